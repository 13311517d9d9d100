"""MockProvider: scripted completions per node, for tests, examples and offline runs.

Script format (DESIGN.md §5)::

    {"responses": {"<nodeId>": ["<text or JSON value>", ...]}, "default": "<optional>"}

Each call made for node X takes the next item of X's list (JSON values are
serialised to text); a call for an unlisted node takes ``default``; an exhausted
list is a clear error. An item ``{"$error": "<error_type>", "message": ..., "retry_after": ...}``
makes that call fail with that Lattice error type instead (to script provider failures).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lattice.errors import LatticeRunError, LatticeUserError
from lattice.llm.base import LLMRequest, LLMResponse, TokenUsage, estimate_tokens

_UNSET: Any = object()


class MockProvider:
    """A scripted provider. ``calls`` keeps every request, in order, for assertions.

    ``latency`` (seconds) makes each call ``await asyncio.sleep``, for concurrency tests.
    ``keep_calls=False`` keeps none (long-lived use, benchmarks).
    """

    name = "mock"

    def __init__(
        self,
        responses: Mapping[str, list[Any]] | None = None,
        *,
        default: Any = _UNSET,
        latency: float = 0.0,
        model: str = "mock-model",
        keep_calls: bool = True,
    ) -> None:
        self.responses = {node: list(items) for node, items in (responses or {}).items()}
        self.default = default
        self.latency = latency
        self.model = model
        self.cursor: dict[str, int] = {}
        self.calls: list[LLMRequest] = []
        self.keep_calls = keep_calls

    @classmethod
    def from_script(cls, script: Mapping[str, Any], **kwargs: Any) -> MockProvider:
        """Build from a parsed mock script; a malformed script is a LatticeUserError."""
        if not isinstance(script, Mapping):
            raise LatticeUserError(
                'a mock script is a JSON object {"responses": {...}}', error_type="mock_error"
            )
        responses = script.get("responses", {})
        if not isinstance(responses, Mapping) or not all(
            isinstance(v, list) for v in responses.values()
        ):
            raise LatticeUserError(
                'mock script: "responses" maps node ids to lists of completions',
                error_type="mock_error",
            )
        unknown = set(script) - {"responses", "default", "description"}
        if unknown:
            raise LatticeUserError(
                f"mock script: unknown keys {sorted(unknown)}", error_type="mock_error"
            )
        default = script.get("default", _UNSET)
        return cls(responses, default=default, **kwargs)

    @classmethod
    def from_file(cls, path: str | Path, **kwargs: Any) -> MockProvider:
        """Read a mock script file; unreadable or invalid files are LatticeUserErrors."""
        try:
            script = json.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise LatticeUserError(
                f"cannot read mock script {path}: {exc.strerror}", error_type="mock_error"
            ) from exc
        except json.JSONDecodeError as exc:
            raise LatticeUserError(
                f"mock script {path} is not valid JSON: {exc.msg} (line {exc.lineno})",
                error_type="mock_error",
            ) from exc
        return cls.from_script(script, **kwargs)

    def covers(self, node_id: str) -> bool:
        """True when a call for ``node_id`` has a scripted answer (list or default)."""
        return node_id in self.responses or self.default is not _UNSET

    def checkpoint(self) -> dict[str, int]:
        """How far each node's list has been consumed (saved in run folders for resume)."""
        return dict(self.cursor)

    def restore(self, cursor: Mapping[str, int]) -> None:
        self.cursor = {str(k): int(v) for k, v in cursor.items()}

    def _next_item(self, node: str) -> Any:
        items = self.responses.get(node)
        if items is None:
            if self.default is _UNSET:
                raise LatticeRunError(
                    f"the mock script has no responses for node {node!r} and no default",
                    error_type="mock_exhausted",
                    node_id=node,
                )
            return self.default
        index = self.cursor.get(node, 0)
        if index >= len(items):
            raise LatticeRunError(
                f"the mock script's responses for node {node!r} are used up "
                f"({len(items)} given, call {index + 1} asked); add more and resume the run",
                error_type="mock_exhausted",
                node_id=node,
            )
        self.cursor[node] = index + 1
        return items[index]

    async def complete(self, request: LLMRequest) -> LLMResponse:
        if self.keep_calls:
            self.calls.append(request)
        started = time.perf_counter()
        item = self._next_item(request.node_id or request.op_id or "")
        if self.latency:
            await asyncio.sleep(self.latency)
        if isinstance(item, str):
            text = item
        elif isinstance(item, Mapping) and "$error" in item:
            details = {k: v for k, v in item.items() if k not in ("$error", "message")}
            raise LatticeRunError(
                str(item.get("message") or f"mock {item['$error']}"),
                error_type=str(item["$error"]),
                node_id=request.node_id,
                details=details,
            )
        else:
            text = json.dumps(item, ensure_ascii=False)
        return LLMResponse(
            text=text,
            usage=TokenUsage((request.size_chars() + 3) // 4, estimate_tokens(text)),
            model=request.model or self.model,
            latency_ms=(time.perf_counter() - started) * 1000,
        )

"""A cache of model answers across evaluation runs, which a user opts into (``--cache FILE``).

A call is looked up by its key: the request's prompt hash (``LLMRequest.prompt_hash``:
the messages, which hold the row's inputs, the model class, the output schema and the
sampling), the concrete model it names, if any, and the ``scope`` (the live provider's
name and the configured model of each class). A known key is answered from the file;
an unknown one is sent to the live provider and its answer appended. So an evaluation
run again after one node's prompt changed pays only that node's calls (and those of the
nodes whose inputs it changed). ``reused`` and ``sent`` count the calls of this process.

The file is JSON lines, one ``{"key", "prompt_hash", "model", "completion", "meta",
"tool_calls"?}`` per answer (a later line for a key wins). Only answers are cached:
a failed call is not, and is tried again next time.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from lattice.errors import LatticeUserError
from lattice.llm.base import (
    LLMProvider,
    LLMRequest,
    LLMResponse,
    TokenUsage,
    close_loop_clients,
    tool_calls_from_json,
)


def _read(path: Path) -> dict[str, dict[str, Any]]:
    table: dict[str, dict[str, Any]] = {}
    if not path.exists():
        return table
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise LatticeUserError(f"cannot read the cache {path}: {exc}") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            tool_calls_from_json(entry.get("tool_calls"))
        except (json.JSONDecodeError, ValueError, AttributeError):
            if number == len(lines):  # cut short by a kill: the call is made again
                continue
            raise LatticeUserError(f"{path}:{number}: not a line of a call cache") from None
        if not isinstance(entry, dict) or not isinstance(entry.get("key"), str):
            raise LatticeUserError(f"{path}:{number}: not a line of a call cache")
        table[entry["key"]] = entry
    return table


class CachedProvider:
    """Answers known calls from ``path`` and sends the others to ``live`` (see the module
    docstring)."""

    def __init__(self, path: str | Path, live: LLMProvider, *, scope: str) -> None:
        self.path = Path(path)
        self.live = live
        self.scope = scope
        self.name = getattr(live, "name", "cached")
        self.table = _read(self.path)
        self.reused = 0
        self.sent = 0

    def key(self, request: LLMRequest) -> str:
        parts = [request.prompt_hash(), request.model or "", self.scope]
        return hashlib.sha256(json.dumps(parts).encode("utf-8")).hexdigest()

    async def aclose_loop_clients(self) -> None:
        """Close the live provider's clients of the running loop."""
        await close_loop_clients(self.live)

    async def complete(self, request: LLMRequest) -> LLMResponse:
        key = self.key(request)
        entry = self.table.get(key)
        if entry is not None:
            self.reused += 1
            meta = entry.get("meta") or {}
            return LLMResponse(
                text=entry["completion"],
                usage=TokenUsage(
                    int(meta.get("input_tokens", 0)), int(meta.get("output_tokens", 0))
                ),
                model=str(meta.get("model", "cached")),
                latency_ms=0.0,
                finish_reason=meta.get("finish_reason", "stop"),
                tool_calls=tool_calls_from_json(entry.get("tool_calls")),
            )
        self.sent += 1
        response = await self.live.complete(request)
        entry = {
            "key": key,
            "prompt_hash": request.prompt_hash(),
            "model": request.model,
            "completion": response.text,
            "meta": {
                "model": response.model,
                "model_class": request.model_class,
                "node_id": request.node_id,
                "input_tokens": response.usage.input_tokens,
                "output_tokens": response.usage.output_tokens,
                "finish_reason": response.finish_reason,
            },
        }
        if response.tool_calls:
            entry["tool_calls"] = [call.to_json() for call in response.tool_calls]
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry, ensure_ascii=False) + "\n")
        self.table[key] = entry
        return response

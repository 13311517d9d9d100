"""FixtureProvider: replay completions by prompt hash, or record them from a live provider.

File format: JSONL, one ``{"prompt_hash", "completion", "meta", "prompt_preview"}`` per
line (docs/mocks.md); an agent's turn that called tools also has ``"tool_calls": [{"id",
"name", "arguments"}, ...]`` (``completion`` is then the text beside them, often empty). The prompt hash is ``LLMRequest.prompt_hash()``; a later line for
the same hash wins. ``lattice hash-prompt`` computes hashes so fixtures can be written by hand.

The lines are read, replayed and written by functions an evaluation's call cache
(``lattice.evals.cache``), a file of recorded answers too, shares.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lattice.errors import ErrorType, LatticeRunError, LatticeUserError
from lattice.llm.base import (
    LLMProvider,
    LLMRequest,
    LLMResponse,
    TokenUsage,
    close_loop_clients,
    provider_checkpoint,
    restore_provider,
    tool_calls_from_json,
)


def read_answer_lines(
    path: Path, key: str, what: str, *, torn_tail: bool = False
) -> dict[str, dict[str, Any]]:
    """``key``'s value → line, of a file of recorded answers (a later line for the same
    key wins); a malformed file is a LatticeUserError naming the line (``what``: what the
    file is). With ``torn_tail``, a last line cut short by a kill is left out (its call is
    made again)."""
    table: dict[str, dict[str, Any]] = {}
    if not path.exists():
        return table
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise LatticeUserError(f"cannot read {what} {path}: {exc}") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            if torn_tail and number == len(lines):
                continue
            raise LatticeUserError(f"{path}:{number}: not JSON ({exc.msg})") from None
        if (
            not isinstance(entry, dict)
            or not isinstance(entry.get(key), str)
            or "completion" not in entry
        ):
            raise LatticeUserError(f"{path}:{number}: a line of {what} needs {key} and completion")
        try:
            tool_calls_from_json(entry.get("tool_calls"))
        except ValueError as exc:
            raise LatticeUserError(f"{path}:{number}: {exc}") from None
        table[entry[key]] = entry
    return table


def read_fixtures(path: Path) -> dict[str, dict[str, Any]]:
    """Hash → fixture line; a malformed file is a LatticeUserError naming the line."""
    return read_answer_lines(path, "prompt_hash", "fixtures")


def recorded_answer(entry: dict[str, Any], model: str) -> LLMResponse:
    """The answer a recorded line holds (``model`` when its meta names none)."""
    meta = entry.get("meta") or {}
    completion = entry["completion"]
    text = completion if isinstance(completion, str) else json.dumps(completion, ensure_ascii=False)
    return LLMResponse(
        text=text,
        usage=TokenUsage(int(meta.get("input_tokens", 0)), int(meta.get("output_tokens", 0))),
        model=str(meta.get("model", model)),
        latency_ms=0.0,
        finish_reason=meta.get("finish_reason", "stop"),
        tool_calls=tool_calls_from_json(entry.get("tool_calls")),
    )


def answer_line(request: LLMRequest, response: LLMResponse) -> dict[str, Any]:
    """What a recorded line keeps of ``response`` to ``request``: ``completion``, ``meta``
    and, for an agent's turn that called tools, ``tool_calls``."""
    line: dict[str, Any] = {
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
        line["tool_calls"] = [call.to_json() for call in response.tool_calls]
    return line


def append_line(path: Path, line: dict[str, Any]) -> None:
    """Append ``line`` to the JSON lines file ``path`` (made, with its folder, if need be)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(line, ensure_ascii=False) + "\n")


class FixtureProvider:
    """Replays ``path``; with ``record_with`` set, calls it for unknown prompts and appends them."""

    name = "fixture"

    def __init__(self, path: str | Path, *, record_with: LLMProvider | None = None) -> None:
        self.path = Path(path)
        self.record_with = record_with
        if record_with is None and not self.path.exists():
            raise LatticeUserError(
                f"fixtures file {self.path} does not exist (record it with --record)"
            )
        self.table = read_fixtures(self.path)

    async def aclose_loop_clients(self) -> None:
        """Close the wrapped live provider's clients of the running loop (when recording)."""
        await close_loop_clients(self.record_with)

    def checkpoint(self) -> Any:
        """Where the provider being recorded is (a mock's cursor), so a resumed run goes on."""
        return provider_checkpoint(self.record_with)

    def restore(self, state: Any, *, committed: Any = None) -> None:
        """Hand a resumed run's provider state to the provider being recorded."""
        restore_provider(self.record_with, state, committed=committed)

    async def complete(self, request: LLMRequest) -> LLMResponse:
        prompt_hash = request.prompt_hash()
        entry = self.table.get(prompt_hash)
        if entry is not None:
            return recorded_answer(entry, "fixture")
        if self.record_with is None:
            raise LatticeRunError(
                f"no fixture for prompt hash {prompt_hash} (node {request.node_id!r}, "
                f"class {request.model_class}); prompt starts: {request.preview()!r}. "
                "Record it with --record --provider NAME, or add a line to the fixtures file",
                error_type=ErrorType.FIXTURE_MISSING,
                node_id=request.node_id,
                details={"prompt_hash": prompt_hash, "prompt_preview": request.preview()},
            )
        response = await self.record_with.complete(request)
        entry = {
            "prompt_hash": prompt_hash,
            **answer_line(request, response),
            "prompt_preview": request.preview(),
        }
        if response.tool_calls:
            entry["tool_calls"] = [call.to_json() for call in response.tool_calls]
        self.keep(entry)
        self.table[prompt_hash] = entry
        return response

    def keep(self, entry: dict[str, Any]) -> None:
        """Keep a recorded fixture line: append it to the fixtures file."""
        append_line(self.path, entry)

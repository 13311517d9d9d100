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

from lattice.llm.base import LLMProvider, LLMRequest, LLMResponse, close_loop_clients
from lattice.llm.fixture import answer_line, append_line, read_answer_lines, recorded_answer


class CachedProvider:
    """Answers known calls from ``path`` and sends the others to ``live`` (see the module
    docstring)."""

    def __init__(self, path: str | Path, live: LLMProvider, *, scope: str) -> None:
        self.path = Path(path)
        self.live = live
        self.scope = scope
        self.name = getattr(live, "name", "cached")
        self.table = read_answer_lines(self.path, "key", "the call cache", torn_tail=True)
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
            return recorded_answer(entry, "cached")
        self.sent += 1
        response = await self.live.complete(request)
        entry = {
            "key": key,
            "prompt_hash": request.prompt_hash(),
            "model": request.model,
            **answer_line(request, response),
        }
        append_line(self.path, entry)
        self.table[key] = entry
        return response

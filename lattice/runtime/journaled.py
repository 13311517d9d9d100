"""The provider of a run that has a folder: every request goes to the run's journal as
it is sent and every model answer as it arrives, and a resumed run gets the answers its
op in flight had already paid for from the journal instead of asking the model again.

It is the run's tool journal too (``lattice.agents.loop.ToolJournal``): an agent op's
tool calls are journaled before they run and their results as they come back, the
decisions on them (a rule's, a person's) before anything acts on them, and a resumed
run's op in flight finds them here.

``FolderJournal`` is the run folder as the walk's ``Persistence``
(``lattice.runtime.durability``): the journal and op records go to the folder's
recorder, and each track's provider is a ``JournaledProvider``."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from lattice.llm.base import (
    CheckpointedProvider,
    LLMProvider,
    LLMRequest,
    LLMResponse,
    TokenUsage,
    provider_checkpoint,
    tool_calls_from_json,
)
from lattice.runs.store import RunRecorder
from lattice.runtime.context import Interrupted


class FolderJournal:
    """The run folder as the walk's persistence: ``recorder``'s journal, commit and op
    records (a run without a folder has ``EPHEMERAL`` instead)."""

    journals = True
    keeps_records = True

    def __init__(self, recorder: RunRecorder) -> None:
        self.recorder = recorder
        self.journal = recorder.journal
        self.commit = recorder.commit
        self.write_op = recorder.write_op

    def provider(
        self,
        inner: LLMProvider,
        recorded: Iterable[dict[str, Any]] = (),
        *,
        branch: str | None = None,
    ) -> LLMProvider:
        return JournaledProvider(inner, self.recorder, recorded, branch=branch)


class JournaledProvider:
    """Wraps the run's provider (the same interface, like any provider wrapper)."""

    def __init__(
        self,
        inner: LLMProvider,
        recorder: RunRecorder,
        recorded: Iterable[dict[str, Any]] = (),
        *,
        branch: str | None = None,
    ) -> None:
        self.inner = inner
        self.branch = branch
        self.name = inner.name
        self._recorder = recorder
        self._checkpointed = isinstance(inner, CheckpointedProvider)
        self._replay: dict[tuple[str | None, str], deque[dict[str, Any]]] = {}
        self._tools: dict[tuple[str | None, str], dict[str, Any]] = {}
        self._decisions: dict[tuple[str | None, str], dict[str, Any]] = {}
        self._asked: set[tuple[str | None, str]] = set()
        for line in recorded:
            if line.get("kind") == "tool_decision":
                self._decisions[(line.get("op_id"), str(line.get("key")))] = line
                continue
            if line.get("kind") == "approval_request":
                self._asked.add((line.get("op_id"), str(line.get("key"))))
                continue
            if line.get("kind") in ("tool_call", "tool_result"):
                tool_key = (line.get("op_id"), str(line.get("key")))
                if self._tools.get(tool_key, {}).get("kind") != "tool_result":
                    self._tools[tool_key] = line
                continue
            key = (line.get("op_id"), str(line.get("prompt_hash")))
            self._replay.setdefault(key, deque()).append(line)

    @property
    def replays_left(self) -> int:
        return sum(len(queue) for queue in self._replay.values())

    async def complete(self, request: LLMRequest) -> LLMResponse:
        prompt_hash = request.prompt_hash()
        if self._replay:
            queue = self._replay.get((request.op_id, prompt_hash))
            if queue:
                line = queue.popleft()
                if not queue:
                    del self._replay[(request.op_id, prompt_hash)]
                return LLMResponse(
                    text=str(line.get("text", "")),
                    usage=TokenUsage(
                        input_tokens=int(line.get("input_tokens") or 0),
                        output_tokens=int(line.get("output_tokens") or 0),
                    ),
                    model=str(line.get("model", "unknown")),
                    latency_ms=float(line.get("latency_ms") or 0.0),
                    finish_reason=line.get("finish_reason"),
                    tool_calls=tool_calls_from_json(line.get("tool_calls")),
                )
        journaled = False

        def sending() -> None:
            nonlocal journaled
            if not journaled:
                journaled = True
                self._journal(
                    {"kind": "request", "op_id": request.op_id, "prompt_hash": prompt_hash}
                )

        # Journaled when the provider sends it, after any wait for a slot: a request that
        # waited and was never sent (refused by a batch's budget gate, or the process
        # killed meanwhile) does not count toward the run's budget when it resumes.
        try:
            response = await self.inner.complete(replace(request, on_send=sending))
        except Interrupted:
            raise  # refused before it was sent (a batch's budget gate): not counted
        except Exception:
            sending()  # a provider that does not say when it sends: it may have sent
            raise
        sending()  # a provider that does not say when it sends: it answered, so it sent
        line = {
            "kind": "answer",
            "op_id": request.op_id,
            "prompt_hash": prompt_hash,
            "model_class": request.model_class,
            "text": response.text,
            "model": response.model,
            "input_tokens": response.usage.input_tokens,
            "output_tokens": response.usage.output_tokens,
            "finish_reason": response.finish_reason,
            "latency_ms": round(response.latency_ms, 3),
        }
        if response.tool_calls:
            line["tool_calls"] = [call.to_json() for call in response.tool_calls]
        if self._checkpointed:
            line["provider_state"] = provider_checkpoint(self.inner)
        self._journal(line)
        return response

    def recorded_tool(self, op_id: str | None, key: str) -> dict[str, Any] | None:
        """The journal's line of tool call ``key`` of ``op_id``: its result, else its start."""
        return self._tools.get((op_id, key))

    def recorded_decision(self, op_id: str | None, key: str) -> dict[str, Any] | None:
        """The journal's decision on tool call ``key`` of ``op_id`` (a rule's or a person's)."""
        return self._decisions.get((op_id, key))

    def was_asked(self, op_id: str | None, key: str) -> bool:
        """Whether tool call ``key`` of ``op_id`` waited for a person when the run halted."""
        return (op_id, key) in self._asked

    def journal_tool(self, line: dict[str, Any]) -> None:
        self._journal(dict(line))

    async def settled(self) -> None:
        """Wait until the lines journaled so far are safe (a run folder's are once
        written; an op's on Temporal once the server has them)."""
        settle = getattr(self._recorder, "settled", None)
        if settle is not None:
            await settle()

    def _journal(self, line: dict[str, Any]) -> None:
        if self.branch is not None:
            line["branch"] = self.branch
        self._recorder.journal(line)

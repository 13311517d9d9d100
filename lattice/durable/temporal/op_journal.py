"""The journal of one op in flight on Temporal: its model answers and tool results, kept
as the activity's heartbeat details so that they outlive the worker.

An op that calls a model several times (an LLM op's repairs, an agent's turns and the
tools it calls between them) journals each answer and each tool call as a local run
journals them in its folder, through the same ``JournaledProvider``; here the lines go to
Temporal with the op's next heartbeat instead of to ``journal.jsonl``. When the worker is
lost and Temporal starts the op again on another one, the new attempt reads the lines
back (``activity.info().heartbeat_details``) and ``JournaledProvider`` answers the calls
already paid for from them, as a resumed local run does, instead of sending them again.
An op that halts keeping its journal (an agent waiting for approvals or an answer) ends
its activity with the journal in its result; the workflow sends it with the op's next
activity, which replays it (its turns, tool results and decisions) and goes on.

Lines are masked with the run's redactor before they leave the op (the payload codec
encrypts them on their way). Heartbeat details travel as one payload, so the journal
stops taking lines at ``LIMIT_BYTES``: the calls after that are made again if the op is
started again. Heartbeats are throttled; a tool's result and a decision on a tool call
are sent at once, and the agent goes on once the server has them (``settled``), so a
lost worker never makes a finished call run again, nor a decided one asked again. This module does not import ``temporalio``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from lattice.contracts.usage import Usage
from lattice.llm.base import TokenUsage
from lattice.runs.redaction import Redactor, redact_value
from lattice.runs.store import NullRecorder

KEPT = ("answer", "tool_call", "tool_result", "tool_decision")
"""What a new attempt replays: the model's answers, the agent's tool calls and the
decisions on them (a ``request`` line only counts toward a local run's budget, which an
op's request carries; an ``approval_request`` is the op's halt, which the workflow keeps)."""
LOG = logging.getLogger(__name__)
LIMIT_BYTES = 1_000_000
"""The journal's size at most (as JSON): Temporal refuses a payload over 2 MB and warns
over 512 KB."""


def recorded_lines(details: Sequence[Any]) -> list[dict[str, Any]]:
    """The journal an earlier attempt left in its heartbeat details (none when it left
    nothing Lattice wrote)."""
    if not details or not isinstance(details[0], list):
        return []
    return [line for line in details[0] if isinstance(line, dict) and line.get("kind") in KEPT]


def replayed_provider_state(lines: Sequence[dict[str, Any]]) -> Any:
    """Where the provider stood after the last answer of ``lines`` (a mock's script
    position), or None: a new attempt goes on from there."""
    for line in reversed(lines):
        if line.get("kind") == "answer" and "provider_state" in line:
            return line["provider_state"]
    return None


def less_replayed(usage: Usage, lines: Sequence[dict[str, Any]]) -> Usage:
    """``usage`` less the requests and answers of ``lines``: the journal of an op's visit
    that halted, whose calls the run counted when that visit ended and the visit going on
    from it counts again as it replays them (a resumed local run does the same:
    ``lattice.runtime.resume.journal_usage``)."""
    for line in lines:
        if line.get("kind") == "answer":
            usage.requests -= 1
            tokens = TokenUsage(
                int(line.get("input_tokens") or 0), int(line.get("output_tokens") or 0)
            )
            model_class = str(line.get("model_class") or "default")
            usage.take_back(str(line.get("model", "unknown")), model_class, tokens)
    return usage


class OpJournal(NullRecorder):
    """The recorder ``JournaledProvider`` journals an op's calls to: it keeps the lines a
    new attempt replays, masked, and hands the whole journal to ``on_change`` (the
    activity's heartbeat) whenever a line is added."""

    def __init__(
        self,
        recorded: Sequence[dict[str, Any]],
        redact: Redactor,
        on_change: Callable[[list[dict[str, Any]]], None] | None = None,
        *,
        limit: int = LIMIT_BYTES,
        on_settle: Callable[[list[dict[str, Any]]], Awaitable[None]] | None = None,
    ) -> None:
        self.lines = list(recorded)
        self.full = False
        """Whether a line was left out because the journal had reached ``limit``."""
        self._redact = redact
        self._on_change = on_change
        self._limit = limit
        self._size = sum(_size(line) for line in self.lines)
        self._on_settle = on_settle
        self._settled = len(self.lines)

    def journal(self, line: dict[str, Any]) -> None:
        if line.get("kind") not in KEPT or self.full:
            return
        masked: dict[str, Any] = redact_value(line, self._redact)
        size = _size(masked)
        if self._size + size > self._limit:
            self.full = True
            LOG.warning(
                "op %s: its journal reached %d bytes; later calls are not journaled and are "
                "made again if the op is started again",
                line.get("op_id"),
                self._limit,
            )
            return
        self.lines.append(masked)
        self._size += size
        if self._on_change is not None:
            self._on_change(self.lines)

    async def settled(self) -> None:
        """Hand the journal to ``on_settle`` (a heartbeat the server acknowledges) when
        lines were added since it last did: a tool's result or a decision is then kept
        even if the worker is lost right after (heartbeats are otherwise throttled)."""
        if self._on_settle is not None and len(self.lines) > self._settled:
            self._settled = len(self.lines)
            await self._on_settle(self.lines)


def _size(line: dict[str, Any]) -> int:
    return len(json.dumps(line, ensure_ascii=False, default=str).encode())

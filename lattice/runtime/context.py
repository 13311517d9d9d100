"""Per-run context that op executors work against, and the signals they raise."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lattice.contracts.calls import (
    TRANSIENT_EVENTS,
    CallEnv,
    discard_event,
    wants_content,
    wants_deltas,
)
from lattice.contracts.usage import Usage
from lattice.errors import LatticeRunError
from lattice.llm.base import LLMRequest, LLMResponse
from lattice.runs.oplog import OpExtras
from lattice.runs.redaction import Redactor, make_redactor
from lattice.runs.store import RunRecorder
from lattice.runtime.events import (
    DEFERRED_TEXT_CHARS,
    REQUEST,
    RESPONSE,
    EventLog,
    make_event,
    utc_now,
)
from lattice.runtime.state import StateStore
from lattice.runtime.walk_state import WalkState
from lattice.tools.http import HttpClientPool, HttpPolicy
from lattice.tools.mcp import ToolSessions

if TYPE_CHECKING:
    from lattice.ir.models import AskOp

EventListener = Callable[[dict[str, Any]], None]
AskHuman = Callable[["AskOp"], Awaitable[Any] | Any]
"""Asks a person an ASK op's question; returns an answer (label, index or text) or None to halt."""


class HaltRun(LatticeRunError):
    """Raised by an executor to stop the run until a human supplies something.

    ``error_type`` is the reason (``question`` or ``missing_information``), ``message``
    the summary; ``action`` tells the person what to do (``RUN_DIR`` stands for the folder).
    """

    def __init__(
        self,
        reason: str,
        summary: str,
        details: dict[str, Any],
        action: str,
        *,
        keeps_journal: bool = False,
    ) -> None:
        super().__init__(summary, error_type=reason, details=details)
        self.action = action
        self.keeps_journal = keeps_journal
        """The halted op's journal lines stay for its resume to replay (an agent waiting
        for approvals: its turns, results and decisions are not paid for or made again)."""

    @property
    def reason(self) -> str:
        return self.error_type

    @property
    def summary(self) -> str:
        return self.message


class Interrupted(LatticeRunError):
    """The run stopped before its end without failing: cancelled, or stopped at an op
    boundary on request. Its folder can be resumed."""

    error_type = "interrupted"


@dataclass(slots=True)
class Outcome:
    """What an op did: the port it leaves through and what it produced."""

    port: str = "default"
    output: Any = None
    record: OpExtras | None = None
    """Extra fields for the op's record file (attempts, request, ...)."""


class RunContext:
    """One run's moving parts: state, events, provider, usage, answers."""

    def __init__(
        self,
        *,
        run_id: str,
        state: StateStore,
        recorder: RunRecorder,
        answers: dict[str, Any],
        ask_human: AskHuman | None,
        listeners: list[EventListener],
        llm: CallEnv,
        http: HttpPolicy,
        tools: Callable[[], ToolSessions],
        seq: int = 0,
        redact: Redactor | None = None,
        secret_names: tuple[str, ...] = (),
    ) -> None:
        self.run_id = run_id
        self._redact = redact
        self.secret_names = secret_names
        """Environment variables whose values :attr:`redact` masks (with the provider keys)."""
        self.state = state
        self.recorder = recorder
        self.answers = answers
        self.ask_human = ask_human
        self.llm = llm
        """What LLM_WRITE ops call through: provider, usage, budget, retries (one per run)."""
        llm.emit = self.emit
        if llm.stream is None:  # streaming is on when a listener takes the deltas
            llm.stream = wants_deltas(listeners)
        llm.content = llm.content or wants_content(listeners)
        self.usage: Usage = llm.usage
        self._http = http
        self._make_tools = tools
        self._http_pool: HttpClientPool | None = None
        self._tools: ToolSessions | None = None
        """Made by the run's first HTTP request or tool call (most runs make neither)."""
        self.events = EventLog(run_id)
        self._keep = self.events.flat.extend
        self._compact = not recorder.takes_events
        """Nothing takes events as they happen: keep them compact until they are read."""
        if self._compact and not llm.content:
            llm.log = self
        self._listeners = listeners
        self.seq = seq
        self.now: Callable[[], str] = utc_now
        """The clock events are stamped with (a durable engine's workflow gives its own)."""
        self.last_result: str | None = None
        self.current_op: str | None = None
        self.current_node: str | None = None
        self.stop_requested = False
        """Set to stop the run at the next op boundary (status ``interrupted``)."""
        self.checkpoint: dict[str, Any] = {}
        """The run's checkpoint as written when it started (or resumed)."""
        self.walk = WalkState()
        """The walk's own part of the run (read on the main context: ``root.walk``)."""
        self.branch: str | None = None
        """The branch this context walks (``0005.2``: the second branch of the fork that
        was op 5), None for the run's main walk."""
        self.cancelled = False
        """Set when a sibling branch failed: this branch stops at its next op boundary."""
        self.changes: list[dict[str, Any]] = []
        """The file changes of the agent ops this run completed (its main context's list)."""
        self._root: RunContext | None = None
        """The run's main context (None in the main context itself)."""
        self._parent: RunContext | None = None
        """The context whose fork started this branch (None in the main context)."""

    def branch_context(self, state: StateStore, branch: str, llm: CallEnv) -> RunContext:
        """A context for one branch: its own state, position and model-call events,
        the run's events, usage, answers, sessions and folder."""
        root = self.root
        root._compact = False  # branch events carry their branch id: build them
        root.llm.log = llm.log = None
        child = object.__new__(RunContext)
        child.__dict__.update(self.__dict__)
        child.state = state
        child.branch = branch
        child.llm = llm
        llm.emit = child.emit
        child.current_op = child.current_node = None
        child.cancelled = False
        child._compact = False
        child._root = root
        child._parent = self
        return child

    def stopped_by_sibling(self) -> bool:
        """Whether a sibling of this branch, or of a branch it runs inside, failed."""
        ctx: RunContext | None = self
        while ctx is not None:
            if ctx.cancelled:
                return True
            ctx = ctx._parent
        return False

    @property
    def redact(self) -> Redactor:
        """Masks the run's secrets (``secret_names`` and the provider keys) in a text: the
        run folder's redactor when it keeps one, else one made on first use."""
        root = self.root
        if root._redact is None:
            root._redact = make_redactor(root.secret_names)
        return root._redact

    @property
    def http_pool(self) -> HttpClientPool:
        """The run's HTTP client (its branches' too), made on first use."""
        root = self.root
        if root._http_pool is None:
            root._http_pool = HttpClientPool(root._http)
        return root._http_pool

    @property
    def tools(self) -> ToolSessions:
        """The run's tool servers (its branches' too), made on first use."""
        root = self.root
        if root._tools is None:
            root._tools = root._make_tools()
            root._tools.emit = root.emit
        return root._tools

    @property
    def root(self) -> RunContext:
        """The run's main context."""
        return self._root or self

    def emit(self, type_: str, data: dict[str, Any] | None = None, *, op: bool = True) -> None:
        """Record an event (appended and flushed to events.jsonl, passed to listeners).

        A transient event (``llm_delta``, ``llm_content``) goes to the listeners only, with
        the number of the last recorded event: the recorded numbers stay gapless."""
        if type_ in TRANSIENT_EVENTS:
            self._transient(type_, data or {})
            return
        root = self._root or self
        root.seq = seq = root.seq + 1
        if op and (op_id := self.current_op) is not None:
            node_id = self.current_node
        else:
            op_id = node_id = None
        if data is None:
            data = {}
        if self._compact and not self._listeners:  # EventLog.add, inlined
            self._keep((seq, time.time(), type_, op_id, node_id, len(data), *data, *data.values()))
            return
        event = make_event(seq, self.now(), self.run_id, type_, op_id, node_id, data)
        if self.branch is not None:
            event["branch"] = self.branch
        self.events.add_built(event)
        self.recorder.append_event(event)
        for listener in self._listeners:
            listener(event)

    def requested(
        self,
        request: LLMRequest,
        attempt: int,
        kind: str,
        request_chars: int,
        schema_json: str,
    ) -> int | None:
        """``CallLog.requested``: the ``llm_request`` event in ``REQUEST``'s layout, with
        a short plain request's texts to hash when the events are read."""
        if not self._compact or self._listeners:
            return None
        self.seq = seq = self.seq + 1  # compact: the main context, no branch
        op_id = self.current_op
        node_id = None if op_id is None else self.current_node
        messages = request.messages
        tail: tuple[Any, ...]
        if request_chars <= DEFERRED_TEXT_CHARS and request.is_plain():
            # hashed when read: the schema, sampling fields and the messages' texts
            if len(messages) == 1:  # the texts of the one message follow
                last = messages[0]
                texts: tuple[str, ...] = ()
            else:  # the earlier messages' texts, then the last's
                last = messages[-1]
                texts = tuple(text for m in messages[:-1] for text in (m.role, m.content))
            tail = (
                schema_json,
                request.temperature,
                request.top_p,
                request.max_tokens,
                len(texts) + 2,
                *texts,
                last.role,
                last.content,
            )
        else:
            tail = (
                request.prompt_hash(schema_json=schema_json),
                request.preview(),
                None,
                None,
                None,
            )
        self._keep(
            (
                seq,
                time.time(),
                "llm_request",
                op_id,
                node_id,
                REQUEST,
                request.model,
                request.model_class,
                attempt,
                kind,
                request_chars,
                *tail,
            )
        )
        return seq

    def answered(self, requested: int, request: LLMRequest, response: LLMResponse) -> bool:
        """``CallLog.answered``: the ``llm_response`` event in ``RESPONSE``'s layout."""
        if not self._compact or self._listeners:
            return False
        self.seq = seq = self.seq + 1
        op_id = self.current_op
        usage = response.usage
        self._keep(
            (
                seq,
                time.time(),
                "llm_response",
                op_id,
                None if op_id is None else self.current_node,
                RESPONSE,
                requested,
                response.model,
                request.model_class,
                usage.input_tokens,
                usage.output_tokens,
                response.latency_ms,
                response.finish_reason,
            )
        )
        return True

    def emit1(self, type_: str, key: str, value: Any) -> None:
        """``emit(type_, {key: value})`` for an op's own event, without the dict when
        nothing takes events as they happen."""
        if self._compact and not self._listeners:
            root = self._root or self
            root.seq = seq = root.seq + 1
            op_id = self.current_op
            node_id = None if op_id is None else self.current_node
            self._keep((seq, time.time(), type_, op_id, node_id, 1, key, value))
        else:
            self.emit(type_, {key: value})

    def emit2(self, type_: str, key1: str, value1: Any, key2: str, value2: Any) -> None:
        """``emit(type_, {key1: value1, key2: value2})`` for an op's own event, as ``emit1``."""
        if self._compact and not self._listeners:
            root = self._root or self
            root.seq = seq = root.seq + 1
            op_id = self.current_op
            node_id = None if op_id is None else self.current_node
            self._keep((seq, time.time(), type_, op_id, node_id, 2, key1, key2, value1, value2))
        else:
            self.emit(type_, {key1: value1, key2: value2})

    def _transient(self, type_: str, data: dict[str, Any]) -> None:
        listeners = self._listeners
        if not listeners:
            return
        op_id, node_id = self.current_op, self.current_node
        if op_id is None:
            node_id = None
        event = make_event(self.root.seq, self.now(), self.run_id, type_, op_id, node_id, data)
        if self.branch is not None:
            event["branch"] = self.branch
        for listener in listeners:
            listener(event)

    async def aclose(self) -> None:
        """Release the run's resources (HTTP client, tool sessions) it made."""
        try:
            if self._tools is not None:
                await self._tools.aclose()
        finally:
            if self._http_pool is not None:
                await self._http_pool.aclose()

    def detach(self) -> None:
        """Drop the links back to this context once the run is over, so that its
        objects are freed as soon as the result is, not by the cycle collector."""
        self.llm.emit = discard_event
        self.llm.log = None
        if self._tools is not None:
            self._tools.emit = discard_event

    def write_result(self, path: str, value: Any) -> None:
        """Write an op's value and remember it as the most recent result."""
        self.state.write(path, value)
        self.last_result = path
        self.emit2("state_write", "path", path, "value", value)

"""The agent loop: model turn → tool calls → tool results → model turn …, bounded.

``AgentLoop`` is the provider an AGENT op's contract engine calls: each ``complete`` (one
contract attempt) sends the request with the granted tools, runs the tools the model
asks for, answers it with their results (``tool`` messages) and asks again, until the
model answers without tool calls. That answer goes back to the contract engine, which
holds it to the op's contract like any LLM answer (schema, invariants, repair,
escalation, budgets). A repair of an answer reached through tool calls goes on in the
conversation: the repair packet is the next user message after the answer it fixes,
every earlier turn and tool result kept (an answer given without tools is repaired as a
plain model call is).
Every turn is a request against the run's budget (``max_calls``).

Bounds: turns, tool calls and tokens of one visit. When one runs out, the model is
asked once more without tools for its final answer; a model that still calls tools
then ends the op with ``agent_limit``. Each tool call has a wall-clock limit; a call
that overruns it, names a tool not offered or fails answers the model with an error it
can act on.

With a ``ToolJournal`` (a run with a folder), each call is journaled before it runs
and its result as soon as it comes back; a resumed run takes recorded results from the
journal instead of running the call again. A write to a toolset that can plan its
changes (``PlanningToolset``: the workspace's) is planned first and the planned change
(path, digests before and after, new content) journaled before it is applied; a resumed
run applies a planned change whose result was not recorded again, which leaves a file
that already holds it as it is.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, runtime_checkable

from lattice.agents.gate import CallGate, Pass
from lattice.agents.records import AgentTranscript, ToolCallRecord, TurnRecord
from lattice.contracts.calls import CallEnv
from lattice.contracts.policies import policy_stack
from lattice.errors import ErrorType, LatticeRunError
from lattice.events import EventKind
from lattice.ir.tool_names import parse_mcp_name
from lattice.llm.base import LLMProvider, LLMRequest, LLMResponse, Message, ToolCall, ToolDef
from lattice.permissions.approvals import ApprovalRequest, ApprovalsPending
from lattice.tools.toolset import ToolResult, Toolset
from lattice.workspace.grants import ASK_TOOL

WRITE_TOOLS = frozenset({"Edit", "MultiEdit", "Write"})
"""Tools whose changes are planned, journaled, then applied (idempotent after a crash)."""
PREVIEW_CHARS = 500
"""Arguments and results in events are cut to this many characters."""


@dataclass(frozen=True, slots=True)
class AgentBounds:
    """The limits of one visit of an agent op."""

    max_turns: int = 20
    max_tool_calls: int = 50
    max_tokens: int | None = None
    tool_timeout_s: float = 60.0


@runtime_checkable
class ToolJournal(Protocol):
    """Where tool calls are journaled, and where a resumed run finds what was recorded."""

    def recorded_tool(self, op_id: str | None, key: str) -> dict[str, Any] | None:
        """The recorded line of call ``key`` of op ``op_id``: its result (``kind``
        ``tool_result``) or, when it started and no result was recorded, its start."""
        ...

    def journal_tool(self, line: dict[str, Any]) -> None:
        """Append one line (``tool_call`` before a call runs, ``tool_result`` after).
        A journal kept elsewhere than a local file may also have ``async settled()``,
        awaited after a result or a decision: it returns once the lines are safe."""
        ...


async def settled(journal: Any) -> None:
    """Wait until ``journal``'s lines are safe, when it says (see ``ToolJournal``)."""
    settle = getattr(journal, "settled", None)
    if settle is not None:
        await settle()


@runtime_checkable
class PlanningToolset(Protocol):
    """A toolset whose writing tools can be split in two: plan the change, then apply it
    (``lattice.workspace.WorkspaceToolset``)."""

    async def plan(self, name: str, arguments: dict[str, Any]) -> ToolResult: ...

    async def apply(self, planned: ToolResult) -> ToolResult: ...

    def hold(self, planned: ToolResult) -> None:
        """Patch-only: keep the planned changes unwritten, for the agent's later reads."""


class ToolBox:
    """The tools offered to a model, each routed to the toolset that has it.

    Only tools the node asked for (and the user granted) are offered, even when a toolset
    lists more: the document's list is the most the agent gets. ``missing`` names the
    granted asks no toolset lists (an MCP tool its server does not have, a server that
    lists nothing), so that the run can say so instead of dropping them unseen.
    """

    def __init__(
        self, routes: dict[str, tuple[ToolDef, Toolset]], missing: tuple[str, ...] = ()
    ) -> None:
        self._routes = routes
        self.defs: tuple[ToolDef, ...] = tuple(tool for tool, _ in routes.values())
        self.missing = missing

    @classmethod
    async def open(cls, toolsets: Sequence[Toolset], granted: Sequence[str]) -> ToolBox:
        """The granted tools among those ``toolsets`` list, in the order they were asked
        for (a whole MCP server, ``mcp__<server>__*``, in the order its server lists them)."""
        found: dict[str, tuple[ToolDef, Toolset]] = {}
        for toolset in toolsets:
            for tool in await toolset.list_tools():
                found.setdefault(tool.name, (tool, toolset))
        routes: dict[str, tuple[ToolDef, Toolset]] = {}
        missing: list[str] = []
        for asked in granted:
            names = _listed_for(asked, found)
            if not names:
                missing.append(asked)
            for name in names:
                routes.setdefault(name, found[name])
        return cls(routes, tuple(missing))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._routes)

    def planner(self, name: str) -> PlanningToolset | None:
        """The toolset that plans ``name``'s changes before applying them, if any."""
        route = self._routes.get(name)
        if name in WRITE_TOOLS and route is not None and isinstance(route[1], PlanningToolset):
            return route[1]
        return None

    async def call(self, call: ToolCall, timeout_s: float) -> ToolResult:
        """Run one call under its time limit; failures come back as error results."""
        route = self._routes.get(call.name)
        if route is None:
            offered = ", ".join(self._routes) or "none"
            return ToolResult(f"There is no tool {call.name!r}; the tools are: {offered}.", True)
        return await _limited(call.name, route[1].call(call.name, call.arguments), timeout_s)


def _listed_for(asked: str, listed: Mapping[str, object]) -> list[str]:
    """The listed tool names an asked name stands for: itself, or every tool of a server."""
    if asked in listed:
        return [asked]
    mcp = parse_mcp_name(asked)
    if mcp is None or mcp[1] is not None:
        return []
    prefix = f"mcp__{mcp[0]}__"
    return [name for name in listed if name.startswith(prefix)]


async def _limited(name: str, work: Any, timeout_s: float) -> ToolResult:
    try:
        result: ToolResult = await asyncio.wait_for(work, timeout_s)
    except TimeoutError:
        return ToolResult(
            f"{name} did not finish within {timeout_s:g} s and was stopped; try a smaller request.",
            True,
        )
    return result


class QuestionPending(Exception):
    """A tool asked the person a question no one has answered yet: the loop stops, and
    its op halts the run, keeping what it journaled (a resumed op replays it)."""

    def __init__(self, question: str, options: list[str], multi_select: bool) -> None:
        super().__init__(question)
        self.question = question
        self.options = options
        self.multi_select = multi_select


def identity(text: str) -> str:
    return text


class AgentLoop:
    """The provider an agent op's contract engine calls (see the module docstring)."""

    def __init__(
        self,
        inner: LLMProvider,
        env: CallEnv,
        box: ToolBox,
        bounds: AgentBounds,
        *,
        journal: ToolJournal | None = None,
        patch_only: bool = False,
        mask: Callable[[str], str] = identity,
        gate: CallGate | None = None,
    ) -> None:
        self.name = inner.name
        self.inner = inner
        self.env = env
        self.box = box
        self.bounds = bounds
        self.journal = journal
        self.patch_only = patch_only
        self.mask = mask
        self.gate = gate
        """Decides each call by the permission rules (None: every offered call runs)."""
        self.transcript = AgentTranscript(tools=box.names)
        self._attempts = 0
        self._conversation: tuple[Message, ...] = ()
        """The messages so far, up to the last final answer (what a repair goes on from)."""
        self._given: tuple[Message, ...] = ()
        self._started: tuple[Message, ...] = ()
        """The messages the last attempt was given, and those it started from."""

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """One contract attempt: turns until the model answers without tool calls."""
        self._attempts += 1
        messages = self._start(request)
        counted = True  # the contract engine counted this attempt's first request
        while True:
            exhausted = self._exhausted()
            if exhausted:
                messages.append(Message("user", _final_note(exhausted)))
            turn_request = replace(
                request, messages=tuple(messages), tools=() if exhausted else self.box.defs
            )
            response = await self._send(turn_request, counted=counted)
            counted = False
            turn = self._record_turn(turn_request, response, tools_offered=not exhausted)
            if not response.tool_calls:
                # a repair goes on from a conversation with tool results in it (what a
                # fresh request would lose); an answer given without tools is repaired
                # as a plain model call is, from the repair packet alone
                worked = any(message.role == "tool" for message in messages)
                self._conversation = (
                    (*messages, Message("assistant", response.text)) if worked else ()
                )
                return response  # the contract engine counts the answer it is given
            self.env.usage.add(response.model, request.model_class, response.usage)
            if exhausted:
                raise LatticeRunError(
                    f"the agent still called tools after its {exhausted} ran out",
                    error_type=ErrorType.AGENT_LIMIT,
                    details={"turns": len(self.transcript.turns)},
                )
            messages.append(Message("assistant", response.text, tool_calls=response.tool_calls))
            for record in await self._run_calls(turn, response.tool_calls, request.op_id):
                turn.calls.append(record)
                result = record.result
                text = self.mask(result.text)  # a secret's value never reaches the model
                text = f"Error: {text}" if result.is_error else text  # OpenAI's shape: text only
                messages.append(
                    Message("tool", text, tool_call_id=record.call.id, is_error=result.is_error)
                )

    def _start(self, request: LLMRequest) -> list[Message]:
        """The messages an attempt starts from. A repair goes on from the conversation:
        every turn and tool result so far, the final answer that broke the contract, then
        the repair packet's request as the next user message (its own system part repeats
        the contract, which the conversation's system message states already). A retry
        starts where the attempt it repeats started; any other attempt (the first, an
        escalation to another model) from the messages it is given."""
        if request.kind == "repair" and self._conversation:
            started = (*self._conversation, Message("user", request.messages[-1].content))
        elif request.kind == "retry" and request.messages == self._given:
            started = self._started
        else:
            started = request.messages
        self._given, self._started = request.messages, started
        return list(started)

    async def _send(self, request: LLMRequest, *, counted: bool) -> LLMResponse:
        """One turn's request. A later turn of an attempt that fails in a way its policy
        retries (a cut stream, a rate limit) is sent again here, after the same backoff
        as a retried attempt: starting the attempt over would run its tools again."""
        env, retries = self.env, 0
        while True:
            if not counted:
                env.budget.check(env.usage)
                env.usage.requests += 1
            try:
                return await self.inner.complete(request)
            except LatticeRunError as exc:
                stack = policy_stack(exc.error_type, None, env.base_policies)
                if counted or "retry" not in stack or retries >= env.retry.max_retries:
                    raise
                retries += 1
                delay = env.retry.delay(retries - 1, _retry_after(exc))
                env.emit(
                    EventKind.RETRY,
                    {"error_type": exc.error_type, "delay_s": round(delay, 3), "retry": retries},
                )
                await env.sleep(delay)

    def _exhausted(self) -> str | None:
        """The bound that has run out (its name), or None."""
        transcript, bounds = self.transcript, self.bounds
        if len(transcript.turns) >= bounds.max_turns - 1:  # the last turn is for the answer
            return "turns"
        if transcript.tool_calls >= bounds.max_tool_calls:
            return "tool calls"
        if bounds.max_tokens is not None and transcript.tokens >= bounds.max_tokens:
            return "tokens"
        return None

    def _record_turn(
        self, request: LLMRequest, response: LLMResponse, *, tools_offered: bool
    ) -> TurnRecord:
        turn = TurnRecord(
            number=len(self.transcript.turns) + 1,
            attempt=self._attempts,
            prompt_hash=request.prompt_hash(),
            text=response.text,
            model=response.model,
            input_tokens=response.usage.input_tokens,
            output_tokens=response.usage.output_tokens,
            finish_reason=response.finish_reason,
            tools_offered=tools_offered,
        )
        self.transcript.turns.append(turn)
        self.env.emit(
            EventKind.AGENT_TURN,
            {
                "turn": turn.number,
                "attempt": turn.attempt,
                "tool_calls": [call.name for call in response.tool_calls],
                "input_tokens": turn.input_tokens,
                "output_tokens": turn.output_tokens,
            },
        )
        return turn

    async def _run_calls(
        self, turn: TurnRecord, calls: Sequence[ToolCall], op_id: str | None
    ) -> list[ToolCallRecord]:
        """The turn's calls, each through the gate in the order asked, then those it lets
        pass run concurrently; their records in the order they were asked. Calls that wait
        for a person end the turn with ``ApprovalsPending`` once the others have run."""
        room = self.bounds.max_tool_calls - self.transcript.tool_calls
        jobs = []
        pending: list[ApprovalRequest] = []
        for index, call in enumerate(calls):
            if index >= room:
                jobs.append(
                    _refused(call, "the agent's tool-call budget is used up; give your answer")
                )
                continue
            fate = await self._gate(turn, index, call, op_id)
            if isinstance(fate, ApprovalRequest):
                pending.append(fate)
                self.env.emit(EventKind.APPROVAL_REQUESTED, fate.to_json())
            elif isinstance(fate, ToolResult):
                jobs.append(self._refuse(turn, index, call, op_id, fate))
            else:
                jobs.append(self._run_call(turn, index, call, op_id, fate.planned))
        # every call ends (and journals its result) before a pending question stops the loop
        done = await asyncio.gather(*jobs, return_exceptions=True)
        for outcome in done:
            if isinstance(outcome, BaseException):
                raise outcome
        if pending:
            raise ApprovalsPending(pending)
        return [outcome for outcome in done if isinstance(outcome, ToolCallRecord)]

    async def _gate(
        self, turn: TurnRecord, index: int, call: ToolCall, op_id: str | None
    ) -> Pass | ToolResult | ApprovalRequest:
        """What the gate says of a call not already past it (a recorded start or result)."""
        if self.gate is None or call.name == ASK_TOOL:  # asking the person needs no permission
            return Pass()
        key = _key(turn, index, call)
        if self.journal is not None and self.journal.recorded_tool(op_id, key) is not None:
            self.gate.remember(call, op_id, key, self.journal)
            return Pass()
        planner = self.box.planner(call.name)
        plan = None
        if planner is not None:

            def plan() -> Any:
                work = planner.plan(call.name, call.arguments)
                return _limited(call.name, work, self.bounds.tool_timeout_s)

        request_id = f"{self.gate.node}.{turn.number}.{index + 1}"
        fate = await self.gate.check(call, request_id, key, op_id, self.journal, plan)
        await settled(self.journal)  # its decision is kept before anything acts on it
        return fate

    async def _refuse(
        self, turn: TurnRecord, index: int, call: ToolCall, op_id: str | None, result: ToolResult
    ) -> ToolCallRecord:
        """A call the gate refused: its refusal journaled as its result, for the model."""
        return await self._ended(turn, op_id, _key(turn, index, call), ToolCallRecord(call, result))

    async def _run_call(
        self,
        turn: TurnRecord,
        index: int,
        call: ToolCall,
        op_id: str | None,
        approved_plan: dict[str, Any] | None = None,
    ) -> ToolCallRecord:
        key = _key(turn, index, call)
        recorded = self.journal.recorded_tool(op_id, key) if self.journal else None
        if recorded is None and approved_plan is not None:
            planned = ToolResult.from_json(approved_plan)
            self._journal(op_id, key, call, planned)  # before it is applied, as any plan
            recorded = {"kind": "tool_call", "planned": approved_plan}
        if recorded is not None and recorded.get("kind") == "tool_result":
            record = ToolCallRecord(call, ToolResult.from_json(recorded), replayed=True)
            self._hold(call, record.result)
            self._finished(turn, record)
            return record
        arguments = json.dumps(call.arguments, ensure_ascii=False, sort_keys=True)
        self.env.emit(
            EventKind.TOOL_CALL_STARTED,
            {
                "turn": turn.number,
                "call_id": call.id,
                "tool": call.name,
                "arguments": self._show(arguments),
            },
        )
        started = time.perf_counter()
        planner = self.box.planner(call.name)
        if planner is not None:
            result = await self._write(planner, call, op_id, key, recorded)
        else:
            self._journal(op_id, key, call, None)
            result = await self.box.call(call, self.bounds.tool_timeout_s)
        record = ToolCallRecord(call, result, (time.perf_counter() - started) * 1000)
        return await self._ended(turn, op_id, key, record)

    async def _ended(
        self, turn: TurnRecord, op_id: str | None, key: str, record: ToolCallRecord
    ) -> ToolCallRecord:
        """A call's result, journaled and safe before the loop goes on (a call that ran is
        never run again), then its event."""
        self._journal_result(op_id, key, record)
        await settled(self.journal)
        self._finished(turn, record)
        return record

    async def _write(
        self,
        planner: PlanningToolset,
        call: ToolCall,
        op_id: str | None,
        key: str,
        recorded: dict[str, Any] | None,
    ) -> ToolResult:
        """Plan the change (or take the plan a crashed run journaled), journal it, apply it."""
        timeout = self.bounds.tool_timeout_s
        planned_line = (recorded or {}).get("planned")
        if isinstance(planned_line, dict):
            planned = ToolResult.from_json(planned_line)
        else:
            planned = await _limited(call.name, planner.plan(call.name, call.arguments), timeout)
            self._journal(op_id, key, call, planned)
        if planned.is_error:
            return planned
        if self.patch_only:
            planner.hold(planned)
            return planned
        return await _limited(call.name, planner.apply(planned), timeout)

    def _hold(self, call: ToolCall, result: ToolResult) -> None:
        """Patch-only: a replayed write's changes are pending again, as when it first ran."""
        planner = self.box.planner(call.name)
        if self.patch_only and planner is not None and not result.is_error:
            planner.hold(result)

    def _journal(
        self, op_id: str | None, key: str, call: ToolCall, planned: ToolResult | None
    ) -> None:
        if self.journal is not None:
            line: dict[str, Any] = {
                "kind": "tool_call",
                "op_id": op_id,
                "key": key,
                "tool": call.name,
            }
            if planned is not None:
                line["planned"] = planned.to_json()
            self.journal.journal_tool(line)

    def _journal_result(self, op_id: str | None, key: str, record: ToolCallRecord) -> None:
        if self.journal is not None:
            line = {"kind": "tool_result", "op_id": op_id, "key": key, **record.result.to_json()}
            self.journal.journal_tool(line)

    def _finished(self, turn: TurnRecord, record: ToolCallRecord) -> None:
        data: dict[str, Any] = {
            "turn": turn.number,
            "call_id": record.call.id,
            "tool": record.call.name,
            "is_error": record.result.is_error,
            "result": self._show(record.result.text),
            "duration_ms": round(record.duration_ms, 3),
        }
        if record.result.changes:
            data["changes"] = [change.path for change in record.result.changes]
        if record.replayed:
            data["replayed"] = True
        self.env.emit(EventKind.TOOL_CALL_FINISHED, data)

    def _show(self, text: str) -> str:
        """``text`` with the run's secrets masked, cut to PREVIEW_CHARS."""
        text = self.mask(text)
        return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def _key(turn: TurnRecord, index: int, call: ToolCall) -> str:
    """A call's key in the journal: its turn's prompt, its place in the turn, its id."""
    return f"{turn.prompt_hash}:{index}:{call.id}"


async def _refused(call: ToolCall, why: str) -> ToolCallRecord:
    return ToolCallRecord(call, ToolResult(why, True))


def _retry_after(exc: LatticeRunError) -> float | None:
    value = exc.details.get("retry_after")
    return float(value) if isinstance(value, int | float) else None


def _final_note(exhausted: str) -> str:
    return (
        f"You have used all of your {exhausted}. Do not call tools any more: give your "
        "final answer now, as the instructions above ask for it."
    )

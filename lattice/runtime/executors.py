"""One executor per op kind. Each is built once per Runner (templates, JMESPath and
conditions compiled there) and then run many times against a RunContext."""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from jmespath.exceptions import JMESPathError

from lattice.errors import ErrorType, LatticeRunError
from lattice.events import EventKind
from lattice.ir.kinds import CONTROL_KINDS
from lattice.ir.templates import ValueTemplate, parse_path
from lattice.runs.redaction import redact_result
from lattice.runtime.answers import normalize_answer, take_answer, waiting_summary
from lattice.runtime.conditions import compile_condition, compile_jmespath
from lattice.runtime.context import HaltRun, Outcome, RunContext
from lattice.runtime.mock_tools import scripted_result, scripted_tool
from lattice.runtime.settings import RuntimeSettings
from lattice.tools.http import HttpExecutor

if TYPE_CHECKING:
    from lattice.ir.models import (
        AskOp,
        EndOp,
        JoinOp,
        McpCall,
        Op,
        StartOp,
        StateOp,
        SwitchOp,
        ToolCallOp,
        TransformOp,
    )


# bound once: looking up an enum member on its class costs about 0.1 µs, a global a tenth
_STATE_WRITE = EventKind.STATE_WRITE


class Executor:
    """Base: ``await executor.run(ctx) -> Outcome``."""

    recomputable = False
    """The op only computes from the run's state: nothing outside the run sees it or
    answers it (no model, tool, person or clock), so a resume can redo it exactly, and
    the walk does not force its journal line to disk before the next op (docs/runs.md)."""

    async def run(self, ctx: RunContext) -> Outcome:
        raise NotImplementedError


class PureExecutor(Executor):
    """An op that never waits: ``now(ctx)`` does all of it, and the walk calls it
    directly instead of making and awaiting a coroutine per op."""

    recomputable = True

    def now(self, ctx: RunContext) -> Outcome:
        raise NotImplementedError

    async def run(self, ctx: RunContext) -> Outcome:
        return self.now(ctx)


class StartExecutor(PureExecutor):
    def __init__(self, op: StartOp) -> None:
        self.op = op

    def now(self, ctx: RunContext) -> Outcome:
        return Outcome()


class JoinExecutor(PureExecutor):
    """Where branches met: the merge happened at their FORK; nothing is left to do."""

    def __init__(self, op: JoinOp) -> None:
        self.op = op

    def now(self, ctx: RunContext) -> Outcome:
        return Outcome()


class EndExecutor(PureExecutor):
    """Computes the run output: ``output`` template, else the most recent result."""

    def __init__(self, op: EndOp) -> None:
        self.output = ValueTemplate(op.output) if op.output is not None else None

    def now(self, ctx: RunContext) -> Outcome:
        if self.output is not None:
            value = self.output.render(ctx.state.resolve)
        elif ctx.last_result is not None:
            value = ctx.state.read(ctx.last_result)
        else:
            value = None
        return Outcome("", value)


class SwitchExecutor(Executor):
    """First matching case wins; otherwise the default port; otherwise a run error naming the value."""

    recomputable = True

    def __init__(self, op: SwitchOp) -> None:
        self.op = op
        self.input = parse_path(op.input) if op.input else None
        self.cases = [(case.port, compile_condition(case.test), case.source) for case in op.cases]
        self.slow = any(case.test.op == "matches" for case in op.cases)
        """A case runs a document's regular expression: cases are tried in a worker thread,
        so that a slow pattern never holds up the loop's other runs."""

    async def run(self, ctx: RunContext) -> Outcome:
        if self.input is not None:
            source = self.input.text
            value = ctx.state.read(self.input)
        elif ctx.last_result is not None:
            source = ctx.last_result
            value = ctx.state.read(source)
        else:
            source, value = "(nothing yet)", None
        taken = await asyncio.to_thread(self._first, value) if self.slow else self._first(value)
        if taken is not None:
            port, condition = taken
            ctx.emit(
                EventKind.BRANCH_TAKEN, {"port": port, "condition": condition, "input": source}
            )
            return Outcome(port=port, output=value)
        if self.op.default_port is not None:
            ctx.emit(
                EventKind.BRANCH_TAKEN,
                {"port": self.op.default_port, "condition": "default", "input": source},
            )
            return Outcome(port=self.op.default_port, output=value)
        raise LatticeRunError(
            f"no branch of {self.op.name or self.op.id!r} matches {source} = {_excerpt(value)} "
            "and it has no default branch",
            error_type=ErrorType.NO_MATCHING_BRANCH,
            details={"input": source, "value": value, "conditions": [c for _, _, c in self.cases]},
        )

    def _first(self, value: Any) -> tuple[str, str] | None:
        """The port and condition of the first case that holds for ``value``."""
        for port, test, condition in self.cases:
            if test(value):
                return port, condition
        return None


def _excerpt(value: Any, limit: int = 200) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class StateExecutor(PureExecutor):
    """set / get / append / increment / delete on ``$vars.<variable>``."""

    def __init__(self, op: StateOp) -> None:
        self.op = op
        self.operation = op.operation
        """(A plain attribute: a model's own are read through its ``__getattr__`` hook.)"""
        self.path = f"$vars.{op.variable}"
        self.parsed = parse_path(self.path)
        self.value = ValueTemplate(op.value) if op.value is not None else None

    def now(self, ctx: RunContext) -> Outcome:
        operation, state = self.operation, ctx.state
        value = self.value.render(state.resolve) if self.value is not None else None
        if operation == "set":
            ctx.write_result(self.path, value, self.parsed)
        elif operation == "get":
            value = state.read(self.path)
            assert self.op.writes is not None
            ctx.write_result(self.op.writes, value)
        elif operation == "append":
            appended = value
            # Records and events carry the appended item, not the whole list (linear growth).
            value = state.append(self.parsed, appended)
            ctx.last_result = self.path
            ctx.emit(_STATE_WRITE, {"path": self.path, "appended": appended, "length": len(value)})
            return Outcome("default", {"appended": appended, "length": len(value)})
        elif operation == "increment":
            current = state.get(self.parsed, 0)
            step = 1 if value is None else value
            if not (type(current) in _NUMBERS and type(step) in _NUMBERS) and not (
                _is_number(current) and _is_number(step)
            ):
                raise LatticeRunError(
                    f"cannot increment {self.path}: {_excerpt(current)} + {_excerpt(step)} are not both numbers",
                    error_type=ErrorType.STATE_ERROR,
                )
            value = current + step
            ctx.write_result(self.path, value, self.parsed)
        else:
            state.delete(self.path)
            ctx.emit(_STATE_WRITE, {"path": self.path, "deleted": True})
            value = None
        return Outcome("default", value)


_NUMBERS = (int, float)
"""The exact types of most numbers (``_is_number`` decides for the rest: subclasses, bool)."""


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class TransformExecutor(PureExecutor):
    """JMESPath over ``input`` (default ``{in, vars, ctx}``), compiled once."""

    def __init__(self, op: TransformOp) -> None:
        self.op = op
        self.search = compile_jmespath(op.expression)
        self.input = parse_path(op.input) if op.input else None
        self.writes = op.writes
        self.written = parse_path(op.writes)

    def now(self, ctx: RunContext) -> Outcome:
        data = ctx.state.read(self.input) if self.input is not None else ctx.state.readable()
        try:
            value = self.search(data)
        except JMESPathError as exc:
            raise LatticeRunError(
                f"JMESPath {self.op.expression!r} failed: {exc}",
                error_type=ErrorType.TRANSFORM_ERROR,
            ) from exc
        ctx.write_result(self.writes, value, self.written)
        return Outcome("default", value)


class AskExecutor(Executor):
    """Takes the answer from ``answers`` or a live human; otherwise halts the run."""

    def __init__(self, op: AskOp) -> None:
        self.op = op
        self.question = ValueTemplate(op.question)

    async def run(self, ctx: RunContext) -> Outcome:
        op = self.op
        answer = take_answer(ctx.answers, op)
        question = self.question.render(ctx.state.resolve)
        if answer is None and ctx.ask_human is not None:
            answer = ctx.ask_human(op.model_copy(update={"question": question}))
            if inspect.isawaitable(answer):
                answer = await answer
        if answer is None:
            options = [o.label for o in op.options]
            details: dict[str, Any] = {
                "question": question,
                "options": options,
                "multiSelect": op.multi_select,
            }
            if op.once:
                details["session"] = True  # a branch session's message: the panel chats
            raise HaltRun(
                "waiting_for_answer",
                waiting_summary(question, options),
                details,
                f"lattice resume RUN_DIR --answer {op.source_node}=<"
                + ("option label or index" if options else "text")
                + ">",
            )
        value = normalize_answer(op, answer)
        ctx.emit(EventKind.HUMAN_ANSWER, {"answer": value})
        ctx.write_result(op.writes, value)
        return Outcome("default", value)


class ToolCallExecutor(Executor):
    """TOOL_CALL: HTTP through the run's pooled client; MCP through the run's sessions.

    What a tool answers enters the run's state with the run's secrets masked (``***``,
    in every form :mod:`lattice.masking` knows): a server may echo a secret the request
    carried, or one an earlier request left with it, and no later op may see its value."""

    def __init__(self, op: ToolCallOp, settings: RuntimeSettings) -> None:
        self.op = op
        self.http = (
            HttpExecutor(op, settings.retry, settings.sleep, formats=settings.formats)
            if op.call.tool == "http"
            else None
        )
        self.mcp = McpCallExecutor(op.call) if op.call.tool == "mcp" else None

    async def run(self, ctx: RunContext) -> Outcome:
        if self.mcp is not None:
            result = await self.mcp.run(ctx, self.op.source_node)
        else:
            assert self.http is not None
            method = self.http.call.method
            key = scripted_tool(ctx, self.op.source_node, None, None)
            if key is not None:
                ctx.emit(EventKind.TOOL_CALL, {"tool": "http", "method": method, "mocked": True})
                result = scripted_result(ctx, key)
                status = result.get("status") if isinstance(result, dict) else None
            else:
                ctx.emit(EventKind.TOOL_CALL, {"tool": "http", "method": method})
                result = await self.http.run(ctx.state.resolve, ctx.http_pool)
                status = result["status"]
            ctx.emit(EventKind.TOOL_RESULT, {"tool": "http", "status": status})
        result = redact_result(result, ctx.redact)
        ctx.write_result(self.op.writes, result)
        return Outcome(output=result)


class McpCallExecutor:
    """One MCP call: arguments rendered (manual mode) or produced by the LLM op before it."""

    def __init__(self, call: McpCall) -> None:
        self.call = call
        self.arguments = ValueTemplate(call.arguments)
        self.arguments_from = parse_path(call.arguments_from) if call.arguments_from else None

    async def run(self, ctx: RunContext, node_id: str) -> Any:
        call = self.call
        tool, arguments = call.tool_name, None
        if self.arguments_from is None:
            arguments = self.arguments.render(ctx.state.resolve)
        else:
            produced = ctx.state.read(self.arguments_from)
            if call.mode == "aiToolSelection":
                tool, arguments = produced.get("tool"), produced.get("arguments")
            else:
                arguments = produced
        if not isinstance(arguments, dict):
            raise LatticeRunError(
                f"arguments for MCP tool {tool!r} must be an object, got {_excerpt(arguments)}",
                error_type=ErrorType.TOOL_ERROR,
            )
        called = {"tool": "mcp", "server": call.server_id, "name": tool}
        key = scripted_tool(ctx, node_id, call.server_id, str(tool))
        if key is not None:
            ctx.emit(EventKind.TOOL_CALL, {**called, "mocked": True})
            result = scripted_result(ctx, key)
        else:
            ctx.emit(EventKind.TOOL_CALL, called)
            result = await ctx.tools.call(call.server_id, str(tool), arguments)
        ctx.emit(
            EventKind.TOOL_RESULT,
            {
                "tool": "mcp",
                "server": call.server_id,
                "name": tool,
                "structured": not isinstance(result, str),
            },
        )
        return result


EXECUTORS: dict[str, Callable[[Any], Executor]] = {
    "START": StartExecutor,
    "END": EndExecutor,
    "SWITCH": SwitchExecutor,
    "STATE": StateExecutor,
    "TRANSFORM": TransformExecutor,
    "ASK": AskExecutor,
    "JOIN": JoinExecutor,
}


def build_executor(op: Op, settings: RuntimeSettings) -> Executor | None:
    """The executor for ``op`` (compiles its templates, expressions and conditions);
    None for FORK and FOR_EACH, which the walk runs itself. The contract engine comes
    with the first LLM or AGENT op: a run without one does not import it."""
    if op.kind in CONTROL_KINDS:
        return None
    if op.kind == "AGENT":
        from lattice.runtime.agent_op import AgentExecutor

        return AgentExecutor(op, settings)  # type: ignore[return-value]
    if op.kind == "LLM_WRITE":
        from lattice.runtime.llm_op import LLMWriteExecutor

        return LLMWriteExecutor(op, settings)  # type: ignore[return-value]
    if op.kind == "TOOL_CALL":
        return ToolCallExecutor(op, settings)
    executor: Executor = EXECUTORS[op.kind](op)
    return executor

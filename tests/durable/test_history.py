"""The workflow side of the walk on Temporal without a server: which ops run in the
workflow, how an activity's usage adds up across branches, and a question answered in
its op (``lattice.durable.temporal.history``)."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from lattice.contracts.usage import Usage
from lattice.ir.models import Case, Condition, SwitchOp
from lattice.llm.base import TokenUsage
from lattice.runtime.context import HaltRun, Outcome, RunContext
from lattice.runtime.executors import Executor, build_executor
from lattice.runtime.settings import RuntimeSettings
from tests.durable.helpers import example

pytest.importorskip("temporalio")  # the package refuses to import without the extra

from lattice.durable.temporal.history import (
    AnsweredOp,
    add_usage,
    compiled_walk,
    runs_in_workflow,
)
from lattice.durable.temporal.ops import execir_digest
from lattice.ir.serialize import ir_to_dict


def test_only_ops_that_never_wait_run_in_the_workflow() -> None:
    ir, _, _ = example("support-triage")
    execir = ir_to_dict(ir)
    compiled = compiled_walk(execir, execir_digest(execir))
    local_kinds = {ir.ops[op_id].kind for op_id in compiled.local}
    remote_kinds = {op.kind for op_id, op in ir.ops.items() if op_id not in compiled.local}
    assert {"START", "END", "SWITCH"} <= local_kinds  # the walk runs them itself
    assert remote_kinds == {"LLM_WRITE"}
    assert compiled_walk(execir, execir_digest(execir)) is compiled  # compiled once


def test_a_switch_matching_regular_expressions_runs_on_a_worker() -> None:
    def switch(op: str) -> SwitchOp:
        case = Case(port="hit", test=Condition(op=op, value="^ERR"))  # type: ignore[arg-type]
        return SwitchOp(id="s", source_node="s", input="$in.text", cases=[case])

    settings = RuntimeSettings()
    plain, regex = switch("contains"), switch("matches")
    assert runs_in_workflow(plain, build_executor(plain, settings))
    assert not runs_in_workflow(regex, build_executor(regex, settings))


def test_branches_usage_adds_up_from_what_each_op_was_sent() -> None:
    run = Usage()
    sent = run.to_json()
    # two ops sent at once, each given the run's usage (a copy: it went through Temporal)
    first, second = Usage.from_json(copy.deepcopy(sent)), Usage.from_json(copy.deepcopy(sent))
    first.add("m", "small", TokenUsage(10, 5))
    first.requests += 1
    second.add("m", "large", TokenUsage(3, 2))
    second.requests += 1
    add_usage(run, sent, first.to_json())
    add_usage(run, sent, second.to_json())
    assert (run.calls, run.requests, run.input_tokens, run.output_tokens) == (2, 2, 13, 7)
    assert run.by_model == {"m": {"calls": 2, "input_tokens": 13, "output_tokens": 7}}
    assert set(run.by_class) == {"small", "large"}


class AsksOnce(Executor):
    """Halts on a question until ``answers`` holds its node's answer."""

    async def run(self, ctx: RunContext) -> Outcome:
        given = ctx.answers.get("q")
        if not given:
            raise HaltRun("waiting_for_answer", "Ready?", {"multiSelect": False}, "answer")
        return Outcome(output=given[0])


def test_a_question_is_answered_inside_its_op_which_then_runs_again() -> None:
    asked: list[str] = []
    events: list[str] = []

    async def ask(ctx: Any, halt: HaltRun) -> Any:
        asked.append(halt.summary)
        return "yes"

    ctx = _context(events)
    outcome = asyncio.run(AnsweredOp(AsksOnce(), "ASK", ask).run(ctx))
    assert outcome.output == "yes"
    assert asked == ["Ready?"]
    assert events == ["op_started"]  # started again once answered, as a resumed run does


def _context(events: list[str]) -> RunContext:
    from lattice.llm.disabled import DisabledProvider
    from lattice.runs.store import NullRecorder
    from lattice.runtime.state import StateStore

    settings = RuntimeSettings()
    ctx = RunContext(
        run_id="r",
        state=StateStore({}),
        recorder=NullRecorder(),
        answers={},
        ask_human=None,
        listeners=[lambda event: events.append(event["type"])],
        llm=settings.call_env(DisabledProvider()),
        http=settings.http,
        tools=lambda: None,  # type: ignore[arg-type,return-value]
    )
    ctx.current_op = ctx.current_node = "q"
    return ctx


def test_a_remote_op_waiting_for_approval_goes_on_from_its_journal() -> None:
    """The op's activity ends with its journal; its next one is sent that journal and the
    decisions (under ``$approvals``), and the decisions it used up leave the run's answers."""
    from types import SimpleNamespace

    from lattice.durable.temporal.history import RemoteOp

    journal = [{"kind": "answer", "op_id": "q", "prompt_hash": "h", "text": "t"}]
    sent: list[tuple[list[dict[str, Any]], dict[str, Any]]] = []
    usage = Usage().to_json()

    async def send(ctx: Any, op: Any, given: list[dict[str, Any]]) -> Any:
        sent.append((given, copy.deepcopy(ctx.answers)))
        done: dict[str, Any] = {"usage": usage, "events": [], "changes": [], "answers": {}}
        if len(sent) == 1:
            halt = {"reason": "waiting_for_approval", "summary": "s", "action": "a"}
            details = {"approvals": [{"id": "q.1.1"}]}
            return {"usage": usage}, done | {
                "halt": halt | {"details": details},
                "journal": journal,
            }
        return {"usage": usage}, done | {"port": "out", "output": "done", "last_result": None}

    async def ask(ctx: Any, halt: HaltRun) -> Any:
        return {"q.1.1": {"decision": "allow", "door": "gateway", "at": "T"}}

    op: Any = SimpleNamespace(id="q", kind="AGENT", source_node="q")
    ctx = _context([])
    outcome = asyncio.run(AnsweredOp(RemoteOp(op, send), "AGENT", ask).run(ctx))
    assert outcome.output == "done"
    assert sent == [
        ([], {}),
        (journal, {"$approvals": {"q.1.1": {"decision": "allow", "door": "gateway", "at": "T"}}}),
    ]
    assert "$approvals" not in ctx.answers

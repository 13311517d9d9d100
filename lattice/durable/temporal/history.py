"""Lattice's own walk inside a Temporal workflow, with Temporal's history as its durability.

The workflow (``workflow.py``) runs ``lattice.runtime.walk.Walker`` itself. Ops that never
wait run in the workflow with their local executors (``runs_in_workflow``); every other
op runs as the ``lattice.op`` activity (``RemoteOp``), whose result the history records:
a replayed workflow is given that result, so the walk needs no journal of its own
(``HistoryRecords``: op records kept, nothing journaled). A question, from an ASK in the
workflow or from a model asking for information in an activity, waits for its answer
inside the op (``AnsweredOp``), so it works in parallel branches too; so do an agent's
tool calls waiting for a person's approval.

This module does not import ``temporalio``: the workflow gives it the calls that do.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from lattice.contracts.usage import Usage
from lattice.ir.models import ExecIR, Op
from lattice.ir.serialize import ir_from_json
from lattice.ir.templates import StatePath
from lattice.permissions.approvals import APPROVALS
from lattice.runs.oplog import OpRecord
from lattice.runtime.context import HaltRun, Outcome, RunContext
from lattice.runtime.durability import Ephemeral
from lattice.runtime.executors import Executor, SwitchExecutor, build_executor
from lattice.runtime.op_record import error_from_data
from lattice.runtime.settings import RuntimeSettings
from lattice.runtime.walk import op_reads

WORKFLOW_KINDS = frozenset({"START", "END", "STATE", "SWITCH", "TRANSFORM", "ASK", "JOIN"})
"""Op kinds that never wait on the world: they run in the workflow itself (FORK and
FOR_EACH too: the walk runs them, and their branches' ops go their own ways)."""
COMPILED_RUNS = 64
"""Compiled ExecIRs a worker's workflows share (by digest): each run does not compile its
document again, and a replay finds it compiled."""


@dataclass
class CompiledWalk:
    """A run's ExecIR with the executors of its workflow-side ops built once."""

    ir: ExecIR
    local: dict[str, Executor | None]
    """Op id → its local executor, for the ops that run in the workflow."""
    reads: dict[str, list[StatePath]]


_compiled: OrderedDict[str, CompiledWalk] = OrderedDict()


def compiled_walk(execir: dict[str, Any], digest: str) -> CompiledWalk:
    """``execir`` compiled (cached by ``digest``; compiling is deterministic, so a shared
    cache keeps workflows deterministic)."""
    compiled = _compiled.get(digest)
    if compiled is not None:
        _compiled.move_to_end(digest)
        return compiled
    ir = ir_from_json(execir)
    settings = RuntimeSettings()  # the workflow side: no provider, secret or host is used
    local: dict[str, Executor | None] = {}
    for op_id, op in ir.ops.items():
        if op.kind not in WORKFLOW_KINDS:
            continue  # its executor is built on the workers that run it
        executor = build_executor(op, settings)
        if runs_in_workflow(op, executor):
            local[op_id] = executor
    compiled = CompiledWalk(ir, local, op_reads(ir))
    _compiled[digest] = compiled
    while len(_compiled) > COMPILED_RUNS:
        _compiled.popitem(last=False)
    return compiled


def runs_in_workflow(op: Op, executor: Executor | None) -> bool:
    """Whether ``op`` runs in the workflow: a kind that never waits, reading no secret
    (secrets are read on workers only, and masked there), and no switch matching regular
    expressions (their time limit counts CPU time, which a replay may not repeat)."""
    if op.kind not in WORKFLOW_KINDS:
        return False
    if any(path.startswith("$secrets") for path in op.reads):
        return False
    return not (isinstance(executor, SwitchExecutor) and executor.slow)


class HistoryRecords(Ephemeral):
    """Temporal's history as the walk's durability: each activity's result is recorded
    by the history as it completes, so nothing is journaled or committed here (model
    calls are made in activities, never in the workflow); op records are kept (in
    ``records``) for the ``record`` query and ``runs export``."""

    keeps_records = True

    def __init__(self, records: list[OpRecord]) -> None:
        self.records = records

    def write_op(self, label: str, op_id: str, record: OpRecord) -> None:
        self.records.append(record)


SendOp = Callable[
    [RunContext, Op, list[dict[str, Any]]], Awaitable[tuple[dict[str, Any], dict[str, Any]]]
]
"""Runs ``op`` as an activity with the track's context and the journal its visit left
when it halted (``[]`` for a new visit); returns the request it sent and what the op did
(``ops.py``)."""


class RemoteHalt(HaltRun):
    """An activity's op halted; ``journal`` is what its visit did so far (its turns, tool
    results and decisions), for the visit's next activity to replay."""

    def __init__(self, halt: dict[str, Any], journal: list[dict[str, Any]]) -> None:
        super().__init__(
            halt["reason"], halt["summary"], halt["details"], halt["action"], keeps_journal=True
        )
        self.journal = journal


class RemoteOp(Executor):
    """An op executed on a worker: takes in what the activity did as the local executor
    would have done it (state changes, events, usage, answers), and returns its outcome
    or raises its failure; the walk does the rest (events, record, routing)."""

    def __init__(self, op: Op, send: SendOp) -> None:
        self.op = op
        self.send = send

    async def run(self, ctx: RunContext, journal: list[dict[str, Any]] | None = None) -> Outcome:
        """The op's visit (going on from ``journal``, what it did before it halted)."""
        sent, done = await self.send(ctx, self.op, journal or [])
        add_usage(ctx.usage, sent["usage"], done["usage"])
        for key in (self.op.source_node, APPROVALS):  # what the op used up
            if key in done["answers"]:
                ctx.answers[key] = done["answers"][key]
            else:
                ctx.answers.pop(key, None)
        for event in done["events"]:
            ctx.emit(event["type"], event.get("data"))
        if "halt" in done:  # the op runs again once answered: its changes are not kept
            halt = done["halt"]
            if "journal" in done:
                raise RemoteHalt(halt, done["journal"])
            raise HaltRun(halt["reason"], halt["summary"], halt["details"], halt["action"])
        for change in done["changes"]:
            ctx.state.apply(change)
        ctx.last_result = done["last_result"]
        if "error" in done:  # routed by the walk, as a local op's failure
            raise error_from_data(done["error"])
        return Outcome(port=done["port"], output=done.get("output"), record=done.get("record"))


AskFor = Callable[[RunContext, HaltRun], Awaitable[Any]]
"""Waits for the answer to a question an op halted on; returns it as given (for calls
waiting for approval: their decisions by request id)."""
APPROVAL = "waiting_for_approval"


class AnsweredOp(Executor):
    """``inner``, which may halt on a question or on tool calls waiting for approval: it
    waits for the answer or the decisions (``ask``), then the op runs again with them, as
    a resumed local run does: a single-choice answer answers this visit only (a question
    in a loop is asked again); a remote op's visit goes on from the journal it halted
    with, so nothing it did is paid for or run again."""

    def __init__(self, inner: Executor, kind: str, ask: AskFor) -> None:
        self.inner = inner
        self.kind = kind
        self.ask = ask

    async def run(self, ctx: RunContext) -> Outcome:
        journal: list[dict[str, Any]] = []
        while True:
            try:
                if isinstance(self.inner, RemoteOp):
                    return await self.inner.run(ctx, journal)
                return await self.inner.run(ctx)
            except HaltRun as halt:
                journal = halt.journal if isinstance(halt, RemoteHalt) else []
                given = await self.ask(ctx, halt)
                if halt.reason == APPROVAL:
                    ctx.answers.setdefault(APPROVALS, {}).update(given)
                else:
                    node = str(ctx.current_node)
                    ctx.answers[node] = given if halt.details.get("multiSelect") else [given]
                ctx.emit("op_started", {"kind": self.kind})  # as a resumed run starts it


def add_usage(usage: Usage, before: dict[str, Any], after: dict[str, Any]) -> None:
    """Add to ``usage`` what an op used on a worker: ``after`` (its usage when it ended)
    less ``before`` (what it was sent), so that branches' ops running at once add up."""
    for name in ("calls", "input_tokens", "output_tokens", "requests"):
        setattr(usage, name, getattr(usage, name) + after[name] - before[name])
    for table, was, now in (
        (usage.by_model, before["by_model"], after["by_model"]),
        (usage.by_class, before["by_class"], after["by_class"]),
    ):
        for key, row in now.items():
            old = was.get(key, {})
            mine = table.setdefault(key, {"calls": 0, "input_tokens": 0, "output_tokens": 0})
            for field_name, value in row.items():
                mine[field_name] = mine.get(field_name, 0) + value - old.get(field_name, 0)

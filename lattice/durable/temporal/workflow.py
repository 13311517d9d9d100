"""The Temporal workflow that runs one Lattice run: Lattice's own walk, deterministic.

``LatticeRun`` runs the walk of a local run (``lattice.runtime.walk.Walker``): ops that
never wait (START, END, STATE, SWITCH, TRANSFORM, ASK, JOIN, and FORK and FOR_EACH, whose
branches run as the workflow's own tasks) run here with their local executors; every op
that does I/O (LLM_WRITE, AGENT, TOOL_CALL) runs as a ``lattice.op`` activity (``ops.py``
executes it on a worker). Temporal's history is the walk's persistence
(``history.py``): a replay is given each activity's recorded result. The walk's clock
is the workflow's (``workflow.time``, ``workflow.now``) and a fork waits for its branches
with ``workflow.wait``, so a replay walks the same way.

The workflow keeps what the run records: its events, its state, its op records and its
usage. A question without an answer (an ASK, or a model asking for information) waits,
for as long as it takes, for the ``answer`` update; an agent's tool calls a permission
rule asks about wait, as long, for the ``approve`` update (no activity, so no worker,
is held meanwhile: the op's activity ended with its journal, which its next one replays).
Each decision, who gave it through which door and when, stays in the history (the
update) and in ``decisions``. Cancelling the workflow (Temporal's
cancellation) ends the run ``interrupted``. Queries give any client the run's progress
(``progress``), and everything a run folder holds (``record``).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, CancelledError

from lattice.errors import ErrorType
from lattice.events import EventKind

with workflow.unsafe.imports_passed_through():
    from lattice.contracts.usage import Usage
    from lattice.durable.temporal.history import (
        APPROVAL,
        AnsweredOp,
        RemoteOp,
        compiled_walk,
    )
    from lattice.durable.temporal.state_slice import state_for
    from lattice.durable.temporal.steps import SteppedRecords, rerun_point, steps_before
    from lattice.durable.temporal.stops import StopGate
    from lattice.durable.temporal.tracing import TRACE_ACTIVITY
    from lattice.errors import LatticeRunError
    from lattice.ir.models import ExecIR, ForEachOp, ForkOp, Op
    from lattice.llm.disabled import DisabledProvider
    from lattice.permissions.approvals import check_approvals
    from lattice.runs.oplog import OpRecord
    from lattice.runs.store import NullRecorder
    from lattice.runtime.context import HaltRun, Interrupted, RunContext
    from lattice.runtime.executors import Executor
    from lattice.runtime.op_record import record_changes
    from lattice.runtime.settings import RuntimeSettings
    from lattice.runtime.state import StateLimits, StateStore
    from lattice.runtime.walk import Track, Walker, WalkPaused, walk_steps
    from lattice.runtime.walk_end import WalkEnd, walk_end
    from lattice.runtime.walk_state import WalkState
    from lattice.tools.mcp import ToolSessions

WORKFLOW_NAME = "LatticeRun"
OP_ACTIVITY = "lattice.op"
RUN_AGAIN = "fix the cause and run the workflow again"
"""What a failed run's report says to do (a run on Temporal keeps no folder to resume)."""
CANCELLED = "the run was cancelled through Temporal"
START_AGAIN = "start it again (a cancelled workflow does not go on)"


# long: Temporal's workflow is one class: its run, queries, updates and signals are its methods over one run's fields (the walk, state and executors are modules of their own)
@workflow.defn(name=WORKFLOW_NAME)
class LatticeRunWorkflow:
    """One Lattice run (the module docstring says how it maps)."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.ops: list[OpRecord] = []
        self.status = "running"
        self.questions: dict[str, dict[str, Any]] = {}
        """``<branch>/<node id>`` → the question waiting there, in the order asked
        (branches may wait at once, on the same node too)."""
        self.answered: dict[str, Any] = {}
        """``<branch>/<node id>`` → the answer to its question, until the op takes it."""
        self.early: dict[str, list[Any]] = {}
        """Node id → answers sent before its question was asked, in order."""
        self.decided: dict[str, dict[str, Any]] = {}
        """Approval id → the decision given on it, until the op waiting on it takes it."""
        self.decisions: list[dict[str, Any]] = []
        """Every decision given (its id, choice, reason, door and time), in order."""
        self.ctx: RunContext | None = None
        self.steps: SteppedRecords | None = None
        self.track: Track | None = None
        """The main walk's track: its ``current`` op is where the run is."""
        self.initial_state: dict[str, Any] = {}
        self.result: dict[str, Any] | None = None
        self.run_id = ""
        self.spec: dict[str, Any] = {}
        self.recorded_fixtures: list[dict[str, Any]] = []
        """Fixture lines the run's ops recorded on workers (``fixtures.py``)."""
        self.scheduled = 0
        """Activities scheduled so far: an op's activity id is ``<number>-<op id>``."""
        self.scheduled_before = 0
        """Activities the executions this one continues had scheduled."""
        self.provider_state: Any = None
        """Where the run's provider stands (a mock script's cursor) after its last op."""
        self.gate = StopGate(lambda: _timestamp(workflow.now()))
        """Closed by the ``stop`` update, opened by ``resume`` (``stops.py``)."""
        self.one_at_a_time = asyncio.Lock()
        """Taken by each op of a run with a scripted provider: its answers are handed out
        in the order the walk reaches the ops, as in a local run."""

    @property
    def question(self) -> dict[str, Any] | None:
        """The question the run waits on (the first asked, when branches wait at once)."""
        return next(iter(self.questions.values()), None)

    # -- what clients send and ask -------------------------------------------------------

    @workflow.update
    def answer(self, node_id: str, value: Any) -> None:
        """An answer to the question of ASK node ``node_id`` (a label, an index or text).

        An update, not a signal: when the client's call returns, the run no longer reads
        as waiting on that question, so whoever follows it next never sees it stale. When
        branches wait on the same node, the question asked first takes it; an answer sent
        before its question is asked answers it when it is."""
        key = next((k for k, q in self.questions.items() if q["node_id"] == node_id), None)
        if key is None:
            self.early.setdefault(node_id, []).append(value)
            return
        del self.questions[key]
        self.answered[key] = value
        if not self.questions:
            self.status = "running"

    @workflow.update
    def approve(self, decisions: dict[str, Any]) -> None:
        """Decisions on tool calls waiting for approval, by request id (``"*"``: every call
        waiting now), each ``"allow"``, ``"allow_run"``, ``"deny"`` or ``{"decision",
        "reason", "door"}``; stamped with the workflow's time. A run waiting on several
        calls at once goes on when each has its decision."""
        now = _timestamp(workflow.now())
        waiting = self._waiting_approvals()
        for request_id, value in decisions.items():
            given = {"decision": value} if isinstance(value, str) else dict(value)
            given["at"] = now
            for one in waiting if request_id == "*" else [request_id]:
                if one in self.decided:
                    continue
                self.decided[one] = given
                self.decisions.append({"id": one, **given})
        for key, question in list(self.questions.items()):
            asked = (
                question["details"].get("approvals", []) if question["reason"] == APPROVAL else ()
            )
            if asked and all(request["id"] in self.decided for request in asked):
                del self.questions[key]
        if not self.questions:
            self.status = "running"

    @approve.validator
    def _check_approve(self, decisions: dict[str, Any]) -> None:
        problems = check_approvals(decisions)
        waiting = self._waiting_approvals()
        unknown = sorted(k for k in decisions if k != "*" and k not in waiting)
        if unknown:
            problems.append(
                f"no tool call waits for approval as {', '.join(unknown)} "
                f"(waiting: {', '.join(waiting) or 'none'})"
            )
        if problems:
            raise ValueError("; ".join(problems))

    def _waiting_approvals(self) -> list[str]:
        """The ids of the tool calls that wait for a decision now."""
        return [
            request["id"]
            for question in self.questions.values()
            if question["reason"] == APPROVAL
            for request in question["details"].get("approvals", [])
            if request["id"] not in self.decided
        ]

    @workflow.update
    def stop(self, door: str = "temporal") -> None:
        """Stop the run at its next op boundary: no new model or tool op starts, the ops
        in flight finish; it then shows ``interrupted`` until ``resume`` (``stops.py``)."""
        self.gate.stop(door)

    @stop.validator
    def _check_stop(self, door: str = "temporal") -> None:
        if self.result is not None:
            raise ValueError(f"run {self.run_id} is {self.result['status']}: it has ended")

    @workflow.update
    def resume(self) -> None:
        """Go on from where the run stopped (or was about to)."""
        assert self.ctx is not None
        self.gate.resume(self.ctx)

    @resume.validator
    def _check_resume(self) -> None:
        if self.gate.request is None:
            raise ValueError(f"run {self.run_id} is {self.shown_status}; it was not stopped")

    @property
    def shown_status(self) -> str:
        """The run's status as clients see it: ``interrupted`` while it is stopped."""
        if self.status == "running" and self.gate.holding:
            return "interrupted"
        return self.status

    def _stopped(self) -> dict[str, Any] | None:
        """The stopped run's report, while it is stopped."""
        if self.shown_status != "interrupted" or self.result is not None:
            return None
        return self.gate.failure(self.run_id, f"lattice resume {self.run_id} --temporal HOST:PORT")

    @workflow.query
    def progress(self, after: int = 0) -> dict[str, Any]:
        """Events after number ``after``, the status, the open question and, once the run
        is over, its result."""
        return {
            "run_id": self.run_id,
            "status": self.shown_status,
            "events": [e for e in self.events if e["seq"] > after],
            "question": self.question,
            "stopped": self._stopped(),
            "stopping": self.gate.request is not None,
            "usage": self.ctx.usage.to_json() if self.ctx is not None else None,
            "result": self.result,
        }

    @workflow.query
    def rerun_point(self, op: str, visit: int | None = None) -> dict[str, Any]:
        """The state before visit ``visit`` of ``op`` of the main walk (``steps.py``), and
        what a re-run from it is started with (this run's spec, for a new run id)."""
        assert self.steps is not None and self.track is not None
        ended = self.result is not None and self.result["status"] == "completed"
        in_flight = None if ended else self.track.current  # a fork, when in its branches
        point = rerun_point(
            self.initial_state,
            self.steps.steps,
            op,
            visit,
            ops=self.spec["execir"]["ops"],
            in_flight=in_flight,
            run_id=self.run_id,
        )
        return {**point, "status": self.result["status"] if self.result else self.shown_status}

    @workflow.query
    def resume_spec(self) -> dict[str, Any]:
        """What a new execution of this workflow (the same run id) is started with to go
        on from the op this failed or interrupted run ended at: the state before that op,
        and the run's events, op records, steps, usage and provider carried over, so the
        run reads as one (a local resume's segments). ValueError when it cannot."""
        assert self.steps is not None and self.track is not None and self.ctx is not None
        status = self.result["status"] if self.result else self.shown_status
        if status not in ("failed", "interrupted") or self.result is None:
            raise ValueError(
                f"run {self.run_id} is {status}; only a failed or interrupted run is resumed "
                "as a new execution (a stopped one goes on where it is)"
            )
        op = self.track.current
        failure = self.result.get("failure") or {}
        if op is None or failure.get("op_id") not in (None, op):
            raise ValueError(
                f"run {self.run_id} failed at {failure.get('op_id')!r}, inside parallel "
                f"branches: resuming would run the branches again; re-run it from {op!r} "
                "(POST /v1/runs/{id}/rerun) to run them again on purpose"
            )
        point = rerun_point(
            self.initial_state,
            self.steps.steps,
            op,
            None,
            ops=self.spec["execir"]["ops"],
            in_flight=op,
            run_id=self.run_id,
        )
        carried = self.spec.get("resumed") or {}
        return {
            **self.spec,
            "start": {**(self.spec.get("start") or {}), "op": op, "state": point["state"]},
            "resumed": {
                "segment": int(carried.get("segment", 1)) + 1,
                "after": status,
                "events": self.events,
                "ops": self.ops,
                "steps": steps_before(self.steps.steps, op, point["visit"]),
                "initial_state": self.initial_state,
                "usage": self.ctx.usage.to_json(),
                "seq": self.ctx.seq,
                "provider_state": self.provider_state,
                "decisions": self.decisions,
                "scheduled": self.scheduled,
            },
        }

    @workflow.query
    def spec_to_rerun(self) -> dict[str, Any]:
        """What this run was started with, but its start (a re-run takes it, with its own)."""
        return {k: v for k, v in self.spec.items() if k not in ("start", "run_id", "resumed")}

    @workflow.query
    def fixtures(self) -> dict[str, Any]:
        """The run's fixture table (``fixtures.py``: a worker asks for it once per run)."""
        table: dict[str, Any] = self.spec.get("fixtures") or {}
        return table

    @workflow.query
    def execir(self) -> dict[str, Any]:
        """The run's ExecIR (a worker asks for it once per document: ops do not carry it)."""
        execir: dict[str, Any] = self.spec["execir"]
        return execir

    @workflow.query
    def record(self) -> dict[str, Any]:
        """Everything a run folder holds (``export.py`` writes it)."""
        return {
            "run_id": self.run_id,
            "execir": self.spec.get("execir"),
            "inputs": self.spec.get("inputs"),
            "workflow": self.spec.get("workflow"),
            "document": self.spec.get("document"),
            "parent": (self.spec.get("start") or {}).get("parent"),
            "status": self.shown_status,
            "stopped": self._stopped(),
            "events": self.events,
            "ops": self.ops,
            "state_initial": self.initial_state,
            "state": self.ctx.state.snapshot() if self.ctx is not None else {},
            "question": self.question,
            "decisions": self.decisions,
            "usage": self.ctx.usage.to_json() if self.ctx is not None else None,
            "result": self.result,
            "fixtures_recorded": self.recorded_fixtures,
        }

    # -- the walk ------------------------------------------------------------------------

    @workflow.run
    async def run(self, spec: dict[str, Any]) -> dict[str, Any]:
        result = await self._run(spec)
        if spec.get("trace"):
            await self._trace(spec, result)
        return result

    async def _trace(self, spec: dict[str, Any], result: dict[str, Any]) -> None:
        """Have a worker export this execution's run span (``tracing.py``)."""
        error = (
            (result.get("failure") or {}).get("category") if result["status"] == "failed" else None
        )
        ended = {
            "run_id": self.run_id,
            "segment": (spec.get("resumed") or {}).get("segment", 1),
            "workflow": spec["workflow"]["id"],
            "started_at": _timestamp(workflow.info().start_time),
            "finished_at": result["finished_at"],
            "status": result["status"],
            "usage": result["usage"],
            "error_type": error,
        }
        with contextlib.suppress(ActivityError, CancelledError, asyncio.CancelledError):
            await workflow.execute_local_activity(
                TRACE_ACTIVITY,
                ended,
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=RetryPolicy(maximum_attempts=2),
            )

    async def _run(self, spec: dict[str, Any]) -> dict[str, Any]:
        self.run_id = spec["run_id"]
        self.spec = spec
        compiled = compiled_walk(spec["execir"], spec["execir_digest"])
        ir = compiled.ir
        settings = RuntimeSettings()  # the workflow side's: no provider, secret or host
        carried = spec.get("carried")  # what the execution this one continues had
        resumed = spec.get("resumed")  # an earlier execution's run, going on (resume_spec)
        if resumed is not None and carried is None:
            self.events.extend(resumed["events"])
            self.ops.extend(resumed["ops"])
            self.decisions.extend(resumed["decisions"])
            self.provider_state = resumed["provider_state"]
            self.scheduled = self.scheduled_before = resumed["scheduled"]
        ctx = self.ctx = self._context(spec, ir, settings, carried)
        start = spec.get("start")  # a re-run from a step of another run (steps.py)
        if carried is not None:
            ctx.walk.counters.steps = carried["steps"]
            ctx.walk.counters.visits = dict(carried["visits"])
        elif resumed is not None and start is not None:
            ctx.emit(
                EventKind.RUN_RESUMED,
                {"segment": resumed["segment"], "from_op": start["op"], "after": resumed["after"]},
                op=False,
            )
        else:
            started = {"workflow": ir.workflow.id, "inputs": spec["inputs"]}
            if start is not None:
                started |= {"start_op": start["op"], "parent": start["parent"]}
            ctx.emit(EventKind.RUN_STARTED, started, op=False)
            for notice in spec["notices"]:
                ctx.emit(notice["type"], notice["data"], op=False)
        limits = spec["limits"]
        walker = Walker(
            ir,
            walk_steps(ir, lambda op: self._executor(op, compiled.local)),
            compiled.reads,
            max_steps=limits["max_steps"],
            max_visits=limits["max_visits"],
            max_parallel=int(limits.get("max_parallel") or settings.max_parallel),
            clock=workflow.time,
            wait=workflow.wait,
            pause=self._continue_now,
        )
        track = self.track = Track(ctx, start["op"] if start is not None else ir.entry)
        if carried is not None:
            track.current, track.op_seq = carried["current"], carried["op_seq"]
        try:
            output = (await walker.run_track(track)).output
        except WalkPaused:
            await workflow.wait_condition(workflow.all_handlers_finished)
            workflow.continue_as_new(self._carried(spec, track))
        except LatticeRunError as stopped:
            end = walk_end(track, stopped=stopped)
            if end.status == "failed" and "recovery_action" not in stopped.details:
                assert end.failure is not None
                end.failure.recovery_action = RUN_AGAIN
        except asyncio.CancelledError:
            end = walk_end(track, stopped=Interrupted(CANCELLED), cancelled=True)
            assert end.failure is not None
            end.failure.recovery_action = START_AGAIN
        else:
            end = walk_end(track, output)
        return self._finish(end)

    def _context(
        self,
        spec: dict[str, Any],
        ir: ExecIR,
        settings: RuntimeSettings,
        carried: dict[str, Any] | None,
    ) -> RunContext:
        """The run's context in the workflow: its state, events (kept for the queries,
        stamped with the workflow's clock) and usage; op records kept by the history.
        ``carried``: what the execution this one continues had (``_carried``)."""
        resumed = spec.get("resumed")
        if carried is None:
            start = spec.get("start")
            state = StateStore(
                spec["inputs"],
                vars=copy.deepcopy(start["state"].get("vars") or {}) if start else None,
                ctx={
                    "run_id": self.run_id,
                    "started_at": _timestamp(workflow.now()),
                    "workflow_id": ir.workflow.id,
                    "workflow_name": ir.workflow.name,
                    "model_classes": spec["model_classes"],
                },
            )
            self.initial_state = resumed["initial_state"] if resumed else state.snapshot()
        else:
            state = StateStore.from_snapshot(carried["state"])
            self.initial_state = carried["state_initial"]
            self.events.extend(carried["events"])
            self.ops.extend(carried["ops"])
            self.decisions = list(carried["decisions"])
            self.decided = dict(carried["decided"])
            self.early = {node: list(values) for node, values in carried["early"].items()}
            self.scheduled = self.scheduled_before = carried["scheduled"]
            self.provider_state = carried["provider_state"]
        state.limit(_state_limits(spec, settings))
        was = carried or resumed  # the usage and event numbers the run goes on from
        ctx = RunContext(
            run_id=self.run_id,
            state=state,
            recorder=NullRecorder(),
            answers=dict(carried["answers"] if carried else spec.get("answers") or {}),
            ask_human=None,
            listeners=[self.events.append],
            llm=settings.call_env(
                DisabledProvider(), usage=Usage.from_json(was["usage"]) if was else None
            ),
            http=settings.http,
            tools=_no_tools,
            seq=int(was["seq"]) if was else 0,
        )
        ctx.now = lambda: _timestamp(workflow.now())
        steps = carried["step_records"] if carried else resumed["steps"] if resumed else None
        self.steps = SteppedRecords(self.ops, state, steps)
        ctx.walk = WalkState(base_provider=DisabledProvider(), persistence=self.steps)
        if carried is not None:
            ctx.last_result = carried["last_result"]
        return ctx

    def _continue_now(self) -> bool:
        """Whether the walk goes on in a new execution (continue-as-new) before its next
        op: when Temporal suggests it (its history nears 4 MB or 4,096 events), or after
        the run's ``continue_after`` activities in this execution."""
        if workflow.info().is_continue_as_new_suggested():
            return True
        every = int(self.spec.get("continue_after") or 0)
        return every > 0 and self.scheduled - self.scheduled_before >= every

    def _carried(self, spec: dict[str, Any], track: Track) -> dict[str, Any]:
        """The spec of the execution that goes on with the walk at ``track``'s op: this
        run's spec with what the walk has done so far, so that nothing a user sees (events,
        op records and their labels, state, usage, decisions) shows the seam."""
        ctx = track.ctx
        assert self.steps is not None
        went_on = {k: v for k, v in spec.items() if k not in ("resumed", "carried")}
        if "resumed" in spec:  # its segment only: what it carried is carried below
            went_on["resumed"] = {k: spec["resumed"][k] for k in ("segment", "after")}
        return {
            **went_on,
            "carried": {
                "step_records": self.steps.steps,
                "current": track.current,
                "op_seq": track.op_seq,
                "steps": ctx.walk.counters.steps,
                "visits": ctx.walk.counters.visits,
                "seq": ctx.seq,
                "state": ctx.state.snapshot(),
                "state_initial": self.initial_state,
                "last_result": ctx.last_result,
                "answers": ctx.answers,
                "usage": ctx.usage.to_json(),
                "events": self.events,
                "ops": self.ops,
                "decisions": self.decisions,
                "decided": self.decided,
                "early": self.early,
                "scheduled": self.scheduled,
                "provider_state": self.provider_state,
                "executions": spec.get("carried", {}).get("executions", 1) + 1,
            },
        }

    def _executor(self, op: Op, local: dict[str, Executor | None]) -> Executor | None:
        """The executor of ``op`` in this run: its local one when it runs here, else the
        activity; an op that may ask (ASK, a model asking for information) waits for its
        answer inside it."""
        if isinstance(op, ForkOp | ForEachOp):
            return None  # the walk runs it itself
        executor = local.get(op.id) if op.id in local else RemoteOp(op, self._send)
        if executor is None:
            return None
        if op.kind == "ASK" or isinstance(executor, RemoteOp):
            return AnsweredOp(executor, op.kind, self._ask)
        return executor

    async def _send(
        self, ctx: RunContext, op: Op, journal: list[dict[str, Any]]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Run ``op`` as the ``lattice.op`` activity, with the part of the track's state it
        reads (``state_slice.py``), what the run has used so far and the journal of the
        visit it goes on with; the request and its result (``ops.py``)."""
        spec = self.spec
        serial = "mock_script" in (spec["provider"] or {})
        async with (
            self.gate.passing(ctx, op.kind),
            self.one_at_a_time if serial else contextlib.nullcontext(),
        ):
            options = spec["activity"]
            request = {
                "run_id": self.run_id,
                "op_id": op.id,
                "execir_digest": spec["execir_digest"],
                "provider": spec["provider"],
                "budgets": spec["budgets"],
                "state": state_for(op, ctx.state, ctx.last_result),
                "seq": ctx.root.seq,
                "answers": ctx.answers,
                "usage": ctx.usage.to_json(),
                "provider_state": self.provider_state,
                "last_result": ctx.last_result,
                "journal": journal,
                "segment": (spec.get("resumed") or {}).get("segment", 1),
            }
            self.scheduled += 1
            try:
                done: dict[str, Any] = await workflow.execute_activity(
                    OP_ACTIVITY,
                    request,
                    activity_id=f"{self.scheduled:04d}-{op.id}",
                    start_to_close_timeout=timedelta(seconds=options["start_to_close_seconds"]),
                    heartbeat_timeout=timedelta(seconds=options["heartbeat_seconds"]),
                    retry_policy=RetryPolicy(
                        maximum_attempts=options["maximum_attempts"],
                        initial_interval=timedelta(milliseconds=200),
                        non_retryable_error_types=["LatticeRunError", "LatticeUserError"],
                    ),
                    result_type=dict,
                )
            except ActivityError as exc:
                if isinstance(exc.cause, CancelledError):  # the run was cancelled meanwhile
                    raise asyncio.CancelledError from exc
                message = str(exc.cause) if exc.cause is not None else str(exc)
                raise LatticeRunError(
                    f"op {op.id!r} could not be run on a worker: {message}",
                    error_type=ErrorType.WORKER_ERROR,
                    details={"recovery_action": "check the workers' logs, then run again"},
                ) from exc
            self.provider_state = done["provider_state"]
            self.recorded_fixtures.extend(done.get("fixtures") or ())
            return request, done

    async def _ask(self, ctx: RunContext, halt: HaltRun) -> Any:
        """Wait for the answer to the question the current op of ``ctx`` halted on."""
        node = str(ctx.current_node)
        if halt.reason != APPROVAL and self.early.get(node):
            return self.early[node].pop(0)
        key = f"{ctx.branch or ''}/{node}"
        self.questions[key] = {
            "op_id": ctx.current_op,
            "reason": halt.reason,
            "summary": halt.summary,
            "details": halt.details,
            "action": halt.action,
            "node_id": node,
            "branch": ctx.branch,
            "asked_at": _timestamp(workflow.now()),
        }
        self.status = "waiting"
        ctx.emit(EventKind.RUN_HALTED, {"reason": halt.reason, "summary": halt.summary})
        if halt.reason == APPROVAL:
            ids = [request["id"] for request in halt.details.get("approvals", [])]
            await workflow.wait_condition(lambda: all(i in self.decided for i in ids))
            return {i: self.decided.pop(i) for i in ids}
        await workflow.wait_condition(lambda: key in self.answered)
        return self.answered.pop(key)

    def _finish(self, end: WalkEnd) -> dict[str, Any]:
        """The run's result (``end``: how its walk ended, its last event emitted): a local
        run's result (``RunResult``'s JSON, without a folder) and when it finished."""
        ctx = self.ctx
        assert ctx is not None
        toolless = self.spec.get("toolless") or []
        result = end.result(
            ctx,
            state={"vars": ctx.state.snapshot()["vars"]},
            run_dir=None,
            changes=record_changes(self.ops),
            without_tools=lambda visits: [
                {k: v for k, v in t.items() if k != "op"} for t in toolless if visits.get(t["op"])
            ],
        )
        self.status = end.status
        self.result = {**result.to_json(), "finished_at": _timestamp(workflow.now())}
        return self.result


def _state_limits(spec: dict[str, Any], settings: RuntimeSettings) -> StateLimits | None:
    """The starting process's bounds on the run's state (None: unbounded); a run started
    without them has the defaults."""
    if "state_limits" not in spec:
        return settings.state_limits
    bounds = spec["state_limits"]
    return None if bounds is None else StateLimits(**bounds)


def _no_tools() -> ToolSessions:
    raise LatticeRunError(
        "a tool session was asked for in the workflow: tool calls run on workers",
        error_type=ErrorType.INTERNAL_ERROR,
    )


def _timestamp(moment: Any) -> str:
    return str(moment.isoformat(timespec="milliseconds").replace("+00:00", "Z"))

"""The Temporal workflow that runs one Lattice run: the walk, deterministic given op results.

``LatticeRun`` walks the run's ops along their edges, one ``lattice.op`` activity per op
(``ops.py`` executes it on a worker), and keeps what the run records: its events, its
state, its op records and its usage. A question (ASK) without an answer waits, for as
long as it takes, for the ``answer`` update. Cancelling the workflow (Temporal's
cancellation) ends the run ``interrupted``. Queries give any client the run's progress
(``progress``), and everything a run folder holds (``record``).

The run's plan (each op's kind, node and edges) comes with its input, worked out by the
client (``client.py``), so that the workflow needs neither pydantic nor the compiler:
only the state store, to apply the changes each op made.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, CancelledError

with workflow.unsafe.imports_passed_through():
    from lattice.runtime.events import make_event
    from lattice.runtime.state import StateStore

WORKFLOW_NAME = "LatticeRun"
OP_ACTIVITY = "lattice.op"
FAILED_PORT = "failed"


@workflow.defn(name=WORKFLOW_NAME)
class LatticeRunWorkflow:
    """One Lattice run (the module docstring says how it maps)."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.ops: list[dict[str, Any]] = []
        self.status = "running"
        self.question: dict[str, Any] | None = None
        self.given: dict[str, Any] = {}
        self.state: StateStore | None = None
        self.initial_state: dict[str, Any] = {}
        self.result: dict[str, Any] | None = None
        self.run_id = ""
        self.seq = 0
        self.spec: dict[str, Any] = {}
        self.scheduled = 0
        self.usage: dict[str, Any] | None = None
        """What the run's model calls have used so far (``Usage.to_json``)."""
        """Activities scheduled so far: an op's activity id is ``<number>-<op id>``."""

    # -- what clients send and ask -------------------------------------------------------

    @workflow.update
    def answer(self, node_id: str, value: Any) -> None:
        """An answer to the question of ASK node ``node_id`` (a label, an index or text).

        An update, not a signal: when the client's call returns, the run no longer reads
        as waiting on that question, so whoever follows it next never sees it stale."""
        self.given[node_id] = value
        if self.question is not None and self.question["node_id"] == node_id:
            self.question, self.status = None, "running"

    @workflow.query
    def progress(self, after: int = 0) -> dict[str, Any]:
        """Events after number ``after``, the status, the open question and, once the run
        is over, its result."""
        return {
            "run_id": self.run_id,
            "status": self.status,
            "events": [e for e in self.events if e["seq"] > after],
            "question": self.question,
            "usage": self.usage,
            "result": self.result,
        }

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
            "status": self.status,
            "events": self.events,
            "ops": self.ops,
            "state_initial": self.initial_state,
            "state": self.state.snapshot() if self.state is not None else {},
            "question": self.question,
            "result": self.result,
        }

    # -- the walk ------------------------------------------------------------------------

    @workflow.run
    async def run(self, spec: dict[str, Any]) -> dict[str, Any]:
        self.run_id = run_id = spec["run_id"]
        self.spec = spec
        plan: dict[str, dict[str, Any]] = spec["plan"]
        started_at = _timestamp(workflow.now())
        state = StateStore(
            spec["inputs"],
            ctx={
                "run_id": run_id,
                "started_at": started_at,
                "workflow_id": spec["workflow"]["id"],
                "workflow_name": spec["workflow"]["name"],
                "model_classes": spec["model_classes"],
            },
        )
        self.state = state
        self.initial_state = state.snapshot()
        self._emit("run_started", {"workflow": spec["workflow"]["id"], "inputs": spec["inputs"]})
        for notice in spec["notices"]:
            self._emit(notice["type"], notice["data"])
        carried: dict[str, Any] = {
            "answers": dict(spec.get("answers") or {}),
            "usage": None,
            "provider_state": None,
            "last_result": None,
        }
        limits = spec["limits"]
        steps, visits = 0, dict[str, int]()
        current: str | None = spec["entry"]
        output: Any = None
        try:
            while current is not None:
                step = plan[current]
                steps += 1
                visits[current] = visits.get(current, 0) + 1
                if steps > limits["max_steps"] or visits[current] > limits["max_visits"]:
                    message = (
                        f"the run exceeded its limit of steps ({limits['max_steps']}) or of "
                        f"visits of {current!r} ({limits['max_visits']}); a loop may not terminate"
                    )
                    failure = self._failure("step_limit", message, current, step["node"])
                    return self._finish("failed", None, carried, failure=failure)
                done = await self._op(spec, current, state, carried)
                if "halt" in done:
                    node = done["halt"]["node_id"]
                    self.question = {"op_id": current, **done["halt"]}
                    self.status = "waiting"
                    self._emit(
                        "run_halted",
                        {"reason": done["halt"]["reason"], "summary": done["halt"]["summary"]},
                        op=(current, node),
                    )
                    await workflow.wait_condition(lambda n=node: n in self.given)  # type: ignore[misc]
                    given = self.given.pop(node)
                    # as a resumed local run takes it: a single-choice answer answers the
                    # next visit only (a question in a loop is asked again)
                    multi = bool(done["halt"]["details"].get("multiSelect"))
                    carried["answers"][node] = given if multi else [given]
                    self.question, self.status = None, "running"
                    steps -= 1
                    visits[current] -= 1
                    continue
                if "failure" in done:
                    return self._finish(
                        "failed", None, carried, failure=done["failure"], error=done["error"]
                    )
                if step["kind"] == "END":
                    output = done.get("output")
                    break
                nxt = step["edges"].get(done["port"])
                if nxt is None and step["edges"] and done["port"] != "default":
                    failure = self._failure(
                        "dead_end",
                        f"op {current!r} left through port {done['port']!r}, which leads nowhere",
                        current,
                        step["node"],
                    )
                    return self._finish("failed", None, carried, failure=failure)
                if nxt is None:
                    last = carried["last_result"]
                    output = state.read(last) if last else None
                current = nxt
        except asyncio.CancelledError:
            self._emit(
                "run_interrupted",
                {"reason": "the run was cancelled through Temporal", "next_op": current},
            )
            return self._finish(
                "interrupted",
                None,
                carried,
                failure=self._failure(
                    "interrupted",
                    "the run was cancelled through Temporal",
                    current,
                    None,
                    action="start it again (a cancelled workflow does not go on)",
                ),
                emit=False,
            )
        return self._finish("completed", output, carried)

    async def _op(
        self, spec: dict[str, Any], op_id: str, state: StateStore, carried: dict[str, Any]
    ) -> dict[str, Any]:
        """Run one op as an activity and take in what it did."""
        options = spec["activity"]
        request = {
            "run_id": self.run_id,
            "op_id": op_id,
            "execir_digest": spec["execir_digest"],
            "provider": spec["provider"],
            "budgets": spec["budgets"],
            "state": state.snapshot(),
            "seq": self.seq,
            **carried,
        }
        try:
            self.scheduled += 1
            done: dict[str, Any] = await workflow.execute_activity(
                OP_ACTIVITY,
                request,
                activity_id=f"{self.scheduled:04d}-{op_id}",
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
            return {
                "failure": self._failure(
                    "worker_error",
                    f"op {op_id!r} could not be run on a worker: {message}",
                    op_id,
                    spec["plan"][op_id]["node"],
                    action="check the workers' logs, then run again",
                ),
                "error": {"error_type": "worker_error", "message": message},
            }
        for change in done["changes"]:
            state.apply(change)
        state.changes = None
        self.events.extend(done["events"])
        self.seq = done["seq"]
        if "record" in done:
            self.ops.append({"seq": len(self.ops) + 1, **done["record"]})
        for key in carried:
            carried[key] = done[key]
        self.usage = done["usage"]
        return done

    def _emit(self, type_: str, data: dict[str, Any], *, op: tuple[str, str] | None = None) -> None:
        self.seq += 1
        op_id, node_id = op if op is not None else (None, None)
        self.events.append(
            make_event(
                self.seq, _timestamp(workflow.now()), self.run_id, type_, op_id, node_id, data
            )
        )

    def _failure(
        self,
        category: str,
        summary: str,
        op_id: str | None,
        node_id: str | None,
        *,
        action: str = "fix the cause and run the workflow again",
    ) -> dict[str, Any]:
        """A FailureReport (``lattice.contracts.report``) as JSON, for a failure of the walk."""
        return {
            "phase": "run",
            "run_id": self.run_id,
            "op_id": op_id,
            "node_id": node_id,
            "category": category,
            "summary": summary,
            "details": {},
            "attempts": [],
            "blocking": True,
            "recovery_action": action,
        }

    def _finish(
        self,
        status: str,
        output: Any,
        carried: dict[str, Any],
        *,
        failure: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
        emit: bool = True,
    ) -> dict[str, Any]:
        usage = carried["usage"] or {}
        if emit:
            if status == "completed":
                self._emit("run_finished", {"status": status, "usage": usage})
            elif status == "failed" and failure is not None:
                error = error or {"error_type": failure["category"], "message": failure["summary"]}
                self._emit("run_failed", error)
        self.status = status
        assert self.state is not None
        self.result = {
            "status": status,
            "run_id": self.run_id,
            "output": output,
            "vars": self.state.snapshot()["vars"],
            "usage": usage,
            "failure": failure,
            "finished_at": _timestamp(workflow.now()),
        }
        return self.result


def _timestamp(moment: Any) -> str:
    return str(moment.isoformat(timespec="milliseconds").replace("+00:00", "Z"))

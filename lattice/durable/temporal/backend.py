"""The gateway's runs on Temporal: ``lattice serve --engine temporal``.

``TemporalRuns`` answers everything the gateway asks about runs from Temporal, and keeps
nothing of any run: runs are listed with Temporal's visibility (workflows of type
``LatticeRun`` on the namespace), a finished run is read from its result (the last event
of its history, no worker needed), a running one from its ``progress`` query, events
with ``progress`` and the panel's state and op records with ``record``; answers are the
workflow's ``answer`` update (decisions on tool calls waiting for approval its ``approve``
update), cancelling is Temporal's cancellation. So any number of
gateways may serve the same runs, and one restarted serves them all again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowHandle,
)
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from lattice.config import TemporalConfig
from lattice.durable.temporal import DEFAULT_TASK_QUEUE
from lattice.durable.temporal.blobs import BlobError
from lattice.durable.temporal.client import (
    answer,
    approve,
    connect,
    resume_stopped,
    start_run,
    stop,
)
from lattice.durable.temporal.codec import CodecKeyError
from lattice.durable.temporal.live import live_of
from lattice.durable.temporal.workflow import OP_ACTIVITY, WORKFLOW_NAME
from lattice.errors import ErrorType, LatticeUserError
from lattice.ir.models import ExecIR
from lattice.ir.serialize import ir_from_json
from lattice.permissions.approvals import APPROVALS
from lattice.runs.redaction import Redactor, make_redactor
from lattice.service.backend import (
    Capability,
    NewRun,
    RunBackend,
    RunConflict,
    RunEvents,
    RunNotFound,
    RunPage,
    RunRecord,
    RunView,
)

QUERY_SECONDS = 10.0
"""How long a query may wait for a worker before the run is shown without its details."""
LOOKUPS_AT_ONCE = 16
"""Runs of a listed page read from Temporal at once."""
ENDED = {
    WorkflowExecutionStatus.CANCELED: "interrupted",
    WorkflowExecutionStatus.TERMINATED: "interrupted",
    WorkflowExecutionStatus.TIMED_OUT: "failed",
    WorkflowExecutionStatus.FAILED: "failed",
}
"""Statuses of a workflow that ended without a run's result."""


class TemporalRuns(RunBackend):
    """Runs on the Temporal server at ``address`` (HOST:PORT), started on ``task_queue``."""

    name = "temporal"
    capabilities = frozenset(
        {Capability.RESUME, Capability.RERUN, Capability.COMPARE, Capability.DELTAS}
    )
    """Resume (a stopped run where it stopped, a failed or interrupted one as a new
    execution), re-run from a step, compare (exported folders), and an op's answer as it
    grows (``?deltas=1``, from its heartbeats); not fixtures through the gateway."""
    """None yet: resuming, re-running and comparing runs, fixtures, model answers piece by
    piece, searching the list and the services are run-folder features (the gateway
    answers each as it says in ``lattice.server.backend``)."""

    def __init__(
        self,
        address: str,
        *,
        task_queue: str = DEFAULT_TASK_QUEUE,
        secret_names: tuple[str, ...] = (),
        config: TemporalConfig | None = None,
    ) -> None:
        self.address = address
        self.config = config
        """``[temporal]``: the payload codec's keys (by default ``LATTICE_TEMPORAL_KEY``)."""
        self.task_queue = task_queue
        self.secret_names = secret_names
        self._client: Client | None = None
        self._connecting: asyncio.Lock | None = None

    def where(self) -> str:
        return f"Temporal at {self.address}, task queue {self.task_queue!r}"

    async def client(self) -> Client:
        """The connection, made on first use (on the gateway's event loop)."""
        if self._client is None:
            if self._connecting is None:
                self._connecting = asyncio.Lock()
            async with self._connecting:
                if self._client is None:
                    self._client = await connect(self.address, self.config)
        return self._client

    # -- starting, answering, cancelling ---------------------------------------------

    async def start(self, run: NewRun) -> None:
        """Start ``run``; RunConflict when a run of its id was started before (while
        Temporal keeps it: the namespace's retention), however long ago and by whichever
        gateway."""
        try:
            await self._start(run)
        except WorkflowAlreadyStartedError:
            raise RunConflict(f"run {run.run_id} exists already", "unknown") from None

    async def _start(self, run: NewRun) -> None:
        await start_run(
            await self.client(),
            run.ir,
            run_id=run.run_id,
            inputs=run.inputs,
            answers=run.answers,
            provider=run.provider,
            budgets=run.budgets,
            limits=run.limits or None,
            task_queue=self.task_queue,
            redact=make_redactor(run.settings.secret_names()),
            settings=run.settings,
            memo={"workflow_name": run.workflow_name} if run.workflow_name else None,
            document=run.document,
        )

    async def answer(self, run_id: str, answers: dict[str, Any]) -> None:
        progress = await self._progress(await self._handle(run_id), after=1 << 62)
        question = progress["question"] if progress["status"] == "waiting" else None
        if question is None:
            status = _status(progress)
            raise RunConflict(
                f"run {run_id} is {status}; only a halted run waits for answers", status
            )
        ir = await self._ir(run_id)
        client = await self.client()
        answers = dict(answers)
        decisions = answers.pop(APPROVALS, None)
        if decisions:
            await approve(client, run_id, decisions)
        for node_id, value in answers.items():
            await answer(client, run_id, ir, node_id, value)

    async def cancel(self, run_id: str) -> None:
        """Stop a running run at its next op boundary, as a local run's cancel does: it
        shows ``interrupted`` and can be resumed (``stops.py``). A run halted on a question
        has nothing in flight to stop: it is cancelled (Temporal's cancellation), and ends
        ``interrupted`` for good, as before it could be stopped."""
        handle = await self._handle(run_id)
        description = await _described(handle, run_id)
        view = await self.describe(run_id)
        if description.status != WorkflowExecutionStatus.RUNNING or view.resumable:
            hint = f"resume it (POST /v1/runs/{run_id}/resume)" if view.resumable else ""
            raise RunConflict(
                f"run {run_id} is {view.status}; only a running or halted run can be "
                f"stopped{'; ' + hint if hint else ''}",
                view.status,
            )
        if view.status == "halted":
            await handle.cancel()
            return
        try:
            await stop(await self.client(), run_id, "gateway")
        except LatticeUserError as exc:
            raise RunConflict(exc.message, "running") from None

    async def resume(self, run_id: str) -> None:
        """Resume a stopped run where it stopped, or a failed or interrupted one from the
        op it ended at (a new execution of its workflow: ``rerun.py``); RunConflict for
        any other run."""
        from lattice.durable.temporal.rerun import resume_ended

        handle = await self._handle(run_id)
        description = await _described(handle, run_id)
        progress = None
        if description.status == WorkflowExecutionStatus.RUNNING:
            progress = await self._progress(handle, after=1 << 62)
        if progress is None or progress["result"] is not None:  # ended, or ending
            try:
                await resume_ended(await self.client(), run_id)
            except LatticeUserError as exc:
                if exc.error_type != ErrorType.CONFLICT:
                    raise
                raise RunConflict(exc.message, (await self.describe(run_id)).status) from None
            return
        if not progress.get("stopping"):
            status = _status(progress)
            raise RunConflict(
                f"run {run_id} is {status}; only a stopped, failed or interrupted run is "
                f"resumed (a halted one is answered: POST /v1/runs/{run_id}/answers)",
                status,
            )
        try:
            await resume_stopped(await self.client(), run_id)
        except LatticeUserError as exc:
            raise RunConflict(exc.message, _status(progress)) from None

    async def live(self, run_id: str) -> list[dict[str, Any]]:
        """Read from the heartbeats of the run's pending ``lattice.op`` activities
        (``live.py``): Temporal keeps them beside the activity, not in the history."""
        client = await self.client()
        description = await _described(await self._handle(run_id), run_id)
        found = []
        for pending in description.raw_description.pending_activities:
            if pending.activity_type.name != OP_ACTIVITY or not pending.heartbeat_details.payloads:
                continue
            details = await client.data_converter.decode(pending.heartbeat_details.payloads)
            live = live_of(details)
            if live is None:
                continue
            op_id = pending.activity_id.split("-", 1)[-1]
            found.append(
                {"activity_id": pending.activity_id, "op_id": op_id, "try": pending.attempt} | live
            )
        return found

    async def export(self, run_id: str, folder: Path) -> None:
        from lattice.durable.temporal.export import export_run

        await _described(await self._handle(run_id), run_id)
        await export_run(await self.client(), run_id, folder)

    async def rerun_point(self, run_id: str, op: str, visit: int | None) -> dict[str, Any]:
        from lattice.durable.temporal.rerun import rerun_point

        await _described(await self._handle(run_id), run_id)
        point = await rerun_point(await self.client(), run_id, op, visit)
        return {k: point[k] for k in ("op", "visit", "visits", "state")}

    async def rerun(
        self,
        run_id: str,
        *,
        op: str,
        visit: int | None,
        state: dict[str, Any] | None,
        provider: dict[str, Any] | None,
        redact: Redactor,
    ) -> tuple[str, dict[str, Any]]:
        from lattice.durable.temporal.rerun import start_rerun

        await _described(await self._handle(run_id), run_id)
        try:
            return await start_rerun(
                await self.client(),
                run_id,
                op=op,
                visit=visit,
                state=state,
                provider=provider,
                task_queue=self.task_queue,
                redact=redact,
            )
        except LatticeUserError as exc:
            if exc.error_type == ErrorType.CONFLICT:
                raise RunConflict(exc.message, "running") from None
            raise

    # -- reading runs ------------------------------------------------------------------

    async def describe(self, run_id: str) -> RunView:
        handle = await self._handle(run_id)
        description = await _described(handle, run_id)
        memo = await description.memo()
        return await self._view(
            handle,
            description.status,
            description.start_time,
            description.close_time,
            memo,
            strict=True,
        )

    async def list_runs(
        self, *, status: str | None, workflow: str | None, limit: int, before: str | None
    ) -> RunPage:
        query = f"WorkflowType = '{WORKFLOW_NAME}'"
        if status in ("running", "halted"):
            query += " AND ExecutionStatus = 'Running'"
        elif status is not None:
            query += " AND ExecutionStatus != 'Running'"
        client = await self.client()
        found: list[RunView] = []
        batch: list[Any] = []
        more = False
        async for execution in client.list_workflows(query, page_size=min(max(limit, 50), 1000)):
            if before is not None and execution.id >= before:
                continue
            batch.append(execution)
            if len(batch) < LOOKUPS_AT_ONCE:
                continue
            found.extend(await self._views(batch, status, workflow))
            batch = []
            if len(found) > limit:
                more = True
                break
        else:
            found.extend(await self._views(batch, status, workflow))
            more = len(found) > limit
        found.sort(key=lambda view: view.run_id, reverse=True)
        page = found[:limit]
        return RunPage(page, page[-1].run_id if more and page else None)

    async def _views(
        self, executions: list[Any], status: str | None, workflow: str | None
    ) -> list[RunView]:
        client = await self.client()

        async def view(execution: Any) -> RunView | None:
            try:
                memo = await execution.memo()
                return await self._view(
                    client.get_workflow_handle(execution.id),
                    execution.status,
                    execution.start_time,
                    execution.close_time,
                    memo,
                )
            except (CodecKeyError, BlobError):
                return None  # encrypted with a key, or kept in a store, this process lacks

        views = await asyncio.gather(*(view(execution) for execution in executions))
        return [
            v
            for v in views
            if v is not None
            and (status is None or v.status == status)
            and (workflow is None or workflow in (v.workflow, v.workflow_name))
        ]

    async def events(self, run_id: str, after: int) -> RunEvents:
        progress = await self._progress(await self._handle(run_id), after=after)
        return RunEvents(list(progress["events"]), _status(progress))

    async def record(self, run_id: str) -> RunRecord:
        record = await self._query(await self._handle(run_id), "record")
        return RunRecord(
            execir=record["execir"],
            document=record.get("document"),  # None for runs started before it was kept
            state_initial=record["state_initial"],
            state_final=record["state"],
            ops=list(record["ops"]),
        )

    async def close(self) -> None:
        self._client = None

    # -- helpers -----------------------------------------------------------------------

    async def _handle(self, run_id: str) -> WorkflowHandle[Any, Any]:
        return (await self.client()).get_workflow_handle(run_id)

    async def _view(
        self,
        handle: WorkflowHandle[Any, Any],
        status: WorkflowExecutionStatus | None,
        started: datetime | None,
        closed: datetime | None,
        memo: Mapping[str, Any],
        *,
        strict: bool = False,
    ) -> RunView:
        """The run's view; a running run whose query no worker answers in time is an
        error with ``strict`` (one run asked for), else shown ``running`` (a list). A run
        that has stopped can be re-run from its steps."""
        view = await self._view_of(handle, status, started, closed, memo, strict=strict)
        ended = status != WorkflowExecutionStatus.RUNNING and view.status in (
            "failed",
            "interrupted",
        )
        return replace(view, rerunnable=view.status != "running", resumable=view.resumable or ended)

    async def _view_of(
        self,
        handle: WorkflowHandle[Any, Any],
        status: WorkflowExecutionStatus | None,
        started: datetime | None,
        closed: datetime | None,
        memo: Mapping[str, Any],
        *,
        strict: bool = False,
    ) -> RunView:
        base: dict[str, Any] = {
            "run_id": handle.id,
            "workflow": memo.get("workflow"),
            "workflow_name": memo.get("workflow_name"),
            "started_at": _timestamp(started),
            "parent": memo.get("parent"),
        }
        if status == WorkflowExecutionStatus.RUNNING:
            try:
                progress = await self._progress(handle, after=1 << 62)
            except LatticeUserError:
                if strict:
                    raise
                return RunView(status="running", **base)
            return _progress_view(progress, base)
        if status == WorkflowExecutionStatus.COMPLETED:
            result: dict[str, Any] = await handle.result(rpc_timeout=_seconds(QUERY_SECONDS))
            return _result_view(result, base)
        ended = ENDED.get(status) if status is not None else None
        return RunView(
            status=ended or "failed",
            finished_at=_timestamp(closed),
            failure={
                "phase": "run",
                "run_id": handle.id,
                "category": ended or "failed",
                "summary": f"its workflow ended {status.name.lower() if status else 'unknown'} "
                "on Temporal",
                "recovery_action": "start it again",
            },
            **base,
        )

    async def _progress(self, handle: WorkflowHandle[Any, Any], *, after: int) -> dict[str, Any]:
        progress: dict[str, Any] = await self._query(handle, "progress", after)
        return progress

    async def _query(self, handle: WorkflowHandle[Any, Any], name: str, *args: Any) -> Any:
        try:
            return await handle.query(name, args=list(args), rpc_timeout=_seconds(QUERY_SECONDS))
        except RPCError as exc:
            raise _not_found_or(exc, handle.id) from None

    async def _ir(self, run_id: str) -> ExecIR:
        execir = await self._query(await self._handle(run_id), "execir")
        return ir_from_json(execir)


def _progress_view(progress: dict[str, Any], base: dict[str, Any]) -> RunView:
    """A running run's view from its ``progress`` query."""
    if progress["result"] is not None:
        return _result_view(progress["result"], base)
    stopped = progress.get("stopped")
    if stopped is not None:
        return RunView(
            status="interrupted",
            finished_at=stopped["details"]["stopped"]["at"],
            usage=progress.get("usage"),
            failure=stopped,
            resumable=True,
            **base,
        )
    question = progress["question"] if progress["status"] == "waiting" else None
    if question is None:
        return RunView(status="running", usage=progress.get("usage"), **base)
    failure = {
        "phase": "run",
        "run_id": base["run_id"],
        "op_id": question.get("op_id"),
        "node_id": question.get("node_id"),
        "category": question.get("reason", "waiting_for_answer"),
        "summary": question.get("summary", ""),
        "details": question.get("details") or {},
    }
    # a halted run's time ends where it halted, as a local halted run's does
    return RunView(
        status="halted",
        finished_at=question.get("asked_at"),
        usage=progress.get("usage"),
        failure=failure,
        **base,
    )


def _result_view(result: dict[str, Any], base: dict[str, Any]) -> RunView:
    status = str(result.get("status", "failed"))
    return RunView(
        status=status,
        finished_at=result.get("finished_at"),
        output=result.get("output") if status == "completed" else None,
        usage=result.get("usage"),
        failure=result.get("failure"),
        **base,
    )


def _status(progress: dict[str, Any]) -> str:
    """The API's status of a run from its ``progress``."""
    if progress["result"] is not None:
        return str(progress["result"]["status"])
    if progress["status"] == "interrupted":
        return "interrupted"  # stopped, resumable
    return "halted" if progress["status"] == "waiting" else "running"


async def _described(handle: WorkflowHandle[Any, Any], run_id: str) -> WorkflowExecutionDescription:
    """The workflow's description, when it is a Lattice run (else RunNotFound: an unknown
    id, or another application's workflow in the namespace)."""
    try:
        description = await handle.describe()
    except RPCError as exc:
        raise _not_found_or(exc, run_id) from None
    if description.workflow_type != WORKFLOW_NAME:
        raise RunNotFound(run_id)
    return description


def _not_found_or(exc: RPCError, run_id: str) -> LatticeUserError:
    if exc.status == RPCStatusCode.NOT_FOUND:
        return RunNotFound(run_id)
    if exc.status == RPCStatusCode.DEADLINE_EXCEEDED:
        return LatticeUserError(
            f"no worker answered for run {run_id!r} within {QUERY_SECONDS:g}s: a running "
            "run is read from its workflow by a worker (is one running on its task queue?)",
            error_type=ErrorType.TEMPORAL_UNAVAILABLE,
        )
    return LatticeUserError(
        f"Temporal could not answer about run {run_id!r}: {exc.message}",
        error_type=ErrorType.TEMPORAL_UNAVAILABLE,
    )


def _timestamp(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _seconds(value: float) -> timedelta:
    return timedelta(seconds=value)

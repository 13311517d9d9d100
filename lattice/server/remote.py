"""Runs that live on a ``RunBackend`` as a gateway's backend (``lattice serve --engine
temporal``): the run routes and the panel's answer them in the API and panel shapes of
run folders (docs/server.md), so that clients and the panel work unchanged.

Nothing of a run is kept here: each request asks the backend. A run's events stream by
asking for those after the last one read every ``POLL_SECONDS`` until the run stops (a
halted run's stream ends ``halted``, as a run folder's does), once per run however many
follow it (``polls.py``). The panel's reads of a run (its canvas, state and op records)
come from the run's record on the backend. What the backend cannot do is what its
``capabilities`` leave out; the gateway refuses it (``backend.py``).
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any, TypeVar

from lattice.errors import ErrorType, LatticeUserError
from lattice.runs.oplog import OpEntry, label_key, record_label, safe_name
from lattice.runs.store import new_run_id, refuse_secret_answers
from lattice.runtime.runner import check_answers
from lattice.server.backend import Accepted, Backend, RunQuery, not_yet
from lattice.server.bodies import AnswerRun, RerunRun, ResumeRun, StartRun
from lattice.server.engine_host import engine_provider
from lattice.server.errors import ApiError, diagnostics_json, from_user_error
from lattice.server.events import (
    PING,
    PING_SECONDS,
    delta_message,
    end_message,
    event_line,
    message,
)
from lattice.server.folder_backend import compare_json
from lattice.server.graph import run_graph
from lattice.server.manager import RUN_ID, links, next_step, question
from lattice.server.polls import PollEnded, RunPolls
from lattice.server.start import Gateway, requested_workflow, run_options
from lattice.service.backend import (
    Capability,
    NewRun,
    RunBackend,
    RunConflict,
    RunEvents,
    RunNotFound,
    RunRecord,
    RunView,
)
from lattice.service.runs import ProviderSpec, prepare_run

T = TypeVar("T")

POLL_SECONDS = 0.25
"""How often a watched run is asked for new events."""
LIVE_SECONDS = 0.5
"""How often a watcher that takes deltas asks for the ops in flight (``backend.live``)."""


class LivePieces:
    """The ``llm_delta`` messages of one watcher: each op in flight's answer, as its
    workers' heartbeats carry it whole, sent a piece at a time (what grew since)."""

    def __init__(self) -> None:
        self._sent: dict[tuple[Any, ...], int] = {}

    def messages(self, live: list[dict[str, Any]], after: int, run_id: str) -> str:
        out = []
        for op in live:
            text, cut = op.get("text") or "", int(op.get("cut") or 0)
            key = (op.get("activity_id"), op.get("try"), op.get("attempt"))
            sent = self._sent.get(key, 0)
            if cut + len(text) <= sent:
                continue
            self._sent[key] = cut + len(text)
            last = (op.get("events") or [{}])[-1]
            event = {
                "seq": after,
                "run_id": run_id,
                "type": "llm_delta",
                "op_id": op.get("op_id"),
                "node_id": last.get("node_id"),
                **({"branch": last["branch"]} if last.get("branch") else {}),
                "data": {"attempt": op.get("attempt"), "text": text[max(0, sent - cut) :]},
            }
            out.append(delta_message(event_line(event)))
        return "".join(out)


def api_error(exc: LatticeUserError) -> ApiError:
    """The API's answer to what a backend refused."""
    if isinstance(exc, RunNotFound):
        return ApiError(404, "not_found", exc.message)
    if isinstance(exc, RunConflict):
        return ApiError(409, "conflict", exc.message, extra={"status": exc.status})
    if exc.error_type in (ErrorType.TEMPORAL_UNAVAILABLE, ErrorType.TEMPORAL_UNREACHABLE):
        return ApiError(503, exc.error_type, exc.message, headers={"Retry-After": "1"})
    return from_user_error(exc)


def run_json(view: RunView, capabilities: frozenset[Capability] = frozenset()) -> dict[str, Any]:
    """``GET /v1/runs/{id}`` of a run on a backend that can do ``capabilities`` (the
    run-folder route's fields)."""
    failure = view.failure
    resumable = Capability.RESUME in capabilities
    if isinstance(failure, dict) and view.status in ("failed", "halted", "interrupted"):
        details = failure.get("details") or {}
        own = details.get("recovery_action")
        step = own if isinstance(own, str) else _next_step(view.run_id, view.status, resumable)
        resumable = resumable and details.get("resumable") is not False
        failure = {**failure, "recovery_action": step, "resumable": resumable}
    else:
        failure = None
    usage = view.usage or None
    return {
        "run_id": view.run_id,
        "status": view.status,
        "workflow": view.workflow,
        "workflow_name": view.workflow_name,
        "started_at": view.started_at,
        "finished_at": view.finished_at if view.status != "running" else None,
        "output": view.output if view.status == "completed" else None,
        "usage": usage,
        "cost_usd": (usage or {}).get("estimated_cost_usd"),
        "failure": failure,
        "question": question(view.run_id, failure) if view.status == "halted" else None,
        "parent": view.parent,
        "reruns": [],  # a parent on a backend does not list its re-runs
        "rerunnable": Capability.RERUN in capabilities and view.status != "running",
        "links": links(view.run_id),
    }


def summary_json(view: RunView) -> dict[str, Any]:
    """A run on a backend as ``GET /v1/runs`` lists it."""
    usage = view.usage or {}
    return {
        "run_id": view.run_id,
        "workflow": view.workflow,
        "workflow_name": view.workflow_name,
        "started_at": view.started_at,
        "finished_at": view.finished_at,
        "calls": usage.get("calls", 0),
        "tokens": (usage.get("input_tokens") or 0) + (usage.get("output_tokens") or 0),
        "cost_usd": usage.get("estimated_cost_usd"),
        "failure_category": (view.failure or {}).get("category")
        if view.status != "running"
        else None,
        "parent": view.parent,
        "links": {"self": f"/v1/runs/{view.run_id}", "events": f"/v1/runs/{view.run_id}/events"},
        "status": view.status,
    }


def _next_step(run_id: str, status: str, resumable: bool) -> str:
    if status == "halted" or resumable:
        return next_step(run_id, status)
    return "fix the cause and start the run again (a run on Temporal is not resumed)"


class EngineBackend(Backend):
    """The runs of ``backend``, served as a gateway's (the module docstring says how)."""

    def __init__(self, backend: RunBackend, gateway: Gateway) -> None:
        self.backend = backend
        self.name = backend.name
        self.capabilities = backend.capabilities
        self.gateway = gateway
        self.library = gateway.library
        self.config = gateway.config
        self.redact = gateway.redact
        self.polls = RunPolls(backend, POLL_SECONDS)

    # -- starting, answering, stopping ------------------------------------------------

    async def start(self, body: StartRun) -> Accepted:
        run, warnings = await asyncio.to_thread(self._prepare, body)
        await ask(self.backend.start(run))
        return Accepted(run.run_id, "running", {"warnings": warnings})

    def _prepare(self, body: StartRun) -> tuple[NewRun, list[dict[str, Any]]]:
        requested = requested_workflow(body, self.gateway)
        ir = requested.ir
        try:
            spec = body.spec(self.library)
            prepared = prepare_run(
                ir,
                config=self.config,
                options=run_options(body, spec, self.gateway, meta={}),
                inputs=body.inputs,
                answers=body.answers,
                workflow=requested.document,
                runs_dir=None,
            )
            if body.answers:
                check_answers(ir, body.answers, what="answers")
            run = NewRun(
                run_id=new_run_id(),
                ir=ir,
                inputs=prepared.inputs,
                answers=dict(body.answers),
                provider=self._provider_meta(spec),
                settings=prepared.settings,
                budgets={"max_calls": body.max_calls, "max_tokens_total": body.max_tokens_total},
                limits={
                    "max_steps": prepared.runner.limits.max_steps,
                    "max_visits": prepared.runner.limits.max_visits,
                },
                workflow_name=requested.meta.get("workflow_name"),
                document=requested.document,
            )
        except LatticeUserError as exc:
            raise api_error(exc) from None
        return run, diagnostics_json(requested.lowered.warnings)

    def _provider_meta(self, spec: ProviderSpec) -> dict[str, Any]:
        if spec.choice.fixtures and Capability.FIXTURES not in self.capabilities:
            raise ApiError(400, "invalid_request", not_yet(Capability.FIXTURES, self.name))
        return engine_provider(spec)

    async def answer(self, run_id: str, body: AnswerRun, door: str) -> Accepted:
        run_id = run_id_of(run_id)
        answers = body.all_answers(door)
        try:
            refuse_secret_answers(answers, self.redact)
        except LatticeUserError as exc:
            raise api_error(exc) from None
        await ask(self.backend.answer(run_id, answers))
        return Accepted(run_id, "running")

    async def cancel(self, run_id: str) -> None:
        await ask(self.backend.cancel(run_id_of(run_id)))

    async def resume(self, run_id: str, body: ResumeRun) -> Accepted:
        run_id = run_id_of(run_id)
        await ask(self.backend.resume(run_id))
        return Accepted(run_id, "running")

    async def rerun_point(self, run_id: str, op: str, visit: int | None) -> dict[str, Any]:
        return await ask(self.backend.rerun_point(run_id_of(run_id), op, visit))

    async def rerun(self, run_id: str, body: RerunRun) -> Accepted:
        spec = body.spec(self.library)
        new_id, parent = await ask(
            self.backend.rerun(
                run_id_of(run_id),
                op=body.op,
                visit=body.visit,
                state=body.state,
                provider=self._provider_meta(spec) if spec.given else None,
                redact=self.redact,
            )
        )
        return Accepted(new_id, "running", {"parent": parent})

    async def compare(self, run_id: str, other_id: str) -> dict[str, Any]:
        """The two runs exported to a scratch folder, compared as run folders are."""
        run_id, other_id = run_id_of(run_id), run_id_of(other_id)
        with tempfile.TemporaryDirectory(prefix="lattice-compare-") as scratch:
            a, b = Path(scratch) / run_id, Path(scratch) / other_id
            await ask(self.backend.export(run_id, a))
            await ask(self.backend.export(other_id, b))
            return await asyncio.to_thread(compare_json, a, b, run_id, other_id)

    async def live(self, run_id: str) -> list[dict[str, Any]]:
        return await ask(self.backend.live(run_id_of(run_id)))

    # -- reading runs back ------------------------------------------------------------

    async def list_runs(self, query: RunQuery) -> dict[str, Any]:
        page = await ask(
            self.backend.list_runs(
                status=query.status, workflow=query.workflow, limit=query.limit, before=query.before
            )
        )
        return {"runs": [summary_json(view) for view in page.runs], "next": page.next}

    async def describe(self, run_id: str) -> dict[str, Any]:
        view = await ask(self.backend.describe(run_id_of(run_id)))
        return run_json(view, self.capabilities) | {"engine": self.name}

    async def events(
        self, run_id: str, cursor: int, *, timing: bool, deltas: bool
    ) -> AsyncIterator[bytes]:
        first = await ask(self.backend.events(run_id_of(run_id), cursor))
        return self._follow(run_id, cursor, first, deltas=deltas)

    async def _follow(
        self, run_id: str, cursor: int, first: RunEvents, *, deltas: bool
    ) -> AsyncIterator[bytes]:
        def sent(batch: RunEvents) -> bytes:
            nonlocal cursor
            if batch.events:
                cursor = batch.events[-1]["seq"]
            text = "".join(message(e["seq"], event_line(e)) for e in batch.events)
            if batch.status != "running":
                text += end_message(batch.status)
            return self.redact(text).encode()

        if first.events or first.status != "running":
            yield sent(first)
        if first.status != "running":
            return
        pieces = LivePieces()
        quiet = 0.0
        wait = LIVE_SECONDS if deltas else PING_SECONDS
        async with self.polls.watch(run_id, cursor) as poll:  # shared with the run's watchers
            while True:
                try:
                    batch = await poll.next(cursor, wait)
                except PollEnded:
                    return  # the client follows again from the last id it got
                if batch is not None and (batch.events or batch.status != "running"):
                    quiet = 0.0
                    yield sent(batch)
                    if batch.status != "running":
                        return
                if deltas:
                    try:
                        live = await self.backend.live(run_id)
                    except LatticeUserError:
                        live = []
                    text = pieces.messages(live, cursor, run_id)
                    if text:
                        quiet = 0.0
                        yield self.redact(text).encode()
                if batch is None:
                    quiet += wait
                    if quiet >= PING_SECONDS:
                        quiet = 0.0
                        yield PING

    # -- the panel's reads: the run's record on the backend -----------------------------

    async def _record(self, run_id: str) -> RunRecord:
        return await ask(self.backend.record(run_id_of(run_id)))

    async def canvas(self, run_id: str) -> dict[str, Any]:
        record = await self._record(run_id)
        return await asyncio.to_thread(run_graph, record.document, record.execir)

    async def state(self, run_id: str, at: str) -> dict[str, Any]:
        record = await self._record(run_id)
        return record.state_initial if at == "initial" else record.state_final

    async def op_entries(
        self, run_id: str, *, canvas: bool
    ) -> tuple[list[OpEntry], dict[str, Any] | None]:
        record = await self._record(run_id)
        graph = None
        if canvas:
            graph = await asyncio.to_thread(run_graph, record.document, record.execir)
        return record_entries(record.ops), graph

    async def close(self) -> None:
        await self.backend.close()


async def ask(call: Awaitable[T]) -> T:
    """What ``call`` to the backend answers; what it refuses, as the API's error."""
    try:
        return await call
    except LatticeUserError as exc:
        raise api_error(exc) from None


def run_id_of(run_id: str) -> str:
    """``run_id``, or 404 when no run could have it."""
    if not RUN_ID.match(run_id):
        raise ApiError(404, "not_found", f"no run {run_id!r}")
    return run_id


def record_entries(ops: list[dict[str, Any]]) -> list[OpEntry]:
    """Op records kept in a list (a run on a backend) as a run folder's entries, in op
    order."""
    entries = (
        OpEntry(record_label(op.get("seq"), n), safe_name(str(op.get("op_id"))), op)
        for n, op in enumerate(ops)
    )
    return sorted(entries, key=lambda entry: label_key(entry.label))

"""The run routes of a gateway whose runs live on a ``RunBackend`` (``lattice serve
--engine temporal``), in the API and panel shapes of the run-folder routes
(docs/server.md), so that clients and the panel work unchanged.

Nothing of a run is kept here: each request asks the backend. A run's events stream by
asking for those after the last one read every ``POLL_SECONDS`` until the run stops (a
halted run's stream ends ``halted``, as a run folder's does), once per run however many
follow it (``polls.py``). What a run on a backend
cannot do is a 409 that says so; two runs are compared as their exported folders are.
The panel's reads of a run (its canvas, state and op records) are the run-folder routes
of ``panel_api.py`` over a ``BackendReader``.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Annotated, Any

from fastapi import FastAPI, Header, Query
from starlette.responses import Response, StreamingResponse

from lattice.config import LatticeConfig
from lattice.errors import LatticeUserError
from lattice.runs.oplog import OpEntry
from lattice.runs.redaction import Redactor
from lattice.runs.store import new_run_id, refuse_secret_answers
from lattice.runtime.runner import check_answers
from lattice.server.bodies import AnswerRun, RerunRun, StartRun, check_start
from lattice.server.errors import ApiError, diagnostics_json, document_error, from_user_error
from lattice.server.events import (
    PING,
    PING_SECONDS,
    delta_message,
    end_message,
    event_line,
    message,
    resume_cursor,
)
from lattice.server.graph import run_graph
from lattice.server.manager import RUN_ID, links, next_step, question
from lattice.server.panel_api import RunReader, compare_json, record_entries
from lattice.server.polls import PollEnded, RunPolls
from lattice.server.workflows import WorkflowLibrary
from lattice.service.backend import (
    NewRun,
    RunBackend,
    RunConflict,
    RunEvents,
    RunNotFound,
    RunRecord,
    RunView,
)
from lattice.service.runs import ProviderSpec, RunOptions, prepare_run

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


Respond = Callable[..., Response]


def api_error(exc: LatticeUserError) -> ApiError:
    """The API's answer to what a backend refused."""
    if isinstance(exc, RunNotFound):
        return ApiError(404, "not_found", exc.message)
    if isinstance(exc, RunConflict):
        return ApiError(409, "conflict", exc.message, extra={"status": exc.status})
    if exc.error_type in ("temporal_unavailable", "temporal_unreachable"):
        return ApiError(503, exc.error_type, exc.message, headers={"Retry-After": "1"})
    return from_user_error(exc)


def run_json(view: RunView) -> dict[str, Any]:
    """``GET /v1/runs/{id}`` of a run on a backend (the run-folder route's fields)."""
    failure = view.failure
    if isinstance(failure, dict) and view.status in ("failed", "halted", "interrupted"):
        own = (failure.get("details") or {}).get("recovery_action")
        step = own if isinstance(own, str) else _next_step(view.run_id, view.status)
        if view.resumable:
            step = f"POST /v1/runs/{view.run_id}/resume (lattice resume {view.run_id} --temporal HOST:PORT)"
        failure = {**failure, "recovery_action": step, "resumable": view.resumable}
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
        "rerunnable": view.rerunnable,
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


def _next_step(run_id: str, status: str) -> str:
    if status == "halted":
        return next_step(run_id, status)
    return "fix the cause and start the run again (a run on Temporal is not resumed)"


def provider_meta(spec: ProviderSpec) -> dict[str, Any]:
    """The run's provider as the workers build it: a mock script travels inline (a worker
    may be on another machine and has no workflows folder); a live provider is built
    from the workers' configuration."""
    choice = spec.choice
    if choice.fixtures:
        raise LatticeUserError(
            "fixtures are not supported for runs on Temporal yet", error_type="invalid_request"
        )
    if choice.mock:
        script = json.loads(Path(choice.mock).read_text(encoding="utf-8"))
        return ProviderSpec(script=script, latency=spec.latency, pieces=spec.pieces).to_meta()
    if spec.script is not None:
        return spec.to_meta()
    return ProviderSpec().to_meta() | {"provider_arg": choice.name}


def add_backend_routes(  # noqa: C901
    app: FastAPI,
    *,
    backend: RunBackend,
    library: WorkflowLibrary,
    config: LatticeConfig,
    config_path: str | None,
    respond: Respond,
    redact: Redactor,
) -> None:
    """The run routes of ``app``, answered by ``backend``. Registered before the
    run-folder routes of the same paths, which ``create_app`` then drops."""

    polls = RunPolls(backend, POLL_SECONDS)

    def events_text(batch: RunEvents) -> bytes:
        text = "".join(message(e["seq"], event_line(e)) for e in batch.events)
        if batch.status != "running":
            text += end_message(batch.status)
        return redact(text).encode()

    async def ask(call: Any) -> Any:
        try:
            return await call
        except LatticeUserError as exc:
            raise api_error(exc) from None

    def run_id_of(run_id: str) -> str:
        if not RUN_ID.match(run_id):
            raise ApiError(404, "not_found", f"no run {run_id!r}")
        return run_id

    def prepare(body: StartRun) -> tuple[NewRun, list[dict[str, Any]]]:
        name = None
        if body.workflow is not None:
            loaded = library.load(body.workflow)
            lowered, document = loaded.lowered, loaded.document
            name = body.workflow
            where = f"workflow {body.workflow!r}"
        else:
            assert body.document is not None
            lowered, document = library.lower_inline(body.document), body.document
            where = "the document"
        if lowered.ir is None:
            raise document_error(lowered.diagnostics, where=where)
        try:
            spec = body.spec(library)
            prepared = prepare_run(
                lowered.ir,
                config=config,
                options=RunOptions(
                    provider=spec,
                    config_path=config_path,
                    max_calls=body.max_calls,
                    max_tokens_total=body.max_tokens_total,
                    max_steps=body.max_steps,
                    max_visits=body.max_visits,
                ),
                inputs=body.inputs,
                answers=body.answers,
                workflow=document,
                runs_dir=None,
            )
            if body.answers:
                check_answers(lowered.ir, body.answers, what="answers")
            run = NewRun(
                run_id=new_run_id(),
                ir=lowered.ir,
                inputs=prepared.inputs,
                answers=dict(body.answers),
                provider=provider_meta(spec),
                settings=prepared.settings,
                budgets={"max_calls": body.max_calls, "max_tokens_total": body.max_tokens_total},
                limits={
                    "max_steps": prepared.runner.limits.max_steps,
                    "max_visits": prepared.runner.limits.max_visits,
                },
                workflow_name=name,
                document=document,
            )
        except LatticeUserError as exc:
            raise api_error(exc) from None
        return run, diagnostics_json(lowered.warnings)

    @app.post("/v1/runs", status_code=202, tags=["runs"], summary="start a run")
    async def start_run(body: StartRun) -> Response:
        check_start(body)
        run, warnings = await asyncio.to_thread(prepare, body)
        await ask(backend.start(run))
        return respond(
            202,
            {
                "run_id": run.run_id,
                "status": "running",
                "warnings": warnings,
                "links": links(run.run_id),
            },
            {"Location": f"/v1/runs/{run.run_id}"},
        )

    @app.get("/v1/runs", tags=["runs"], summary="list runs, newest first")
    async def list_runs(
        status: Annotated[str | None, Query(pattern=STATUSES)] = None,
        workflow: Annotated[str | None, Query(description="workflow id or file name")] = None,
        limit: Annotated[int, Query(ge=1, le=500)] = 50,
        before: Annotated[str | None, Query(description="the previous page's next")] = None,
    ) -> Response:
        page = await ask(
            backend.list_runs(status=status, workflow=workflow, limit=limit, before=before)
        )
        return respond(200, {"runs": [summary_json(v) for v in page.runs], "next": page.next})

    @app.get("/v1/runs/{run_id}", tags=["runs"], summary="one run")
    async def get_run(run_id: str) -> Response:
        view = await ask(backend.describe(run_id_of(run_id)))
        return respond(200, run_json(view) | {"engine": backend.name})

    @app.get(
        "/v1/runs/{run_id}/events",
        tags=["runs"],
        summary="the run's events as Server-Sent Events",
        response_class=StreamingResponse,
    )
    async def run_events(
        run_id: str,
        last_event_id_header: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
        last_event_id: Annotated[int | None, Query(ge=0)] = None,
        timing: Annotated[bool, Query(description="emission time before each event")] = False,
        deltas: Annotated[
            bool,
            Query(
                description="the model answers of ops in flight as they grow (llm_delta), "
                "read from their workers' heartbeats"
            ),
        ] = False,
    ) -> Response:
        cursor = resume_cursor(last_event_id, last_event_id_header)
        first = await ask(backend.events(run_id_of(run_id), cursor))

        def sent(batch: RunEvents) -> bytes:
            nonlocal cursor
            if batch.events:
                cursor = batch.events[-1]["seq"]
            return events_text(batch)

        async def messages() -> AsyncIterator[bytes]:
            if first.events or first.status != "running":
                yield sent(first)
            if first.status != "running":
                return
            pieces = LivePieces()
            quiet = 0.0
            wait = LIVE_SECONDS if deltas else PING_SECONDS
            async with polls.watch(run_id, cursor) as poll:  # shared with the run's watchers
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
                            live = await backend.live(run_id)
                        except LatticeUserError:
                            live = []
                        text = pieces.messages(live, cursor, run_id)
                        if text:
                            quiet = 0.0
                            yield redact(text).encode()
                    if batch is None:
                        quiet += wait
                        if quiet >= PING_SECONDS:
                            quiet = 0.0
                            yield PING

        return StreamingResponse(
            messages(),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    @app.get(
        "/v1/runs/{run_id}/live",
        tags=["runs"],
        summary="what the run's ops in flight have done so far (their events, the answer "
        "being streamed), read from their workers' heartbeats",
    )
    async def live_ops(run_id: str) -> Response:
        run_id = run_id_of(run_id)
        return respond(200, {"run_id": run_id, "ops": await ask(backend.live(run_id))})

    @app.post(
        "/v1/runs/{run_id}/answers",
        status_code=202,
        tags=["runs"],
        summary="answer a halted run's question and resume it",
    )
    async def answer_run(run_id: str, body: AnswerRun) -> Response:
        run_id = run_id_of(run_id)
        answers = body.all_answers()
        try:
            refuse_secret_answers(answers, redact)
        except LatticeUserError as exc:
            raise api_error(exc) from None
        await ask(backend.answer(run_id, answers))
        return respond(
            202,
            {"run_id": run_id, "status": "running", "links": links(run_id)},
            {"Location": f"/v1/runs/{run_id}"},
        )

    @app.post(
        "/v1/runs/{run_id}/cancel",
        status_code=202,
        tags=["runs"],
        summary="stop a run at its next op boundary (it shows interrupted, resumable)",
    )
    async def cancel_run(run_id: str) -> Response:
        await ask(backend.cancel(run_id_of(run_id)))
        return respond(
            202, {"run_id": run_id, "status": "running", "stopping": True, "links": links(run_id)}
        )

    @app.post(
        "/v1/runs/{run_id}/resume",
        status_code=202,
        tags=["runs"],
        summary="resume a stopped run where it stopped",
    )
    async def resume_run(run_id: str) -> Response:
        run_id = run_id_of(run_id)
        await ask(backend.resume(run_id))
        return respond(
            202,
            {"run_id": run_id, "status": "running", "links": links(run_id)},
            {"Location": f"/v1/runs/{run_id}"},
        )

    @app.get(
        "/v1/runs/{run_id}/rerun",
        tags=["runs"],
        summary="the state a re-run from a step of this run starts with",
    )
    async def rerun_preview(
        run_id: str, op: str, visit: Annotated[int | None, Query(ge=1)] = None
    ) -> Response:
        point = await ask(backend.rerun_point(run_id_of(run_id), op, visit))
        return respond(200, point)

    @app.post(
        "/v1/runs/{run_id}/rerun",
        status_code=202,
        tags=["runs"],
        summary="start a new run from a step of this one",
    )
    async def rerun_run(run_id: str, body: RerunRun) -> Response:
        run_id = run_id_of(run_id)
        spec = body.spec(library)
        given = spec.given
        new_id, parent = await ask(
            backend.rerun(
                run_id,
                op=body.op,
                visit=body.visit,
                state=body.state,
                provider=provider_meta(spec) if given else None,
                redact=redact,
            )
        )
        return respond(
            202,
            {"run_id": new_id, "status": "running", "parent": parent, "links": links(new_id)},
            {"Location": f"/v1/runs/{new_id}"},
        )

    @app.get(
        "/v1/runs/{run_id}/compare/{other_id}",
        tags=["panel"],
        summary="what differs between two runs (lattice runs diff)",
    )
    async def compare_runs(run_id: str, other_id: str) -> Response:
        run_id, other_id = run_id_of(run_id), run_id_of(other_id)
        with tempfile.TemporaryDirectory(prefix="lattice-compare-") as scratch:
            a, b = Path(scratch) / run_id, Path(scratch) / other_id
            await ask(backend.export(run_id, a))
            await ask(backend.export(other_id, b))
            out = await asyncio.to_thread(compare_json, a, b, run_id, other_id)
        return respond(200, out)


class BackendReader(RunReader):
    """The panel's reads of runs on ``backend``: each one asks it for the run's record
    (the ``record`` query on Temporal), which holds what a run folder holds."""

    def __init__(self, backend: RunBackend) -> None:
        self.backend = backend

    async def _record(self, run_id: str) -> RunRecord:
        if not RUN_ID.match(run_id):
            raise ApiError(404, "not_found", f"no run {run_id!r}")
        try:
            return await self.backend.record(run_id)
        except LatticeUserError as exc:
            raise api_error(exc) from None

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


STATUSES = "^(running|completed|failed|halted|interrupted)$"

"""The run routes of ``lattice serve`` (``/v1/runs``…, docs/server.md), declared once over
the gateway's ``Backend``: run folders or an engine's runs answer the same paths, bodies
and status codes. A route that needs a ``Capability`` the backend lacks is ``409
not_supported`` (``backend.needs``); ``?deltas=1`` and ``?q=`` are passed on only to a
backend that can do them."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import Body, FastAPI, Header, Query
from starlette.responses import Response, StreamingResponse

from lattice.server.backend import Backend, RunQuery, accepted, needs
from lattice.server.bodies import AnswerRun, RerunRun, ResumeRun, StartRun, check_start
from lattice.server.errors import Respond
from lattice.server.events import resume_cursor
from lattice.server.manager import links
from lattice.service.backend import Capability

Status = Literal["running", "completed", "failed", "halted", "interrupted"]


def add_run_routes(app: FastAPI, *, runs: Backend, respond: Respond) -> None:
    """Serve the runs of ``runs`` from ``app``."""
    add_start_and_reads(app, runs, respond)
    add_answers_and_stops(app, runs, respond)


def add_start_and_reads(app: FastAPI, runs: Backend, respond: Respond) -> None:
    """``POST /v1/runs``, the list, one run and its event stream."""

    @app.post("/v1/runs", status_code=202, tags=["runs"], summary="start a run")
    async def start_run(body: StartRun) -> Response:
        check_start(body)
        started = await runs.start(body)
        return accepted(respond, started.run_id, {"status": started.status, **started.fields})

    @app.get("/v1/runs", tags=["runs"], summary="list runs, newest first")
    async def list_runs(
        status: Annotated[Status | None, Query()] = None,
        workflow: Annotated[
            str | None, Query(description="workflow id, name or file, or NAME@VERSION")
        ] = None,
        limit: Annotated[int, Query(ge=1, le=500)] = 50,
        before: Annotated[str | None, Query(description="the previous page's next")] = None,
        q: Annotated[
            str | None,
            Query(
                max_length=200,
                description="words each found (any case) in the run's id, workflow, "
                "workflow name, status or start time (2026-12-02T13)",
            ),
        ] = None,
    ) -> Response:
        search = q if Capability.SEARCH in runs.capabilities else None
        return respond(200, await runs.list_runs(RunQuery(status, workflow, limit, before, search)))

    @app.get("/v1/runs/{run_id}", tags=["runs"], summary="one run")
    async def get_run(run_id: str) -> Response:
        return respond(200, await runs.describe(run_id))

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
            bool, Query(description="the pieces of model answers as they arrive (llm_delta)")
        ] = False,
    ) -> Response:
        cursor = resume_cursor(last_event_id, last_event_id_header)
        messages = await runs.events(
            run_id,
            cursor,
            timing=timing,
            deltas=deltas and Capability.DELTAS in runs.capabilities,
        )
        return StreamingResponse(
            messages,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    @app.get(
        "/v1/runs/{run_id}/live",
        tags=["runs"],
        summary="what the run's ops in flight have done so far (on Temporal: read from "
        "their workers' heartbeats)",
    )
    async def live_ops(run_id: str) -> Response:
        return respond(200, {"run_id": run_id, "ops": await runs.live(run_id)})


def add_answers_and_stops(app: FastAPI, runs: Backend, respond: Respond) -> None:
    """Answering, resuming, re-running and cancelling a run."""

    @app.post(
        "/v1/runs/{run_id}/answers",
        status_code=202,
        tags=["runs"],
        summary="answer a halted run's question and resume it",
    )
    async def answer_run(
        run_id: str,
        body: AnswerRun,
        client: Annotated[
            str | None,
            Header(
                alias="X-Lattice-Client",
                description="`panel` when the panel sends the answer: the door its "
                "approvals are journaled as coming by (a label, not a credential)",
            ),
        ] = None,
    ) -> Response:
        door = "panel" if client == "panel" else "gateway"
        answered = await runs.answer(run_id, body, door)
        return accepted(respond, run_id, {"status": answered.status})

    @app.post(
        "/v1/runs/{run_id}/resume",
        status_code=202,
        tags=["runs"],
        summary="resume a failed or interrupted run",
        dependencies=[needs(runs, Capability.RESUME)],
    )
    async def resume_run(run_id: str, body: Annotated[ResumeRun | None, Body()] = None) -> Response:
        resumed = await runs.resume(run_id, body or ResumeRun())
        return accepted(respond, run_id, {"status": resumed.status})

    @app.get(
        "/v1/runs/{run_id}/rerun",
        tags=["runs"],
        summary="the state a re-run from a step of this run starts with",
        dependencies=[needs(runs, Capability.RERUN)],
    )
    async def rerun_preview(
        run_id: str, op: str, visit: Annotated[int | None, Query(ge=1)] = None
    ) -> Response:
        return respond(200, await runs.rerun_point(run_id, op, visit))

    @app.post(
        "/v1/runs/{run_id}/rerun",
        status_code=202,
        tags=["runs"],
        summary="start a new run from a step of this one",
        dependencies=[needs(runs, Capability.RERUN)],
    )
    async def rerun_run(run_id: str, body: RerunRun) -> Response:
        started = await runs.rerun(run_id, body)
        return accepted(respond, started.run_id, {"status": started.status, **started.fields})

    @app.post(
        "/v1/runs/{run_id}/cancel",
        status_code=202,
        tags=["runs"],
        summary="stop a run at its next op boundary (it ends interrupted, resumable)",
    )
    async def cancel_run(run_id: str) -> Response:
        await runs.cancel(run_id)
        return respond(
            202, {"run_id": run_id, "status": "running", "stopping": True, "links": links(run_id)}
        )

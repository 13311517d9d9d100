"""The FastAPI application of ``lattice serve``: routes, request bodies, errors and the
guard (bearer token, body size) in front of them. docs/server.md documents each route.

Routes that only read folders (run folders, the workflows folder) or lower a document
are plain ``def``: FastAPI runs them in its thread pool, so that their file reads and
checks (work that grows with the document) never hold up the event loop every run and
event stream shares. The others are ``async def`` and read no file (the event stream
reads ``events.jsonl`` in a worker thread), except starting and resuming a run, which
prepare the run folder on the loop; starting one lowers its document and checks its
inputs (its schemas' patterns) in a worker thread."""

from __future__ import annotations

import asyncio
import gc
import hmac
import inspect
import ipaddress
import json
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import Body, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.responses import Response, StreamingResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lattice.config import LatticeConfig
from lattice.errors import LatticeUserError
from lattice.ir.models import ExecIR
from lattice.llm.disabled import DisabledProvider
from lattice.lower.compiler import LoweringResult
from lattice.runs.redaction import Redactor, make_redactor
from lattice.runtime.settings import settings_from_config
from lattice.server.api_docs import add_docs_routes, is_docs_asset
from lattice.server.bodies import (
    AnswerRun,
    CheckDocument,
    RerunRun,
    ResumeRun,
    StartRun,
    check_start,
)
from lattice.server.errors import ApiError, diagnostics_json, document_error, from_user_error
from lattice.server.events import FolderTails, resume_cursor, stream
from lattice.server.manager import RunManager, links
from lattice.server.panel_api import add_panel_routes, is_public
from lattice.server.remote import BackendReader, add_backend_routes
from lattice.server.services import Services, ServicesSettings, is_webhook
from lattice.server.store import LoopStore
from lattice.server.workflows import WorkflowLibrary
from lattice.service.backend import RunBackend
from lattice.service.rerun import note_rerun, prepare_rerun, rerun_point
from lattice.service.runs import (
    PreparedRun,
    ProviderSpec,
    RunOptions,
    prepare_resume,
    prepare_run,
)
from lattice.services.runs import version_meta
from lattice.services.schedules import Clock

log = logging.getLogger("lattice.server")

VERSION = "0.1.0"
DEFAULT_MAX_BODY = 1024 * 1024
DEFAULT_MAX_ACTIVE = 64


_NO_TELEMETRY: dict[str, Any] = (
    {"telemetry": {"tracing": False, "metrics": False, "logs": False}}
    if "telemetry" in inspect.signature(FastAPI.__init__).parameters
    else {}
)
"""Recent FastAPI versions trace every request with OpenTelemetry unless told not to."""


@dataclass(frozen=True)
class ServerSettings:
    """What ``lattice serve`` was started with."""

    runs_dir: Path = Path("runs")
    workflows_dir: Path | None = None
    config: LatticeConfig = field(default_factory=LatticeConfig)
    config_path: str | None = None
    token: str | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY
    max_active_runs: int = DEFAULT_MAX_ACTIVE
    backend: RunBackend | None = None
    """Where runs live when not in run folders under ``runs_dir`` (``--engine temporal``)."""
    mocks: bool = False
    """Runs started at ``/mcp``, by webhooks and by schedules use each workflow's
    ``NAME.mock.json`` (``--mocks``)."""
    mock_latency: float = 0.0
    """A pause before each of those mock answers (demos of progress and cancelling)."""
    clock: Clock | None = None
    """The schedules' clock (None: the system's; tests give a ``ManualClock``)."""


# -- the guard ----------------------------------------------------------------------------


def _public(path: str) -> bool:
    """Files that hold no run data: the panel's page and files, the API docs' assets."""
    return is_public(path) or is_docs_asset(path)


def _loopback_name(host: str) -> bool:
    """Whether ``host`` (a Host header's name, or an Origin's, without the port) names
    this machine's loopback: ``localhost``, ``127.0.0.0/8``, ``[::1]``."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.removeprefix("[").removesuffix("]")).is_loopback
    except ValueError:
        return False


def _host_name(authority: str) -> str:
    """The name of ``host[:port]`` (``[v6]:port`` keeps its brackets' content)."""
    if authority.startswith("["):
        return authority.partition("]")[0] + "]"
    return authority.rpartition(":")[0] if ":" in authority else authority


def _foreign(headers: Mapping[bytes, bytes]) -> tuple[int, str, str] | None:
    """Why a request to a gateway without a token is refused: its Host or Origin is not
    loopback (a web page whose name was rebound to 127.0.0.1), else None."""
    host = headers.get(b"host", b"").decode("latin-1").strip()
    if not _loopback_name(_host_name(host)):
        return 421, "misdirected_request", f"this server answers loopback names only, not {host!r}"
    origin = headers.get(b"origin")
    if origin is not None:
        text = origin.decode("latin-1").strip()
        scheme, sep, rest = text.partition("://")
        if (
            not sep
            or scheme.lower() not in ("http", "https")
            or not _loopback_name(_host_name(rest.partition("/")[0]))
        ):
            return 403, "forbidden_origin", f"requests from {text!r} are refused"
    return None


class Guard:
    """Pure ASGI, in front of everything: the bearer token (every route but ``/healthz``,
    the panel's page and static files and the API docs' assets, which hold no run data,
    and the webhooks, which check their own HMAC signature: a sender such as GitHub
    cannot send a bearer token) and the body size limit (413 before the body is read past the limit).
    Without a token, a request whose Host or Origin is not a loopback name is refused
    (``421``/``403``; the webhooks and ``/healthz`` excepted): loopback is then the only
    lock, and a web page whose name was rebound to 127.0.0.1 must not pick it."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str | None,
        max_body: int,
        respond: Callable[[int, dict[str, Any], Mapping[str, str]], Response],
    ) -> None:
        self.app = app
        self.expected = token.encode() if token else None
        self.max_body = max_body
        self.respond = respond

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":  # no route takes one; refused before any route runs
            await receive()  # websocket.connect
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        foreign = (
            _foreign(headers)
            if self.expected is None
            and scope["path"] != "/healthz"
            and not (scope["method"] == "POST" and is_webhook(scope["path"]))
            else None
        )
        if foreign is not None:
            status, error, said = foreign
            await self.respond(status, {"error": error, "message": said}, {})(scope, receive, send)
            return
        if (
            self.expected is not None
            and scope["path"] != "/healthz"
            and not (scope["method"] in ("GET", "HEAD") and _public(scope["path"]))
            and not (scope["method"] == "POST" and is_webhook(scope["path"]))
        ):
            given = headers.get(b"authorization", b"")
            scheme, _, credentials = given.partition(b" ")
            # the scheme is case-insensitive (RFC 9110); the token is compared in constant time
            if scheme.lower() != b"bearer" or not hmac.compare_digest(
                credentials.strip(), self.expected
            ):
                error = "missing_token" if not given else "invalid_token"
                await self.respond(
                    401,
                    {"error": error, "message": "this server needs Authorization: Bearer <token>"},
                    {"WWW-Authenticate": "Bearer"},
                )(scope, receive, send)
                return
        if scope["method"] in ("POST", "PUT", "PATCH"):
            length = headers.get(b"content-length")
            if length is not None and (not length.isdigit() or int(length) > self.max_body):
                await self._too_large(scope, receive, send)
                return
            chunks: list[bytes] = []
            size = 0
            more = True
            while more:
                message = await receive()
                if message["type"] != "http.request":
                    break
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > self.max_body:
                    await self._too_large(scope, receive, send)
                    return
                chunks.append(chunk)
                more = message.get("more_body", False)
            body = b"".join(chunks)
            replayed = False

            async def replay() -> Message:
                nonlocal replayed
                if not replayed:
                    replayed = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()

            await self.app(scope, replay, send)
            return
        await self.app(scope, receive, send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.respond(
            413,
            {
                "error": "body_too_large",
                "message": f"the request body is over the limit of {self.max_body} bytes",
            },
            {"Connection": "close"},
        )(scope, receive, send)


# -- the application -----------------------------------------------------------------------


class MaskingFilter(logging.Filter):
    """Masks secret values in the server's log records (message and traceback), as every
    response is masked: an exception's text may hold what a run read."""

    def __init__(self, redact: Redactor) -> None:
        super().__init__()
        self.redact = redact

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = self.redact(record.getMessage()), None
        if record.exc_info and not record.exc_text:
            record.exc_text = self.redact(logging.Formatter().formatException(record.exc_info))
        return True


def load_what_runs_use() -> None:
    """Import and build now what a process loads on first use (jsonschema and the
    validator class of ``lattice.schemas``, the regex package, the guarded HTTP
    transport, the document and ExecIR models' validators), so that the first run does
    not pay for it on the loop every run shares."""
    import regex  # noqa: F401

    import lattice.tools.guarded  # noqa: F401
    from lattice.document import models as document_models
    from lattice.ir import models as ir_models
    from lattice.schemas import schema_validator

    schema_validator({})

    for module in (document_models, ir_models):
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, BaseModel)
                and value.__module__ == module.__name__
            ):
                value.model_rebuild()


def create_app(settings: ServerSettings) -> FastAPI:  # noqa: C901
    """The ``lattice serve`` application for ``settings``."""
    config = settings.config
    secret_names = (
        *settings_from_config(config).secret_names(),
        *(trigger.secret_env for trigger in config.triggers.values()),
    )
    redact: Redactor = make_redactor(secret_names)
    masking = MaskingFilter(redact)
    for name in ("lattice.server", "uvicorn.error"):
        logger = logging.getLogger(name)
        for old in [f for f in logger.filters if isinstance(f, MaskingFilter)]:
            logger.removeFilter(old)  # an app made before in this process
        logger.addFilter(masking)
    manager = RunManager(
        settings.runs_dir, max_active_runs=settings.max_active_runs, secret_names=secret_names
    )
    library = WorkflowLibrary(settings.workflows_dir, list(config.mcp.servers))
    tails = FolderTails(status=manager.status, closing=lambda: manager.closing, redact=redact)
    services = Services(
        ServicesSettings(
            workflows_dir=settings.workflows_dir,
            config=config,
            config_path=settings.config_path,
            token=settings.token,
            on_temporal=settings.backend is not None,
            mocks=settings.mocks,
            mock_latency=settings.mock_latency,
            clock=settings.clock,
        ),
        manager,
    )

    def respond(status: int, data: Any, headers: Mapping[str, str] | None = None) -> Response:
        text = json.dumps(data, ensure_ascii=False, default=str)
        return Response(
            redact(text), status_code=status, headers=headers, media_type="application/json"
        )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # What is alive now (the modules, the app, its routes and schemas) lives as long
        # as the server: out of the cycle collector's sight, a full collection walks only
        # what runs and requests made since (a full walk of it all paused every run and
        # stream for tens of milliseconds).
        load_what_runs_use()
        gc.collect()
        gc.freeze()
        async with services.running():
            yield
            await manager.shutdown()
        if settings.backend is not None:
            await settings.backend.close()

    app = FastAPI(
        title="Lattice",
        version=VERSION,
        description="Start, watch, answer and resume Lattice runs (docs/server.md).",
        lifespan=lifespan,
        docs_url=None,  # add_docs_routes serves /docs without a CDN
        redoc_url=None,  # ReDoc loads its logo from the internet
        **_NO_TELEMETRY,
    )
    app.state.manager = manager
    app.state.library = library

    # -- errors: JSON, never a stack trace --

    async def api_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        return respond(exc.status, exc.body(), exc.headers)

    async def invalid_request(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        problems = list(exc.errors())
        if any(p.get("type") == "json_invalid" for p in problems):
            return respond(
                400, {"error": "invalid_json", "message": "the request body is not valid JSON"}
            )
        diagnostics = [_request_diagnostic(p) for p in problems]
        return respond(
            422,
            {
                "error": "invalid_request",
                "message": "; ".join(f"{d['pointer'] or '/'}: {d['message']}" for d in diagnostics),
                "diagnostics": diagnostics,
            },
        )

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        kind = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return respond(
            exc.status_code, {"error": kind, "message": str(exc.detail)}, exc.headers or None
        )

    async def internal_error(request: Request, exc: Exception) -> Response:
        log.error("internal error on %s %s", request.method, request.url.path, exc_info=exc)
        return respond(
            500, {"error": "internal_error", "message": "internal error; see the server's log"}
        )

    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(RequestValidationError, invalid_request)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(Exception, internal_error)
    app.add_middleware(
        Guard,
        token=settings.token,
        max_body=settings.max_body_bytes,
        respond=respond,
    )

    # -- routes --

    if settings.backend is not None:
        # first: these take the run routes' paths; the run-folder routes are dropped below
        add_backend_routes(
            app,
            backend=settings.backend,
            library=library,
            config=config,
            config_path=settings.config_path,
            respond=respond,
            redact=redact,
        )

    @app.get("/healthz", tags=["server"], summary="liveness (no token needed)")
    async def healthz() -> Response:
        return respond(
            200,
            {
                "status": "ok",
                "version": VERSION,
                "active_runs": len(manager.active),
                "max_active_runs": manager.max_active_runs,
            },
        )

    @app.post("/v1/runs", status_code=202, tags=["runs"], summary="start a run")
    async def start_run(body: StartRun) -> Response:
        check_start(body)
        async with manager.starting:
            return await _start(body)

    def _prepare(body: StartRun) -> tuple[LoweringResult, PreparedRun]:
        """The run ``body`` asks for: its document lowered, its inputs checked."""
        meta: dict[str, Any] = {"started_by": {"via": "api"}}
        ir: ExecIR | None = None
        if body.workflow is not None and services.names_version(body.workflow):
            workflow = services.resolve(body.workflow)
            lowered = LoweringResult(workflow.ir, [])
            document, ir = workflow.document, workflow.ir
            meta.update({"workflow_name": workflow.name, **version_meta(workflow)})
            where = f"workflow {body.workflow!r}"
        elif body.workflow is not None:
            loaded = library.load(body.workflow)
            lowered, document = loaded.lowered, loaded.document
            meta["workflow_name"] = body.workflow
            where = f"workflow {body.workflow!r}"
            if lowered.ir is not None and (versioned := services.file(body.workflow)):
                # the deployed version's IR, so that the run records the IR it runs
                meta.update({"workflow_name": versioned.name, **version_meta(versioned)})
                document, ir = versioned.document, versioned.ir
        else:
            assert body.document is not None
            lowered, document = library.lower_inline(body.document), body.document
            where = "the document"
        if lowered.ir is None:
            raise document_error(lowered.diagnostics, where=where)
        try:
            prepared = prepare_run(
                ir or lowered.ir,
                config=config,
                options=RunOptions(
                    provider=body.spec(library),
                    config_path=settings.config_path,
                    max_calls=body.max_calls,
                    max_tokens_total=body.max_tokens_total,
                    max_steps=body.max_steps,
                    max_visits=body.max_visits,
                    meta=meta,
                ),
                inputs=body.inputs,
                answers=body.answers,
                workflow=document,
                runs_dir=manager.runs_dir,
                store_type=LoopStore,
            )
        except LatticeUserError as exc:
            raise from_user_error(exc) from None
        return lowered, prepared

    async def _start(body: StartRun) -> Response:
        manager.check_capacity()
        # Lowering (CPU work that grows with the document) and checking the inputs (their
        # schema's patterns): in a worker thread, so that the loop keeps answering meanwhile.
        lowered, prepared = await asyncio.to_thread(_prepare, body)
        api_hint(prepared.runner.provider)
        active = await manager.start(prepared)
        return respond(
            202,
            {
                "run_id": active.run_id,
                "status": manager.status(active.run_id),
                "warnings": diagnostics_json(lowered.warnings),
                "links": links(active.run_id),
            },
            {"Location": f"/v1/runs/{active.run_id}"},
        )

    @app.get("/v1/runs", tags=["runs"], summary="list runs, newest first")
    def list_runs(
        status: Annotated[
            Literal["running", "completed", "failed", "halted", "interrupted"] | None, Query()
        ] = None,
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
        page = manager.list_runs(
            status=status, workflow=workflow, limit=limit, before=before, search=q
        )
        return respond(200, page)

    @app.get("/v1/runs/{run_id}", tags=["runs"], summary="one run")
    def get_run(run_id: str) -> Response:
        return respond(200, manager.describe(run_id))

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
        folder = manager.folder(run_id)
        cursor = resume_cursor(last_event_id, last_event_id_header)
        messages = stream(
            folder,
            cursor,
            channel=lambda: manager.channel(run_id),
            tails=tails,
            timing=timing,
            redact=redact,
            deltas=deltas,
        )
        return StreamingResponse(
            messages,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

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
        folder = manager.folder(run_id)
        door = "panel" if client == "panel" else "gateway"
        async with manager.starting:
            manager.check_resumable(
                run_id, ("halted",), "only a halted run waits for answers (see its question)"
            )
            if body.approvals.keys() - {"*"}:
                check_waiting(run_id, body.approvals)
            return await _resume(run_id, folder, ProviderSpec(), body.all_answers(door), False)

    def check_waiting(run_id: str, approvals: Mapping[str, Any]) -> None:
        """409 for a decision on a call the run does not wait for (decided already by
        another door, or never asked): a page showing an earlier halt is not taken for
        an answer to this one."""
        question = manager.describe(run_id).get("question") or {}
        waiting = [item.get("id") for item in question.get("approvals") or []]
        stale = sorted(set(approvals) - {"*"} - set(waiting))
        if stale:
            raise ApiError(
                409,
                "conflict",
                f"{', '.join(stale)}: not waiting for a decision (decided already, or never "
                f"asked); the run waits for: {', '.join(map(str, waiting)) or 'no approval'}",
                extra={"waiting": waiting},
            )

    @app.post(
        "/v1/runs/{run_id}/resume",
        status_code=202,
        tags=["runs"],
        summary="resume a failed or interrupted run",
    )
    async def resume_run(run_id: str, body: Annotated[ResumeRun | None, Body()] = None) -> Response:
        body = body or ResumeRun()
        folder = manager.folder(run_id)
        spec = body.spec(library)
        async with manager.starting:
            manager.check_resumable(
                run_id,
                ("failed", "interrupted"),
                "only a failed or interrupted run can be resumed (a halted one is answered: "
                f"POST /v1/runs/{run_id}/answers)",
            )
            return await _resume(run_id, folder, spec, body.answers, body.accept_changed)

    async def _resume(
        run_id: str,
        folder: Path,
        spec: ProviderSpec,
        answers: dict[str, Any],
        accept_changed: bool,
    ) -> Response:
        manager.check_capacity()
        try:
            prepared = prepare_resume(
                folder,
                provider=spec,
                answers=answers,
                accept_changed=accept_changed,
                config=config,
                store_type=LoopStore,
            )
        except LatticeUserError as exc:
            raise from_user_error(exc) from None
        api_hint(prepared.provider)
        active = await manager.resume(run_id, prepared)
        return respond(
            202,
            {"run_id": run_id, "status": manager.status(active.run_id), "links": links(run_id)},
            {"Location": f"/v1/runs/{run_id}"},
        )

    @app.get(
        "/v1/runs/{run_id}/rerun",
        tags=["runs"],
        summary="the state a re-run from a step of this run starts with",
    )
    def rerun_preview(
        run_id: str, op: str, visit: Annotated[int | None, Query(ge=1)] = None
    ) -> Response:
        folder = manager.folder(run_id)
        try:
            point = rerun_point(folder, op, visit)
        except LatticeUserError as exc:
            raise from_user_error(exc) from None
        return respond(200, point.to_json())

    @app.post(
        "/v1/runs/{run_id}/rerun",
        status_code=202,
        tags=["runs"],
        summary="start a new run from a step of this one",
    )
    async def rerun_run(run_id: str, body: RerunRun) -> Response:
        folder = manager.folder(run_id)
        spec = body.spec(library)
        async with manager.starting:
            manager.check_resumable(
                run_id,
                ("completed", "failed", "halted", "interrupted"),
                "a run is re-run from a step once it has stopped",
            )
            manager.check_capacity()
            try:
                prepared = await run_in_threadpool(
                    lambda: prepare_rerun(
                        folder,
                        op=body.op,
                        visit=body.visit,
                        state=body.state,
                        provider=spec,
                        config=config,
                        runs_dir=manager.runs_dir,
                        store_type=LoopStore,
                    )
                )
            except LatticeUserError as exc:
                raise from_user_error(exc) from None
            api_hint(prepared.runner.provider)
            active = await manager.start(prepared)
        assert prepared.start is not None
        await run_in_threadpool(note_rerun, folder, prepared.start, active.run_id)
        return respond(
            202,
            {
                "run_id": active.run_id,
                "status": manager.status(active.run_id),
                "parent": prepared.start.parent,
                "links": links(active.run_id),
            },
            {"Location": f"/v1/runs/{active.run_id}"},
        )

    @app.post(
        "/v1/runs/{run_id}/cancel",
        status_code=202,
        tags=["runs"],
        summary="stop a run at its next op boundary (it ends interrupted, resumable)",
    )
    async def cancel_run(run_id: str) -> Response:
        manager.folder(run_id)
        manager.cancel(run_id)
        return respond(
            202, {"run_id": run_id, "status": "running", "stopping": True, "links": links(run_id)}
        )

    @app.get("/v1/workflows", tags=["workflows"], summary="the workflows under --workflows")
    def list_workflows() -> Response:
        return respond(200, {"workflows": library.listing()})

    @app.get(
        "/v1/workflows/{name:path}",
        tags=["workflows"],
        summary="a workflow: its document, ExecIR and diagnostics",
    )
    def get_workflow(name: str) -> Response:
        return respond(200, library.load(name).describe(full=True))

    @app.post("/v1/check", tags=["workflows"], summary="the diagnostics of an inline document")
    def check(body: CheckDocument) -> Response:
        lowered = library.lower_inline(body.document)
        return respond(
            200,
            {
                "valid": lowered.ir is not None,
                "diagnostics": diagnostics_json(lowered.diagnostics),
            },
        )

    services.add_routes(app, respond=respond)
    add_panel_routes(
        app,
        manager=manager,
        library=library,
        respond=respond,
        reader=BackendReader(settings.backend) if settings.backend is not None else None,
    )
    add_docs_routes(app)
    if settings.backend is not None:
        drop_shadowed_routes(app)
    return app


def drop_shadowed_routes(app: FastAPI) -> None:
    """Drop each route that an earlier one of the same path and methods answers in its
    place (the backend's run routes stand before the run-folder ones)."""
    seen: set[tuple[str, frozenset[str]]] = set()
    kept = []
    for route in app.router.routes:
        key = (getattr(route, "path", ""), frozenset(getattr(route, "methods", None) or ()))
        if key[1] and key in seen:
            continue
        seen.add(key)
        kept.append(route)
    app.router.routes[:] = kept


def _request_diagnostic(problem: Mapping[str, Any]) -> dict[str, Any]:
    """A request body problem found by FastAPI, located by a JSON pointer into the body
    (``?name`` for a query parameter)."""
    loc = [str(part) for part in problem.get("loc", ())]
    if loc and loc[0] == "body":
        pointer = "".join(f"/{part}" for part in loc[1:])
    elif loc and loc[0] in ("query", "header", "path"):
        pointer = f"?{'.'.join(loc[1:])}" if loc[0] == "query" else ".".join(loc[1:])
    else:
        pointer = "".join(f"/{part}" for part in loc)
    return {
        "code": "invalid-request",
        "severity": "error",
        "message": str(problem.get("msg", "invalid")),
        "pointer": pointer,
    }


API_HOW_TO_CONFIGURE = (
    'no LLM provider is configured. Run offline with "mock" (a mock script under the '
    'server\'s workflows folder) or "mock_script" (an inline script) in the request body, '
    'or choose a real provider with "provider": "openai", "anthropic" or "litellm" (keys '
    "come from the server's OPENAI_API_KEY / ANTHROPIC_API_KEY)"
)


def api_hint(provider: object) -> None:
    """Make a run without a provider say what to send the API (not the CLI's flags)."""
    if isinstance(provider, DisabledProvider):
        provider.how_to = API_HOW_TO_CONFIGURE

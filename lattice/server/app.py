"""The FastAPI application of ``lattice serve`` (docs/server.md documents each route),
assembled: the backend its runs live on (``folder_backend.py``: run folders;
``remote.py``: an engine's, ``--engine temporal``), the run routes over it
(``run_routes.py``), the workflows' (``workflows.py``), the services' (``services.py``),
the panel's (``panel_api.py``), the API docs (``api_docs.py``), JSON errors
(``errors.py``) and the guard in front of them all (``guard.py``: bearer token, body
size, loopback names).

No route holds up the event loop every run and event stream shares with file reads or
work that grows with a document: routes that only read the workflows folder or lower a
document are plain ``def`` (FastAPI's thread pool), and each backend reads runs off the
loop (its module says how)."""

from __future__ import annotations

import gc
import inspect
import json
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel
from starlette.responses import Response

from lattice.config import LatticeConfig
from lattice.runs.redaction import Redactor, make_redactor
from lattice.runtime.settings import settings_from_config
from lattice.server.api_docs import add_docs_routes
from lattice.server.backend import Backend
from lattice.server.errors import Respond, add_error_handlers
from lattice.server.folder_backend import FolderBackend
from lattice.server.guard import Guard
from lattice.server.manager import RunManager
from lattice.server.panel_api import add_panel_routes
from lattice.server.remote import EngineBackend
from lattice.server.run_routes import add_run_routes
from lattice.server.services import Services, ServicesSettings
from lattice.server.start import Gateway
from lattice.server.workflow_routes import add_workflow_routes
from lattice.server.workflows import WorkflowLibrary
from lattice.service.backend import RunBackend
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


def create_app(settings: ServerSettings) -> FastAPI:
    """The ``lattice serve`` application for ``settings``: its runs' backend (run
    folders under ``runs_dir``, or ``settings.backend``'s), the routes over it, the
    services, the panel, the API docs and the guard in front of them."""
    config = settings.config
    secret_names = (
        *settings_from_config(config).secret_names(),
        *(trigger.secret_env for trigger in config.triggers.values()),
    )
    redact = make_redactor(secret_names)
    mask_logs(redact)
    manager = RunManager(
        settings.runs_dir, max_active_runs=settings.max_active_runs, secret_names=secret_names
    )
    library = WorkflowLibrary(settings.workflows_dir, list(config.mcp.servers))
    services = Services(
        ServicesSettings(
            workflows_dir=settings.workflows_dir,
            config=config,
            config_path=settings.config_path,
            token=settings.token,
            backend=settings.backend,
            mocks=settings.mocks,
            mock_latency=settings.mock_latency,
            clock=settings.clock,
        ),
        manager,
    )
    gateway = Gateway(library, services, config, settings.config_path, redact)
    runs: Backend = (
        FolderBackend(manager, gateway)
        if settings.backend is None
        else EngineBackend(settings.backend, gateway)
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
        await runs.close()

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
    add_error_handlers(app, respond)
    app.add_middleware(
        Guard, token=settings.token, max_body=settings.max_body_bytes, respond=respond
    )
    add_health_route(app, manager, respond)
    add_run_routes(app, runs=runs, respond=respond)
    add_workflow_routes(app, library, respond)
    services.add_routes(app, respond=respond)
    add_panel_routes(app, runs=runs, library=library, respond=respond)
    add_docs_routes(app)
    return app


def mask_logs(redact: Redactor) -> None:
    """Mask secret values in the server's log records, as every response is masked."""
    masking = MaskingFilter(redact)
    for name in ("lattice.server", "uvicorn.error"):
        logger = logging.getLogger(name)
        for old in [f for f in logger.filters if isinstance(f, MaskingFilter)]:
            logger.removeFilter(old)  # an app made before in this process
        logger.addFilter(masking)


def add_health_route(app: FastAPI, manager: RunManager, respond: Respond) -> None:
    """``GET /healthz``: the server is up (no token needed), and its runs in flight."""

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

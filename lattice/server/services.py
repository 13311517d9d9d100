"""The gateway's services (docs/services.md): the workflows under ``--workflows`` as MCP
tools at ``/mcp`` (Streamable HTTP, behind the gateway's token like every route), the
webhooks of ``[triggers.*]`` and the schedules of ``[schedules.*]``. Their runs are the
gateway's own: run folders under ``--runs-dir`` driven by its run manager, listed,
watched and answered as any other."""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from starlette.responses import Response
from starlette.routing import Route

from lattice.config import LatticeConfig, TriggerConfig
from lattice.errors import ErrorType, LatticeUserError
from lattice.runs.store import RunStore
from lattice.runtime.context import EventListener
from lattice.runtime.results import RunResult
from lattice.server.backend import accepted, not_yet
from lattice.server.engine_host import EngineHost
from lattice.server.errors import ApiError, Respond, not_found
from lattice.server.manager import ActiveRun, RunManager
from lattice.server.store import LoopStore
from lattice.service.backend import Capability, RunBackend
from lattice.service.runs import PreparedResume, PreparedRun, ProviderSpec
from lattice.services.catalog import Catalog, Workflow
from lattice.services.runs import HostedRun, Launch, StartedBy, WorkflowRuns, answer_folder
from lattice.services.schedules import Clock, Scheduler, SystemClock
from lattice.services.versions import VERSIONS_DIR
from lattice.services.webhooks import (
    Delivery,
    DeliveryLedger,
    InputMapping,
    Refused,
    secret_of,
    verify,
)

LOOPBACK_HOSTS = ["127.0.0.1:*", "localhost:*", "[::1]:*"]
"""A gateway without a token listens on loopback only: ``/mcp`` then refuses requests
whose Host or Origin is another (a web page's DNS rebinding)."""


WEBHOOKS = "/hooks/"


def is_webhook(path: str) -> bool:
    """Whether ``path`` is a webhook's (authenticated by its signature, not the token)."""
    return path.startswith(WEBHOOKS)


class ManagerHost:
    """Runs of the services on the gateway's run manager (``RunHost``)."""

    store_type: type[RunStore] = LoopStore

    def __init__(self, manager: RunManager) -> None:
        self.manager = manager
        self.runs_dir = manager.runs_dir

    async def start(
        self, prepared: PreparedRun, *, run_id: str | None, launch: Launch
    ) -> HostedRun:
        try:
            async with self.manager.starting:
                active = await self.manager.start(prepared, run_id=run_id)
        except ApiError as exc:
            raise LatticeUserError(exc.message, error_type=exc.error) from None
        return self._hosted(active)

    async def resume(
        self, run_id: str, prepared: PreparedResume, *, on_event: EventListener | None
    ) -> HostedRun:
        try:
            async with self.manager.starting:
                self.manager.check_resumable(
                    run_id, ("halted",), "only a halted run waits for answers"
                )
                active = await self.manager.resume(run_id, prepared, on_event=on_event)
        except ApiError as exc:
            raise LatticeUserError(exc.message, error_type=exc.error) from None
        return self._hosted(active)

    async def answer(
        self,
        run_id: str,
        answers: Mapping[str, Any],
        *,
        config: LatticeConfig,
        on_event: EventListener | None,
    ) -> HostedRun:
        return await answer_folder(self, run_id, answers, config=config, on_event=on_event)

    def _hosted(self, active: ActiveRun) -> HostedRun:
        async def done() -> RunResult:
            assert active.task is not None
            await active.task
            if active.result is None:
                raise LatticeUserError(
                    f"run {active.run_id} stopped before its end: "
                    f"{active.error or 'the server is shutting down'}"
                )
            return active.result

        def stop() -> bool:
            runner = active.runner
            if runner is None or not runner.request_stop(active.run_id):
                return False
            active.stop_asked = True
            return True

        return HostedRun(active.run_id, done, stop)


@dataclass(frozen=True)
class ServicesSettings:
    """What of ``lattice serve``'s settings the services read."""

    workflows_dir: Path | None
    config: LatticeConfig
    config_path: str | None = None
    token: str | None = None
    backend: RunBackend | None = None
    """The engine that keeps the gateway's runs (``--engine temporal``; None: run
    folders). The services start their runs there; without ``Capability.SERVICES``
    the engine has no schedules yet, and a schedule configured is an error."""
    mocks: bool = False
    mock_latency: float = 0.0
    clock: Any = None


class Services:
    """What ``/mcp``, the webhooks and the schedules share: the catalog of the workflows
    folder and the runs they start (none without ``--workflows``, nor on Temporal)."""

    def __init__(self, settings: ServicesSettings, manager: RunManager) -> None:
        self.settings = settings
        self.manager = manager
        self.runs: WorkflowRuns | None = None
        self.mcp: Any = None
        """The MCP SDK's session manager of ``/mcp`` (StreamableHTTPSessionManager)."""
        self.clock: Clock = settings.clock or SystemClock()
        self.triggers: dict[str, Trigger] = {}
        self.schedulers: list[Scheduler] = []
        config = settings.config
        wanted = [f"[triggers.{name}]" for name in config.triggers] + [
            f"[schedules.{name}]" for name in config.schedules
        ]
        backend = settings.backend
        if backend is not None and Capability.SERVICES not in backend.capabilities:
            for name in config.schedules:
                raise LatticeUserError(
                    f"[schedules.{name}]: {not_yet(Capability.SERVICES, backend.name)}"
                )
        if wanted and settings.workflows_dir is None:
            raise LatticeUserError(
                f"{wanted[0]} names a workflow under --workflows DIR: give the folder"
            )
        if settings.workflows_dir is None:
            return
        catalog = Catalog(
            settings.workflows_dir,
            mcp_servers=list(config.mcp.servers) if config.source else None,
            versions=manager.runs_dir / VERSIONS_DIR if backend is None else None,
        )
        self.runs = WorkflowRuns(
            catalog,
            ManagerHost(manager) if backend is None else EngineHost(backend),
            config=config,
            config_path=settings.config_path,
            provider=ProviderSpec(latency=settings.mock_latency),
            mocks=settings.mocks,
        )
        self.mcp = self._mcp_sessions(self.runs, token=settings.token)
        durable = config.runs.durability == "fsync"
        self._add_triggers(config, manager.runs_dir, durable=durable)
        self.schedulers = [
            Scheduler(
                name,
                schedule,
                clock=self.clock,
                state_dir=manager.runs_dir / ".schedules",
                fire=self.runs.start_tick,
                durable=durable,
            )
            for name, schedule in config.schedules.items()
        ]
        self.check()

    @staticmethod
    def _mcp_sessions(runs: WorkflowRuns, *, token: str | None) -> Any:
        """The MCP SDK's session manager of ``/mcp`` (the SDK, a second of imports, is
        imported only by a server with a workflows folder)."""
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
        from mcp.server.transport_security import TransportSecuritySettings

        from lattice.services.mcp_tools import state_key_of, workflow_server

        loopback_only = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=LOOPBACK_HOSTS,
            allowed_origins=[f"http://{host}" for host in LOOPBACK_HOSTS],
        )
        return StreamableHTTPSessionManager(
            app=workflow_server(runs, state_key=state_key_of(token) if token else None),
            security_settings=None if token else loopback_only,
        )

    def _add_triggers(self, config: LatticeConfig, runs_dir: Path, *, durable: bool) -> None:
        for name, trigger in config.triggers.items():
            if trigger.path in self.triggers:
                raise LatticeUserError(
                    f"triggers.{name}.path: /hooks/{trigger.path} is "
                    f"triggers.{self.triggers[trigger.path].name}'s already"
                )
            self.triggers[trigger.path] = Trigger(name, trigger, runs_dir=runs_dir, durable=durable)

    def names_version(self, ref: str) -> bool:
        """Whether ``POST /v1/runs``'s ``workflow`` names a workflow by name or version
        (``NAME``, ``NAME@VERSION``, ``FILE.json@VERSION``) rather than a file."""
        if self.runs is None:
            return False
        return "@" in ref or not (ref.endswith(".json") or "/" in ref or "\\" in ref)

    def resolve(self, ref: str) -> Workflow:
        """The workflow ``ref`` names (``Catalog.resolve``), as an API error: 404 when
        there is none, 409 when its deployed version was changed."""
        assert self.runs is not None
        try:
            return self.runs.catalog.resolve(ref)
        except LatticeUserError as exc:
            if exc.error_type == ErrorType.VERSION_CHANGED:
                raise ApiError(409, "version_changed", exc.message) from None
            if exc.error_type == ErrorType.INVALID_PATH:
                raise ApiError(400, "invalid_path", exc.message) from None
            raise not_found(exc.message) from None

    def file(self, relative: str) -> Workflow | None:
        """The deployed version of the workflow file ``relative`` (None on a server that
        keeps no versions, or when the file is no workflow of the catalog)."""
        if self.runs is None:
            return None
        try:
            return self.runs.catalog.file(relative)
        except LatticeUserError:
            return None

    def check(self) -> None:
        """Refuse to start when a trigger or a schedule could never start a run: its
        workflow missing or invalid, its secret not set."""
        assert self.runs is not None
        for trigger in self.triggers.values():
            self.runs.catalog.resolve(trigger.config.workflow)
            secret_of(trigger.name, trigger.config, os.environ)
        for scheduler in self.schedulers:
            self.runs.catalog.resolve(scheduler.schedule.workflow)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The services' background work while the server runs: MCP sessions and one
        task per schedule."""
        async with AsyncExitStack() as stack:
            if self.mcp is not None:
                await stack.enter_async_context(self.mcp.run())
            tasks = [
                asyncio.create_task(scheduler.run(), name=f"schedule {scheduler.name}")
                for scheduler in self.schedulers
            ]
            try:
                yield
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

    def add_routes(self, app: FastAPI, *, respond: Respond) -> None:
        """Serve ``/mcp`` and the webhooks from ``app`` (when there are any)."""
        if self.runs is None or self.mcp is None:
            return
        from mcp.server.streamable_http_manager import StreamableHTTPASGIApp

        app.router.routes.append(Route("/mcp", endpoint=StreamableHTTPASGIApp(self.mcp)))
        if not self.triggers:
            return

        @app.post(
            "/hooks/{path:path}",
            status_code=202,
            tags=["services"],
            summary="a webhook of [triggers.*]: a signed delivery starts a run, once",
        )
        async def hook(path: str, request: Request) -> Response:
            trigger = self.triggers.get(path.strip("/"))
            if trigger is None:
                raise not_found(f"no trigger at /hooks/{path}")
            body = await request.body()
            headers = {key.lower(): value for key, value in request.headers.items()}
            try:
                started = await self.deliver(trigger, body, headers)
            except Refused as refused:
                refusal = {"error": refused.error, "message": refused.message}
                return respond(refused.status, refusal, None)
            return accepted(respond, started.run_id, {"delivery": started.delivery})

    async def deliver(self, trigger: Trigger, body: bytes, headers: dict[str, str]) -> Started:
        """Start the run of one delivery: its signature checked, its inputs read and
        checked, its id kept (only then is anything written); Refused otherwise."""
        assert self.runs is not None
        try:
            secret = secret_of(trigger.name, trigger.config, os.environ)
            workflow = self.runs.catalog.resolve(trigger.config.workflow)
        except LatticeUserError as exc:
            raise Refused(503, "trigger_not_ready", exc.message) from None
        delivery = verify(trigger.config, secret, body, headers, now=self.clock.now().timestamp())
        keys = list(dict.fromkeys((delivery.id, delivery.signed)))
        for key in keys:
            if (kept := trigger.ledger.kept(key)) is not None:
                raise _repeated(delivery, key, kept)
        inputs = trigger.mapping.inputs(delivery)
        started_by = StartedBy("webhook", {"trigger": trigger.name, "delivery": delivery.id})
        try:
            prepared = await asyncio.to_thread(self.runs.prepare, workflow, inputs, started_by)
        except LatticeUserError as exc:
            raise Refused(422, "invalid_inputs", exc.message) from None
        run_id = delivery_run_id(trigger.name, delivery.id)
        claimed: list[str] = []
        for key in keys:
            kept = trigger.ledger.claim(key, run_id)
            if kept is not None:
                for done in claimed:
                    trigger.ledger.release(done)
                raise _repeated(delivery, key, kept)
            claimed.append(key)
        try:
            await self.runs.host.start(prepared, run_id=run_id, launch=self.runs.launch(workflow))
        except LatticeUserError as exc:
            if exc.error_type == ErrorType.CONFLICT:  # another gateway started it (a shared engine)
                raise _repeated(delivery, delivery.id, run_id) from None
            for key in keys:  # not started: a redelivery may start it
                trigger.ledger.release(key)
            status = 429 if exc.error_type == ErrorType.TOO_MANY_ACTIVE_RUNS else 503
            raise Refused(status, exc.error_type or "not_started", exc.message) from None
        except BaseException:
            for key in keys:
                trigger.ledger.release(key)
            raise
        return Started(run_id, delivery.id)


def delivery_run_id(trigger: str, delivery: str) -> str:
    """The id of the run a trigger's delivery starts: the same for the same delivery, so
    that an engine shared by several gateways refuses a second start of it."""
    digest = hashlib.sha256(f"{trigger}\0{delivery}".encode()).hexdigest()[:32]
    return f"hook-{digest}"


def _repeated(delivery: Delivery, key: str, run_id: str) -> Refused:
    """The refusal of a delivery kept before, by its id or by what its signature covers."""
    if key == delivery.id:
        return Refused(409, "repeated_delivery", f"delivery {delivery.id!r} started run {run_id}")
    return Refused(
        409,
        "repeated_delivery",
        f"this signed request started run {run_id} already (under another delivery id)",
    )


@dataclass(frozen=True)
class Started:
    run_id: str
    delivery: str


class Trigger:
    """A configured webhook: its inputs' searches and its kept deliveries."""

    def __init__(self, name: str, config: TriggerConfig, *, runs_dir: Path, durable: bool) -> None:
        self.name = name
        self.config = config
        self.mapping = InputMapping(name, config.inputs)
        self.ledger = DeliveryLedger(runs_dir / ".deliveries" / name, durable=durable)

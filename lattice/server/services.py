"""The gateway's services (docs/services.md): the workflows under ``--workflows`` as MCP
tools at ``/mcp`` (Streamable HTTP, behind the gateway's token like every route), the
webhooks of ``[triggers.*]`` and the schedules of ``[schedules.*]``. Their runs are the
gateway's own: run folders under ``--runs-dir`` driven by its run manager, listed,
watched and answered as any other."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.routing import Route

from lattice.config import LatticeConfig
from lattice.errors import LatticeUserError
from lattice.runtime.results import RunResult
from lattice.server.errors import ApiError
from lattice.server.manager import ActiveRun, RunManager
from lattice.server.store import LoopStore
from lattice.service.runs import PreparedResume, PreparedRun, ProviderSpec
from lattice.services.catalog import Catalog
from lattice.services.mcp_tools import workflow_server
from lattice.services.runs import HostedRun, WorkflowRuns

LOOPBACK_ONLY = TransportSecuritySettings(
    enable_dns_rebinding_protection=True,
    allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
    allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
)
"""A gateway without a token listens on loopback only: ``/mcp`` then refuses requests
whose Host or Origin is another (a web page's DNS rebinding)."""


class ManagerHost:
    """Runs of the services on the gateway's run manager (``RunHost``)."""

    store_type = LoopStore

    def __init__(self, manager: RunManager) -> None:
        self.manager = manager
        self.runs_dir = manager.runs_dir

    async def start(self, prepared: PreparedRun, *, run_id: str | None) -> HostedRun:
        try:
            async with self.manager.starting:
                active = await self.manager.start(prepared, run_id=run_id)
        except ApiError as exc:
            raise LatticeUserError(exc.message, error_type=exc.error) from None
        return self._hosted(active)

    async def resume(self, run_id: str, prepared: PreparedResume) -> HostedRun:
        try:
            async with self.manager.starting:
                self.manager.check_resumable(
                    run_id, ("halted",), "only a halted run waits for answers"
                )
                active = await self.manager.resume(run_id, prepared)
        except ApiError as exc:
            raise LatticeUserError(exc.message, error_type=exc.error) from None
        return self._hosted(active)

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

        return HostedRun(active.run_id, done(), stop)


@dataclass(frozen=True)
class ServicesSettings:
    """What of ``lattice serve``'s settings the services read."""

    workflows_dir: Path | None
    config: LatticeConfig
    config_path: str | None = None
    token: str | None = None
    on_temporal: bool = False
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
        self.mcp: StreamableHTTPSessionManager | None = None
        if settings.workflows_dir is None or settings.on_temporal:
            return
        config = settings.config
        catalog = Catalog(
            settings.workflows_dir,
            mcp_servers=list(config.mcp.servers) if config.source else None,
        )
        self.runs = WorkflowRuns(
            catalog,
            ManagerHost(manager),
            config=config,
            config_path=settings.config_path,
            provider=ProviderSpec(latency=settings.mock_latency),
            mocks=settings.mocks,
        )
        self.mcp = StreamableHTTPSessionManager(
            app=workflow_server(self.runs),
            security_settings=None if settings.token else LOOPBACK_ONLY,
        )

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The services' background work while the server runs (MCP sessions)."""
        async with AsyncExitStack() as stack:
            if self.mcp is not None:
                await stack.enter_async_context(self.mcp.run())
            yield

    def add_routes(self, app: FastAPI, *, respond: Any) -> None:
        if self.mcp is not None:
            app.router.routes.append(Route("/mcp", endpoint=StreamableHTTPASGIApp(self.mcp)))

"""``lattice worker --temporal HOST:PORT``: a worker that runs Lattice runs' workflows and ops."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from lattice.config import LatticeConfig
from lattice.durable.temporal import DEFAULT_TASK_QUEUE
from lattice.durable.temporal.blobs import blob_store_from_config, collect_garbage, current_run
from lattice.durable.temporal.client import connect
from lattice.durable.temporal.live import LiveOp
from lattice.durable.temporal.op_journal import recorded_lines
from lattice.durable.temporal.ops import OpExecutor
from lattice.durable.temporal.tracing import TRACE_ACTIVITY, trace_run
from lattice.durable.temporal.workflow import OP_ACTIVITY, LatticeRunWorkflow
from lattice.runtime.settings import settings_from_config

PASSED_THROUGH = (
    "lattice",
    "jsonschema",
    "jsonschema_specifications",
    "referencing",
    "attrs",
    "attr",
    "rpds",
    "regex",
    "jmespath",
    "idna",
    "httpx",
    "pydantic",
    "pydantic_core",
)
"""Modules the workflow sandbox shares with the worker instead of importing them again
for every run: Lattice's walk (deterministic given its ops' results: it reads no clock
but the workflow's) and what it imports, at load or when first used (a module imported
for the first time inside a workflow would fail its task)."""
LOG = logging.getLogger(__name__)
GARBAGE_EVERY = 3600.0
"""Seconds between two collections of the blobs of runs Temporal no longer has."""
HEARTBEAT_EVERY = 1.0
"""Seconds between an op's heartbeats: a lost worker is noticed after the run's
heartbeat timeout, and a cancelled run's op hears of it at its next heartbeat."""
HEARTBEAT_THROTTLE = timedelta(seconds=2)
"""How often at most a heartbeat goes to the server (Temporal's default is 80% of the
heartbeat timeout): an op's model answers and tool results travel with its heartbeats
(``op_journal.py``), so a worker lost later than this after an answer loses no answer."""


class OpActivity:
    """The ``lattice.op`` activity: one op on this worker, heartbeating while it runs,
    with the op's journal as the heartbeat's details."""

    def __init__(self, client: Client, config: LatticeConfig) -> None:
        self.client = client
        self.executor = OpExecutor(config)

    @activity.defn(name=OP_ACTIVITY)
    async def run_op(self, request: dict[str, Any]) -> dict[str, Any]:
        workflow_id = activity.info().workflow_id
        if workflow_id is None:  # a standalone activity: there is no run to read
            raise ApplicationError("lattice.op runs inside a LatticeRun workflow only")

        async def load() -> dict[str, Any]:
            execir: dict[str, Any] = await self.client.get_workflow_handle(workflow_id).query(
                "execir"
            )
            return execir

        current_run.set(workflow_id)  # the op's heartbeats keep large journals as its run's

        async def load_fixtures() -> dict[str, dict[str, Any]]:
            table: dict[str, dict[str, Any]] = await self.client.get_workflow_handle(
                workflow_id
            ).query("fixtures")
            return table

        journal: list[list[dict[str, Any]]] = [recorded_lines(activity.info().heartbeat_details)]
        live = LiveOp()

        def journaled(lines: list[dict[str, Any]]) -> None:
            journal[0] = list(lines)
            activity.heartbeat(journal[0], live.snapshot())

        handle = self.client.get_async_activity_handle(task_token=activity.info().task_token)

        async def settle(lines: list[dict[str, Any]]) -> None:
            try:
                await handle.heartbeat(list(lines), live.snapshot())
            except Exception as exc:  # the throttled heartbeat still carries them
                LOG.warning(
                    "op %s: its journal could not be sent at once: %s", request["op_id"], exc
                )

        beating = asyncio.ensure_future(_heartbeat(journal, live))
        try:
            return await self.executor.run_op(
                request,
                load,
                recorded=journal[0],
                on_journal=journaled,
                on_settle=settle,
                load_fixtures=load_fixtures,
                live=live,
            )
        finally:
            beating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beating


class TraceActivity:
    """The ``lattice.trace_run`` local activity: export an execution's run span with this
    worker's ``[telemetry]`` (``tracing.py``)."""

    def __init__(self, config: LatticeConfig) -> None:
        self.settings = settings_from_config(config)

    @activity.defn(name=TRACE_ACTIVITY)
    async def trace_run(self, ended: dict[str, Any]) -> bool:
        try:
            return trace_run(self.settings, ended)
        except Exception as exc:  # tracing never fails, nor holds up, a run
            LOG.warning("run %s: its run span could not be exported: %s", ended.get("run_id"), exc)
            return False


async def _heartbeat(journal: list[list[dict[str, Any]]], live: LiveOp) -> None:
    """Heartbeat with the op's journal (``journal[0]``, the latest) and what it has done
    so far (``live.py``) until cancelled: each heartbeat's details replace the last
    one's on the server."""
    while True:
        activity.heartbeat(journal[0], live.snapshot())
        await asyncio.sleep(HEARTBEAT_EVERY)


def workflow_runner() -> SandboxedWorkflowRunner:
    """Temporal's sandbox for ``LatticeRun``, sharing ``PASSED_THROUGH`` with the worker
    (a ``Replayer`` checking a run's history uses it too). They are imported here, before
    any workflow runs: a module first imported inside a workflow's activation (the
    ExecIR's schema checks import ``jsonschema_specifications`` and its dependencies)
    counts against Temporal's two seconds without a yield, which a fresh worker replaying
    a run on a loaded machine passed (its queries failed as a potential deadlock)."""
    for name in PASSED_THROUGH:
        importlib.import_module(name)
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSED_THROUGH)
    )


def make_worker(
    client: Client,
    config: LatticeConfig,
    *,
    task_queue: str = DEFAULT_TASK_QUEUE,
    ops: OpActivity | None = None,
) -> Worker:
    """A worker for Lattice runs on ``task_queue`` (``async with`` it, or ``await run()``);
    ``client`` must use Lattice's data converter (``client.connect`` makes such a client).
    ``ops`` runs the ops (by default one made here)."""
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[LatticeRunWorkflow],
        workflow_runner=workflow_runner(),
        activities=[(ops or OpActivity(client, config)).run_op, TraceActivity(config).trace_run],
        max_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
    )


async def run_worker(
    address: str,
    config: LatticeConfig,
    *,
    task_queue: str,
    connected: Callable[[], None] | None = None,
) -> None:
    """Connect to Temporal at ``address`` (then call ``connected``) and work until cancelled."""
    client = await connect(address, config.temporal)
    if connected is not None:
        connected()
    ops = OpActivity(client, config)
    collecting = asyncio.ensure_future(_collect_garbage(client, config))
    try:
        await make_worker(client, config, task_queue=task_queue, ops=ops).run()
    finally:
        collecting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await collecting
        await ops.executor.tool_sessions.aclose()


async def _collect_garbage(client: Client, config: LatticeConfig) -> None:
    """Every ``GARBAGE_EVERY`` seconds, delete the blobs of the runs Temporal no longer
    has (``blobs.collect_garbage``); workers sharing a store may all do it."""
    store = blob_store_from_config(config.temporal)
    while True:
        try:
            await collect_garbage(client, store)
        except Exception as exc:  # a store out of reach: try again next time
            LOG.warning("blob store %s: garbage not collected: %s", store.describe(), exc)
        await asyncio.sleep(GARBAGE_EVERY)

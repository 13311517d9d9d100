"""``lattice worker --temporal HOST:PORT``: a worker that runs Lattice runs' workflows and ops."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from lattice.config import LatticeConfig
from lattice.durable.temporal import DEFAULT_TASK_QUEUE
from lattice.durable.temporal.client import connect
from lattice.durable.temporal.ops import OpExecutor
from lattice.durable.temporal.workflow import OP_ACTIVITY, LatticeRunWorkflow

PASSED_THROUGH = (
    "lattice",
    "jsonschema",
    "referencing",
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
HEARTBEAT_EVERY = 1.0
"""Seconds between an op's heartbeats: a lost worker is noticed after the run's
heartbeat timeout, and a cancelled run's op hears of it at its next heartbeat."""


class OpActivity:
    """The ``lattice.op`` activity: one op on this worker, heartbeating while it runs."""

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

        beating = asyncio.ensure_future(_heartbeat())
        try:
            return await self.executor.run_op(request, load)
        finally:
            beating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beating


async def _heartbeat() -> None:
    while True:
        activity.heartbeat()
        await asyncio.sleep(HEARTBEAT_EVERY)


def workflow_runner() -> SandboxedWorkflowRunner:
    """Temporal's sandbox for ``LatticeRun``, sharing ``PASSED_THROUGH`` with the worker
    (a ``Replayer`` checking a run's history uses it too)."""
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSED_THROUGH)
    )


def make_worker(
    client: Client, config: LatticeConfig, *, task_queue: str = DEFAULT_TASK_QUEUE
) -> Worker:
    """A worker for Lattice runs on ``task_queue`` (``async with`` it, or ``await run()``);
    ``client`` must use ``DATA_CONVERTER`` (``client.connect`` makes such a client)."""
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[LatticeRunWorkflow],
        workflow_runner=workflow_runner(),
        activities=[OpActivity(client, config).run_op],
    )


async def run_worker(
    address: str,
    config: LatticeConfig,
    *,
    task_queue: str,
    connected: Callable[[], None] | None = None,
) -> None:
    """Connect to Temporal at ``address`` (then call ``connected``) and work until cancelled."""
    client = await connect(address)
    if connected is not None:
        connected()
    await make_worker(client, config, task_queue=task_queue).run()

"""Stopping a run on Temporal at an op boundary, and resuming it where it stopped.

A local run asked to stop (``lattice serve``'s cancel, the panel's Stop) ends
``interrupted`` at its next op boundary, and ``lattice resume`` goes on from there. On
Temporal the workflow does not end: the ``stop`` update closes the gate every op that
runs on a worker passes before its activity is scheduled, so no new model or tool call
starts; the ops in flight finish and keep their results. Once none is in flight the run
shows ``interrupted`` (resumable), and waits, with no worker held, for the ``resume``
update, which opens the gate: the ops waiting at it start, from where they stopped. Ops
that never wait (they run in the workflow itself) are not stopped: a stopped run has
done every such op it could reach. Cancelling a stopped run (Temporal's cancellation)
ends it for good.

This module does not import ``temporalio``: the workflow's event loop is deterministic,
so an ``asyncio.Event`` waits as ``workflow.wait_condition`` would.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from lattice.events import EventKind
from lattice.runtime.context import RunContext

STOPPED = "the run was stopped at an op boundary, as asked"
"""The reason a stopped run gives (a local run's words)."""


class StopGate:
    """The gate the ops of one run pass before their activity starts."""

    def __init__(self, now: Callable[[], str]) -> None:
        self._now = now
        self._open = asyncio.Event()
        self._open.set()
        self.request: dict[str, Any] | None = None
        """The stop asked for (its door and time), until the run is resumed."""
        self.stopped: dict[str, Any] | None = None
        """Where the run stopped (the first op held at the gate, its branch, when)."""
        self.in_flight = 0
        """Activities running now."""
        self.resumes = 0

    @property
    def holding(self) -> bool:
        """Whether the run is stopped: asked to, with no op in flight any more."""
        return self.request is not None and self.in_flight == 0

    def stop(self, door: str) -> None:
        """Close the gate (again asking is no change)."""
        if self.request is None:
            self.request = {"door": door, "at": self._now()}
            self._open.clear()

    def resume(self, ctx: RunContext) -> None:
        """Open the gate: the ops held at it start."""
        if self.request is None:
            return
        if self.stopped is not None:
            self.resumes += 1
            ctx.emit(
                EventKind.RUN_RESUMED,
                {
                    "segment": self.resumes + 1,
                    "from_op": self.stopped["op_id"],
                    "after": "interrupted",
                },
                op=False,
            )
        self.request = self.stopped = None
        self._open.set()

    @asynccontextmanager
    async def passing(self, ctx: RunContext, kind: str) -> AsyncIterator[None]:
        """Wait while the gate is closed (the op of ``ctx`` is where the run stopped),
        then count the op in flight until it is done."""
        if not self._open.is_set():
            if self.stopped is None:
                self.stopped = {
                    "op_id": ctx.current_op,
                    "node_id": ctx.current_node,
                    "branch": ctx.branch,
                    "at": self._now(),
                }
                ctx.emit(
                    EventKind.RUN_INTERRUPTED,
                    {"reason": STOPPED, "next_op": ctx.current_op},
                    op=False,
                )
            while not self._open.is_set():
                await self._open.wait()
            ctx.emit(EventKind.OP_STARTED, {"kind": kind})  # as a resumed run starts it
        self.in_flight += 1
        try:
            yield
        finally:
            self.in_flight -= 1

    def failure(self, run_id: str, recovery_action: str) -> dict[str, Any]:
        """The stopped run's report (a local interrupted run's shape)."""
        where = self.stopped or {}
        return {
            "phase": "run",
            "run_id": run_id,
            "op_id": where.get("op_id"),
            "node_id": where.get("node_id"),
            "category": "interrupted",
            "summary": STOPPED,
            "details": {
                "stopped": self.request,
                **({"branch": where["branch"]} if where.get("branch") else {}),
            },
            "attempts": [],
            "blocking": True,
            "recovery_action": recovery_action,
        }

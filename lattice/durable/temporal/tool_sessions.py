"""One MCP session per run per worker, shared by the run's ops on that worker.

A local run opens a tool server's session once and keeps it for the whole run. On
Temporal each op is an activity, and an op's context closes what it opened when it
ends; so a worker keeps each run's ``ToolSessions`` itself (``RunToolSessions``): every
op of the run on this worker gets a view of them (``SharedSessions``) whose ``aclose``
leaves them open. An MCP node whose arguments a model fills in (an op that lists the
tools, then the op that calls one) opens one session, not two, and so does a loop that
calls the same server again.

An MCP client's session belongs to the task that opened it (its transport's task group
must be left from the same task), so each run's sessions are opened and closed by a
task of their own (``_Owner``), not by the op that first asks. They are closed once no
op of the run has run on this worker for ``IDLE_SECONDS`` (the worker cannot know that a
run has ended: its next op may come to this worker, or to another), or when more than
``MAX_RUNS`` runs hold sessions (the least recently used first).

This module does not import ``temporalio``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Callable
from functools import partial
from typing import Any

from lattice.tools.mcp import ToolServer, ToolSessions

IDLE_SECONDS = 300.0
"""How long a run's sessions stay open on a worker after its last op there."""
MAX_RUNS = 64
"""Runs whose sessions a worker keeps open at once."""
LOG = logging.getLogger(__name__)

Emit = Callable[[str, dict[str, Any]], Any]
_Ask = tuple[str, Emit, "asyncio.Future[ToolServer]"]


def _discard(type_: str, data: dict[str, Any]) -> None:
    return None


class _Owner:
    """The task that opens one run's sessions and closes them."""

    def __init__(self, sessions: ToolSessions) -> None:
        self.sessions = sessions
        self.in_use = 0
        self._asks: asyncio.Queue[_Ask | None] = asyncio.Queue()
        self.on_closed: Callable[[], None] = lambda: None
        self.task = asyncio.ensure_future(self._own())

    async def server(self, server_id: str, emit: Emit) -> ToolServer:
        opened: asyncio.Future[ToolServer] = asyncio.get_running_loop().create_future()
        await self._asks.put((server_id, emit, opened))
        return await opened

    def close(self) -> None:
        self._asks.put_nowait(None)

    async def _own(self) -> None:
        try:
            while True:
                try:
                    ask = await asyncio.wait_for(self._asks.get(), IDLE_SECONDS)
                except TimeoutError:
                    if self.in_use:
                        continue
                    break
                if ask is None:
                    break
                server_id, emit, opened = ask
                self.sessions.emit = emit  # the op that opens a session is told it opened
                try:
                    opened.set_result(await self.sessions.server(server_id))
                except Exception as exc:
                    opened.set_exception(exc)
                finally:
                    self.sessions.emit = _discard
        finally:
            self.on_closed()
            try:
                await self.sessions.aclose()
            except Exception as exc:  # a server that fails to close is only logged
                LOG.warning("closing a run's tool sessions: %s", exc)


class SharedSessions(ToolSessions):
    """One op's view of its run's sessions on this worker: opened through their owner,
    left open by ``aclose``."""

    def __init__(self, owner: _Owner) -> None:
        shared = owner.sessions
        super().__init__(shared.servers, builtin=shared.builtin, redact=shared.redact)
        self._owner = owner
        owner.in_use += 1
        self._released = False

    async def server(self, server_id: str) -> ToolServer:
        return await self._owner.server(server_id, self.emit)

    async def aclose(self) -> None:
        if not self._released:
            self._released = True
            self._owner.in_use -= 1


class RunToolSessions:
    """The tool sessions of the runs this worker serves, by run id."""

    def __init__(self) -> None:
        self._owners: OrderedDict[str, _Owner] = OrderedDict()

    def for_run(self, run_id: str, make: Callable[[], ToolSessions]) -> SharedSessions:
        """A view of run ``run_id``'s sessions (made with ``make`` the first time)."""
        owner = self._owners.get(run_id)
        if owner is None or owner.task.done():
            owner = _Owner(make())
            owner.on_closed = partial(self._forget, run_id, owner)
            self._owners[run_id] = owner
            while len(self._owners) > MAX_RUNS:
                _, oldest = self._owners.popitem(last=False)
                oldest.close()
        else:
            self._owners.move_to_end(run_id)
        return SharedSessions(owner)

    def _forget(self, run_id: str, owner: _Owner) -> None:
        if self._owners.get(run_id) is owner:
            del self._owners[run_id]

    async def aclose(self) -> None:
        """Close every run's sessions (the worker stops)."""
        owners = list(self._owners.values())
        for owner in owners:
            owner.close()
        for owner in owners:
            with contextlib.suppress(Exception):
                await owner.task

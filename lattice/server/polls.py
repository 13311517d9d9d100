"""One poller per run whose events clients follow on a ``RunBackend``: however many
watch a run (the panel in several tabs, a CLI and a dashboard), the backend is asked
for its new events once every ``seconds``, not once per watcher.

A watcher asks the backend itself once, for the events after its own cursor (its
``Last-Event-ID``), then takes what the run's poller reads. One that fell behind the
poller (a slow client, while two polls came in) asks the backend again for what it
missed, so that no watcher loses an event. The poller stops with the run (any status
but ``running``), or when its last watcher leaves.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from lattice.errors import LatticeUserError
from lattice.service.backend import RunBackend, RunEvents

log = logging.getLogger("lattice.server")


class PollEnded(Exception):
    """The backend could not be asked (the run is gone, the engine unreachable): the
    watcher's stream ends, and its client follows again from the last id it got."""


@dataclass(frozen=True)
class Poll:
    """What one poll read: the events after ``after``, and the run's status."""

    after: int
    events: RunEvents


class RunPoll:
    """The poller of one run, and what it read last."""

    def __init__(self, backend: RunBackend, run_id: str, after: int, seconds: float) -> None:
        self.backend = backend
        self.run_id = run_id
        self.cursor = after
        """The last event the poller has read."""
        self.seconds = seconds
        self.watchers = 0
        self.latest: Poll | None = None
        """The last poll that read something (events, or a status but ``running``)."""
        self.ended = False
        """The backend could not be asked: the poller stopped."""
        self._arrived = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def poll(self) -> None:
        """Ask for new events every ``seconds`` until the run stops."""
        while True:
            await asyncio.sleep(self.seconds)
            try:
                found = await self.backend.events(self.run_id, self.cursor)
            except LatticeUserError:
                self._publish(None)
                return
            except Exception:
                log.exception("run %s: its events could not be read", self.run_id)
                self._publish(None)
                return
            if found.events or found.status != "running":
                self._publish(Poll(self.cursor, found))
                if found.events:
                    self.cursor = found.events[-1]["seq"]
            if found.status != "running":
                return

    def _publish(self, poll: Poll | None) -> None:
        if poll is None:
            self.ended = True
        else:
            self.latest = poll
        arrived, self._arrived = self._arrived, asyncio.Event()
        arrived.set()

    def _news_for(self, cursor: int) -> bool:
        latest = self.latest
        if self.ended or latest is None:
            return self.ended
        events = latest.events.events
        return latest.events.status != "running" or bool(events and events[-1]["seq"] > cursor)

    async def next(self, cursor: int, timeout: float) -> RunEvents | None:
        """The events after ``cursor`` and the run's status, once a poll has read some
        (or the run stopped); None when ``timeout`` seconds pass first. PollEnded when
        the backend could not be asked."""
        if not self._news_for(cursor):
            try:
                await asyncio.wait_for(self._arrived.wait(), timeout)
            except TimeoutError:
                return None
        if self.ended:
            raise PollEnded(self.run_id)
        latest = self.latest
        assert latest is not None
        if latest.after > cursor:  # polls this watcher missed: it asks for them itself
            try:
                return await self.backend.events(self.run_id, cursor)
            except LatticeUserError:
                raise PollEnded(self.run_id) from None
        return RunEvents(
            [e for e in latest.events.events if e["seq"] > cursor], latest.events.status
        )


class RunPolls:
    """The pollers of the runs being watched, one per run."""

    def __init__(self, backend: RunBackend, seconds: float) -> None:
        self.backend = backend
        self.seconds = seconds
        self.polls: dict[str, RunPoll] = {}

    @asynccontextmanager
    async def watch(self, run_id: str, after: int) -> AsyncIterator[RunPoll]:
        """The poller of ``run_id`` for one watcher whose cursor is ``after`` (a new
        poller starts there), while the block lasts."""
        poll = self.polls.get(run_id)
        if poll is None:
            poll = self.polls[run_id] = RunPoll(self.backend, run_id, after, self.seconds)
            poll.task = asyncio.create_task(poll.poll(), name=f"events of run {run_id}")
            poll.task.add_done_callback(lambda _: self._forget(poll))
        poll.watchers += 1
        try:
            yield poll
        finally:
            poll.watchers -= 1
            if poll.watchers == 0 and poll.task is not None:
                poll.task.cancel()
                self._forget(poll)

    def _forget(self, poll: RunPoll) -> None:
        """A poller that stopped takes no new watchers (the next one starts another)."""
        if self.polls.get(poll.run_id) is poll:
            del self.polls[poll.run_id]

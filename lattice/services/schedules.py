"""Schedules (``[schedules.<name>]``): a cron expression in a time zone that starts a
workflow with given inputs inside ``lattice serve``, one run per tick, even across a
restart.

Each tick's run has an id made of the tick's time and the schedule's name (the run
folder is the proof the tick was started: a tick whose folder exists is never started
again), and the last tick handled is kept in ``.schedules/<name>.json`` under the runs
folder. On start, ticks missed while the server was down are skipped, or the latest of
them is run once (``catch_up = "once"``); then each tick is started when the clock
reaches it. The clock is an interface: the system's, or a ``ManualClock`` that tests
move by hand.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import threading
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Protocol
from zoneinfo import ZoneInfo

from croniter import croniter

from lattice.config import ScheduleConfig
from lattice.errors import LatticeUserError
from lattice.files import atomic_write_text

log = logging.getLogger("lattice.services")

MAX_SLEEP = 60.0
"""The system clock's longest single sleep (a changed wall clock is noticed within it)."""


class Clock(Protocol):
    """Where the schedules read the time and wait for it."""

    def now(self) -> datetime:
        """The time now (aware)."""
        ...

    async def sleep_until(self, when: datetime) -> None:
        """Return once ``now()`` has reached ``when``."""
        ...


class SystemClock:
    """The machine's clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    async def sleep_until(self, when: datetime) -> None:
        while (left := (when - self.now()).total_seconds()) > 0:
            await asyncio.sleep(min(left, MAX_SLEEP))


class ManualClock:
    """A clock that moves only when told (``set``, ``advance``), from any thread; for
    tests and simulations of schedules. ``sleeping()`` says how many waits are on a
    time still ahead (a scheduler that is idle until its next tick)."""

    def __init__(self, start: datetime) -> None:
        self._now = start
        self._lock = threading.Lock()
        self._sleepers: list[tuple[datetime, asyncio.Future[None]]] = []

    def now(self) -> datetime:
        with self._lock:
            return self._now

    async def sleep_until(self, when: datetime) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        with self._lock:
            if when <= self._now:
                return
            entry = (when, future)
            self._sleepers.append(entry)
        try:
            await future
        finally:
            with self._lock:
                if entry in self._sleepers:
                    self._sleepers.remove(entry)

    def set(self, now: datetime) -> None:
        with self._lock:
            self._now = now
            due = [entry for entry in self._sleepers if entry[0] <= now]
            self._sleepers = [entry for entry in self._sleepers if entry[0] > now]
        for _, future in due:
            future.get_loop().call_soon_threadsafe(_wake, future)

    def advance(self, delta: timedelta) -> None:
        self.set(self.now() + delta)

    def sleeping(self) -> int:
        with self._lock:
            return len(self._sleepers)


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def check_cron(name: str, schedule: ScheduleConfig) -> None:
    """A LatticeUserError naming the schedule when its cron expression is not one."""
    if not croniter.is_valid(schedule.cron):
        raise LatticeUserError(
            f"schedules.{name}.cron: {schedule.cron!r} is not a cron expression "
            "(five fields: minute hour day-of-month month day-of-week)"
        )


def tick_run_id(name: str, tick: datetime) -> str:
    """The run id of ``name``'s tick at ``tick``: the same for the same tick, always."""
    stamp = tick.astimezone(UTC).strftime("%Y%m%dT%H%M%S")
    return f"{stamp}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"


Fire = Callable[[str, ScheduleConfig, datetime, str], Awaitable[None]]
"""Starts the run of a tick: ``fire(name, schedule, tick, run id)``; a run that exists
already raises nothing (it was started before)."""


class Scheduler:
    """One schedule, driven by ``clock``; ``run`` until cancelled."""

    def __init__(
        self,
        name: str,
        schedule: ScheduleConfig,
        *,
        clock: Clock,
        state_dir: Path,
        fire: Fire,
        durable: bool = True,
    ) -> None:
        check_cron(name, schedule)
        self.durable = durable
        """Whether the last tick is forced to disk (``[runs] durability = "fsync"``)."""
        self.name = name
        self.schedule = schedule
        self.clock = clock
        self.state_path = state_dir / f"{name}.json"
        self.fire = fire
        self.zone = ZoneInfo(schedule.timezone)

    def next_tick(self, after: datetime) -> datetime:
        found: datetime = croniter(self.schedule.cron, after.astimezone(self.zone)).get_next(
            datetime
        )
        return found

    def last_tick(self, before: datetime) -> datetime:
        """The latest tick strictly before ``before``."""
        found: datetime = croniter(self.schedule.cron, before.astimezone(self.zone)).get_prev(
            datetime
        )
        return found

    def read_state(self) -> datetime | None:
        try:
            data = json.loads(self.state_path.read_text(encoding="utf-8"))
            return datetime.fromisoformat(data["last_tick"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def write_state(self, tick: datetime) -> None:
        atomic_write_text(
            self.state_path,
            json.dumps({"schedule": self.name, "last_tick": tick.isoformat()}) + "\n",
            durable=self.durable,
        )

    async def run(self) -> None:
        cursor = await self.catch_up()
        while True:
            tick = self.next_tick(cursor)
            await self.clock.sleep_until(tick)
            await self._start(tick)
            cursor = tick

    async def catch_up(self) -> datetime:
        """The tick to go on after: now on a first start; else the last tick handled, or
        the latest tick missed while down (run once when ``catch_up = "once"``)."""
        now = self.clock.now()
        last = self.read_state()
        if last is None:
            return now - timedelta(microseconds=1)  # a tick at this very moment is due
        missed = self.last_tick(now)
        if missed <= last:
            return last
        if self.schedule.catch_up == "once":
            await self._start(missed)
        else:
            log.info("schedule %s: ticks up to %s were missed and are skipped", self.name, missed)
            self.write_state(missed)
        return missed

    async def _start(self, tick: datetime) -> None:
        try:
            await self.fire(self.name, self.schedule, tick, tick_run_id(self.name, tick))
        except LatticeUserError as exc:  # the tick is not started; the schedule goes on
            log.error(
                "schedule %s: the run of the tick at %s did not start: %s", self.name, tick, exc
            )
        except Exception:
            log.exception("schedule %s: the run of the tick at %s did not start", self.name, tick)
        self.write_state(tick)

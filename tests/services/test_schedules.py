"""Schedules with a controllable clock: a minute schedule over a simulated hour starts
exactly 60 runs; a restart mid-hour starts no tick twice and loses none; ticks missed
while down are skipped or run once, as configured; time zones are the schedule's."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from lattice.config import LatticeConfig, RunsConfig, ScheduleConfig
from lattice.errors import LatticeUserError
from lattice.server.app import ServerSettings
from lattice.server.in_thread import serve_in_thread
from lattice.services.catalog import Catalog
from lattice.services.runs import LocalHost, WorkflowRuns
from lattice.services.schedules import ManualClock, Scheduler, tick_run_id
from tests.conftest import EXAMPLES

START = datetime(2026, 12, 2, 9, 0, 30, tzinfo=UTC)
"""Half a minute past nine: the first tick of a minute schedule is at 09:01."""
EVERY_MINUTE = ScheduleConfig(cron="* * * * *", workflow="hello-world.json", inputs={"name": "Ada"})


class Simulation:
    """A schedule's runs on a LocalHost, driven by a ManualClock, in one event loop."""

    def __init__(self, runs_dir: Path, schedule: ScheduleConfig = EVERY_MINUTE) -> None:
        self.clock = ManualClock(START)
        self.host = LocalHost(runs_dir)
        self.runs = WorkflowRuns(
            Catalog(EXAMPLES),
            self.host,
            config=LatticeConfig(runs=RunsConfig(durability="os")),
            mocks=True,
        )
        self.schedule = schedule
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """A scheduler (as a server starting), idle once it waits for its next tick."""
        scheduler = Scheduler(
            "digest",
            self.schedule,
            clock=self.clock,
            state_dir=self.host.runs_dir / ".schedules",
            fire=self.runs.start_tick,
            durable=False,
        )
        self.task = asyncio.create_task(scheduler.run())
        await self.idle()

    async def idle(self) -> None:
        while self.clock.sleeping() == 0:
            assert self.task is not None and not self.task.done(), self.task
            await asyncio.sleep(0.001)

    async def minutes(self, count: int) -> None:
        for _ in range(count):
            self.clock.advance(timedelta(minutes=1))
            await self.idle()

    async def stop(self) -> None:
        """The server stops (between ticks)."""
        assert self.task is not None
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)

    async def finish(self) -> list[dict[str, Any]]:
        await self.stop()
        await asyncio.gather(*self.host.tasks)
        folders = sorted(p for p in self.host.runs_dir.iterdir() if not p.name.startswith("."))
        for folder in folders:  # each run began once, and ended
            events = (folder / "events.jsonl").read_text().splitlines()
            kinds = [json.loads(line)["type"] for line in events]
            assert kinds.count("run_started") == 1 and kinds[-1] == "run_finished", folder
        return [json.loads((f / "checkpoint.json").read_text())["meta"] for f in folders]


def ticks(metas: list[dict[str, Any]]) -> list[str]:
    return [meta["started_by"]["tick"] for meta in metas]


def minute(n: int) -> str:
    """The tick n minutes past nine, as a run records it."""
    return (START.replace(second=0) + timedelta(minutes=n)).isoformat()


def test_a_minute_schedule_over_an_hour_starts_60_runs(tmp_path: Path) -> None:
    async def go() -> list[dict[str, Any]]:
        sim = Simulation(tmp_path)
        await sim.start()
        await sim.minutes(60)
        return await sim.finish()

    metas = asyncio.run(go())
    assert ticks(metas) == [minute(n) for n in range(1, 61)]
    assert metas[0]["started_by"] == {"via": "schedule", "schedule": "digest", "tick": minute(1)}


@pytest.mark.parametrize("catch_up", ["skip", "once"])
def test_a_restart_mid_hour_starts_no_tick_twice_and_loses_none(
    tmp_path: Path, catch_up: str
) -> None:
    schedule = EVERY_MINUTE.model_copy(update={"catch_up": catch_up})

    async def go() -> list[dict[str, Any]]:
        sim = Simulation(tmp_path, schedule)
        await sim.start()
        await sim.minutes(30)
        await sim.stop()
        # killed after the 30th tick's run began, before its tick was written down
        state = tmp_path / ".schedules" / "digest.json"
        state.write_text(json.dumps({"last_tick": minute(29)}))
        await sim.start()
        await sim.minutes(30)
        return await sim.finish()

    assert ticks(asyncio.run(go())) == [minute(n) for n in range(1, 61)]


@pytest.mark.parametrize(("catch_up", "extra"), [("skip", []), ("once", [40])])
def test_ticks_missed_while_down_are_skipped_or_run_once(
    tmp_path: Path, catch_up: str, extra: list[int]
) -> None:
    schedule = EVERY_MINUTE.model_copy(update={"catch_up": catch_up})

    async def go() -> list[dict[str, Any]]:
        sim = Simulation(tmp_path, schedule)
        await sim.start()
        await sim.minutes(30)
        await sim.stop()
        sim.clock.advance(timedelta(minutes=10))  # down from 09:30:30 to 09:40:30
        await sim.start()
        await sim.minutes(20)
        return await sim.finish()

    expected = sorted([*range(1, 31), *extra, *range(41, 61)])
    assert ticks(asyncio.run(go())) == [minute(n) for n in expected]


def test_a_schedule_ticks_in_its_time_zone(tmp_path: Path) -> None:
    nightly = ScheduleConfig(
        cron="0 2 * * *", workflow="hello-world.json", timezone="Europe/Berlin"
    )
    scheduler = Scheduler(
        "nightly", nightly, clock=ManualClock(START), state_dir=tmp_path, fire=_never
    )
    summer = scheduler.next_tick(datetime(2026, 7, 1, 12, tzinfo=UTC))
    winter = scheduler.next_tick(datetime(2026, 12, 1, 12, tzinfo=UTC))
    assert summer.astimezone(UTC) == datetime(2026, 7, 2, 0, tzinfo=UTC)
    assert winter.astimezone(UTC) == datetime(2026, 12, 2, 1, tzinfo=UTC)
    assert tick_run_id("nightly", winter) == tick_run_id("nightly", winter.astimezone(UTC))


def test_a_cron_expression_that_is_not_one_is_refused(tmp_path: Path) -> None:
    bad = ScheduleConfig(cron="every minute", workflow="hello-world.json")
    with pytest.raises(LatticeUserError, match=r"schedules\.bad\.cron"):
        Scheduler("bad", bad, clock=ManualClock(START), state_dir=tmp_path, fire=_never)


async def _never(name: str, schedule: ScheduleConfig, tick: datetime, run_id: str) -> None:
    raise AssertionError("no tick is due")


def test_lattice_serve_starts_the_ticks_of_its_schedules(tmp_path: Path) -> None:
    clock = ManualClock(START)
    config = LatticeConfig.model_validate(
        {
            "runs": {"durability": "os"},
            "schedules": {
                "digest": {
                    "cron": "*/5 * * * *",
                    "workflow": "hello-world.json",
                    "inputs": {"name": "Ada"},
                }
            },
        }
    )
    settings = ServerSettings(
        runs_dir=tmp_path, workflows_dir=EXAMPLES, config=config, mocks=True, clock=clock
    )

    def idle() -> None:
        while clock.sleeping() == 0:
            time.sleep(0.005)

    with serve_in_thread(settings) as url:
        idle()
        for _ in range(15):
            clock.advance(timedelta(minutes=1))
            idle()
        for _ in range(2000):
            runs = httpx.get(f"{url}/v1/runs").json()["runs"]
            if len(runs) == 3 and all(run["status"] == "completed" for run in runs):
                break
            time.sleep(0.01)
    assert sorted(run["started_by"]["tick"] for run in runs) == [minute(5), minute(10), minute(15)]
    assert (tmp_path / ".schedules" / "digest.json").is_file()

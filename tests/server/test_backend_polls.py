"""Watchers of a run on a ``RunBackend`` (``lattice serve --engine temporal``) share one
poller: the backend is asked for a run's new events once per poll, not once per watcher.

The backend here is a list of events in memory; the name of the asyncio task that asks
it for events tells the polls from a watcher's own first question."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from lattice.server.app import ServerSettings
from lattice.server.in_thread import serve_in_thread
from lattice.server.polls import PollEnded, RunPolls
from lattice.service.backend import (
    NewRun,
    RunBackend,
    RunEvents,
    RunNotFound,
    RunPage,
    RunRecord,
    RunView,
)
from tests.server.helpers import TIMEOUT, read_sse

WATCHERS = 3


def event(seq: int) -> dict[str, Any]:
    return {"seq": seq, "ts": "2026-11-26T18:00:00Z", "run_id": "r1", "type": "op_started"}


class ListedRuns(RunBackend):
    """One run, ``r1``, whose events and status the test sets; it notes which task asks."""

    name = "listed"

    def __init__(self) -> None:
        self.listed: list[dict[str, Any]] = [event(1)]
        self.status = "running"
        self.askers: list[str] = []
        self.lock = threading.Lock()

    def where(self) -> str:
        return "a list"

    async def events(self, run_id: str, after: int) -> RunEvents:  # type: ignore[override]
        if run_id != "r1":
            raise RunNotFound(run_id)
        task = asyncio.current_task()
        with self.lock:
            self.askers.append(f"{id(task)} {task.get_name() if task else ''}")
            return RunEvents([e for e in self.listed if e["seq"] > after], self.status)

    def finish(self, *seqs: int) -> None:
        with self.lock:
            self.listed += [event(seq) for seq in seqs]
            self.status = "completed"

    async def start(self, run: NewRun) -> None:
        raise NotImplementedError

    async def describe(self, run_id: str) -> RunView:
        raise NotImplementedError

    async def list_runs(
        self, *, status: str | None, workflow: str | None, limit: int, before: str | None
    ) -> RunPage:
        raise NotImplementedError

    async def record(self, run_id: str) -> RunRecord:
        raise NotImplementedError

    async def answer(self, run_id: str, answers: dict[str, Any]) -> None:
        raise NotImplementedError

    async def cancel(self, run_id: str) -> None:
        raise NotImplementedError


def watch(url: str, first_seen: threading.Barrier) -> tuple[list[int], str]:
    """Follow r1's events from the start; wait at ``first_seen`` once the first came."""
    seqs: list[int] = []
    with (
        httpx.Client(base_url=url, timeout=TIMEOUT) as client,
        client.stream("GET", "/v1/runs/r1/events") as response,
    ):
        assert response.status_code == 200, response.read()
        for message in read_sse(response):
            if message.event == "end":
                return seqs, message.data["status"]
            seqs.append(message.data["seq"])
            if len(seqs) == 1:
                first_seen.wait(TIMEOUT)
    raise AssertionError("the stream closed without an end message")


def test_watchers_of_one_run_share_its_polls(tmp_path: Path) -> None:
    backend = ListedRuns()
    settings = ServerSettings(runs_dir=tmp_path / "runs", backend=backend)
    # the run goes on once every watcher has its first event (and so polls, or waits)
    first_seen = threading.Barrier(WATCHERS + 1)
    with serve_in_thread(settings) as url, ThreadPoolExecutor(WATCHERS) as pool:
        watchers = [pool.submit(watch, url, first_seen) for _ in range(WATCHERS)]
        first_seen.wait(TIMEOUT)
        backend.finish(2, 3)
        followed = [w.result(TIMEOUT) for w in watchers]
    assert followed == [([1, 2, 3], "completed")] * WATCHERS
    polled = [asker for asker in backend.askers if asker.endswith("events of run r1")]
    # each watcher asked once, for the events after its Last-Event-ID; the run's poller
    # asked the rest (a watcher polling on its own asks at least twice)
    assert len(backend.askers) - len(polled) == WATCHERS, backend.askers
    assert polled


def test_a_watcher_behind_the_poller_asks_for_what_it_missed() -> None:
    backend = ListedRuns()

    async def scenario() -> tuple[RunEvents | None, RunEvents | None, list[str]]:
        polls = RunPolls(backend, seconds=0)
        async with polls.watch("r1", 1) as poll, polls.watch("r1", 1) as same:
            assert poll is same and list(polls.polls) == ["r1"]
            backend.finish(2, 3)
            caught_up = await poll.next(1, TIMEOUT)
            asked_before = list(backend.askers)
            behind = await poll.next(0, TIMEOUT)  # a watcher that never saw event 1
        assert polls.polls == {}, "the poller stops with its last watcher"
        return caught_up, behind, backend.askers[len(asked_before) :]

    caught_up, behind, asked_after = asyncio.run(scenario())
    assert caught_up == RunEvents([event(2), event(3)], "completed")
    assert behind == RunEvents([event(1), event(2), event(3)], "completed")
    assert len(asked_after) == 1, "the watcher behind asked for the events it missed"


def test_a_run_the_backend_no_longer_knows_ends_its_watchers() -> None:
    backend = ListedRuns()

    async def scenario() -> None:
        polls = RunPolls(backend, seconds=0)
        async with polls.watch("gone", 0) as poll:
            with pytest.raises(PollEnded):
                await poll.next(0, TIMEOUT)

    asyncio.run(scenario())

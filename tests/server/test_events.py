"""The event stream of a run this server runs: what its channel holds, what its folder
holds, and what a watcher gets from them."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from pathlib import Path
from typing import Any

import pytest

from lattice.server import events
from lattice.server.events import KEEP, EventChannel, FolderTails, stream
from lattice.server.manager import DeltaRelay
from lattice.server.store import LoopRecorder
from tests.server.helpers import TIMEOUT


def event(seq: int) -> dict[str, Any]:
    return {"seq": seq, "ts": "2026-01-01T00:00:00.000Z", "run_id": "r", "type": "tick", "data": {}}


def ids(chunk: bytes) -> list[int]:
    """The ids of the SSE messages in ``chunk``."""
    return [int(n) for n in re.findall(rb"^id: (\d+)$", chunk, re.MULTILINE)]


def test_a_watcher_gets_every_event_of_a_long_stretch_exactly_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run emits more than the channel keeps (KEEP) without yielding the loop, while a
    watcher that came back with ``Last-Event-ID: 5`` reads ``events.jsonl`` for what the
    channel no longer holds (the recorder appends to the file when the run yields: here
    only after that read). The watcher still gets every event after 5, once, in order."""
    read_done = threading.Event()
    real_read = events.read_events

    def read_events(folder: Path, after: int) -> list[tuple[int, str]]:
        try:
            return real_read(folder, after)
        finally:
            read_done.set()

    monkeypatch.setattr(events, "read_events", read_events)
    stretch = KEEP + 76

    async def go() -> list[int]:
        loop = asyncio.get_running_loop()
        channel = EventChannel("r")
        recorder = LoopRecorder(tmp_path / "r", durability="os", on_line=channel.add)
        for seq in range(1, 6):
            recorder.append_event(event(seq))
        await asyncio.sleep(0)  # the recorder appends them to the file
        tails = FolderTails(status=lambda run_id: "running")
        watcher = stream(tmp_path / "r", 5, channel=lambda: channel, tails=tails)
        # The loop goes on only once the watcher has read the file, as when that read
        # wins the race with the recorder's append.
        loop.call_soon(read_done.wait, TIMEOUT)
        for seq in range(6, 6 + stretch):
            recorder.append_event(event(seq))
        chunk = await anext(watcher)  # in this task: its read starts before the loop goes on
        read_done.set()
        seen = ids(chunk)
        while seen[-1] < 5 + stretch:
            seen.extend(ids(await asyncio.wait_for(anext(watcher), TIMEOUT)))
        await watcher.aclose()
        recorder.close()
        return seen

    assert asyncio.run(go()) == list(range(6, 6 + stretch))


def test_a_run_of_another_process_is_followed_while_it_has_watchers(tmp_path: Path) -> None:
    """Watchers of a run another process runs share one reader of its folder, which
    stops when the last of them leaves."""
    folder = tmp_path / "r"
    folder.mkdir()
    (folder / "events.jsonl").write_text("".join(json.dumps(event(s)) + "\n" for s in (1, 2)))

    def following() -> list[str]:
        return [t.get_name() for t in asyncio.all_tasks() if t.get_name().startswith("follow")]

    async def go() -> None:
        tails = FolderTails(status=lambda run_id: "running")
        watchers = [stream(folder, 0, channel=lambda: None, tails=tails) for _ in range(3)]
        for watcher in watchers:
            assert ids(await anext(watcher)) == [1, 2]
        assert tails.followed == [folder] and following() == ["follow r"]
        for watcher in watchers[:2]:
            await watcher.aclose()
        assert tails.followed == [folder]
        await watchers[2].aclose()
        await asyncio.sleep(0)  # the reader's task takes its cancellation
        assert tails.followed == [] and following() == []

    asyncio.run(go())


def delta_line(after: int, text: str) -> str:
    return json.dumps(
        {"seq": after, "run_id": "r", "type": "llm_delta", "data": {"attempt": 1, "text": text}}
    )


def test_deltas_go_in_their_place_and_a_slow_watcher_loses_only_deltas(tmp_path: Path) -> None:
    """Deltas follow the recorded event they came after. A watcher that does not read
    while many deltas arrive gets at most MAX_PENDING_DELTAS of them and a gap message
    saying how many were dropped, and every recorded event still; the run never waits."""

    async def go() -> tuple[bytes, list[int]]:
        channel = EventChannel("r")
        tails = FolderTails(status=lambda run_id: "running")
        watcher = stream(tmp_path, 0, channel=lambda: channel, tails=tails, deltas=True)
        channel.add(1, json.dumps(event(1)))
        first = await anext(watcher)
        assert ids(first) == [1]
        channel.add_delta(1, delta_line(1, "early"))
        channel.add(2, json.dumps(event(2)))
        for n in range(events.MAX_PENDING_DELTAS + 40):
            channel.add_delta(2, delta_line(2, f"piece {n}"))
        channel.add(3, json.dumps(event(3)))
        channel.close("completed")
        received = b""
        async for chunk in watcher:
            received += chunk
        return received, ids(received)

    received, seen = asyncio.run(go())
    assert seen == [2, 3]
    text = received.decode()
    early, second = text.index('"early"'), text.index("id: 2\n")
    assert early < second < text.index("event: llm_delta_gap") < text.index("id: 3\n")
    kept = re.findall(r'"piece (\d+)"', text)
    assert kept == [str(n) for n in range(events.MAX_PENDING_DELTAS - 1)]
    assert '{"dropped": 41}' in text
    assert text.endswith('event: end\ndata: {"status": "completed"}\n\n')


def _delta(text: str, *, seq: int = 3, op: str = "o1") -> dict[str, Any]:
    return {"type": "llm_delta", "seq": seq, "op_id": op, "data": {"attempt": 1, "text": text}}


def test_a_watcher_who_comes_mid_answer_gets_no_tail_of_a_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    secret = "sk-live-ABCDEFGHIJKLMNOP"
    monkeypatch.setenv("LATTICE_RELAY_SECRET", secret)

    async def scenario() -> str:
        channel = EventChannel("r1")
        relay = DeltaRelay(channel, ("LATTICE_RELAY_SECRET",))
        relay(_delta("the key is sk-live-ABC"))  # nobody takes deltas yet
        feed = channel.watch_deltas()  # one comes (?deltas=1) mid-answer
        relay(_delta("DEFGHIJKLMNOP and then a long tail of ordinary answer text" + " ..." * 20))
        return feed.take(3).decode()

    sent = asyncio.run(scenario())
    assert "and then a long tail" in sent
    assert "DEFGHIJKLMNOP" not in sent and "***" in sent


def test_a_new_call_in_a_lane_starts_its_answer_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the masker held back of an answer (it might begin a secret) is not put in
    front of the next answer of the same op (a loop's next visit, a second call)."""
    monkeypatch.setenv("LATTICE_RELAY_SECRET", "sk-live-ABCDEFGHIJKLMNOP")

    async def scenario() -> str:
        channel = EventChannel("r1")
        relay = DeltaRelay(channel, ("LATTICE_RELAY_SECRET",))
        feed = channel.watch_deltas()
        relay(_delta("first visit answer: RED"))
        relay({"type": "llm_request", "seq": 4, "op_id": "o1", "data": {"attempt": 1}})
        long_enough = "second visit answer, long enough to pass on past what is held back"
        relay(_delta(long_enough + " ..." * 20, seq=4))
        return feed.take(3).decode() + feed.take(4).decode()

    sent = asyncio.run(scenario())
    assert "second visit answer" in sent
    assert "REDsecond" not in sent and "answer: RED" not in sent

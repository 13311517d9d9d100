"""A run's events as Server-Sent Events.

Each SSE message is one event of the run's ``events.jsonl`` (the same JSON object, masked
the same way) with its sequence number as the message id::

    id: 7
    data: {"seq":7,"ts":"…","run_id":"…","type":"op_finished",…}

A client that reconnects with ``Last-Event-ID: 7`` (or ``?last_event_id=7``) gets the
events after 7, then the live ones. When the run stops (completed, failed, halted,
interrupted) the stream ends with ``event: end`` and ``data: {"status": "…"}``.

Cost: a run this server is running has one ``EventChannel``, fed by the run's recorder
with each event's line as it is written (serialised and masked once, for the file and
every watcher alike), which keeps the recent ones in memory; any number of watchers read
from it and sleep on one ``asyncio.Event`` between events. The folder's
``events.jsonl`` is read only to replay what the channel no longer (or never) held: a
watcher that starts late, a finished run.

A run of another process (a ``lattice run`` in progress) is followed from its folder by
one ``FolderTail`` for all its watchers: every ``POLL_SECONDS`` it reads what was
appended to ``events.jsonl`` since its last read and feeds a channel of its own, until
the run stops or its last watcher leaves.

Live answers: a watcher that asks for deltas (``?deltas=1``) of a run this server runs
also gets its ``llm_delta`` events, the pieces of model answers as they arrive, as
messages of their own without an id (``event: llm_delta``), in their place among the
recorded events. They are never recorded, so a reconnecting watcher does not get them
again. Each such watcher has a ``DeltaFeed``: at most ``MAX_PENDING_DELTAS`` of them
wait for it, and further ones are dropped (an ``event: llm_delta_gap`` message then says
how many) rather than held for a watcher that does not keep up.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from lattice.runs.journal import read_lines
from lattice.runs.redaction import Redactor
from lattice.server.errors import ApiError

log = logging.getLogger("lattice.server")

KEEP = 1024
"""Events a channel keeps in memory (at most twice this many between trims)."""
PING_SECONDS = 15.0
"""A comment line is sent after this long without an event (keeps proxies from closing)."""
POLL_SECONDS = 0.25
"""How often a run of another process is looked at for new events."""
MAX_PENDING_DELTAS = 256
"""Deltas that may wait for one watcher; more are dropped until it catches up."""


def event_line(event: dict[str, Any]) -> str:
    """An event as ``events.jsonl`` holds it (before masking)."""
    return json.dumps(event, ensure_ascii=False, separators=(",", ":"), default=str)


class DeltaFeed:
    """The deltas waiting for one watcher: ``(after, message)`` pairs, ``after`` being the
    seq of the last recorded event before the delta (the delta goes after it), and how
    many were dropped since the watcher last took them."""

    __slots__ = ("_ready", "dropped", "items")

    def __init__(self) -> None:
        self.items: deque[tuple[int, bytes]] = deque()
        self.dropped = 0
        self._ready = asyncio.Event()

    def put(self, after: int, message: bytes) -> None:
        if len(self.items) >= MAX_PENDING_DELTAS:
            self.dropped += 1
        else:
            self.items.append((after, message))
        self._ready.set()

    def take(self, cursor: int) -> bytes:
        """The messages of the deltas that go right after event ``cursor`` (those before
        it are dropped: what they were pieces of has been sent), then, once all the
        kept ones are taken, the gap of those dropped after them."""
        items = self.items
        parts: list[bytes] = []
        while items and items[0][0] <= cursor:
            after, message = items.popleft()
            if after == cursor:
                parts.append(message)
        if self.dropped and not items:
            parts.append(gap_message(self.dropped))
            self.dropped = 0
        return b"".join(parts)

    def next_after(self) -> int | None:
        """After which recorded event the next waiting delta goes (None: none waits)."""
        return self.items[0][0] if self.items else None

    def wake(self) -> None:
        self._ready.set()

    async def wait(self) -> None:
        await self._ready.wait()
        self._ready.clear()


class EventChannel:
    """The live events of one run this server is running: fed by its recorder with each
    event's line as ``events.jsonl`` gets it, it keeps ``(seq, line, emitted at)`` and
    wakes the watchers.

    Watchers mostly stand at the same place (the last event), so the SSE bytes of what
    follows a place are built once per wake-up and shared (``batch``). One timer per
    channel wakes the watchers for a keep-alive comment after ``PING_SECONDS`` of quiet.
    """

    __slots__ = (
        "_batches",
        "_changed",
        "_feeds",
        "_first",
        "_items",
        "_pinger",
        "begun",
        "pinged",
        "run_id",
        "status",
    )

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self._items: list[tuple[int, str, float]] = []
        self._first = 0
        """Index in ``_items`` of the oldest event still kept."""
        self._changed = asyncio.Event()
        self._batches: dict[tuple[int, bool], tuple[bytes, int]] = {}
        self._pinger: asyncio.TimerHandle | None = None
        self._feeds: list[DeltaFeed] = []
        self.pinged = 0
        """How many keep-alive wake-ups there have been."""
        self.status: str | None = None
        """The run's status once it has stopped (the channel is then closed)."""
        self.begun = asyncio.Event()
        """Set at the run's first event, or when it ended without one (by its manager)."""

    @property
    def started(self) -> bool:
        """Whether the run has emitted its first event."""
        return bool(self._items)

    @property
    def closed(self) -> bool:
        return self.status is not None

    def add(self, seq: int, line: str) -> None:
        """An event of the run, as its line in ``events.jsonl`` (``LoopStore.on_line``)."""
        if not self._items:
            self.begun.set()
        self._items.append((seq, line, time.time()))
        if len(self._items) - self._first > KEEP:
            self._first += 1
            if self._first >= KEEP:
                del self._items[: self._first]
                self._first = 0
        self._wake()

    @property
    def wants_deltas(self) -> bool:
        """Whether a watcher takes the run's deltas."""
        return bool(self._feeds)

    def add_delta(self, after: int, line: str) -> None:
        """A delta of the run (never recorded), as a JSON line, after event ``after``."""
        data = delta_message(line).encode()
        for feed in self._feeds:
            feed.put(after, data)

    def watch_deltas(self) -> DeltaFeed:
        """A feed of the run's deltas for one watcher, until ``unwatch_deltas``."""
        feed = DeltaFeed()
        self._feeds.append(feed)
        return feed

    def unwatch_deltas(self, feed: DeltaFeed) -> None:
        self._feeds.remove(feed)

    def close(self, status: str) -> None:
        """The run stopped: watchers send what is left and end their streams."""
        self.status = status
        self.quiet()
        self._wake()

    def _wake(self) -> None:
        if self._batches:
            self._batches.clear()
        self._wake_all()

    def _ping(self) -> None:
        self.pinged += 1
        self._pinger = asyncio.get_running_loop().call_later(PING_SECONDS, self._ping)
        self._wake_all()

    def _wake_all(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
        for feed in self._feeds:
            feed.wake()

    def since(self, cursor: int) -> list[tuple[int, str, float]] | None:
        """The kept events after ``cursor``; None when some of them are no longer (or not
        yet) kept, so that they must be read from the folder."""
        items, first = self._items, self._first
        if len(items) == first:
            return None
        oldest = items[first][0]
        if cursor + 1 < oldest:
            return None
        if cursor >= items[-1][0]:
            return []
        return items[first + cursor + 1 - oldest :]

    def batch(self, cursor: int, timing: bool) -> tuple[bytes, int] | None:
        """The SSE messages of the kept events after ``cursor`` and the last one's seq
        (``(b"", cursor)`` when there are none yet); None when they must be read from
        the folder."""
        key = (cursor, timing)
        found = self._batches.get(key)
        if found is not None:
            return found
        items = self.since(cursor)
        if items is None:
            return None
        if not items:
            return b"", cursor
        if timing:
            text = "".join(message(seq, line, at) for seq, line, at in items)
        else:
            text = "".join(message(seq, line) for seq, line, _ in items)
        found = self._batches[key] = (text.encode(), items[-1][0])
        return found

    def oldest(self) -> int | None:
        """The sequence number of the oldest event kept (None before the first)."""
        return self._items[self._first][0] if len(self._items) > self._first else None

    def quiet(self) -> None:
        """Nobody follows the channel any more: stop its keep-alive timer."""
        if self._pinger is not None:
            self._pinger.cancel()
            self._pinger = None

    async def changed(self, feed: DeltaFeed | None = None) -> None:
        """Wait for a new event, the end of the run, or a keep-alive wake-up; and for a
        new delta when the watcher has a ``feed``."""
        if self._pinger is None and not self.closed:
            self._pinger = asyncio.get_running_loop().call_later(PING_SECONDS, self._ping)
        if feed is None:
            await self._changed.wait()
        else:
            await feed.wait()

    def through(self, cursor: int, last: int, timing: bool) -> tuple[bytes, int] | None:
        """Like ``batch``, but only the events up to ``last`` (not shared: a watcher
        with deltas waiting sends the events before them first)."""
        items = self.since(cursor)
        if items is None:
            return None
        items = [item for item in items if item[0] <= last]
        if not items:
            return b"", cursor
        text = "".join(message(seq, line, at if timing else None) for seq, line, at in items)
        return text.encode(), items[-1][0]


def resume_cursor(query: int | None, header: str | None) -> int:
    """The seq a stream starts after: the ``Last-Event-ID`` header a reconnecting
    ``EventSource`` sends, else the ``last_event_id`` query parameter, else 0."""
    if header is None:
        return query or 0
    if not header.strip().isdigit():
        raise ApiError(400, "invalid_last_event_id", "Last-Event-ID must be an event's seq")
    return int(header)


def message(seq: int, line: str, emitted: float | None = None) -> str:
    """One SSE message (with ``: emitted <unix time>`` first when timing was asked for)."""
    if emitted is not None:
        return f": emitted {emitted:.6f}\nid: {seq}\ndata: {line}\n\n"
    return f"id: {seq}\ndata: {line}\n\n"


def delta_message(line: str) -> str:
    """The SSE message of a delta: its own event name and no id (deltas are not recorded:
    ``Last-Event-ID`` counts recorded events only)."""
    return f"event: llm_delta\ndata: {line}\n\n"


def gap_message(dropped: int) -> bytes:
    """Says that ``dropped`` deltas were dropped for a watcher that did not keep up."""
    return f'event: llm_delta_gap\ndata: {{"dropped": {dropped}}}\n\n'.encode()


def end_message(status: str) -> str:
    return f'event: end\ndata: {{"status": "{status}"}}\n\n'


def read_events(folder: Path, after: int) -> list[tuple[int, str]]:
    """The events of ``folder/events.jsonl`` after sequence number ``after`` (a torn last
    line, being written or cut by a crash, is left out)."""
    events, _ = read_lines(folder / "events.jsonl")
    return event_lines(events, after)


def event_lines(events: list[dict[str, Any]], after: int) -> list[tuple[int, str]]:
    """``(seq, line)`` of the events after sequence number ``after``."""
    return [
        (seq, event_line(event))
        for event in events
        if isinstance(seq := event.get("seq"), int) and seq > after
    ]


class FolderTail:
    """The events of a run another process runs, read for all of its watchers: one task
    reads, every ``POLL_SECONDS``, the bytes appended to the folder's ``events.jsonl``
    since its last read, and adds their events to ``channel``; it closes the channel
    with the run's status once the run stops (or the server shuts down)."""

    def __init__(
        self,
        folder: Path,
        *,
        status: Callable[[], str],
        closing: Callable[[], bool],
        redact: Redactor | None,
    ) -> None:
        self.channel = EventChannel(folder.name)
        self.watchers = 0
        self._path = folder / "events.jsonl"
        self._offset = 0
        self._seq = 0
        self._status = status
        self._closing = closing
        self._redact = redact or (lambda text: text)
        self._task = asyncio.create_task(self._follow(), name=f"follow {folder.name}")

    def _poll(self) -> tuple[str, list[tuple[int, str]]]:
        """The run's status, then the events appended since the last read (in that order:
        a run that stopped has written all of its events)."""
        state = self._status()
        events, self._offset = read_lines(self._path, self._offset)
        return state, event_lines(events, self._seq)

    async def _follow(self) -> None:
        try:
            while True:
                state, new = await asyncio.to_thread(self._poll)
                for seq, line in new:
                    self.channel.add(seq, self._redact(line))
                    self._seq = seq
                if state != "running" or self._closing():
                    self.channel.close(state)
                    return
                await asyncio.sleep(POLL_SECONDS)
        except Exception:
            log.exception("cannot follow the events of %s", self._path.parent)
            self.channel.close("running")  # the streams end; the run may go on

    def stop(self) -> None:
        """Its last watcher left."""
        self._task.cancel()
        self.channel.quiet()


class FolderTails:
    """The ``FolderTail`` of each run of another process that has watchers."""

    def __init__(
        self,
        *,
        status: Callable[[str], str],
        closing: Callable[[], bool] = lambda: False,
        redact: Redactor | None = None,
    ) -> None:
        self.status = status
        """The status of a run, by its id, as its folder says."""
        self.closing = closing
        """Whether the server is shutting down (followed runs' streams then end)."""
        self._redact = redact
        self._tails: dict[Path, FolderTail] = {}

    def join(self, folder: Path) -> EventChannel:
        """The channel of the run in ``folder``, followed until every ``join`` has had
        its ``leave``."""
        tail = self._tails.get(folder)
        if tail is None or tail.channel.closed:
            tail = self._tails[folder] = FolderTail(
                folder,
                status=lambda: self.status(folder.name),
                closing=self.closing,
                redact=self._redact,
            )
        tail.watchers += 1
        return tail.channel

    def leave(self, folder: Path, channel: EventChannel) -> None:
        """A watcher of ``channel`` (from ``join``) has gone."""
        tail = self._tails.get(folder)
        if tail is None or tail.channel is not channel:
            return  # a tail that stopped with its run, replaced since
        tail.watchers -= 1
        if tail.watchers == 0:
            tail.stop()
            del self._tails[folder]

    @property
    def followed(self) -> list[Path]:
        """The folders being followed."""
        return list(self._tails)


PING = b": ping\n\n"


async def stream(  # noqa: C901
    folder: Path,
    cursor: int,
    *,
    channel: Callable[[], EventChannel | None],
    tails: FolderTails,
    timing: bool = False,
    redact: Redactor | None = None,
    deltas: bool = False,
) -> AsyncIterator[bytes]:
    """The SSE messages of a run after event ``cursor``, until the run stops.

    ``channel()`` is the run's live channel while this server runs it; a run it does not
    run is followed through ``tails`` while another process runs it; ``redact`` masks
    what is replayed from the folder (which its run masked already, with its own
    settings). With ``deltas``, the deltas of a run this server runs come too, each
    after the recorded event it followed."""
    followed: EventChannel | None = None
    live: EventChannel | None = None
    feed: DeltaFeed | None = None
    try:
        live = channel()
        if live is None:
            state = await asyncio.to_thread(tails.status, folder.name)
            live = channel()  # it may have started here meanwhile
            if live is None and (state != "running" or tails.closing()):
                replay = await asyncio.to_thread(read_events, folder, cursor)
                text = "".join(message(seq, line) for seq, line in replay)
                if redact is not None:
                    text = redact(text)
                yield (text + end_message(state)).encode()
                return
            if live is None:
                live = followed = tails.join(folder)  # a run of another process
        if deltas and followed is None:
            feed = live.watch_deltas()
        while True:
            upto = None
            if feed is not None:
                due = feed.take(cursor)
                if due:
                    yield due
                    continue
                upto = feed.next_after()
            batch = (
                live.batch(cursor, timing) if upto is None else live.through(cursor, upto, timing)
            )
            if batch is None:
                # What the channel does not hold comes from the folder: the events before
                # the watcher came.
                replay = await asyncio.to_thread(read_events, folder, cursor)
                if replay:
                    text = "".join(message(seq, line) for seq, line in replay)
                    yield (redact(text) if redact is not None else text).encode()
                    cursor = replay[-1][0]
                    continue
                batch = live.batch(cursor, timing)
                if batch is None:
                    oldest = live.oldest()
                    if oldest is not None and not live.closed:
                        cursor = oldest - 1  # cut from the file meanwhile: go on from the channel
                        continue
                    batch = b"", cursor
            data, through = batch
            if data:
                yield data
                cursor = through
                continue
            if live.status is not None:
                yield end_message(live.status).encode()
                return
            pinged = live.pinged
            await live.changed(feed)
            if live.pinged != pinged and live.batch(cursor, timing) == (b"", cursor):
                yield PING
    finally:
        if feed is not None and live is not None:
            live.unwatch_deltas(feed)
        if followed is not None:
            tails.leave(folder, followed)

"""A run's event log, kept compact while nobody reads it.

An event (docs/runs.md) is ``{"seq", "ts", "run_id", "type", "op_id"?, "node_id"?,
"data"}``. A run that writes a folder or has listeners builds each dict as it is
emitted; a run kept in memory with no listener (library use, tests, benchmarks)
stores ``seq, time, type, op_id, node_id, n`` and then the ``n`` keys and the ``n``
values of ``data`` as consecutive items of one flat list instead, and builds the
dicts when ``RunResult.events`` is first read. That saves a seven-key dict and a
timestamp format per event (about a tenth of a short run's cost), and keeps no
object per event while the run goes on: each event's ``data`` dict is freed as soon
as it is emitted, so a run's events add nothing to the allocations that set off the
cycle collector's passes (with a thousand runs in flight they were a third of
them); what a reader sees is the same.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import Any, overload

Event = dict[str, Any]
FIELDS = 6
"""Fixed items per event in ``EventLog.flat``: seq, time (or None), type, op_id, node_id,
and the number of ``data``'s keys (or the event, when it was built already); the keys
and then the values of ``data`` follow."""


class _UtcClock:
    """Formats POSIX times as ``2026-11-22T10:15:00.123Z``, each millisecond once.

    The cache is one tuple, replaced whole, so threads sharing the clock never mix the
    text of one second or millisecond with another."""

    __slots__ = ("last_millis", "last_second")

    def __init__(self) -> None:
        self.last_second: tuple[int, str] = (-1, "")
        self.last_millis: tuple[int, str] = (-1, "")

    def format(self, seconds: float) -> str:
        millis = int(seconds * 1000)
        cached_millis, text = self.last_millis
        if millis == cached_millis:
            return text
        second = millis // 1000
        cached_second, second_text = self.last_second
        if second != cached_second:
            second_text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            self.last_second = (second, second_text)
        text = f"{second_text}.{millis % 1000:03d}Z"
        self.last_millis = (millis, text)
        return text

    def now(self) -> str:
        return self.format(time.time())


_CLOCK = _UtcClock()
utc_now = _CLOCK.now
"""The current UTC time for events and records (millisecond precision)."""
format_utc = _CLOCK.format
"""``time.time()`` seconds as an event timestamp."""


def make_event(
    seq: int,
    ts: str,
    run_id: str,
    type_: str,
    op_id: str | None,
    node_id: str | None,
    data: dict[str, Any],
) -> Event:
    """One event dict; ``op_id``/``node_id`` only for events that belong to an op."""
    if op_id is None:
        return {"seq": seq, "ts": ts, "run_id": run_id, "type": type_, "data": data}
    return {
        "seq": seq,
        "ts": ts,
        "run_id": run_id,
        "type": type_,
        "op_id": op_id,
        "node_id": node_id,
        "data": data,
    }


class EventLog:
    """The events of one run in emission order, in ``flat`` (the layout is ``FIELDS``'s).

    ``add`` keeps the fields of an event not yet built; ``add_built`` keeps an event
    dict already handed to listeners (its time slot is None).
    """

    __slots__ = ("flat", "run_id")

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.flat: list[Any] = []

    def __len__(self) -> int:
        return sum(1 for _ in self._entries())

    def __reduce__(self) -> tuple[Any, ...]:
        return (_restore_log, (self.run_id, self.flat))

    def add(
        self,
        seq: int,
        when: float,
        type_: str,
        op_id: str | None,
        node_id: str | None,
        data: dict[str, Any],
    ) -> None:
        """Keep an event to build later (``RunContext.emit`` inlines this)."""
        self.flat.extend((seq, when, type_, op_id, node_id, len(data), *data, *data.values()))

    def add_built(self, event: Event) -> None:
        self.flat.extend((event["seq"], None, None, None, None, event))

    def _entries(self) -> Iterator[tuple[int, int]]:
        """Where each event's fixed items start in ``flat``, and how many keys its data has
        (-1: a built event)."""
        flat, at, end = self.flat, 0, len(self.flat)
        while at < end:
            if flat[at + 1] is None:
                yield at, -1
                at += FIELDS
            else:
                keys = flat[at + FIELDS - 1]
                yield at, keys
                at += FIELDS + 2 * keys

    def to_list(self) -> list[Event]:
        """Every event as a dict."""
        flat, run_id = self.flat, self.run_id
        events = []
        for at, keys in self._entries():
            if keys < 0:
                events.append(flat[at + FIELDS - 1])
                continue
            seq, when, type_, op_id, node_id = flat[at : at + FIELDS - 1]
            start = at + FIELDS
            data = dict(
                zip(flat[start : start + keys], flat[start + keys : start + 2 * keys], strict=True)
            )
            events.append(make_event(seq, format_utc(when), run_id, type_, op_id, node_id, data))
        return events


def _restore_log(run_id: str, flat: list[Any]) -> EventLog:
    log = EventLog(run_id)
    log.flat = flat
    return log


class EventsField:
    """``RunResult.events``: a list of event dicts, expanded from an EventLog on first read.

    A dataclass field whose default is this descriptor (see "descriptor-typed fields"
    in the dataclasses documentation); it accepts a list, any iterable of events,
    None or an EventLog, and stores ``[]`` when none is given.
    """

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        self.slot = "_" + name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> EventsField: ...

    @overload
    def __get__(self, obj: object, owner: type | None = None) -> list[Event]: ...

    def __get__(self, obj: object | None, owner: type | None = None) -> Any:
        if obj is None:
            return self
        stored = obj.__dict__
        value = stored.get(self.slot, stored.get(self.name))  # ``events``: an older pickle
        if value is None:
            raise AttributeError(self.name)
        if isinstance(value, EventLog):
            value = stored[self.slot] = value.to_list()
        return value

    def __set__(
        self, obj: object, value: list[Event] | EventLog | Iterable[Event] | EventsField | None
    ) -> None:
        if value is None or isinstance(value, EventsField):  # the dataclass passes us as default
            value = []
        elif not isinstance(value, (list, EventLog)):
            value = list(value)
        obj.__dict__[self.slot] = value

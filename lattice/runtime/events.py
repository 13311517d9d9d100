"""A run's event log, kept compact while nobody reads it.

An event (DESIGN.md §7) is ``{"seq", "ts", "run_id", "type", "op_id"?, "node_id"?,
"data"}``. A run that writes a folder or has listeners builds each dict as it is
emitted; a run kept in memory with no listener (library use, tests, benchmarks)
stores ``seq, time, type, op_id, node_id, data`` as six consecutive items of one
flat list instead and builds the dicts when ``RunResult.events`` is first read.
That saves a seven-key dict and a timestamp format per event (about a tenth of a
short run's cost), and leaves the cycle collector one list to walk per run rather
than an object per event (most ``data`` dicts hold only strings and numbers, which
CPython does not track); what a reader sees is the same.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

Event = dict[str, Any]
FIELDS = 6
"""Items per event in ``EventLog.flat``: seq, time (or None), type, op_id, node_id, data (or the event)."""


class _UtcClock:
    """Formats POSIX times as ``2026-11-22T10:15:00.123Z``, each millisecond once."""

    __slots__ = ("millis", "second", "second_text", "text")

    def __init__(self) -> None:
        self.second = self.millis = -1
        self.second_text = self.text = ""

    def format(self, seconds: float) -> str:
        millis = int(seconds * 1000)
        if millis != self.millis:
            second = millis // 1000
            if second != self.second:
                self.second = second
                self.second_text = dt.datetime.fromtimestamp(second, dt.UTC).strftime(
                    "%Y-%m-%dT%H:%M:%S"
                )
            self.millis = millis
            self.text = f"{self.second_text}.{millis % 1000:03d}Z"
        return self.text

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
    """The events of one run in emission order, six items each in ``flat``.

    ``add`` keeps the fields of an event not yet built; ``add_built`` keeps an event
    dict already handed to listeners (its time slot is None).
    """

    __slots__ = ("run_id", "flat")

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.flat: list[Any] = []

    def __len__(self) -> int:
        return len(self.flat) // FIELDS

    def add(
        self,
        seq: int,
        when: float,
        type_: str,
        op_id: str | None,
        node_id: str | None,
        data: dict[str, Any],
    ) -> None:
        """Keep an event to build later (``RunContext.emit`` inlines this as ``flat.extend``)."""
        self.flat.extend((seq, when, type_, op_id, node_id, data))

    def add_built(self, event: Event) -> None:
        self.flat.extend((event["seq"], None, None, None, None, event))

    def to_list(self) -> list[Event]:
        """Every event as a dict."""
        flat, run_id = self.flat, self.run_id
        events = []
        for i in range(0, len(flat), FIELDS):
            seq, when, type_, op_id, node_id, data = flat[i : i + FIELDS]
            if when is None:
                events.append(data)
            else:
                events.append(make_event(seq, format_utc(when), run_id, type_, op_id, node_id, data))
        return events


class EventsField:
    """``RunResult.events``: a list of event dicts, expanded from an EventLog on first read.

    A dataclass field whose default is this descriptor (see "descriptor-typed fields"
    in the dataclasses documentation); it accepts a list, any iterable of events or
    an EventLog, and stores ``[]`` when none is given.
    """

    def __set_name__(self, owner: type, name: str) -> None:
        self.slot = "_" + name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        value = obj.__dict__[self.slot]
        if isinstance(value, EventLog):
            value = obj.__dict__[self.slot] = value.to_list()
        return value

    def __set__(self, obj: Any, value: Any) -> None:
        if value is self:  # ``field(default=EventsField())``: the dataclass passes us as the default
            value = []
        obj.__dict__[self.slot] = value if isinstance(value, (list, EventLog)) else list(value)

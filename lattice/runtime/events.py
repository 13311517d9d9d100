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

A model call's ``llm_request`` and ``llm_response`` go into the flat list in a layout of
their own (``REQUEST``, ``RESPONSE``): the values only, with a short request's role and
content texts instead of its prompt hash and preview, which are worked out when the
events are read (a run nobody reads the events of never hashes its prompts).
``count`` answers "how many events of these types" without building any of them.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import Any, overload

from lattice.llm.base import plain_prompt_hash, preview_of

Event = dict[str, Any]
FIELDS = 6
"""Fixed items per event in ``EventLog.flat``: seq, time (or None), type, op_id, node_id,
and the number of ``data``'s keys (the keys and then the values of ``data`` follow), a
``Layout`` (its values follow), or the event itself when it was built already."""
DEFERRED_TEXT_CHARS = 1024
"""The most message text a compact ``llm_request`` keeps to hash later: a longer
request is hashed as it is sent, so a run's compact events never hold long prompts."""


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


class Layout:
    """How the values of a compact event with a fixed shape follow its fixed items."""

    __slots__ = ()

    def width(self, flat: list[Any], start: int) -> int:
        """How many values the event at ``start`` (its first value) has."""
        raise NotImplementedError

    def data(self, flat: list[Any], start: int, hashes: dict[int, str]) -> dict[str, Any]:
        """The event's ``data``; ``hashes`` maps the seq of each ``llm_request`` read so
        far to its prompt hash."""
        raise NotImplementedError


class _Request(Layout):
    """``llm_request``: model, model_class, attempt, kind, request_chars, then either
    ``prompt_hash, preview, None, None, None`` or ``schema_json, temperature, top_p,
    max_tokens, n`` followed by the ``n`` role and content texts of the messages, in turn
    (hashed when read)."""

    __slots__ = ()

    def width(self, flat: list[Any], start: int) -> int:
        return 10 + (flat[start + 9] or 0)

    def data(self, flat: list[Any], start: int, hashes: dict[int, str]) -> dict[str, Any]:
        model, model_class, attempt, kind, request_chars, first, second, top_p, most, n = flat[
            start : start + 10
        ]
        if n is None:
            prompt_hash, preview = first, second
        else:
            texts = flat[start + 10 : start + 10 + n]
            prompt_hash = plain_prompt_hash(texts, model_class, first, second, top_p, most)
            preview = ""
            for i in range(n - 2, -1, -2):
                if texts[i] == "user":
                    preview = preview_of(texts[i + 1])
                    break
        hashes[flat[start - FIELDS]] = prompt_hash
        return {
            "model": model,
            "model_class": model_class,
            "prompt_hash": prompt_hash,
            "attempt": attempt,
            "kind": kind,
            "request_chars": request_chars,
            "prompt_preview": preview,
        }


class _Response(Layout):
    """``llm_response``: the seq of its ``llm_request`` (whose prompt hash it repeats),
    model, model_class, input_tokens, output_tokens, latency (ms, unrounded),
    finish_reason."""

    __slots__ = ()

    def width(self, flat: list[Any], start: int) -> int:
        return 7

    def data(self, flat: list[Any], start: int, hashes: dict[int, str]) -> dict[str, Any]:
        request, model, model_class, tokens_in, tokens_out, latency, finish = flat[
            start : start + 7
        ]
        return {
            "model": model,
            "model_class": model_class,
            "prompt_hash": hashes.get(request),
            "input_tokens": tokens_in,
            "output_tokens": tokens_out,
            "latency_ms": round(latency, 3),
            "finish_reason": finish,
        }


REQUEST = _Request()
RESPONSE = _Response()


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
        """Where each event's fixed items start in ``flat``, and how many items its data
        takes after them (-1: a built event)."""
        flat, at, end = self.flat, 0, len(self.flat)
        while at < end:
            if flat[at + 1] is None:
                yield at, -1
                at += FIELDS
                continue
            shape = flat[at + FIELDS - 1]
            width = 2 * shape if type(shape) is int else shape.width(flat, at + FIELDS)
            yield at, width
            at += FIELDS + width

    def count(self, types: frozenset[str] | set[str]) -> dict[str, int]:
        """How many events of each of ``types`` the log holds (without building them)."""
        counts = dict.fromkeys(types, 0)
        flat = self.flat
        for at, width in self._entries():
            type_ = flat[at + FIELDS - 1]["type"] if width < 0 else flat[at + 2]
            if type_ in counts:
                counts[type_] += 1
        return counts

    def to_list(self) -> list[Event]:
        """Every event as a dict."""
        flat, run_id = self.flat, self.run_id
        events = []
        hashes: dict[int, str] = {}
        for at, width in self._entries():
            if width < 0:
                events.append(flat[at + FIELDS - 1])
                continue
            seq, when, type_, op_id, node_id, shape = flat[at : at + FIELDS]
            start = at + FIELDS
            if type(shape) is int:
                data = dict(
                    zip(
                        flat[start : start + shape],
                        flat[start + shape : start + 2 * shape],
                        strict=True,
                    )
                )
            else:
                data = shape.data(flat, start, hashes)
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

    def count(self, obj: object, types: frozenset[str] | set[str]) -> dict[str, int]:
        """How many of ``obj``'s events are of each of ``types``; a log not read yet
        stays unbuilt."""
        stored = obj.__dict__
        value = stored.get(self.slot, stored.get(self.name))
        if isinstance(value, EventLog):
            return value.count(types)
        counts = dict.fromkeys(types, 0)
        for event in value or ():
            if event["type"] in counts:
                counts[event["type"]] += 1
        return counts

    def __set__(
        self, obj: object, value: list[Event] | EventLog | Iterable[Event] | EventsField | None
    ) -> None:
        if value is None or isinstance(value, EventsField):  # the dataclass passes us as default
            value = []
        elif not isinstance(value, (list, EventLog)):
            value = list(value)
        obj.__dict__[self.slot] = value

"""Events kept compact in memory read the same as events built as they happen."""

from __future__ import annotations

import copy
import dataclasses
import json
import pickle
from pathlib import Path
from typing import Any

from lattice.contracts.usage import Usage
from lattice.llm.mock import MockProvider
from lattice.lower import lower
from lattice.runs.oplog import read_op_records
from lattice.runtime import Runner, RunStore
from lattice.runtime.events import EventLog, format_utc
from lattice.runtime.results import RunResult
from tests.builders import chain, node
from tests.runtime.test_examples import check_events


def _without_times(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {k: v for k, v in e.items() if k not in ("ts", "run_id")}
        | {"data": {k: v for k, v in e["data"].items() if k not in ("duration_ms", "latency_ms")}}
        for e in events
    ]


def _runner(store: RunStore) -> Runner:
    doc = chain(
        node("ask", "prompt", prompt="Say ok"),
        node("again", "prompt", prompt="Say ok again"),
        node("count", "variableStore", operation="increment", name="n", value=1),
    )
    return Runner(lower(doc), provider=MockProvider(default="ok"), store=store)


def test_in_memory_events_equal_listened_and_written_events(tmp_path: Path) -> None:
    compact = _runner(RunStore(None)).run({})
    listened: list[dict[str, Any]] = []
    observed = _runner(RunStore(None))
    observed.subscribe(listened.append)
    eager = observed.run({})
    written = _runner(RunStore(tmp_path)).run({})
    lines = (written.run_dir / "events.jsonl").read_text().splitlines()  # type: ignore[operator]
    for result in (compact, eager, written):
        check_events(result.events, result.run_id)
    assert listened == eager.events
    assert [json.loads(line) for line in lines] == written.events
    assert (
        _without_times(compact.events)
        == _without_times(eager.events)
        == _without_times(written.events)
    )
    assert json.loads(json.dumps(compact.events)) == compact.events


def test_run_result_events_survive_copy_pickle_and_replace() -> None:
    result = _runner(RunStore(None)).run({})
    events = result.events
    assert isinstance(events, list) and result.events is events  # expanded once
    assert pickle.loads(pickle.dumps(result)).events == events
    assert copy.deepcopy(result).events == events
    assert dataclasses.replace(result).events == events
    assert dataclasses.asdict(result)["events"] == events
    empty = RunResult(
        status="completed", output=None, state={}, run_id="r", run_dir=None, usage=Usage()
    )
    assert empty.events == [] and "events" not in repr(empty)


def test_an_event_log_expands_kept_fields_and_keeps_built_events() -> None:
    log = EventLog("r1")
    log.add(1, 1_763_800_000.25, "run_started", None, None, {"x": 1})
    log.add_built({"seq": 2, "ts": "t", "run_id": "r1", "type": "kept", "data": {}})
    log.add(3, 1_763_800_000.5, "op_started", "a", "node-a", {})
    assert len(log) == 3
    first, second, third = log.to_list()
    assert first == {
        "seq": 1,
        "ts": format_utc(1_763_800_000.25),
        "run_id": "r1",
        "type": "run_started",
        "data": {"x": 1},
    }
    assert first["ts"] == "2025-11-22T08:26:40.250Z"
    assert second["type"] == "kept"
    assert third["op_id"] == "a" and third["node_id"] == "node-a" and third["data"] == {}


def test_an_event_log_keeps_no_dict_per_event_and_gives_each_data_back_whole() -> None:
    log = EventLog("r1")
    nested = {"rows": [1, 2], "meta": {"k": None}}
    log.add(1, 1.0, "a", None, None, {"x": 1, "y": "two", "z": nested})
    log.add(2, 2.0, "b", "op", "node", {})
    log.add(3, 3.0, "c", None, None, {"only": None})
    assert not any(isinstance(item, dict) and item is not nested for item in log.flat)
    assert len(log) == 3
    events = log.to_list()
    assert [e["data"] for e in events] == [
        {"x": 1, "y": "two", "z": nested},
        {},
        {"only": None},
    ]
    assert list(events[0]["data"]) == ["x", "y", "z"]  # the order of the keys is kept


def test_a_listener_subscribed_mid_run_sees_later_events_and_the_order_is_kept() -> None:
    runner = _runner(RunStore(None))
    seen: list[dict[str, Any]] = []

    def subscribe_on_first_write(path: str, value: Any) -> None:
        if not runner._event_listeners:
            runner.subscribe(seen.append)

    runner.subscribe_state(subscribe_on_first_write)
    result = runner.run({})
    events = result.events
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert seen and events[-len(seen) :] == seen  # built as emitted, kept in place
    check_events(events, result.run_id)


def test_unread_events_pickle_at_every_protocol() -> None:
    result = _runner(RunStore(None)).run({})
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        fresh = _runner(RunStore(None)).run({})  # events not read yet: still an EventLog
        assert len(pickle.loads(pickle.dumps(fresh, protocol=protocol)).events) == len(
            result.events
        )


def test_a_recorder_that_takes_events_without_a_folder_receives_every_event() -> None:
    from lattice.runs.store import NullRecorder

    class Streaming(NullRecorder):
        takes_events = True

        def __init__(self) -> None:
            self.lines: list[dict[str, Any]] = []

        def append_event(self, event: dict[str, Any]) -> None:
            self.lines.append(event)

    recorder = Streaming()

    class StreamingStore(RunStore):
        def open(self, run_id: str, *, redact: Any = None) -> Streaming:  # type: ignore[override]
            assert run_id  # the store is told the run's id
            return recorder

    result = _runner(StreamingStore(None)).run({})
    assert recorder.lines == result.events and len(result.events) > 10


class _CountingHashlib:
    """Stands in for ``hashlib`` in ``lattice.llm.base``: counts the prompts hashed."""

    def __init__(self) -> None:
        import hashlib

        self.hashed = 0
        self._sha256 = hashlib.sha256

    def sha256(self, data: bytes) -> Any:
        self.hashed += 1
        return self._sha256(data)


SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}


def _model_calls_runner(store: RunStore) -> Runner:
    """Three model calls: a plain one, one with a system part (a schema's template), and
    one whose prompt is too long to keep for hashing later."""
    doc = chain(
        node("plain", "prompt", prompt="Say ok\r\nplease"),
        node("shaped", "prompt", prompt="Judge it", outputSchema=SCHEMA),
        node("long", "prompt", prompt="word " * 400),
    )
    answers = {"plain": ["ok"], "shaped": ['{"ok": true}'], "long": ["ok"]}
    return Runner(lower(doc), provider=MockProvider(answers), store=store)


def test_a_compact_run_hashes_a_short_prompt_only_when_its_events_are_read(
    monkeypatch: Any,
) -> None:
    import lattice.llm.base as base

    counting = _CountingHashlib()
    monkeypatch.setattr(base, "hashlib", counting)
    result = _model_calls_runner(RunStore(None)).run({})
    assert result.status == "completed"
    assert counting.hashed == 1  # the long prompt only, as it was sent
    requests = [e for e in result.events if e["type"] == "llm_request"]
    assert counting.hashed == 3
    assert [len(e["data"]["prompt_hash"]) for e in requests] == [64, 64, 64]


def test_compact_model_call_events_read_as_built_ones(tmp_path: Path) -> None:
    compact = _model_calls_runner(RunStore(None)).run({})
    listened: list[dict[str, Any]] = []
    observed = _model_calls_runner(RunStore(None))
    observed.subscribe(listened.append)
    eager = observed.run({})
    written = _model_calls_runner(RunStore(tmp_path)).run({})
    assert _without_times(compact.events) == _without_times(eager.events)
    assert _without_times(compact.events) == _without_times(written.events)
    calls = [e for e in compact.events if e["type"] in ("llm_request", "llm_response")]
    assert len(calls) == 6
    for request, response in zip(calls[::2], calls[1::2], strict=True):
        assert request["data"]["prompt_hash"] == response["data"]["prompt_hash"]
        assert response["data"]["latency_ms"] == round(response["data"]["latency_ms"], 3)
    assert calls[0]["data"]["prompt_preview"] == "Say ok please"
    # the hashes are the ones the written run's op records hold, request by request
    assert written.run_dir is not None
    records = read_op_records(written.run_dir)
    hashes = [a["prompt_hash"] for r in records for a in r.get("attempts", [])]
    assert hashes == [e["data"]["prompt_hash"] for e in calls[::2]]


def test_counting_events_builds_none_of_them() -> None:
    result = _model_calls_runner(RunStore(None)).run({})
    counts = result.count_events("llm_request", "op_started", "repair_attempt")
    assert counts == {"llm_request": 3, "op_started": 5, "repair_attempt": 0}
    assert isinstance(result.__dict__["_events"], EventLog)  # still unbuilt
    events = result.events
    assert result.count_events("llm_response", "run_finished") == {
        "llm_response": sum(e["type"] == "llm_response" for e in events),
        "run_finished": 1,
    }


def test_counting_a_log_of_compact_and_built_events() -> None:
    runner = _runner(RunStore(None))

    def subscribe_on_first_write(path: str, value: Any) -> None:
        if not runner._event_listeners:
            runner.subscribe(lambda event: None)

    runner.subscribe_state(subscribe_on_first_write)
    result = runner.run({})
    counts = result.count_events("op_started", "llm_request", "state_write", "nothing")
    events = result.events  # built now: the counts agree with them
    assert counts == {
        kind: sum(e["type"] == kind for e in events)
        for kind in ("op_started", "llm_request", "state_write", "nothing")
    }
    assert counts["llm_request"] == 2 and counts["nothing"] == 0


def test_op_durations_are_milliseconds_rounded_to_three_places() -> None:
    """``duration_ms`` is the op's time in ms as ``round(ms, 3)`` gives it (the walk
    rounds whole microseconds, without formatting the float in decimal)."""
    durations = [0.0012345678, 0.25, 3.0000004e-6, 1.9999996e-3, 0.0, 12.3456789]
    ticks: list[float] = []
    for d in durations:
        ticks += [100.0, 100.0 + d]
    doc = chain(
        *(node(f"n{i}", "variableStore", operation="increment", name="n") for i in range(4))
    )
    runner = Runner(lower(doc), store=RunStore(None))
    clock = iter(ticks)
    runner._walker.clock = lambda: next(clock)
    result = runner.run({})
    got = [e["data"]["duration_ms"] for e in result.events if e["type"] == "op_finished"]
    want = [round(((100.0 + d) - 100.0) * 1000, 3) for d in durations]
    assert got == want
    assert [repr(v) for v in got] == [repr(v) for v in want]

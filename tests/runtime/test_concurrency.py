"""One Runner, many concurrent runs: real concurrency and no state shared between runs."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

from lattice.llm.base import LLMRequest, LLMResponse
from lattice.llm.mock import MockProvider
from lattice.lower import lower
from lattice.runtime import Runner, RunResult, RunStore
from lattice.runtime.settings import RuntimeSettings
from tests.builders import chain, conn, node, workflow

RUNS = 50
LLM_OPS = 5
LATENCY = 0.02


def five_prompts() -> dict[str, Any]:
    doc = chain(
        *[
            node(f"p{i}", "prompt", prompt=f"Step {i} for {{{{ $in.who }}}}")
            for i in range(LLM_OPS)
        ],
        node("count", "variableStore", operation="increment", name="n", value="$in.n"),
    )
    doc["nodes"][0]["data"]["inputs"] = {
        "type": "object",
        "properties": {"who": {"type": "string"}, "n": {"type": "integer"}},
        "required": ["who", "n"],
    }
    return doc


class PeakCountingMock(MockProvider):
    """A mock provider that counts how many of its calls were in flight at once."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.in_flight = 0
        self.peak = 0

    async def complete(self, request: LLMRequest) -> LLMResponse:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            return await super().complete(request)
        finally:
            self.in_flight -= 1


async def run_many(runner: Runner) -> list[RunResult]:
    return list(
        await asyncio.gather(*(runner.arun({"who": f"user-{i}", "n": i}) for i in range(RUNS)))
    )


def test_fifty_concurrent_runs_overlap() -> None:
    provider = PeakCountingMock(default="ok", latency=LATENCY)
    runner = Runner(lower(five_prompts()), provider=provider, store=RunStore(None))
    results = asyncio.run(run_many(runner))

    # runs that waited for one another would have one call in flight at a time; a timing
    # bound would say the same less surely on a loaded machine
    assert provider.peak >= RUNS // 2, provider.peak

    assert all(r.status == "completed" for r in results)
    assert len(provider.calls) == RUNS * LLM_OPS
    assert len({r.run_id for r in results}) == RUNS
    for i, result in enumerate(results):
        # each run kept its own state and events
        assert result.state["in"] == {"who": f"user-{i}", "n": i}
        assert result.vars["n"] == i
        assert result.output == i
        assert result.usage.calls == LLM_OPS
        assert {e["run_id"] for e in result.events} == {result.run_id}
        seqs = [e["seq"] for e in result.events]
        assert seqs == list(range(1, len(seqs) + 1))
        assert result.state["ctx"]["run_id"] == result.run_id
    prompts = {r.messages[-1].content.split("\n")[0] for r in provider.calls}
    assert {f"Step 0 for user-{i}" for i in range(RUNS)} <= prompts


def test_concurrent_runs_do_not_share_answers_or_listeners() -> None:
    doc = workflow(
        [
            node("start", "start"),
            node(
                "q",
                "askUserQuestion",
                questionText="Pick",
                options=[{"label": "A"}, {"label": "B"}],
            ),
            node("end", "end"),
        ],
        [conn("start", "q"), conn("q", "end", "branch-0"), conn("q", "end", "branch-1")],
    )
    runner = Runner(lower(doc), provider=MockProvider(), store=RunStore(None), answers={"q": ["A"]})
    events: list[dict[str, Any]] = []
    runner.subscribe(events.append)

    async def both() -> list[RunResult]:
        return list(await asyncio.gather(runner.arun(), runner.arun(), runner.arun()))

    results = asyncio.run(both())
    # a list answer is a queue *per run*: every run gets its own copy
    assert [r.status for r in results] == ["completed"] * 3
    assert [r.output for r in results] == [{"label": "A", "index": 0}] * 3
    assert runner.answers == {"q": ["A"]}
    assert len(events) == sum(len(r.events) for r in results)


def test_sync_run_is_repeatable_on_one_runner() -> None:
    runner = Runner(
        lower(five_prompts()), provider=MockProvider(default="ok"), store=RunStore(None)
    )
    first = runner.run({"who": "a", "n": 1})
    second = runner.run({"who": "b", "n": 2})
    assert (first.output, second.output) == (1, 2)
    assert first.run_id != second.run_id


def test_gc_pacing_holds_while_runs_are_active_and_restores_after() -> None:
    import gc

    from lattice.runtime.gc_pacing import (
        OLDEST_GENERATION_THRESHOLD,
        YOUNG_GENERATION_THRESHOLD,
        active_runs,
    )

    before = gc.get_threshold()
    seen: list[tuple[int, tuple[int, int, int]]] = []
    ir = lower(five_prompts())
    runner = Runner(ir, provider=MockProvider(default="ok", latency=0.005), store=RunStore(None))
    runner.subscribe(
        lambda event: (
            event["type"] != "run_started"  # pacing covers the walk
            and seen.append((active_runs(), gc.get_threshold()))
        )
    )

    async def both() -> list[RunResult]:
        return list(
            await asyncio.gather(
                runner.arun({"who": "a", "n": 1}), runner.arun({"who": "b", "n": 2})
            )
        )

    results = asyncio.run(both())
    assert [r.status for r in results] == ["completed", "completed"]
    assert max(active for active, _ in seen) == 2  # the two runs overlapped
    paced = (
        max(before[0], YOUNG_GENERATION_THRESHOLD),
        before[1],
        max(before[2], OLDEST_GENERATION_THRESHOLD),
    )
    assert all(t == paced for _, t in seen)
    assert gc.get_threshold() == before and active_runs() == 0


def test_gc_pacing_keeps_collection_off_and_leaves_changed_thresholds_alone() -> None:
    import gc

    before = gc.get_threshold()
    runner = Runner(
        lower(five_prompts()), provider=MockProvider(default="ok"), store=RunStore(None)
    )
    seen: list[tuple[int, int, int]] = []
    runner.subscribe(lambda event: seen.append(gc.get_threshold()))
    try:
        gc.set_threshold(0, before[1], before[2])  # threshold 0 turns automatic collection off
        assert runner.run({"who": "a", "n": 1}).status == "completed"
        assert seen and all(t[0] == 0 for t in seen)

        def change_midway(event: dict[str, Any]) -> None:
            if event["type"] == "llm_response":
                gc.set_threshold(1234, 5, 6)

        gc.set_threshold(*before)
        runner.subscribe(change_midway)
        assert runner.run({"who": "a", "n": 1}).status == "completed"
        assert gc.get_threshold() == (1234, 5, 6)  # somebody else's setting wins
    finally:
        gc.set_threshold(*before)


def test_gc_pacing_off_leaves_the_thresholds_alone() -> None:
    import gc

    from lattice.runtime.settings import RuntimeSettings

    before = gc.get_threshold()
    seen: list[tuple[int, int, int]] = []
    runner = Runner(
        lower(five_prompts()),
        provider=MockProvider(default="ok"),
        store=RunStore(None),
        settings=RuntimeSettings(gc_pacing=False),
    )
    runner.subscribe(lambda event: seen.append(gc.get_threshold()))
    assert runner.run({"who": "a", "n": 1}).status == "completed"
    assert seen and all(t == before for t in seen)


def test_mock_provider_can_keep_no_calls() -> None:
    provider = MockProvider(default="ok", keep_calls=False)
    result = Runner(lower(five_prompts()), provider=provider, store=RunStore(None)).run(
        {"who": "a", "n": 1}
    )
    assert result.usage.calls == LLM_OPS
    assert provider.calls == []


def test_finished_runs_leave_no_cycles_for_the_collector() -> None:
    """A run's objects are freed by reference counting when its result is dropped."""
    import gc

    runner = Runner(
        lower(five_prompts()), provider=MockProvider(default="ok"), store=RunStore(None)
    )

    async def runs() -> None:
        for i in range(20):
            result = await runner.arun({"who": "w", "n": i})
            assert result.status == "completed" and result.events
            del result

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(runs())  # warm caches before counting
        gc.collect()
        gc.disable()
        try:
            loop.run_until_complete(runs())
            assert gc.collect() == 0
        finally:
            gc.enable()
    finally:
        loop.close()


def test_gc_pacing_restores_the_thresholds_when_runs_start_and_end_on_many_threads() -> None:
    import gc
    import sys
    import threading

    from lattice.runtime.gc_pacing import active_runs, gc_pacing

    before = gc.get_threshold()
    interval = sys.getswitchinterval()

    def churn() -> None:
        for _ in range(3000):
            with gc_pacing():
                pass

    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=churn) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert active_runs() == 0 and gc.get_threshold() == before


def test_a_run_of_ops_that_never_wait_leaves_the_loop_to_others() -> None:
    """On a shared loop (the server's), a loop of deterministic ops never awaits: other
    runs, requests and streams waited until it ended."""
    from lattice.runtime import RunLimits
    from tests.runtime.test_ops import infinite_loop

    subject = Runner(
        lower(infinite_loop()), store=RunStore(None), limits=RunLimits(max_steps=2_000)
    )

    async def both() -> bool:
        run = asyncio.create_task(subject.arun())
        await asyncio.sleep(0)  # the run takes the loop
        during = bool(subject._active)  # back here before the run ended?
        result = await run
        assert result.status == "failed"  # at its step limit
        return during

    assert asyncio.run(both()) is True


class _Gate:
    """A model that answers the first prompt at once and holds every second one until
    ``release`` is set."""

    name = "gate"

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.waiting = 0

    async def complete(self, request: LLMRequest) -> LLMResponse:
        if request.node_id == "first":
            return LLMResponse(text="ok")
        self.waiting += 1
        await self.release.wait()
        return LLMResponse(text="ok")


HELD_PER_WAITING_RUN = 44.5
"""Tracked objects a run keeps alive while its model call waits, on average over 100 runs
(the half: room for a stray object of another test in the same process). 44: the
call's attempt list is made by its first record, the run's tool sessions are a partial
(not a closure of three cells), the run_started data and a recorder method are not
held by the run, and a fresh run's walk position shares the run's usage; 51 before
that (a run without a folder having the shared keep-nothing durability, not a journal
object of its own); 63 before the first attempt's record, the call state and the
previous op's outcome were let go. Each is walked by every collection during the wait
and, with many runs in flight, pushed into the oldest generation, whose growth sets off
full collections."""


def test_a_waiting_run_holds_few_objects_for_the_collector() -> None:
    doc = chain(node("first", "prompt", prompt="Say ok."), node("second", "prompt", prompt="Ok?"))
    gate = _Gate()
    runner = Runner(
        lower(doc), provider=gate, store=RunStore(None), settings=RuntimeSettings(gc_pacing=False)
    )
    runs = 100

    async def measure() -> float:
        gate.release.set()
        assert (await runner.arun({})).status == "completed"  # warm: caches made once
        gate.release.clear()
        gate.waiting = 0
        gc.collect()
        before = len(gc.get_objects())
        tasks = [asyncio.ensure_future(runner.arun({})) for _ in range(runs)]
        while gate.waiting < runs:
            await asyncio.sleep(0)
        gc.collect()
        held = (len(gc.get_objects()) - before) / runs
        gate.release.set()
        results = await asyncio.gather(*tasks)
        assert all(r.status == "completed" and r.usage.calls == 2 for r in results)
        return held

    held = asyncio.run(measure())
    assert held <= HELD_PER_WAITING_RUN, held

"""One Runner, many concurrent runs: real concurrency and no state shared between runs."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from lattice.llm.mock import MockProvider
from lattice.lower import lower
from lattice.runtime import Runner, RunResult, RunStore
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


async def run_many(runner: Runner) -> tuple[list[RunResult], float]:
    started = time.perf_counter()
    results = await asyncio.gather(
        *(runner.arun({"who": f"user-{i}", "n": i}) for i in range(RUNS))
    )
    return list(results), time.perf_counter() - started


def test_fifty_concurrent_runs_overlap() -> None:
    provider = MockProvider(default="ok", latency=LATENCY)
    runner = Runner(lower(five_prompts()), provider=provider, store=RunStore(None))
    results, wall = asyncio.run(run_many(runner))

    sequential = RUNS * LLM_OPS * LATENCY  # 5 s if the runs did not overlap
    assert wall < 1.0, f"{RUNS} runs took {wall:.2f}s (sequential would be {sequential:.1f}s)"

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

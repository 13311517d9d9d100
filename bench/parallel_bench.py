"""Parallel branches and forEach, against their ideal wall time and against LangGraph.

1. A 10-way fan-out: ten LLM ops whose mock call sleeps 100 ms, joined before the END
   (ideal: 100 ms). LangGraph: ten ``Send``s to an async node that sleeps 100 ms.
2. forEach over 1,000 items, 50 at a time, each item one mock call of 100 ms (ideal:
   1,000 / 50 × 100 ms = 2 s; ``max_parallel`` raised to 64 so that it does not bind).
   LangGraph: 1,000 ``Send``s with ``max_concurrency = 50``.

Trials of Lattice and LangGraph alternate in one process; the tables give min / median /
max of the wall time and of its ratio to the ideal.

    python bench/parallel_bench.py            # 5 fan-out and 3 forEach trials each
    python bench/parallel_bench.py --quick    # 2 and 1
"""

from __future__ import annotations

import argparse
import asyncio
import operator
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lattice.llm.mock import MockProvider
from lattice.lower import lower
from lattice.runtime import Runner, RunStore
from lattice.runtime.settings import RuntimeSettings

try:
    import langgraph  # noqa: F401

    HAVE_LANGGRAPH = True
except ImportError:
    HAVE_LANGGRAPH = False

LATENCY = 0.1


class State(TypedDict):
    """LangGraph's state: the results of the mapped calls, merged by list concatenation."""

    results: Annotated[list[str], operator.add]


def node(node_id: str, node_type: str, **data: Any) -> dict[str, Any]:
    return {
        "id": node_id,
        "type": node_type,
        "name": node_id,
        "position": {"x": 0, "y": 0},
        "data": data,
    }


def conn(source: str, target: str) -> dict[str, Any]:
    return {"id": f"{source}-{target}", "from": source, "to": target}


def fan_out_doc(width: int) -> dict[str, Any]:
    branches = [node(f"b{i}", "prompt", prompt=f"branch {i}") for i in range(width)]
    return {
        "id": "fan-out",
        "name": "fan-out",
        "version": "1",
        "nodes": [
            node("start", "start"),
            *branches,
            node("join", "variableStore", operation="set", name="done", value=True),
            node("end", "end"),
        ],
        "connections": [
            *(conn("start", f"b{i}") for i in range(width)),
            *(conn(f"b{i}", "join") for i in range(width)),
            conn("join", "end"),
        ],
    }


def for_each_doc(concurrency: int) -> dict[str, Any]:
    return {
        "id": "for-each",
        "name": "for-each",
        "version": "1",
        "nodes": [
            node(
                "start",
                "start",
                inputs={"type": "object", "properties": {"items": {"type": "array"}}},
            ),
            node(
                "each",
                "forEach",
                items="$in.items",
                subAgentFlowId="one",
                maxConcurrency=concurrency,
            ),
            node("end", "end", output="$vars.each.result"),
        ],
        "connections": [conn("start", "each"), conn("each", "end")],
        "subAgentFlows": [
            {
                "id": "one",
                "name": "one",
                "nodes": [
                    node("s", "start"),
                    node("work", "prompt", prompt="item {{ $vars.each.item }}"),
                    node("e", "end"),
                ],
                "connections": [conn("s", "work"), conn("work", "e")],
            }
        ],
    }


def lattice_fan_out(width: int) -> Callable[[], Awaitable[Any]]:
    runner = Runner(
        lower(fan_out_doc(width)),
        provider=MockProvider(default="ok", latency=LATENCY, keep_calls=False),
        store=RunStore(None),
    )
    return lambda: runner.arun({})


def lattice_for_each(items: int, concurrency: int) -> Callable[[], Awaitable[Any]]:
    runner = Runner(
        lower(for_each_doc(concurrency)),
        provider=MockProvider(default="ok", latency=LATENCY, keep_calls=False),
        store=RunStore(None),
        settings=RuntimeSettings(max_parallel=max(64, concurrency)),
    )
    data = {"items": list(range(items))}
    return lambda: runner.arun(data)


def langgraph_map(count: int, concurrency: int | None) -> Callable[[], Awaitable[Any]]:
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import Send

    async def work(item: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(LATENCY)
        return {"results": ["ok"]}

    def dispatch(state: State) -> list[Any]:
        return [Send("work", {"item": i}) for i in range(count)]

    graph = StateGraph(State)
    graph.add_node("work", work)
    graph.add_conditional_edges(START, dispatch, ["work"])
    graph.add_edge("work", END)
    app = graph.compile()
    config: dict[str, Any] = {"max_concurrency": concurrency} if concurrency else {}
    return lambda: app.ainvoke({"results": []}, config=config)


async def timed(make: Callable[[], Awaitable[Any]]) -> float:
    started = time.perf_counter()
    await make()
    return time.perf_counter() - started


def row(name: str, times: list[float], ideal: float) -> str:
    ratios = [t / ideal for t in times]
    return (
        f"  {name:<22} {min(times) * 1000:>9.1f} {statistics.median(times) * 1000:>9.1f} "
        f"{max(times) * 1000:>9.1f}   {min(ratios):.2f}x / {statistics.median(ratios):.2f}x / {max(ratios):.2f}x"
    )


async def measure(
    title: str, ideal: float, trials: int, sides: dict[str, Callable[[], Awaitable[Any]]]
) -> dict[str, list[float]]:
    for make in sides.values():  # warm up
        await make()
    times: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(trials):
        for name, make in sides.items():  # interleaved
            times[name].append(await timed(make))
    print(f"\n{title} (ideal {ideal * 1000:.0f} ms, {trials} trials)")
    print(
        f"  {'':<22} {'min ms':>9} {'median':>9} {'max ms':>9}   ratio to ideal min / median / max"
    )
    for name, values in times.items():
        print(row(name, values, ideal))
    return times


async def main(quick: bool) -> None:
    fan_trials, each_trials = (2, 1) if quick else (5, 3)
    print(
        f"Parallel branches — Python {sys.version.split()[0]}, mock calls of {LATENCY * 1000:.0f} ms"
    )
    sides = {"Lattice fan-out": lattice_fan_out(10)}
    if HAVE_LANGGRAPH:
        sides["LangGraph Send x10"] = langgraph_map(10, None)
    fan = await measure("1. 10-way fan-out and join", LATENCY, fan_trials, sides)
    sides = {"Lattice forEach": lattice_for_each(1000, 50)}
    if HAVE_LANGGRAPH:
        sides["LangGraph Send x1000"] = langgraph_map(1000, 50)
    each = await measure("2. forEach over 1,000 items, 50 at a time", 2.0, each_trials, sides)
    fan_ratio = statistics.median(fan["Lattice fan-out"]) / LATENCY
    each_ratio = statistics.median(each["Lattice forEach"]) / 2.0
    print("\nGoals")
    print(
        f"  10-way fan-out within 1.2x of 100 ms: {fan_ratio:.2f}x: {'PASS' if fan_ratio <= 1.2 else 'MISS'}"
    )
    print(
        f"  forEach 1,000 @ 50 within 1.3x of 2 s: {each_ratio:.2f}x: {'PASS' if each_ratio <= 1.3 else 'MISS'}"
    )
    if not HAVE_LANGGRAPH:
        print("  (LangGraph not installed: pip install -e '.[bench]' to compare)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    asyncio.run(main(parser.parse_args().quick))

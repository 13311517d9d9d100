"""Runner overhead: Lattice's Runner against LangGraph on the same graphs, side by side.

Four measurements, each printed as a table, then the headline ratios:

1. Linear chains of 10, 100 and 1,000 trivial ops whose state grows. Lattice: a
   generated document ``start → N variableStore(append) → end`` lowered with
   ``lattice.lower.lower``, run with persistence off (``RunStore(None)``); a second
   Lattice column runs N ``dataTransform`` nodes instead. LangGraph: a StateGraph of
   N nodes, each appending to a list field with an ``operator.add`` reducer,
   compiled without a checkpointer. Reported: time per op (total / N), best of
   several repetitions.
2. A chain of ~100 SWITCH diamonds (deterministic ifElse on ``$in.route``, two
   branches that merge again), both frameworks (LangGraph: conditional edges).
3. 1, 10, 100 and 1,000 concurrent runs of a workflow of 5 LLM ops whose mock LLM
   sleeps 20 ms per call (Lattice: ``MockProvider(default="ok", latency=0.02)``;
   LangGraph: async nodes that ``await asyncio.sleep(0.02)``), gathered in one event
   loop. The ideal wall time is 5 × 20 ms = 100 ms.
4. With run folders on (``RunStore(tmpdir)``): bytes written per run for chains of
   10, 100 and 1,000 ops, and bytes per op (linear growth keeps bytes/op flat).

Timing: ``time.perf_counter``; ``gc.collect()`` before every repetition; the best
repetition counts. Lattice runs are awaited inside one event loop (``arun``), so
event-loop start-up is not charged to either side; LangGraph is timed through both
``invoke`` and ``ainvoke`` and its faster figure is used in the ratios.

    pip install -e '.[bench]'             # LangGraph (optional: without it, Lattice only)
    python bench/runner_overhead.py       # full run (one to two minutes)
    python bench/runner_overhead.py --quick      # smoke mode, a few seconds
    python bench/runner_overhead.py --profile    # also cProfile the Lattice side
    python bench/runner_overhead.py --cpu        # tables 1-2 in CPU time (loaded machines)
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import io
import itertools
import operator
import os
import platform
import pstats
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypedDict

from lattice.ir.models import ExecIR
from lattice.llm.mock import MockProvider
from lattice.lower import lower
from lattice.runs.store import RunStore
from lattice.runtime.runner import Runner

try:
    import langgraph  # noqa: F401
    from langgraph.graph import END, START, StateGraph

    HAVE_LANGGRAPH = True
except ImportError:  # optional dependency: report Lattice figures only
    HAVE_LANGGRAPH = False

LLM_OPS = 5
LLM_LATENCY = 0.02
IDEAL_WALL = LLM_OPS * LLM_LATENCY


@dataclass(frozen=True)
class Settings:
    chain_sizes: tuple[int, ...]
    diamonds: int
    concurrency: tuple[int, ...]
    bytes_sizes: tuple[int, ...]
    repeat: int
    concurrent_repeat: int
    target_seconds: float
    """Each repetition loops a measurement until it lasts about this long."""


FULL = Settings((10, 100, 1000), 100, (1, 10, 100, 1000), (10, 100, 1000), 9, 3, 0.02)
QUICK = Settings((10, 100), 20, (1, 10, 100), (10, 100), 3, 1, 0.002)
"""Smoke mode: smaller sizes, one repetition (the headline uses the sizes it has)."""


# -- timing ---------------------------------------------------------------------------


CLOCK: Callable[[], float] = time.perf_counter
"""The clock of tables 1 and 2 (``--cpu`` switches it to ``time.process_time``)."""


def _calibrate(first_call_seconds: float, target: float) -> int:
    return max(1, round(target / max(first_call_seconds, 1e-7)))


def best_of(fn: Callable[[], Any], repeat: int, target: float) -> float:
    """Best seconds per call of ``fn`` over ``repeat`` repetitions (GC collected before each)."""
    started = CLOCK()
    fn()  # warm-up, also sizes the inner loop
    number = _calibrate(CLOCK() - started, target)
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        started = CLOCK()
        for _ in range(number):
            fn()
        best = min(best, (CLOCK() - started) / number)
    return best


async def abest_of(fn: Callable[[], Awaitable[Any]], repeat: int, target: float) -> float:
    """``best_of`` for coroutines, timed inside the running event loop."""
    started = CLOCK()
    await fn()
    number = _calibrate(CLOCK() - started, target)
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        started = CLOCK()
        for _ in range(number):
            await fn()
        best = min(best, (CLOCK() - started) / number)
    return best


# -- documents (Lattice) ----------------------------------------------------------------


def _node(node_id: str, node_type: str, **data: Any) -> dict[str, Any]:
    return {"id": node_id, "type": node_type, "name": node_id, "data": data}


def _sequence(nodes: list[dict[str, Any]], doc_id: str) -> dict[str, Any]:
    ids = [n["id"] for n in nodes]
    connections = [
        {"id": f"c{i}", "from": a, "to": b} for i, (a, b) in enumerate(itertools.pairwise(ids))
    ]
    return {"id": doc_id, "name": doc_id, "nodes": nodes, "connections": connections}


def chain_document(n: int, kind: str = "append") -> dict[str, Any]:
    """``start → n trivial nodes → end``; every node makes the state grow."""
    if kind == "append":  # $vars.items gains one item per op
        middle = [
            _node(f"n{i}", "variableStore", operation="append", name="items", value=i)
            for i in range(n)
        ]
    else:  # $vars.n<i>.result: one new entry per op
        middle = [_node(f"n{i}", "dataTransform", expression="length(vars)") for i in range(n)]
    return _sequence([_node("start", "start"), *middle, _node("end", "end")], f"chain-{kind}-{n}")


def diamond_document(d: int) -> dict[str, Any]:
    """``d`` ifElse diamonds on ``$in.route``: diamond k asks ``== "left"`` (k even) or
    ``== "right"`` (k odd); yes goes to ``l<k>``, no to ``r<k>``, both merge into the next."""
    nodes = [_node("start", "start")]
    connections: list[dict[str, Any]] = []

    def link(a: str, b: str, port: str | None = None) -> None:
        edge: dict[str, Any] = {"id": f"c{len(connections)}", "from": a, "to": b}
        if port is not None:
            edge["fromPort"] = port
        connections.append(edge)

    link("start", "d0")
    for k in range(d):
        want = "left" if k % 2 == 0 else "right"
        nodes.append(
            _node(
                f"d{k}",
                "ifElse",
                evaluationTarget="$in.route",
                branches=[
                    {"label": "yes", "condition": f'== "{want}"'},
                    {"label": "no", "condition": ""},
                ],
            )
        )
        nodes.append(_node(f"l{k}", "variableStore", operation="increment", name="left"))
        nodes.append(_node(f"r{k}", "variableStore", operation="increment", name="right"))
        link(f"d{k}", f"l{k}", "branch-0")
        link(f"d{k}", f"r{k}", "branch-1")
        link(f"l{k}", f"d{k + 1}" if k + 1 < d else "end")
        link(f"r{k}", f"d{k + 1}" if k + 1 < d else "end")
    nodes.append(_node("end", "end", output={"left": "$vars.left", "right": "$vars.right"}))
    return {"id": "diamonds", "name": "diamonds", "nodes": nodes, "connections": connections}


def llm_document() -> dict[str, Any]:
    prompts = [
        _node(f"llm{i}", "prompt", prompt=f"Step {i}: answer with the word ok.")
        for i in range(LLM_OPS)
    ]
    return _sequence([_node("start", "start"), *prompts, _node("end", "end")], "llm-chain")


def memory_runner(ir: ExecIR, **kwargs: Any) -> Runner:
    return Runner(ir, store=RunStore(None), **kwargs)


# -- graphs (LangGraph) -----------------------------------------------------------------


class ChainState(TypedDict):
    items: Annotated[list[int], operator.add]


class DiamondState(TypedDict):
    route: str
    left: Annotated[int, operator.add]
    right: Annotated[int, operator.add]


class LLMState(TypedDict):
    out: Annotated[list[str], operator.add]


def lg_chain(n: int) -> Any:
    graph = StateGraph(ChainState)

    def make(i: int) -> Callable[[ChainState], dict[str, Any]]:
        def step(state: ChainState) -> dict[str, Any]:
            return {"items": [i]}

        return step

    for i in range(n):
        graph.add_node(f"n{i}", make(i))
    graph.add_edge(START, "n0")
    for i in range(n - 1):
        graph.add_edge(f"n{i}", f"n{i + 1}")
    graph.add_edge(f"n{n - 1}", END)
    return graph.compile()


def lg_diamonds(d: int) -> Any:
    graph = StateGraph(DiamondState)

    def decide(state: DiamondState) -> dict[str, Any]:
        return {}

    def go_left(state: DiamondState) -> dict[str, Any]:
        return {"left": 1}

    def go_right(state: DiamondState) -> dict[str, Any]:
        return {"right": 1}

    def router(want: str) -> Callable[[DiamondState], str]:
        return lambda state: "yes" if state["route"] == want else "no"

    graph.add_edge(START, "d0")
    for k in range(d):
        want = "left" if k % 2 == 0 else "right"
        graph.add_node(f"d{k}", decide)
        graph.add_node(f"l{k}", go_left)
        graph.add_node(f"r{k}", go_right)
        graph.add_conditional_edges(f"d{k}", router(want), {"yes": f"l{k}", "no": f"r{k}"})
        after = f"d{k + 1}" if k + 1 < d else END
        graph.add_edge(f"l{k}", after)
        graph.add_edge(f"r{k}", after)
    return graph.compile()


def lg_llm_chain(latency: float) -> Any:
    graph = StateGraph(LLMState)

    async def call(state: LLMState) -> dict[str, Any]:
        await asyncio.sleep(latency)
        return {"out": ["ok"]}

    previous = START
    for i in range(LLM_OPS):
        graph.add_node(f"llm{i}", call)
        graph.add_edge(previous, f"llm{i}")
        previous = f"llm{i}"
    graph.add_edge(previous, END)
    return graph.compile()


# -- printing ---------------------------------------------------------------------------


def table(title: str, headers: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    print(f"\n{title}")
    print("  " + "  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True)))
    print("  " + "  ".join("-" * w for w in widths))
    for row in rows:
        print("  " + "  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))


def us(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e6:,.1f}"


def ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:,.1f}"


def times(x: float | None) -> str:
    return "-" if x is None else f"{x:,.2f}x"


# -- 1. linear chains -------------------------------------------------------------------


def bench_chains(s: Settings) -> dict[int, dict[str, float | None]]:
    results: dict[int, dict[str, float | None]] = {}
    loop = asyncio.new_event_loop()
    try:
        empty = memory_runner(lower(chain_document(0)))
        fixed = loop.run_until_complete(abest_of(empty.arun, s.repeat, s.target_seconds))
        fixed_lg = None
        if HAVE_LANGGRAPH:
            one = lg_chain(1)
            fixed_lg = best_of(lambda: one.invoke({"items": []}), s.repeat, s.target_seconds)
        for n in s.chain_sizes:
            row: dict[str, float | None] = {}
            for kind in ("append", "transform"):
                runner = memory_runner(lower(chain_document(n, kind)))
                result = loop.run_until_complete(runner.arun({}))
                assert result.status == "completed", result.failure
                if kind == "append":
                    assert result.vars["items"] == list(range(n))
                row[kind] = (
                    loop.run_until_complete(abest_of(runner.arun, s.repeat, s.target_seconds)) / n
                )
            row["lg_invoke"] = row["lg_ainvoke"] = None
            if HAVE_LANGGRAPH:
                app = lg_chain(n)
                config = {"recursion_limit": n + 10}
                assert app.invoke({"items": []}, config)["items"] == list(range(n))
                row["lg_invoke"] = (
                    best_of(
                        lambda a=app, c=config: a.invoke({"items": []}, c),
                        s.repeat,
                        s.target_seconds,
                    )
                    / n
                )
                row["lg_ainvoke"] = (
                    loop.run_until_complete(
                        abest_of(
                            lambda a=app, c=config: a.ainvoke({"items": []}, c),
                            s.repeat,
                            s.target_seconds,
                        )
                    )
                    / n
                )
            results[n] = row
    finally:
        loop.close()
    rows = []
    for n, r in results.items():
        lg = _lg_best(r)
        rows.append(
            [
                f"{n:,}",
                us(r["append"]),
                us(r["transform"]),
                us(r["lg_invoke"]),
                us(r["lg_ainvoke"]),
                times(lg / r["append"]) if lg and r["append"] else "-",
            ]
        )
    table(
        "1. Linear chain, state grows every op (µs per op = run time / N, best of "
        f"{s.repeat}; persistence off)",
        [
            "N ops",
            "Lattice append",
            "Lattice transform",
            "LangGraph invoke",
            "LangGraph ainvoke",
            "LG best / Lattice",
        ],
        rows,
    )
    print(
        f"  Fixed cost of one run: Lattice start → end {us(fixed)} µs; "
        f"LangGraph one no-op node (invoke) {us(fixed_lg)} µs"
    )
    return results


def _lg_best(r: dict[str, float | None]) -> float | None:
    values = [v for v in (r.get("lg_invoke"), r.get("lg_ainvoke")) if v is not None]
    return min(values) if values else None


# -- 2. SWITCH diamonds ---------------------------------------------------------------------


def bench_diamonds(s: Settings) -> dict[str, float | None]:
    d = s.diamonds
    runner = memory_runner(lower(diamond_document(d)))
    route = {"route": "left"}
    loop = asyncio.new_event_loop()
    out: dict[str, float | None] = {"lg_invoke": None, "lg_ainvoke": None}
    try:
        result = loop.run_until_complete(runner.arun(route))
        assert result.status == "completed", result.failure
        expect = {"left": (d + 1) // 2, "right": d // 2}
        assert result.output == expect, result.output
        out["lattice"] = loop.run_until_complete(
            abest_of(lambda: runner.arun(route), s.repeat, s.target_seconds)
        )
        if HAVE_LANGGRAPH:
            app = lg_diamonds(d)
            config = {"recursion_limit": 2 * d + 10}
            start = {"route": "left", "left": 0, "right": 0}
            got = app.invoke(start, config)
            assert (got["left"], got["right"]) == (expect["left"], expect["right"]), got
            out["lg_invoke"] = best_of(
                lambda: app.invoke(start, config), s.repeat, s.target_seconds
            )
            out["lg_ainvoke"] = loop.run_until_complete(
                abest_of(lambda: app.ainvoke(start, config), s.repeat, s.target_seconds)
            )
    finally:
        loop.close()
    steps = 2 * d  # one decision + one branch op per diamond, both frameworks
    rows = [
        [
            "Lattice arun",
            ms(out["lattice"]),
            us(_div(out["lattice"], d)),
            us(_div(out["lattice"], steps)),
        ],
        [
            "LangGraph invoke",
            ms(out["lg_invoke"]),
            us(_div(out["lg_invoke"], d)),
            us(_div(out["lg_invoke"], steps)),
        ],
        [
            "LangGraph ainvoke",
            ms(out["lg_ainvoke"]),
            us(_div(out["lg_ainvoke"], d)),
            us(_div(out["lg_ainvoke"], steps)),
        ],
    ]
    table(
        f"2. {d} SWITCH diamonds (ifElse on $in.route, branches merge; {steps} steps), "
        f"best of {s.repeat}",
        ["", "ms / run", "µs / diamond", "µs / step"],
        rows,
    )
    lg = _lg_best(out)
    if lg and out["lattice"]:
        print(f"  LangGraph best / Lattice: {times(lg / out['lattice'])}")
    return out


def _div(a: float | None, b: float) -> float | None:
    return None if a is None else a / b


# -- 3. concurrent LLM runs ---------------------------------------------------------------


async def _lattice_wall(ir: ExecIR, c: int, latency: float) -> float:
    runner = memory_runner(
        ir, provider=MockProvider(default="ok", latency=latency, keep_calls=False)
    )
    gc.collect()
    started = time.perf_counter()
    results = await asyncio.gather(*(runner.arun({}) for _ in range(c)))
    wall = time.perf_counter() - started
    assert all(r.status == "completed" for r in results), results[0].failure
    assert all(r.usage.calls == LLM_OPS for r in results)
    return wall


async def _asyncio_floor(c: int, latency: float) -> float:
    """Wall time of ``c`` tasks that only sleep ``LLM_OPS`` times: what no runtime can beat."""

    async def sleeper() -> None:
        for _ in range(LLM_OPS):
            await asyncio.sleep(latency)

    gc.collect()
    started = time.perf_counter()
    await asyncio.gather(*(sleeper() for _ in range(c)))
    return time.perf_counter() - started


async def _lg_wall(app: Any, c: int) -> float:
    gc.collect()
    started = time.perf_counter()
    results = await asyncio.gather(*(app.ainvoke({"out": []}) for _ in range(c)))
    wall = time.perf_counter() - started
    assert all(len(r["out"]) == LLM_OPS for r in results)
    return wall


def bench_concurrency(s: Settings) -> dict[int, dict[str, float | None]]:
    ir = lower(llm_document())
    lg_slow = lg_llm_chain(LLM_LATENCY) if HAVE_LANGGRAPH else None
    lg_fast = lg_llm_chain(0.0) if HAVE_LANGGRAPH else None
    results: dict[int, dict[str, float | None]] = {}
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(_lattice_wall(ir, 10, 0.0))  # warm-up
        if lg_fast is not None:
            loop.run_until_complete(_lg_wall(lg_fast, 10))
        for c in s.concurrency:
            row: dict[str, float | None] = {}
            row["lattice"] = min(
                loop.run_until_complete(_lattice_wall(ir, c, LLM_LATENCY))
                for _ in range(s.concurrent_repeat)
            )
            row["lattice_cpu"] = min(
                loop.run_until_complete(_lattice_wall(ir, c, 0.0))
                for _ in range(s.concurrent_repeat)
            )
            row["floor"] = min(
                loop.run_until_complete(_asyncio_floor(c, LLM_LATENCY))
                for _ in range(s.concurrent_repeat)
            )
            row["lg"] = row["lg_cpu"] = None
            if lg_slow is not None and lg_fast is not None:
                row["lg"] = min(
                    loop.run_until_complete(_lg_wall(lg_slow, c))
                    for _ in range(s.concurrent_repeat)
                )
                row["lg_cpu"] = min(
                    loop.run_until_complete(_lg_wall(lg_fast, c))
                    for _ in range(s.concurrent_repeat)
                )
            results[c] = row
    finally:
        loop.close()
    rows = []
    for c, r in results.items():
        rows.append(
            [
                f"{c:,}",
                ms(r["lattice"]),
                times(r["lattice"] / IDEAL_WALL if r["lattice"] else None),
                us(_div(r["lattice_cpu"], c)),
                ms(r["lg"]),
                times(r["lg"] / IDEAL_WALL if r["lg"] else None),
                us(_div(r["lg_cpu"], c)),
                ms(r["floor"]),
            ]
        )
    table(
        f"3. Concurrent runs of {LLM_OPS} LLM ops, mock latency {LLM_LATENCY * 1e3:.0f} ms "
        f"(ideal wall {IDEAL_WALL * 1e3:.0f} ms), best of {s.concurrent_repeat}; "
        "'µs/run @0ms' = same runs with zero latency, wall / runs",
        [
            "runs",
            "Lattice wall ms",
            "x ideal",
            "Lattice µs/run @0ms",
            "LangGraph wall ms",
            "x ideal",
            "LG µs/run @0ms",
            "asyncio floor ms",
        ],
        rows,
    )
    return results


# -- 4. bytes written ---------------------------------------------------------------------


def _folder_bytes(folder: Path) -> tuple[int, int]:
    files = [p for p in folder.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files), len(files)


def bench_bytes(s: Settings) -> dict[str, dict[int, float]]:
    per_op: dict[str, dict[int, float]] = {"append": {}, "transform": {}}
    rows = []
    with tempfile.TemporaryDirectory(prefix="lattice-bench-") as tmp:
        for kind in ("append", "transform"):
            for n in s.bytes_sizes:
                runner = Runner(lower(chain_document(n, kind)), store=RunStore(Path(tmp) / kind))
                gc.collect()
                started = time.perf_counter()
                result = runner.run({})
                elapsed = time.perf_counter() - started
                assert result.status == "completed" and result.run_dir is not None
                total, files = _folder_bytes(result.run_dir)
                per_op[kind][n] = total / n
                rows.append(
                    [
                        kind,
                        f"{n:,}",
                        f"{files:,}",
                        f"{total:,}",
                        f"{total / n:,.0f}",
                        ms(elapsed),
                    ]
                )
    table(
        "4. Run folders on (RunStore(tmpdir)): bytes written per run",
        ["chain", "N ops", "files", "bytes / run", "bytes / op", "ms / run"],
        rows,
    )
    return per_op


# -- profiling ----------------------------------------------------------------------------


def profile_lattice(s: Settings) -> None:
    """cProfile of the Lattice side: the largest append chain and the largest concurrent batch."""
    n = max(s.chain_sizes)
    runner = memory_runner(lower(chain_document(n, "append")))
    ir = lower(llm_document())
    c = max(s.concurrency)

    async def chains() -> None:
        for _ in range(5):
            await runner.arun({})

    for label, work in (
        (f"append chain of {n} ops x5", chains),
        (f"{c} concurrent LLM runs", lambda: _lattice_wall(ir, c, LLM_LATENCY)),
    ):
        asyncio.run(work())  # warm-up
        profiler = cProfile.Profile()
        profiler.enable()
        asyncio.run(work())
        profiler.disable()
        buffer = io.StringIO()
        pstats.Stats(profiler, stream=buffer).sort_stats("tottime").print_stats(15)
        print(f"\ncProfile, Lattice, {label} (by own time):")
        print("\n".join(line for line in buffer.getvalue().splitlines()[4:] if line.strip()))


# -- main ---------------------------------------------------------------------------------


def verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("PASS" if ok else "MISS")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke mode: a few seconds")
    parser.add_argument("--profile", action="store_true", help="cProfile the Lattice side too")
    parser.add_argument(
        "--cpu",
        action="store_true",
        help="tables 1 and 2 measure this process's CPU time (time.process_time) instead of "
        "perf_counter: steadier on a loaded machine (wall clocks stay for tables 3 and 4)",
    )
    args = parser.parse_args(argv)
    s = QUICK if args.quick else FULL
    global CLOCK
    CLOCK = time.process_time if args.cpu else time.perf_counter

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"Runner overhead benchmark ({'quick' if args.quick else 'full'} mode) — "
        f"Python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs, "
        f"load {load:.2f}; tables 1-2 clock: {'process_time (CPU)' if args.cpu else 'perf_counter'}"
    )
    if HAVE_LANGGRAPH:
        from importlib.metadata import version

        print(f"LangGraph {version('langgraph')} (graphs compiled without a checkpointer)")
    else:
        print("LangGraph is not installed (pip install -e '.[bench]'): Lattice figures only.")
    started = time.perf_counter()

    chains = bench_chains(s)
    diamonds = bench_diamonds(s)
    concurrency = bench_concurrency(s)
    per_op_bytes = bench_bytes(s)

    print("\nHeadline" + (" (quick mode: small sizes, indicative only)" if args.quick else ""))
    small, large = min(s.chain_sizes), max(s.chain_sizes)
    ratios = {
        n: (lg / r["append"]) for n, r in chains.items() if (lg := _lg_best(r)) and r["append"]
    }
    if ratios:
        worst_n = min(ratios, key=lambda k: ratios[k])
        detail = ", ".join(f"{ratios[n]:.1f}x at N={n:,}" for n in ratios)
        print(
            f"  LangGraph per-step / Lattice per-op overhead: {ratios[worst_n]:.1f}x "
            f"(worst case; {detail}); target >= 10x: {verdict(ratios[worst_n] >= 10)}"
        )
        lg_d = _lg_best(diamonds)
        if lg_d and diamonds.get("lattice"):
            print(f"    (SWITCH diamonds: {lg_d / diamonds['lattice']:.1f}x)")
    else:
        print("  LangGraph per-step / Lattice per-op overhead: n/a (LangGraph not installed)")
    growth = chains[large]["append"] / chains[small]["append"]  # type: ignore[operator]
    print(
        f"  Lattice per-op at N={large:,} / at N={small:,}: {growth:.2f}x "
        f"(transform chain: {chains[large]['transform'] / chains[small]['transform']:.2f}x); "  # type: ignore[operator]
        f"target <= 1.5x: {verdict(growth <= 1.5)}"
    )
    top = max(s.concurrency)
    wall = concurrency[top]["lattice"]
    assert wall is not None
    lg_wall = concurrency[top]["lg"]
    print(
        f"  {top:,} concurrent runs, wall / ideal: {wall / IDEAL_WALL:.2f}x"
        + (f" (LangGraph {lg_wall / IDEAL_WALL:.2f}x)" if lg_wall else "")
        + f"; target <= 2x: {verdict(wall / IDEAL_WALL <= 2)}"
    )
    floor = concurrency[top]["floor"]
    assert floor is not None
    print(
        f"    (bare asyncio tasks that only sleep: {floor / IDEAL_WALL:.2f}x ideal on this "
        f"machine; Lattice / that floor: {wall / floor:.2f}x)"
    )
    b_small, b_large = min(s.bytes_sizes), max(s.bytes_sizes)
    for kind, table_ in per_op_bytes.items():
        g = table_[b_large] / table_[b_small]
        print(
            f"  bytes/op, {kind} chain, at N={b_large:,} vs N={b_small:,}: "
            f"{table_[b_large]:,.0f} vs {table_[b_small]:,.0f} = {g:.2f}x "
            f"(linear keeps this near 1x, quadratic ~{b_large / b_small:.0f}x): "
            f"{'linear' if g <= 2 else 'SUPER-LINEAR'}"
        )
    print(f"\n(total benchmark time {time.perf_counter() - started:.1f} s)")

    if args.profile:
        profile_lattice(s)
    return 0


if __name__ == "__main__":
    sys.exit(main())

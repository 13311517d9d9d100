"""Lattice against LangGraph, measured fairly: interleaved trials, like-for-like ops, ratios.

Every comparison runs both frameworks in this one process, trial after trial, the order
of the two sides alternating from one trial to the next; a trial times each side over
a loop calibrated to last about ``--sample`` seconds, and the ratio LangGraph ÷ Lattice
is taken per trial. Tables give the median per-op time of each side and the ratio's
min / median / max over the trials. CPU time (``time.process_time``, every thread of
the process) is the steady figure on a shared machine; wall time is given beside it,
and is the one that counts where a side waits for the disk (persistence).

Sections (``--sections``, all by default):

``sync``
    Chains of N ops through the synchronous entry points: ``Runner.run`` against
    ``CompiledStateGraph.invoke``. Three like-for-like ops: ``counter`` (fixed-size
    state: Lattice variableStore ``increment``; LangGraph returns ``count + 1``),
    ``append`` (a list that grows: variableStore ``append``; an ``operator.add``
    reducer) and ``transform`` (a transform over growing state: a dataTransform
    ``length(vars)`` writing one more result per op; a node reading the results and
    adding one through a dict-merging reducer). Per op = run time ÷ N (Lattice's start
    and end ops are charged to it too).
``async``
    The same through the async entry points, awaited inside one event loop on both
    sides: ``Runner.arun`` against ``ainvoke``, LangGraph's nodes written as
    ``async def`` (plain ``def`` nodes would each go to a thread under ``ainvoke``).
``persist``
    The same synchronous chains with persistence: Lattice run folders
    (``RunStore(dir, durability="fsync")``, the default, and ``"os"``) against LangGraph
    with ``InMemorySaver`` and ``SqliteSaver`` (a file in the same directory, WAL mode),
    paired by what they guarantee (``PERSIST_PAIRS``, printed with each table):
    ``fsync`` against ``durability="sync"`` with ``PRAGMA synchronous=FULL`` (each step
    synced before the next), ``os`` against ``durability="sync"`` with
    ``synchronous=OFF`` (each step handed to the OS, never synced); and, marked as
    different guarantees, ``fsync`` against LangGraph's default ``"async"`` (steps saved
    on a background thread) and ``os`` against ``InMemorySaver``. A new thread id per
    run, as Lattice makes a new folder per run.
``concurrent``
    1, 10, 100 and 1,000 concurrent runs of five model calls gathered in one event
    loop. Both sides call the same kind of mock: ``await asyncio.sleep(latency)`` on
    every call, 0 included (so runs interleave at 0 ms on both sides). Wall time ÷ the
    ideal 5 × 20 ms, next to bare asyncio tasks that only sleep (the floor), and CPU
    per run at 0 ms latency.
``import``
    ``from lattice import Runner, lower, RunStore`` (and ``import lattice`` +
    ``lattice.Runner``) against ``import langgraph.graph``, each in a fresh
    interpreter, interleaved; the time of the import statement itself.

Garbage collection (``--gc``): ``defaults`` runs each side as it comes (Lattice's
``gc_pacing`` on, LangGraph under the interpreter's thresholds); ``same`` turns
Lattice's pacing off so both run under the interpreter's thresholds. ``gc.collect()``
runs before every timed sample on both sides.

    pip install -e '.[bench]' langgraph-checkpoint-sqlite
    python bench/compare_langgraph.py                   # everything (several minutes)
    python bench/compare_langgraph.py --quick           # a smoke run
    python bench/compare_langgraph.py --sections sync persist --gc same --trials 9
    python bench/compare_langgraph.py --json out.json   # the figures as JSON too

Without LangGraph installed the script says so and stops.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import itertools
import json
import operator
import os
import platform
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypedDict

from lattice.llm.base import LLMRequest, LLMResponse, TokenUsage
from lattice.lower import lower
from lattice.runs.store import RunStore
from lattice.runtime.runner import Runner
from lattice.runtime.settings import RuntimeSettings

try:
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, StateGraph
except ImportError:  # pragma: no cover - reported at start
    StateGraph = None  # type: ignore[assignment,misc]

try:
    from langgraph.checkpoint.sqlite import SqliteSaver
except ImportError:  # pragma: no cover - reported at start
    SqliteSaver = None  # type: ignore[assignment,misc]

KINDS = ("counter", "append", "transform")
LLM_CALLS = 5
LATENCY = 0.02
IDEAL = LLM_CALLS * LATENCY


@dataclass(frozen=True)
class Plan:
    chain_sizes: tuple[int, ...]
    persist_sizes: tuple[int, ...]
    concurrency: tuple[int, ...]
    trials: int
    sample: float
    """Seconds a timed sample of one side lasts, about."""
    import_trials: int


FULL = Plan((10, 100, 1000), (10, 100), (1, 10, 100, 1000), 5, 0.1, 9)
QUICK = Plan((10, 100), (10,), (1, 100), 3, 0.02, 3)


# -- statistics -------------------------------------------------------------------------


@dataclass
class Pair:
    """Per-trial figures of one comparison: seconds per op of each side, CPU and wall."""

    lattice_cpu: list[float] = field(default_factory=list)
    lattice_wall: list[float] = field(default_factory=list)
    other_cpu: list[float] = field(default_factory=list)
    other_wall: list[float] = field(default_factory=list)

    def ratios(self, clock: str = "cpu") -> list[float]:
        mine = self.lattice_cpu if clock == "cpu" else self.lattice_wall
        theirs = self.other_cpu if clock == "cpu" else self.other_wall
        return [t / m for m, t in zip(mine, theirs, strict=True) if m > 0]

    def to_json(self) -> dict[str, Any]:
        return {
            "lattice_cpu_s": self.lattice_cpu,
            "lattice_wall_s": self.lattice_wall,
            "other_cpu_s": self.other_cpu,
            "other_wall_s": self.other_wall,
            "ratio_cpu": spread(self.ratios("cpu")),
            "ratio_wall": spread(self.ratios("wall")),
        }


def spread(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def fmt_spread(values: list[float]) -> str:
    if not values:
        return "-"
    s = spread(values)
    return f"{s['median']:.1f}x [{s['min']:.1f}–{s['max']:.1f}]"


def us(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f}"


def med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


# -- timing -----------------------------------------------------------------------------


def _calibrate(fn: Callable[[], Any], sample: float) -> int:
    started = time.perf_counter()
    fn()
    fn()
    once = (time.perf_counter() - started) / 2
    return max(1, round(sample / max(once, 1e-7)))


def _timed(fn: Callable[[], Any], number: int) -> tuple[float, float]:
    gc.collect()
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(number):
        fn()
    return (time.process_time() - cpu) / number, (time.perf_counter() - wall) / number


def interleaved(
    lattice: Callable[[], Any],
    other: Callable[[], Any],
    *,
    per: int,
    plan: Plan,
) -> Pair:
    """``plan.trials`` trials; each times both sides (order alternating), per op."""
    n_mine = _calibrate(lattice, plan.sample)
    n_theirs = _calibrate(other, plan.sample)
    pair = Pair()
    for trial in range(plan.trials):
        sides = [("mine", lattice, n_mine), ("theirs", other, n_theirs)]
        if trial % 2:
            sides.reverse()
        for name, fn, number in sides:
            cpu, wall = _timed(fn, number)
            if name == "mine":
                pair.lattice_cpu.append(cpu / per)
                pair.lattice_wall.append(wall / per)
            else:
                pair.other_cpu.append(cpu / per)
                pair.other_wall.append(wall / per)
    return pair


def in_loop(
    loop: asyncio.AbstractEventLoop, make: Callable[[], Awaitable[Any]]
) -> Callable[[], Any]:
    """A callable timing ``await make()`` inside the running loop: the loop runs one
    coroutine that awaits ``make()`` ``number`` times, so loop start-up is not charged."""

    def run_n(number: int) -> None:
        async def body() -> None:
            for _ in range(number):
                await make()

        loop.run_until_complete(body())

    return run_n


def interleaved_async(
    loop: asyncio.AbstractEventLoop,
    lattice: Callable[[], Awaitable[Any]],
    other: Callable[[], Awaitable[Any]],
    *,
    per: int,
    plan: Plan,
) -> Pair:
    """``interleaved`` for coroutines: each sample awaits its calls inside one coroutine."""
    mine, theirs = in_loop(loop, lattice), in_loop(loop, other)

    def calibrate(run_n: Callable[[int], None]) -> int:
        started = time.perf_counter()
        run_n(2)
        once = (time.perf_counter() - started) / 2
        return max(1, round(plan.sample / max(once, 1e-7)))

    n_mine, n_theirs = calibrate(mine), calibrate(theirs)
    pair = Pair()
    for trial in range(plan.trials):
        sides = [("mine", mine, n_mine), ("theirs", theirs, n_theirs)]
        if trial % 2:
            sides.reverse()
        for name, run_n, number in sides:
            gc.collect()
            cpu, wall = time.process_time(), time.perf_counter()
            run_n(number)
            c = (time.process_time() - cpu) / number / per
            w = (time.perf_counter() - wall) / number / per
            if name == "mine":
                pair.lattice_cpu.append(c)
                pair.lattice_wall.append(w)
            else:
                pair.other_cpu.append(c)
                pair.other_wall.append(w)
    return pair


# -- Lattice documents ------------------------------------------------------------------


def _node(node_id: str, node_type: str, **data: Any) -> dict[str, Any]:
    return {"id": node_id, "type": node_type, "name": node_id, "data": data}


def _sequence(nodes: list[dict[str, Any]], doc_id: str) -> dict[str, Any]:
    ids = [n["id"] for n in nodes]
    connections = [
        {"id": f"c{i}", "from": a, "to": b} for i, (a, b) in enumerate(itertools.pairwise(ids))
    ]
    return {"id": doc_id, "name": doc_id, "nodes": nodes, "connections": connections}


def chain_document(n: int, kind: str) -> dict[str, Any]:
    """``start → n ops of one kind → end``."""
    if kind == "counter":
        middle = [
            _node(f"n{i}", "variableStore", operation="increment", name="count") for i in range(n)
        ]
    elif kind == "append":
        middle = [
            _node(f"n{i}", "variableStore", operation="append", name="items", value=i)
            for i in range(n)
        ]
    else:
        middle = [_node(f"n{i}", "dataTransform", expression="length(vars)") for i in range(n)]
    return _sequence([_node("start", "start"), *middle, _node("end", "end")], f"{kind}-{n}")


def llm_document() -> dict[str, Any]:
    prompts = [
        _node(f"llm{i}", "prompt", prompt=f"Step {i}: answer with the word ok.")
        for i in range(LLM_CALLS)
    ]
    return _sequence([_node("start", "start"), *prompts, _node("end", "end")], "llm-chain")


def check_lattice(result: Any, kind: str, n: int) -> None:
    assert result.status == "completed", result.failure
    got = result.vars
    if kind == "counter":
        assert got.get("count", 0) == n, got
    elif kind == "append":
        assert got.get("items", []) == list(range(n)), got
    else:
        assert len(got) == n, len(got)


class SleepProvider:
    """A model that answers ``ok`` after ``await asyncio.sleep(latency)`` (0 included),
    like the LangGraph nodes below."""

    name = "bench"

    def __init__(self, latency: float) -> None:
        self.latency = latency

    async def complete(self, request: LLMRequest) -> LLMResponse:
        await asyncio.sleep(self.latency)
        return LLMResponse(text="ok", usage=TokenUsage(10, 1), model="bench")


# -- LangGraph graphs -------------------------------------------------------------------


def _merge(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {**a, **b}


class CounterState(TypedDict):
    count: int


class AppendState(TypedDict):
    items: Annotated[list[int], operator.add]


class TransformState(TypedDict):
    results: Annotated[dict[str, int], _merge]


class LLMState(TypedDict):
    out: Annotated[list[str], operator.add]


def lg_chain(n: int, kind: str, checkpointer: Any = None, *, asynchronous: bool = False) -> Any:
    """A chain of ``n`` LangGraph nodes doing ``kind``'s op. ``asynchronous`` makes every node
    an ``async def``, as a graph run with ``ainvoke`` is written: plain ``def`` nodes under
    ``ainvoke`` are each handed to a thread, which costs LangGraph about 1.5x."""
    schema: Any = {"counter": CounterState, "append": AppendState, "transform": TransformState}[
        kind
    ]
    graph = StateGraph(schema)

    def make(i: int) -> Callable[[Any], Any]:
        if kind == "counter":

            def update(state: Any) -> dict[str, Any]:
                return {"count": state["count"] + 1}

        elif kind == "append":

            def update(state: Any) -> dict[str, Any]:
                return {"items": [i]}

        else:
            key = f"n{i}"

            def update(state: Any) -> dict[str, Any]:
                return {"results": {key: len(state["results"])}}

        if not asynchronous:
            return update

        async def step(state: Any) -> dict[str, Any]:
            return update(state)

        return step

    for i in range(n):
        graph.add_node(f"n{i}", make(i))
    graph.add_edge(START, "n0")
    for i in range(n - 1):
        graph.add_edge(f"n{i}", f"n{i + 1}")
    graph.add_edge(f"n{n - 1}", END)
    return graph.compile(checkpointer=checkpointer)


def lg_input(kind: str) -> dict[str, Any]:
    return {"counter": {"count": 0}, "append": {"items": []}, "transform": {"results": {}}}[kind]


def check_lg(out: Any, kind: str, n: int) -> None:
    if kind == "counter":
        assert out["count"] == n, out
    elif kind == "append":
        assert out["items"] == list(range(n)), out
    else:
        assert len(out["results"]) == n, out


def lg_llm_chain(latency: float) -> Any:
    graph = StateGraph(LLMState)

    async def call(state: LLMState) -> dict[str, Any]:
        await asyncio.sleep(latency)
        return {"out": ["ok"]}

    previous = START
    for i in range(LLM_CALLS):
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
    sys.stdout.flush()


def settings_for(gc_mode: str) -> RuntimeSettings:
    return RuntimeSettings(gc_pacing=gc_mode == "defaults")


# -- sections ---------------------------------------------------------------------------


def section_chains(plan: Plan, gc_modes: list[str], mode: str) -> dict[str, Any]:
    """``mode`` ``sync`` (run vs invoke) or ``async`` (arun vs ainvoke in one loop)."""
    out: dict[str, Any] = {}
    loop = asyncio.new_event_loop() if mode == "async" else None
    try:
        for gc_mode in gc_modes:
            rows = []
            for kind in KINDS:
                for n in plan.chain_sizes:
                    ir = lower(chain_document(n, kind))
                    runner = Runner(ir, store=RunStore(None), settings=settings_for(gc_mode))
                    app = lg_chain(n, kind, asynchronous=loop is not None)
                    config = {"recursion_limit": n + 10}
                    start = lg_input(kind)
                    if loop is None:
                        check_lattice(runner.run({}), kind, n)
                        check_lg(app.invoke(start, config), kind, n)
                        pair = interleaved(
                            lambda r=runner: r.run({}),
                            lambda a=app, s=start, c=config: a.invoke(s, c),
                            per=n,
                            plan=plan,
                        )
                    else:
                        check_lattice(loop.run_until_complete(runner.arun({})), kind, n)
                        check_lg(loop.run_until_complete(app.ainvoke(start, config)), kind, n)
                        pair = interleaved_async(
                            loop,
                            lambda r=runner: r.arun({}),
                            lambda a=app, s=start, c=config: a.ainvoke(s, c),
                            per=n,
                            plan=plan,
                        )
                    out[f"{gc_mode}/{kind}/{n}"] = pair.to_json()
                    rows.append(
                        [
                            kind,
                            f"{n:,}",
                            us(med(pair.lattice_cpu)),
                            us(med(pair.other_cpu)),
                            fmt_spread(pair.ratios("cpu")),
                            fmt_spread(pair.ratios("wall")),
                        ]
                    )
            entry = ("Runner.run", "invoke") if mode == "sync" else ("Runner.arun", "ainvoke")
            table(
                f"{mode}: per-op cost, {entry[0]} vs LangGraph {entry[1]}, GC {gc_mode}; "
                f"µs per op (CPU, median of {plan.trials} interleaved trials); "
                "ratio LangGraph ÷ Lattice per trial: median [min–max]",
                ["op", "N", "Lattice µs", "LangGraph µs", "ratio CPU", "ratio wall"],
                rows,
            )
    finally:
        if loop is not None:
            loop.close()
    return out


def _sqlite_saver(path: Path, synchronous: str) -> tuple[Any, str]:
    """A SqliteSaver on ``path`` with ``PRAGMA synchronous`` set: ``FULL`` syncs every commit
    (a committed step survives a power cut, as under Lattice's ``fsync``), ``OFF`` leaves
    commits to the OS (they survive a killed process, as under Lattice's ``os``)."""
    conn = sqlite3.connect(str(path), check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()
    conn.execute(f"PRAGMA synchronous={synchronous}")
    sync = conn.execute("PRAGMA synchronous").fetchone()[0]
    mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    return saver, f"journal_mode={mode}, synchronous={sync}"


PERSIST_PAIRS = {
    ("fsync", "sqlite-full"): "same: each step on disk (synced) before the next",
    ("os", "sqlite-off"): "same: each step handed to the OS before the next (no sync)",
    ("fsync", "sqlite-full-async"): "differ: LangGraph saves steps on a background thread",
    ("os", "memory"): "differ: LangGraph keeps steps in memory only",
}
"""Lattice's durability against LangGraph's checkpointer, and what each pair guarantees."""


def lg_call(
    app: Any, durability: str | None, start: dict[str, Any], n: int, ids: itertools.count[int]
) -> Callable[[], Any]:
    """``app.invoke`` on a new thread id each time (a checkpointer keeps threads apart)."""

    def call() -> Any:
        config = {"recursion_limit": n + 10, "configurable": {"thread_id": f"t{next(ids)}"}}
        if durability is None:
            return app.invoke(start, config)
        return app.invoke(start, config, durability=durability)

    return call


def section_persist(plan: Plan, gc_modes: list[str]) -> dict[str, Any]:
    """Run folders (fsync / os) against InMemorySaver and SqliteSaver (sync / async)."""
    out: dict[str, Any] = {}
    base = Path(tempfile.mkdtemp(prefix="lattice-compare-", dir=os.environ.get("BENCH_DIR")))
    counter = itertools.count()
    try:
        saver_full, pragma_full = _sqlite_saver(base / "checkpoints-full.sqlite", "FULL")
        saver_off, pragma_off = _sqlite_saver(base / "checkpoints-off.sqlite", "OFF")
        print(f"\npersist: files under {base} (SqliteSaver: {pragma_full}; and {pragma_off})")
        for (mine, theirs), guarantee in PERSIST_PAIRS.items():
            print(f"  folder {mine} vs LG {theirs}: guarantees {guarantee}")
        sizes: list[list[str]] = []
        syncs: list[list[str]] = []
        for gc_mode in gc_modes:
            rows = []
            for kind in ("counter", "append"):
                for n in plan.persist_sizes:
                    ir = lower(chain_document(n, kind))
                    runners = {
                        d: Runner(
                            ir,
                            store=RunStore(base / f"runs-{d}", durability=d),  # type: ignore[arg-type]
                            settings=settings_for(gc_mode),
                        )
                        for d in ("fsync", "os")
                    }
                    for runner in runners.values():
                        check_lattice(runner.run({}), kind, n)
                    apps = {
                        "memory": (lg_chain(n, kind, InMemorySaver()), None),
                        "sqlite-full": (lg_chain(n, kind, saver_full), "sync"),
                        "sqlite-off": (lg_chain(n, kind, saver_off), "sync"),
                        "sqlite-full-async": (lg_chain(n, kind, saver_full), "async"),
                    }
                    start = lg_input(kind)

                    for app, durability in apps.values():
                        check_lg(lg_call(app, durability, start, n, counter)(), kind, n)
                    for mine, theirs in PERSIST_PAIRS:
                        runner = runners[mine]
                        app, durability = apps[theirs]
                        pair = interleaved(
                            lambda r=runner: r.run({}),
                            lg_call(app, durability, start, n, counter),
                            per=n,
                            plan=plan,
                        )
                        out[f"{gc_mode}/{kind}/{n}/{mine}/{theirs}"] = pair.to_json()
                        rows.append(
                            [
                                kind,
                                f"{n:,}",
                                f"folder {mine}",
                                f"LG {theirs}",
                                PERSIST_PAIRS[mine, theirs].split(":")[0],
                                us(med(pair.lattice_wall)),
                                us(med(pair.other_wall)),
                                fmt_spread(pair.ratios("wall")),
                                us(med(pair.lattice_cpu)),
                                us(med(pair.other_cpu)),
                                fmt_spread(pair.ratios("cpu")),
                            ]
                        )
                    sizes.append(_bytes_per_op(base, ir, kind, n, counter))
                    if gc_mode == gc_modes[0]:
                        syncs.append(_syncs_per_op(runners["fsync"], kind, n))
                    for d in ("fsync", "os"):  # keep the directory small between sizes
                        shutil.rmtree(base / f"runs-{d}", ignore_errors=True)
            table(
                f"persist: per-op cost with persistence, Runner.run vs invoke, GC {gc_mode}; "
                f"µs per op (median of {plan.trials} interleaved trials); "
                "ratio LangGraph ÷ Lattice: median [min–max]",
                [
                    "op",
                    "N",
                    "Lattice",
                    "LangGraph",
                    "guarantees",
                    "Lattice wall",
                    "LG wall",
                    "ratio wall",
                    "Lattice CPU",
                    "LG CPU",
                    "ratio CPU",
                ],
                rows,
            )
        table(
            "persist: bytes stored per run and per op (Lattice: every file of the run folder; "
            "LangGraph: the checkpoint and write blobs SqliteSaver stored for the run)",
            ["op", "N", "Lattice bytes/run", "bytes/op", "LangGraph bytes/run", "bytes/op"],
            sizes[: len(sizes) // len(gc_modes)],
        )
        table(
            'persist: disk syncs of one Lattice run under durability="fsync" (os.fsync and '
            "os.fdatasync calls, counted in this process); ops = the chain's N + its start "
            "and end ops",
            ["op", "N", "ops", "fdatasync", "fsync", "syncs", "syncs per op"],
            syncs,
        )
        out["syncs"] = syncs
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return out


def _bytes_per_op(base: Path, ir: Any, kind: str, n: int, ids: itertools.count[int]) -> list[str]:
    """One run on each side, its stored bytes: Lattice's folder, LangGraph's blobs."""
    result = Runner(ir, store=RunStore(base / "bytes", durability="os")).run({})
    assert result.run_dir is not None
    mine = sum(p.stat().st_size for p in result.run_dir.rglob("*") if p.is_file())
    saver, _ = _sqlite_saver(base / f"bytes-{kind}-{n}.sqlite", "FULL")
    lg_call(lg_chain(n, kind, saver), "sync", lg_input(kind), n, ids)()
    conn = saver.conn
    theirs = conn.execute(
        "SELECT coalesce(sum(length(checkpoint)) + sum(length(metadata)), 0) FROM checkpoints"
    ).fetchone()[0]
    theirs += conn.execute("SELECT coalesce(sum(length(value)), 0) FROM writes").fetchone()[0]
    conn.close()
    return [kind, f"{n:,}", f"{mine:,}", f"{mine / n:,.0f}", f"{theirs:,}", f"{theirs / n:,.0f}"]


def _syncs_per_op(runner: Any, kind: str, n: int) -> list[str]:
    """One run of ``runner`` (``durability="fsync"``), its ``fsync`` and ``fdatasync`` calls
    counted by wrapping the two functions of ``os`` for the length of the run."""
    counts = {"fsync": 0, "fdatasync": 0}
    real = {name: getattr(os, name) for name in counts}

    def counting(name: str) -> Callable[[int], None]:
        def call(fd: int) -> None:
            counts[name] += 1
            real[name](fd)

        return call

    for name in counts:
        setattr(os, name, counting(name))
    try:
        check_lattice(runner.run({}), kind, n)
    finally:
        for name, function in real.items():
            setattr(os, name, function)
    total = sum(counts.values())
    ops = n + 2
    return [
        kind,
        f"{n:,}",
        f"{ops:,}",
        str(counts["fdatasync"]),
        str(counts["fsync"]),
        str(total),
        f"{total / ops:.2f}",
    ]


Burst = tuple[float, float]
"""Wall and CPU seconds of one burst of concurrent runs (``gc.collect()`` before, not in it)."""


async def _lattice_burst(runner: Runner, c: int) -> Burst:
    gc.collect()
    cpu, started = time.process_time(), time.perf_counter()
    results = await asyncio.gather(*(runner.arun({}) for _ in range(c)))
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    assert all(r.status == "completed" for r in results), results[0].failure
    assert all(r.usage.calls == LLM_CALLS for r in results)
    return wall, cpu


async def _lg_burst(app: Any, c: int) -> Burst:
    gc.collect()
    cpu, started = time.process_time(), time.perf_counter()
    results = await asyncio.gather(*(app.ainvoke({"out": []}) for _ in range(c)))
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    assert all(len(r["out"]) == LLM_CALLS for r in results)
    return wall, cpu


async def _floor_burst(c: int, latency: float) -> Burst:
    async def sleeper() -> None:
        for _ in range(LLM_CALLS):
            await asyncio.sleep(latency)

    gc.collect()
    cpu, started = time.process_time(), time.perf_counter()
    await asyncio.gather(*(sleeper() for _ in range(c)))
    return time.perf_counter() - started, time.process_time() - cpu


Job = tuple[str, Callable[[], Awaitable[Burst]], Callable[[], Awaitable[Burst]] | None]
"""A side of the concurrency table: its name, its burst at 20 ms, its burst at 0 ms."""


def section_concurrent(plan: Plan, gc_modes: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    ir = lower(llm_document())
    loop = asyncio.new_event_loop()
    try:
        for gc_mode in gc_modes:
            settings = settings_for(gc_mode)
            slow = Runner(
                ir, provider=SleepProvider(LATENCY), store=RunStore(None), settings=settings
            )
            fast = Runner(ir, provider=SleepProvider(0.0), store=RunStore(None), settings=settings)
            lg_slow, lg_fast = lg_llm_chain(LATENCY), lg_llm_chain(0.0)
            loop.run_until_complete(_lattice_burst(fast, 10))  # warm-up
            loop.run_until_complete(_lg_burst(lg_fast, 10))
            rows = []
            for c in plan.concurrency:
                walls: dict[str, list[float]] = {"lattice": [], "lg": [], "floor": []}
                cpus: dict[str, list[float]] = {"lattice": [], "lg": [], "floor": []}
                bind = functools.partial
                jobs: list[Job] = [
                    ("lattice", bind(_lattice_burst, slow, c), bind(_lattice_burst, fast, c)),
                    ("lg", bind(_lg_burst, lg_slow, c), bind(_lg_burst, lg_fast, c)),
                    ("floor", bind(_floor_burst, c, LATENCY), bind(_floor_burst, c, 0.0)),
                ]
                for trial in range(plan.trials):
                    order = jobs[trial % 3 :] + jobs[: trial % 3]
                    for name, wall_job, cpu_job in order:
                        walls[name].append(loop.run_until_complete(wall_job())[0])
                        if cpu_job is not None:
                            cpus[name].append(loop.run_until_complete(cpu_job())[1] / c)
                out[f"{gc_mode}/{c}"] = {"wall_s": walls, "cpu_per_run_s": cpus}
                ratio = [lg / mine for mine, lg in zip(walls["lattice"], walls["lg"], strict=True)]
                rows.append(
                    [
                        f"{c:,}",
                        f"{med(walls['lattice']) / IDEAL:.2f}x [{min(walls['lattice']) / IDEAL:.2f}–{max(walls['lattice']) / IDEAL:.2f}]",
                        f"{med(walls['lg']) / IDEAL:.2f}x [{min(walls['lg']) / IDEAL:.2f}–{max(walls['lg']) / IDEAL:.2f}]",
                        f"{med(walls['floor']) / IDEAL:.2f}x",
                        fmt_spread(ratio),
                        us(med(cpus["lattice"])),
                        us(med(cpus["lg"])),
                        us(med(cpus["floor"])),
                    ]
                )
            table(
                f"concurrent: {LLM_CALLS} model calls a run, {LATENCY * 1e3:.0f} ms each "
                f"(ideal {IDEAL * 1e3:.0f} ms), GC {gc_mode}; wall ÷ ideal, median [min–max] "
                f"of {plan.trials} interleaved trials; CPU µs per run with 0 ms latency",
                [
                    "runs",
                    "Lattice",
                    "LangGraph",
                    "asyncio floor",
                    "LG ÷ Lattice wall",
                    "Lattice CPU/run",
                    "LG CPU/run",
                    "floor CPU/run",
                ],
                rows,
            )
    finally:
        loop.close()
    return out


IMPORTS = {
    "lattice": "from lattice import Runner, lower, RunStore",
    "lattice-runner": "import lattice; lattice.Runner",
    "langgraph": "import langgraph.graph",
}
HEAVY = ("networkx", "httpx", "jsonschema", "pydantic", "rich", "openai", "anthropic", "mcp")


def _import_once(statement: str, env: dict[str, str], cwd: str) -> dict[str, Any]:
    """One fresh interpreter, run from ``cwd`` (``python -c`` puts the working directory
    first on sys.path: from a checkout it would import that checkout's lattice)."""
    code = (
        "import sys, time, json\n"
        "c, w = time.process_time(), time.perf_counter()\n"
        f"{statement}\n"
        "w, c = time.perf_counter() - w, time.process_time() - c\n"
        "mods = sorted({m.split('.')[0] for m in sys.modules})\n"
        "print(json.dumps({'wall': w, 'cpu': c, 'modules': mods}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env, cwd=cwd
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def section_import(plan: Plan) -> dict[str, Any]:
    """Both sides with bytecode caches, as after ``pip install`` (which compiles them): an
    editable or source checkout under PYTHONDONTWRITEBYTECODE=1 would compile Lattice's
    modules on every import while LangGraph's come compiled. The caches live in a
    temporary PYTHONPYCACHEPREFIX, filled by a first, untimed import of each statement."""
    figures: dict[str, dict[str, list[float]]] = {k: {"wall": [], "cpu": []} for k in IMPORTS}
    loaded: dict[str, list[str]] = {}
    names = list(IMPORTS)
    with tempfile.TemporaryDirectory(prefix="lattice-pycache-") as cache:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = cache
        for name in names:
            _import_once(IMPORTS[name], env, cache)  # fills the bytecode cache
        for trial in range(plan.import_trials):
            for name in names[trial % 3 :] + names[: trial % 3]:
                got = _import_once(IMPORTS[name], env, cache)
                figures[name]["wall"].append(got["wall"])
                figures[name]["cpu"].append(got["cpu"])
                loaded[name] = [m for m in HEAVY if m in got["modules"]]
    rows = []
    for name in ("lattice", "lattice-runner"):
        ratio_cpu = [
            m / t for m, t in zip(figures[name]["cpu"], figures["langgraph"]["cpu"], strict=True)
        ]
        ratio_wall = [
            m / t for m, t in zip(figures[name]["wall"], figures["langgraph"]["wall"], strict=True)
        ]
        rows.append(
            [
                IMPORTS[name],
                f"{med(figures[name]['wall']) * 1e3:.0f}",
                f"{med(figures['langgraph']['wall']) * 1e3:.0f}",
                _ratio_text(ratio_wall),
                _ratio_text(ratio_cpu),
                ", ".join(loaded[name]) or "none",
            ]
        )
    table(
        f"import: time of the import statement in a fresh interpreter (bytecode cached for "
        f"both), median of {plan.import_trials} interleaved trials; ratio Lattice ÷ "
        "`import langgraph.graph`",
        ["statement", "ms", "LangGraph ms", "ratio wall", "ratio CPU", "heavy modules loaded"],
        rows,
    )
    return {"figures": figures, "heavy_modules": loaded}


def _ratio_text(values: list[float]) -> str:
    s = spread(values)
    return f"{s['median']:.2f}x [{s['min']:.2f}–{s['max']:.2f}]"


# -- main -------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: small sizes, 3 trials")
    parser.add_argument(
        "--sections",
        nargs="+",
        choices=["sync", "async", "persist", "concurrent", "import"],
        default=["sync", "async", "persist", "concurrent", "import"],
    )
    parser.add_argument("--gc", choices=["defaults", "same", "both"], default="both")
    parser.add_argument("--trials", type=int, help="interleaved trials per comparison")
    parser.add_argument("--sample", type=float, help="seconds per timed sample of one side")
    parser.add_argument("--sizes", type=int, nargs="+", help="chain sizes of sync and async")
    parser.add_argument("--json", type=Path, help="also write every figure to this file")
    args = parser.parse_args(argv)
    if StateGraph is None:
        print("LangGraph is not installed (pip install -e '.[bench]'): nothing to compare.")
        return 1
    plan = QUICK if args.quick else FULL
    if args.trials:
        plan = Plan(**{**plan.__dict__, "trials": args.trials, "import_trials": args.trials})
    if args.sample:
        plan = Plan(**{**plan.__dict__, "sample": args.sample})
    if args.sizes:
        plan = Plan(**{**plan.__dict__, "chain_sizes": tuple(args.sizes)})
    gc_modes = ["defaults", "same"] if args.gc == "both" else [args.gc]

    from importlib.metadata import version

    import lattice

    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    print(
        f"compare_langgraph ({'quick' if args.quick else 'full'}): Python "
        f"{platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs, load "
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; LangGraph {version('langgraph')}; "
        f"lattice from {Path(lattice.__file__).parent}; GC thresholds {gc.get_threshold()}"
    )
    started = time.perf_counter()
    results: dict[str, Any] = {"load_start": load}
    if "sync" in args.sections:
        results["sync"] = section_chains(plan, gc_modes, "sync")
    if "async" in args.sections:
        results["async"] = section_chains(plan, gc_modes, "async")
    if "persist" in args.sections:
        if SqliteSaver is None:
            print("\npersist: skipped (pip install langgraph-checkpoint-sqlite)")
        else:
            results["persist"] = section_persist(plan, gc_modes)
    if "concurrent" in args.sections:
        results["concurrent"] = section_concurrent(plan, gc_modes)
    if "import" in args.sections:
        results["import"] = section_import(plan)
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    results["load_end"] = load
    print(
        f"\n(total {time.perf_counter() - started:.0f} s; load at the end "
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f})"
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

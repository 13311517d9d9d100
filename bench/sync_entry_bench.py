"""CPU of one synchronous run, and of the synchronous entry alone.

Times ``Runner.run`` on the 10-op chains of ``compare_langgraph.py`` (counter, append,
transform), a run with no op between start and end, an empty coroutine through
``lattice.runtime.sync.run_sync``, and the counter chain through ``await runner.arun()``
inside a running loop (the run without the synchronous entry). The interpreter's GC
thresholds (``gc_pacing`` off), as ``compare_langgraph.py --gc same``; the figures are
µs of CPU per run (``time.process_time``), min / median / max over interleaved trials.

    python bench/sync_entry_bench.py                 # 7 trials of 2,000 runs each
    python bench/sync_entry_bench.py --trials 3 --runs 500
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compare_langgraph import chain_document, settings_for

from lattice import Runner, RunStore, lower
from lattice.runtime.sync import run_sync


def runner(n: int, kind: str) -> Runner:
    return Runner(
        lower(chain_document(n, kind)), store=RunStore(None), settings=settings_for("same")
    )


def per_call(fn: Callable[[], Any], runs: int) -> float:
    started = time.process_time()
    for _ in range(runs):
        fn()
    return (time.process_time() - started) / runs * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=7)
    parser.add_argument("--runs", type=int, default=2000, help="runs per trial and case")
    args = parser.parse_args(argv)
    chains = {kind: runner(10, kind) for kind in ("counter", "append", "transform")}
    empty = runner(0, "counter")
    loop = asyncio.new_event_loop()

    async def nothing() -> None:
        return None

    async def in_loop() -> float:
        counter = chains["counter"]
        started = time.process_time()
        for _ in range(args.runs):
            await counter.arun({})
        return (time.process_time() - started) / args.runs * 1e6

    cases: dict[str, Callable[[], float]] = {
        **{
            f"{kind}, 10 ops, Runner.run": (lambda r=r: per_call(lambda: r.run({}), args.runs))
            for kind, r in chains.items()
        },
        "start → end, Runner.run": lambda: per_call(lambda: empty.run({}), args.runs),
        "empty coroutine, run_sync": lambda: per_call(
            lambda: run_sync(nothing, what="x"), args.runs
        ),
        "counter, 10 ops, await arun() in a loop": lambda: loop.run_until_complete(in_loop()),
    }
    figures: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.trials):
        for name, case in cases.items():
            figures[name].append(case())
    loop.close()
    print(f"µs of CPU per call, min / median / max of {args.trials} trials")
    for name, values in figures.items():
        print(
            f"  {name:42s} {min(values):6.1f} / {statistics.median(values):6.1f} / {max(values):6.1f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

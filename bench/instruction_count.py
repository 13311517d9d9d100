"""Instructions per run, counted by valgrind's callgrind: a figure the machine's load does not move.

Each case runs in two fresh interpreters under ``valgrind --tool=callgrind``: one that
makes the Runner and warms it up (20 runs), and one that then does ``--runs`` more; the
difference of their totals divided by ``--runs`` is the instructions of one run. The
collector is off during the counted runs (``gc.disable()`` after a ``gc.collect()``), so
that where a collection happens to fall does not move the figure. The cases are the
10-op chains of ``compare_langgraph.py`` through ``Runner.run`` (``counter``, ``append``,
``transform``) and ``llm5``: ``--runs`` concurrent runs of five model calls gathered in
one loop (``SleepProvider(0)``, no run folder), as its ``concurrent`` section makes them.

    python bench/instruction_count.py                      # every case, 200 runs
    python bench/instruction_count.py --cases counter llm5 --runs 100

Needs ``valgrind`` on the PATH; about a minute a case on an idle core (valgrind runs
the interpreter some 50 times slower).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

CASES = ("counter", "append", "transform", "llm5")
WARM_UP = 20


def _run_case(case: str, runs: int) -> None:
    """The body counted under valgrind: warm up, then ``runs`` runs of ``case``."""
    from compare_langgraph import SleepProvider, chain_document, llm_document, settings_for

    from lattice import Runner, RunStore, lower

    settings = settings_for("same")
    if case == "llm5":
        runner = Runner(
            lower(llm_document()),
            provider=SleepProvider(0.0),
            store=RunStore(None),
            settings=settings,
        )
        loop = asyncio.new_event_loop()

        async def burst(count: int) -> None:
            results = await asyncio.gather(*(runner.arun({}) for _ in range(count)))
            assert all(r.status == "completed" for r in results)

        loop.run_until_complete(burst(WARM_UP))
        gc.collect()
        gc.disable()
        if runs:
            loop.run_until_complete(burst(runs))
        return
    runner = Runner(lower(chain_document(10, case)), store=RunStore(None), settings=settings)
    for _ in range(WARM_UP):
        runner.run({})
    gc.collect()
    gc.disable()
    for _ in range(runs):
        runner.run({})


def _count(case: str, runs: int, folder: Path) -> int:
    out = folder / f"callgrind-{case}-{runs}.out"
    done = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}",
            sys.executable,
            __file__,
            "--inner",
            case,
            str(runs),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    found = re.search(r"Collected : (\d+)", done.stderr)
    assert found, done.stderr[-2000:]
    return int(found.group(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    parser.add_argument("--runs", type=int, default=200, help="counted runs per case")
    parser.add_argument("--inner", nargs=2, metavar=("CASE", "RUNS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.inner:
        _run_case(args.inner[0], int(args.inner[1]))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        for case in args.cases:
            base = _count(case, 0, Path(tmp))
            total = _count(case, args.runs, Path(tmp))
            per_run = (total - base) / args.runs
            per_op = f"  ({per_run / 10:,.0f} an op)" if case != "llm5" else ""
            print(f"{case:10s} {per_run:12,.0f} instructions a run{per_op}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

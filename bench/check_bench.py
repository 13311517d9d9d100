"""Benchmark of ``lattice check`` on the two shapes that were once quadratic.

* ``invalid``: a chain of prompt nodes without a prompt, one error per node (checking
  used to count every error so far after each node: 20,000 nodes took 31.7 s).
* ``shared-variable``: a chain in which every other node sets the variable ``x`` and the
  others read ``{{ $vars.x }}`` (every setter × reader pair was a reachability search:
  50,000 nodes did not finish in 150 s).

Each document is written to a temporary file and checked by the ``lattice check``
command in this process (its diagnostics printed to the null device), as a user runs
it, but without the interpreter's start-up, which would swamp the small sizes. The
caches an earlier check filled are emptied first (``lower_bench.cold_caches``). The
last line per shape divides the CPU time per node at the largest size by that at the
smallest: about 1.0 means linear growth.

    python bench/check_bench.py                          # 1,000 and 20,000 / 50,000 nodes
    python bench/check_bench.py --shape invalid --sizes 1000 5000 20000 --repeat 5
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import itertools
import json
import os
import pstats
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lower_bench import cold_caches

from lattice.cli.main import main as lattice_main
from lattice.document import limits as document_limits

DEFAULT_SIZES = {"invalid": [1000, 20000], "shared-variable": [1000, 50000]}
"""The sizes of the issue's acceptance figures: 1,000 nodes against the large size."""


def _document(nodes: list[dict[str, Any]]) -> dict[str, Any]:
    """``nodes`` in a row between a start and an end node."""
    ids = ["start", *(n["id"] for n in nodes), "end"]
    return {
        "id": "bench",
        "name": "bench",
        "version": "1.0.0",
        "nodes": [
            {"id": "start", "type": "start", "name": "start", "data": {}},
            *nodes,
            {"id": "end", "type": "end", "name": "end", "data": {}},
        ],
        "connections": [
            {"id": f"c{i}", "from": a, "to": b} for i, (a, b) in enumerate(itertools.pairwise(ids))
        ],
    }


def _node(node_id: str, node_type: str, data: dict[str, Any]) -> dict[str, Any]:
    return {"id": node_id, "type": node_type, "name": node_id, "data": data}


def invalid(size: int) -> dict[str, Any]:
    """``size`` nodes in all, every prompt node without its prompt (an error each)."""
    return _document([_node(f"p{i}", "prompt", {}) for i in range(size - 2)])


def shared_variable(size: int) -> dict[str, Any]:
    """``size`` nodes in all, every other one setting ``x``, the others reading it."""
    return _document(
        [
            _node(f"s{i}", "variableStore", {"operation": "set", "name": "x", "value": i})
            if i % 2 == 0
            else _node(f"r{i}", "prompt", {"prompt": "Go on from {{ $vars.x }}"})
            for i in range(size - 2)
        ]
    )


SHAPES: dict[str, Callable[[int], dict[str, Any]]] = {
    "invalid": invalid,
    "shared-variable": shared_variable,
}


def time_check(path: Path, repeat: int) -> tuple[float, float, int]:
    """The best CPU and wall seconds of ``lattice check path`` and its exit code."""
    cpu_times, wall_times, code = [], [], 0
    for _ in range(repeat):
        cold_caches()
        gc.collect()
        with open(os.devnull, "w") as null, contextlib.redirect_stderr(null):
            wall, cpu = time.perf_counter(), time.process_time()
            code = lattice_main(["check", str(path)])
            cpu_times.append(time.process_time() - cpu)
            wall_times.append(time.perf_counter() - wall)
    return min(cpu_times), min(wall_times), code


def count_calls(path: Path) -> int:
    """Python function calls made by one ``lattice check path`` (cProfile): a measure of
    work that machine load does not move."""
    cold_caches()
    profiler = cProfile.Profile()
    with open(os.devnull, "w") as null, contextlib.redirect_stderr(null):
        profiler.enable()
        lattice_main(["check", str(path)])
        profiler.disable()
    return int(pstats.Stats(profiler).total_calls)  # type: ignore[attr-defined]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=[*SHAPES, "all"], default="all")
    parser.add_argument("--sizes", type=int, nargs="+", metavar="N", help="nodes per document")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per size (default 3)")
    parser.add_argument(
        "--calls",
        action="store_true",
        help="also count function calls per node (exact; one extra profiled run per size)",
    )
    args = parser.parse_args(argv)
    shapes = list(SHAPES) if args.shape == "all" else [args.shape]
    worst = 0.0
    with tempfile.TemporaryDirectory(prefix="lattice-check-bench-") as tmp:
        for shape in shapes:
            sizes = sorted(set(args.sizes or DEFAULT_SIZES[shape]))
            if min(sizes) < 3:
                parser.error("sizes must be at least 3 (a start, a node and an end)")
            print(f"lattice check, {shape}, best of {args.repeat}")
            print(
                f"{'nodes':>8} {'bytes':>11} {'exit':>5} {'wall ms':>9} {'cpu ms':>9} "
                f"{'µs/node':>8}" + (f" {'calls/node':>11}" if args.calls else "")
            )
            per_node: list[float] = []
            calls: list[float] = []
            for size in sizes:
                path = Path(tmp) / f"{shape}-{size}.json"
                path.write_text(json.dumps(SHAPES[shape](size)), encoding="utf-8")
                bytes_ = path.stat().st_size
                document_limits.MAX_DOCUMENT_BYTES = max(document_limits.MAX_DOCUMENT_BYTES, bytes_)
                if not per_node:
                    time_check(path, 1)  # warm-up: imports, registry
                cpu, wall, code = time_check(path, args.repeat)
                per_node.append(cpu * 1e6 / size)
                if args.calls:
                    calls.append(count_calls(path) / size)
                print(
                    f"{size:>8,} {bytes_:>11,} {code:>5} {wall * 1e3:>9.1f} {cpu * 1e3:>9.1f} "
                    f"{per_node[-1]:>8.1f}" + (f" {calls[-1]:>11.0f}" if calls else "")
                )
            if len(per_node) > 1:
                ratio = per_node[-1] / per_node[0]
                worst = max(worst, ratio)
                verdict = "about linear" if ratio < 1.3 else "SUPER-LINEAR"
                print(
                    f"per-node time at {sizes[-1]:,} / at {sizes[0]:,} nodes: {ratio:.2f} "
                    f"({verdict})"
                )
                if calls:
                    growth = calls[-1] / calls[0]
                    print(f"per-node calls at {sizes[-1]:,} / at {sizes[0]:,} nodes: {growth:.2f}")
                print()
    return 0 if worst < 1.3 else 1


if __name__ == "__main__":
    sys.exit(main())

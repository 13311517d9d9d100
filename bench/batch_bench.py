"""``lattice batch`` throughput: 10,000 rows of a 5-LLM-op workflow, on the local engine and
on a local Ray.

Every model call is a mock call that sleeps ``--latency-ms`` (20 ms): a row takes at
least 5 × 20 ms = 100 ms, so a row in flight finishes at most 10 rows a second, and
``--concurrency`` rows in flight (200) finish at most 200 × 10 = 2,000 rows/s. That is
the ideal; the figure reported is how close each engine gets.

Each engine runs in a child process of its own (clean peak memory), which reports:

- rows/s: rows run over the time from the first row dispatched to the last line written
  (the workflow is lowered, the rows read and checked before; Ray is started before),
  and its ratio to the ideal;
- CPU per row: the driver's CPU time (plus, on Ray, the CPU time of the actors that ran
  rows, read from each actor before it is stopped) divided by the rows;
- peak RSS of the driver, and on Ray of the largest actor.

Variants: ``local`` (no run folders), ``local-folders`` (a run folder per row,
durability ``os``; fewer rows: every row writes a dozen files), ``ray`` (2 actors with
``concurrency / 2`` rows in flight each, so the same 200 rows in flight in all).

    python bench/batch_bench.py                    # local, local-folders, ray (if installed)
    python bench/batch_bench.py --quick            # 2,000 rows
    python bench/batch_bench.py --only local --rows 10000 --concurrency 200

Needs lattice only; ``ray`` needs ``pip install 'lattice-lre[ray]'`` (skipped otherwise).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
LLM_OPS = 5


def chain_document(count: int) -> dict[str, Any]:
    """``start → p0 → … → p<count-1> → end``: each ``p`` an LLM prompt on the row's text."""

    def node(node_id: str, kind: str, **data: Any) -> dict[str, Any]:
        return {
            "id": node_id,
            "type": kind,
            "name": node_id,
            "position": {"x": 0, "y": 0},
            "data": data,
        }

    nodes = [
        node(
            "start",
            "start",
            inputs={
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"],
            },
        )
    ]
    nodes += [node(f"p{i}", "prompt", prompt=f"Step {i}: {{{{ $in.text }}}}") for i in range(count)]
    nodes.append(node("end", "end"))
    ids = [n["id"] for n in nodes]
    connections = [
        {"id": f"c{i}", "from": a, "to": b} for i, (a, b) in enumerate(itertools.pairwise(ids))
    ]
    return {
        "id": "batch-bench",
        "name": "batch-bench",
        "version": "1.0.0",
        "nodes": nodes,
        "connections": connections,
    }


def child(args: argparse.Namespace) -> None:
    """Run one variant in this process and print its figures as one JSON line."""
    sys.path.insert(0, str(REPO))
    from lattice.batch.engine import BatchOptions, BatchRun, make_engine
    from lattice.batch.limits import BatchLimits
    from lattice.runtime.sync import run_sync

    folder = Path(args.workdir)
    flow = folder / "flow.json"
    flow.write_text(json.dumps(chain_document(LLM_OPS)))
    rows = folder / "rows.jsonl"
    rows.write_text(
        "".join(
            json.dumps({"id": i, "inputs": {"text": f"row {i}"}}) + "\n" for i in range(args.rows)
        )
    )
    engine = "ray" if args.child == "ray" else "local"
    ray_started = 0.0
    if engine == "ray":
        from lattice.batch.ray_engine import start_local_ray

        began = time.perf_counter()
        start_local_ray(num_cpus=2)
        ray_started = time.perf_counter() - began
    concurrency = args.concurrency // 2 if engine == "ray" else args.concurrency
    options = BatchOptions(
        workflow=flow,
        inputs=rows,
        output=folder / f"{args.child}.jsonl",
        concurrency=concurrency,
        runs_dir=folder / "runs" if args.child == "local-folders" else None,
        mock={"responses": {}, "default": "ok"},
        mock_latency=args.latency_ms / 1000,
        durability="os",
        limits=BatchLimits(),
        engine=engine,
        ray_actors=2 if engine == "ray" else None,
    )
    run = BatchRun(options)
    run.engine = make_engine(options, run.prepared)
    cpu_before = time.process_time()
    summary = run_sync(run.arun, what="")
    driver_cpu = time.process_time() - cpu_before
    workers = getattr(run.engine, "worker_stats", [])
    worker_cpu = sum(w["cpu_s"] for w in workers)
    result = {
        "variant": args.child,
        "rows": args.rows,
        "completed": summary.rows.get("completed", 0),
        "elapsed_s": summary.elapsed_s,
        "rows_per_s": summary.rows_per_second,
        "driver_cpu_s": driver_cpu,
        "worker_cpu_s": worker_cpu,
        "cpu_ms_per_row": (driver_cpu + worker_cpu) / args.rows * 1000,
        "driver_peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "worker_peak_rss_mib": max((w["peak_rss_mib"] for w in workers), default=None),
        "ray_start_s": ray_started,
        "p50_ms": summary.latency_ms.get("p50"),
        "p95_ms": summary.latency_ms.get("p95"),
    }
    if engine == "ray":
        import ray

        ray.shutdown()
    print("RESULT " + json.dumps(result), flush=True)


def run_variant(variant: str, rows: int, args: argparse.Namespace) -> dict[str, Any] | None:
    with tempfile.TemporaryDirectory(prefix="batch-bench-") as workdir:
        command = [
            sys.executable,
            __file__,
            "--child",
            variant,
            "--rows",
            str(rows),
            "--concurrency",
            str(args.concurrency),
            "--latency-ms",
            str(args.latency_ms),
            "--workdir",
            workdir,
        ]
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
        for line in done.stdout.splitlines():
            if line.startswith("RESULT "):
                return dict(json.loads(line[len("RESULT ") :]))
        print(f"{variant} failed:\n{done.stderr[-3000:]}", file=sys.stderr)
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--folder-rows", type=int, default=2_000, help="rows of local-folders")
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--quick", action="store_true", help="2,000 rows (500 with folders)")
    parser.add_argument("--only", action="append", choices=["local", "local-folders", "ray"])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args)
        return 0
    if args.quick:
        args.rows, args.folder_rows = 2_000, 500
    variants = args.only or ["local", "local-folders", "ray"]
    if "ray" in variants:
        try:
            import ray  # noqa: F401
        except ImportError:
            print("ray is not installed (pip install 'lattice-lre[ray]'): skipping the ray variant")
            variants = [v for v in variants if v != "ray"]
    ideal = args.concurrency * 1000 / (LLM_OPS * args.latency_ms)
    print(
        f"{LLM_OPS} LLM ops a row, mock calls of {args.latency_ms:g} ms, {args.concurrency} rows in "
        f"flight: ideal {ideal:,.0f} rows/s ({os.cpu_count()} CPUs)"
    )
    header = f"{'variant':<14} {'rows':>6} {'rows/s':>8} {'× ideal':>8} {'CPU/row':>9} {'driver RSS':>11} {'actor RSS':>10} {'p50':>7} {'p95':>7}"
    print(header)
    print("-" * len(header))
    for variant in variants:
        rows = args.folder_rows if variant == "local-folders" else args.rows
        result = run_variant(variant, rows, args)
        if result is None:
            continue
        rate = result["rows_per_s"] or 0.0
        actor = result["worker_peak_rss_mib"]
        print(
            f"{variant:<14} {rows:>6} {rate:>8,.0f} {ideal / rate if rate else float('inf'):>7.2f}x "
            f"{result['cpu_ms_per_row']:>7.2f}ms {result['driver_peak_rss_mib']:>8.0f} MiB "
            f"{(f'{actor:.0f} MiB' if actor else '-'):>10} {result['p50_ms'] or 0:>5.0f}ms {result['p95_ms'] or 0:>5.0f}ms"
            + (f"   (Ray started in {result['ray_start_s']:.1f}s)" if result["ray_start_s"] else "")
        )
        if result["completed"] != rows:
            print(f"  only {result['completed']} of {rows} rows completed", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

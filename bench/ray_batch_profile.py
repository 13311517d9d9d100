"""Where the time of ``lattice batch`` on Ray goes: per-row timing split and a driver profile.

Runs the workflow of ``bench/batch_bench.py`` (5 mock model calls of ``--latency-ms``
each, ``--concurrency`` rows in flight over 2 actors) on a local Ray, with the actor
class replaced by a subclass that stamps each row's line with when its chunk reached
the actor, when the row's run started and ended, and when its line left the actor. The
driver stamps when each row was handed to a chunk and when its line came back. Clocks
are ``time.time()`` of processes on one machine. Per row, in ms (median / p90 / max):

- ``to actor``: the chunk handed over → the actor's method starts (pickling the chunk,
  Ray's transport, the actor's event loop getting to it: queueing);
- ``run``: the row's run, start to end (the ideal is 5 × latency);
- ``in actor``: run ended → its line left the actor (waiting for the loop, batching);
- ``back``: the line left the actor → the driver has it (pickling, transport, the
  driver's loop).

Also: the pickled size and pickling time of one chunk and of its lines, the actors' and
the driver's CPU per row, and (``--profile``) the driver's cProfile, top by own time.

    python bench/ray_batch_profile.py --rows 2000 --profile
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pickle
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncGenerator, Iterable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from batch_bench import LLM_OPS, chain_document  # noqa: E402

from lattice.batch import ray_engine  # noqa: E402
from lattice.batch.worker import RowTask  # noqa: E402


class TimedRowActor(ray_engine.RowActor):
    """A ``RowActor`` whose lines carry the times their row went through."""

    async def run_rows(self, tasks: list[RowTask]) -> AsyncGenerator[list[dict[str, Any]], None]:
        received = time.time()
        runs: dict[Any, tuple[float, float]] = {}
        run_row = self.worker.run_row

        async def timed(task: RowTask) -> dict[str, Any]:
            began = time.time()
            line = await run_row(task)
            runs[task.id] = (began, time.time())
            return line

        self.worker.run_row = timed  # type: ignore[method-assign]
        try:
            async for lines in super().run_rows(tasks):
                left = time.time()
                for line in lines:
                    began, ended = runs.pop(line["id"])
                    line["_t"] = {"recv": received, "start": began, "end": ended, "left": left}
                yield lines
        finally:
            self.worker.run_row = run_row  # type: ignore[method-assign]


def stats(values: list[float]) -> str:
    ordered = sorted(values)
    p90 = ordered[int(len(ordered) * 0.9)]
    return f"{statistics.median(ordered):7.2f} {p90:7.2f} {ordered[-1]:7.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--profile", action="store_true", help="cProfile the driver")
    parser.add_argument("--top", type=int, default=20)
    args = parser.parse_args(argv)

    from lattice.batch.engine import BatchOptions, BatchRun, make_engine
    from lattice.batch.limits import BatchLimits
    from lattice.runtime.sync import run_sync

    ray_engine.RowActor = TimedRowActor  # type: ignore[misc]
    sent: dict[Any, float] = {}
    back: dict[Any, float] = {}
    timings: dict[Any, dict[str, float]] = {}
    original_run = ray_engine.RayEngine.run

    def stamped(tasks: Iterable[RowTask]) -> Iterable[RowTask]:
        for task in tasks:
            sent[task.id] = time.time()  # taken as its chunk is cut
            yield task

    async def timed_run(
        self: ray_engine.RayEngine, tasks: Iterable[RowTask]
    ) -> AsyncGenerator[dict[str, Any], None]:
        async for line in original_run(self, stamped(tasks)):
            back[line["id"]] = time.time()
            timings[line["id"]] = line.pop("_t")
            yield line

    ray_engine.RayEngine.run = timed_run  # type: ignore[method-assign]

    with tempfile.TemporaryDirectory(prefix="ray-profile-") as workdir:
        folder = Path(workdir)
        flow = folder / "flow.json"
        flow.write_text(json.dumps(chain_document(LLM_OPS)))
        rows = folder / "rows.jsonl"
        rows.write_text(
            "".join(
                json.dumps({"id": i, "inputs": {"text": f"row {i}"}}) + "\n"
                for i in range(args.rows)
            )
        )
        ray_engine.start_local_ray(num_cpus=2)
        options = BatchOptions(
            workflow=flow,
            inputs=rows,
            output=folder / "out.jsonl",
            concurrency=args.concurrency // 2,
            runs_dir=None,
            mock={"responses": {}, "default": "ok"},
            mock_latency=args.latency_ms / 1000,
            durability="os",
            limits=BatchLimits(),
            engine="ray",
            ray_actors=2,
        )
        run = BatchRun(options)
        run.engine = make_engine(options, run.prepared)
        profiler = cProfile.Profile() if args.profile else None
        cpu = time.process_time()
        if profiler is not None:
            profiler.enable()
        summary = run_sync(run.arun, what="")
        if profiler is not None:
            profiler.disable()
        driver_cpu = time.process_time() - cpu
        actors = getattr(run.engine, "worker_stats", [])
        chunk = [RowTask(id=i, line=i, inputs={"text": f"row {i}"}, run_id=None) for i in range(50)]
        lines = [json.loads(line) for line in (folder / "out.jsonl").read_text().splitlines()]

    ideal = args.concurrency * 1000 / (LLM_OPS * args.latency_ms)
    print(
        f"{summary.rows.get('completed', 0)} rows in {summary.elapsed_s:.2f} s: "
        f"{summary.rows_per_second:.0f} rows/s, {ideal / summary.rows_per_second:.2f}x of the ideal"
    )
    actor_cpu = sum(a["cpu_s"] for a in actors)
    print(
        f"CPU per row: driver {driver_cpu / args.rows * 1000:.3f} ms, actors "
        f"{actor_cpu / args.rows * 1000:.3f} ms (actors' whole process, start-up included)"
    )
    split = {
        "to actor": [(t["recv"] - sent[k]) * 1000 for k, t in timings.items()],
        "run": [(t["end"] - t["start"]) * 1000 for t in timings.values()],
        "in actor": [(t["left"] - t["end"]) * 1000 for t in timings.values()],
        "back": [(back[k] - t["left"]) * 1000 for k, t in timings.items()],
        "whole": [(back[k] - sent[k]) * 1000 for k in timings],
    }
    print(f"per row, ms    median     p90     max   (ideal run {LLM_OPS * args.latency_ms:.0f})")
    for name, values in split.items():
        print(f"  {name:<10} {stats(values)}")
    began = time.perf_counter()
    for _ in range(100):
        pickled_chunk = pickle.dumps(chunk)
    chunk_us = (time.perf_counter() - began) / 100 / len(chunk) * 1e6
    began = time.perf_counter()
    for _ in range(100):
        pickled_lines = pickle.dumps(lines[:50])
    lines_us = (time.perf_counter() - began) / 100 / 50 * 1e6
    print(
        f"pickling per row: the task {chunk_us:.1f} µs ({len(pickled_chunk) // 50} B), "
        f"its line {lines_us:.1f} µs ({len(pickled_lines) // 50} B)"
    )
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(args.top)
    import ray

    ray.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

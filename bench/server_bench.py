"""``lattice serve`` under load: runs started over HTTP, and many watchers of one run.

Starts ``lattice serve`` as a child process on 127.0.0.1 (an ephemeral port, a temporary
runs folder, a workflows folder holding two generated documents), then measures:

1. Event delivery, quiet: one run of ``--watch-ops`` LLM ops (mock calls that sleep
   ``--latency-ms``) followed by ``--watchers`` SSE clients. Each event delivered live
   carries the server's emission time (``?timing=1``: a comment line with ``time.time()``
   taken when the runner emitted it); the client notes the arrival time of each chunk.
   Reported: p50/p95/p99 of arrival − emission over every event and watcher.
2. Throughput: ``--runs`` runs of a workflow of ``--calls`` LLM ops (the same mock
   calls) started at once over HTTP (``POST /v1/runs``, an inline mock script with
   ``mock_latency_ms``). Reported: runs/s from the first request to the last run's end,
   p50/p95 of the start request's latency (until its 202), the peak of active runs
   (``GET /healthz``), and that every run completed.
3. Event delivery under load: phase 1 again while phase 2's burst runs.
4. Concurrency: ``--runs`` runs whose mock calls sleep ``--hold-ms`` (long enough for
   all of them to be active at once). Reported: the peak of active runs, the time until
   the last one ended, and that every run completed.

At the end: the server's peak RSS (``VmHWM`` of /proc/<pid>/status).

    python bench/server_bench.py                     # 200 runs, 50 watchers
    python bench/server_bench.py --quick             # 40 runs, 10 watchers
    python bench/server_bench.py --durability os     # run folders not forced to disk

Server and client share the machine: on 2 cores the client's own work (50 streams, 200
requests) is part of what is measured. Needs the ``server`` extra and httpx.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import re
import select
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]


def chain_document(count: int, name: str) -> dict[str, Any]:
    """``start → n0 → … → n<count-1> → end``, each an LLM prompt."""

    def node(node_id: str, kind: str, **data: Any) -> dict[str, Any]:
        return {
            "id": node_id,
            "type": kind,
            "name": node_id,
            "position": {"x": 0, "y": 0},
            "data": data,
        }

    ids = ["start", *(f"n{i}" for i in range(count)), "end"]
    nodes = [node("start", "start")]
    nodes += [node(f"n{i}", "prompt", prompt=f"step {i}") for i in range(count)]
    nodes.append(node("end", "end"))
    connections = [
        {"id": f"c{i}", "from": a, "to": b} for i, (a, b) in enumerate(itertools.pairwise(ids))
    ]
    return {
        "id": name,
        "name": name,
        "version": "1.0.0",
        "nodes": nodes,
        "connections": connections,
    }


def mock_script(count: int) -> dict[str, Any]:
    return {"responses": {f"n{i}": [f"answer {i}"] for i in range(count)}}


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


class Server:
    """``lattice serve`` as a child process."""

    def __init__(self, root: Path, args: argparse.Namespace) -> None:
        config = root / "lattice.toml"
        config.write_text(f'[runs]\ndurability = "{args.durability}"\n')
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from lattice.cli import main; raise SystemExit(main())",
                "serve",
                "--port",
                "0",
                "--runs-dir",
                str(root / "runs"),
                "--workflows",
                str(root / "workflows"),
                "--config",
                str(config),
                "--max-active-runs",
                str(args.runs + 10),
            ],
            cwd=root,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.process.stderr is not None
        self.lines: list[str] = []
        url = None
        while url is None:
            line = self.process.stderr.readline()
            if not line:
                raise SystemExit("lattice serve did not start:\n" + "".join(self.lines))
            self.lines.append(line)
            found = re.search(r"serving on (http://\S+) ", line)
            url = found.group(1) if found else None
        self.url = url
        self._drain = threading.Thread(
            target=lambda: self.lines.extend(self.process.stderr or ()), daemon=True
        )
        self._drain.start()

    def cpu_seconds(self) -> float:
        """User + system CPU time of the server process so far."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def peak_rss_mb(self) -> float:
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        found = re.search(r"VmHWM:\s+(\d+) kB", status)
        return int(found.group(1)) / 1024 if found else float("nan")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._drain.join(5)
        if self.process.stderr is not None:
            self.process.stderr.close()


STAMP = re.compile(rb": emitted (\d+\.\d+)\n")
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
"""Linux: the kernel stamps each received segment with its arrival time."""


class Watchers(threading.Thread):
    """``count`` SSE clients of one run on plain sockets, in a thread of their own.

    Each event delivered live carries its emission time (``?timing=true``); its arrival
    time is the kernel's receive timestamp of the data (``SO_TIMESTAMPNS``), so that the
    figure is what the server adds (emission → bytes on the client's socket), not the
    time this Python client takes to get round to 50 sockets on a shared 2-core machine.
    """

    def __init__(self, url: str, run_id: str, count: int) -> None:
        super().__init__(daemon=True)
        host, port = url.removeprefix("http://").rsplit(":", 1)
        self.address = (host, int(port))
        self.request = (
            f"GET /v1/runs/{run_id}/events?timing=true HTTP/1.1\r\nHost: {host}\r\n"
            "Accept: text/event-stream\r\n\r\n"
        ).encode()
        self.count = count
        self.delays: list[float] = []
        self.counts: list[int] = []
        self.connected = threading.Event()

    def run(self) -> None:
        poller = select.epoll()
        open_: dict[int, tuple[socket.socket, list[Any]]] = {}
        for _ in range(self.count):
            sock = socket.create_connection(self.address)
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            sock.sendall(self.request)
            sock.setblocking(False)
            poller.register(sock.fileno(), select.EPOLLIN)
            open_[sock.fileno()] = (sock, [b"", False, 0])  # buffer, past headers, events
        self.connected.set()
        space = socket.CMSG_SPACE(16)
        while open_:
            for fd, _ in poller.poll(30):
                sock, state = open_[fd]
                try:
                    data, ancillary, _, _ = sock.recvmsg(1 << 16, space)
                except BlockingIOError:
                    continue
                arrived = time.time()
                for level, kind, raw in ancillary:
                    if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                        seconds, nanos = struct.unpack("qq", raw[:16])
                        arrived = seconds + nanos / 1e9
                if not data or self._take(state, data, arrived):
                    poller.unregister(fd)
                    sock.close()
                    del open_[fd]
                    self.counts.append(state[2])
        poller.close()

    def _take(self, state: list[Any], data: bytes, arrived: float) -> bool:
        """Count the events and note the delays of ``data``; True at the end message."""
        buffer = state[0] + data
        if not state[1]:
            head = buffer.find(b"\r\n\r\n")
            if head < 0:
                state[0] = buffer
                return False
            state[1], buffer = True, buffer[head + 4 :]
        cut = buffer.rfind(b"\n\n")
        if cut < 0:
            state[0] = buffer
            return False
        complete, state[0] = buffer[: cut + 2], buffer[cut + 2 :]
        state[2] += complete.count(b"\ndata: ") + complete.startswith(b"data: ")
        self.delays.extend((arrived - float(t)) * 1000 for t in STAMP.findall(complete))
        if b"event: end" in complete:
            state[2] -= 1  # the end message has data too
            return True
        return False


async def watched_run(
    client: httpx.AsyncClient, args: argparse.Namespace
) -> tuple[list[float], list[int]]:
    """Phase 1 (and 3): one long run, many watchers."""
    response = await client.post(
        "/v1/runs",
        json={
            "workflow": "watched.json",
            "mock_script": mock_script(args.watch_ops),
            "mock_latency_ms": args.latency_ms,
        },
    )
    response.raise_for_status()
    watchers = Watchers(str(client.base_url).rstrip("/"), response.json()["run_id"], args.watchers)
    watchers.start()
    await asyncio.to_thread(watchers.join)
    return watchers.delays, watchers.counts


async def burst(
    client: httpx.AsyncClient, args: argparse.Namespace, latency_ms: float | None = None
) -> dict[str, Any]:
    """Phase 2 (and 4): many runs started at once; returns its figures."""
    body = {
        "workflow": "burst.json",
        "mock_script": mock_script(args.calls),
        "mock_latency_ms": args.latency_ms if latency_ms is None else latency_ms,
    }
    latencies: list[float] = []
    peak = 0
    retried = 0
    done = asyncio.Event()

    async def start_one() -> str:
        nonlocal retried
        began = time.perf_counter()
        try:
            response = await client.post("/v1/runs", json=body)
        except (httpx.ReadError, httpx.RemoteProtocolError):
            # A kept-alive connection the server closed as the request went out: sent
            # again on a new one (and counted).
            retried += 1
            response = await client.post("/v1/runs", json=body)
        latencies.append((time.perf_counter() - began) * 1000)
        response.raise_for_status()
        return str(response.json()["run_id"])

    async def sample() -> None:
        nonlocal peak
        while not done.is_set():
            health = (await client.get("/healthz")).json()
            peak = max(peak, health["active_runs"])
            await asyncio.sleep(0.01)

    sampler = asyncio.create_task(sample())
    began = time.perf_counter()
    run_ids = await asyncio.gather(*(start_one() for _ in range(args.runs)))
    while (await client.get("/healthz")).json()["active_runs"] > 0:
        await asyncio.sleep(0.005)
    wall = time.perf_counter() - began
    done.set()
    await sampler
    statuses: dict[str, int] = {}
    for run_id in run_ids:
        status = (await client.get(f"/v1/runs/{run_id}")).json()["status"]
        statuses[status] = statuses.get(status, 0) + 1
    return {
        "runs": args.runs,
        "wall_s": wall,
        "runs_per_s": args.runs / wall,
        "start_p50_ms": percentile(latencies, 50),
        "start_p95_ms": percentile(latencies, 95),
        "peak_active": peak,
        "statuses": statuses if not retried else {**statuses, "retried requests": retried},
    }


def delivery_line(
    label: str, delays: list[float], counts: list[int], args: argparse.Namespace
) -> str:
    expected = 3 + 5 * args.watch_ops + 3
    complete = sum(1 for c in counts if c >= expected)
    return (
        f"{label:<28} {len(delays):>6} live events  p50 {percentile(delays, 50):6.2f} ms  "
        f"p95 {percentile(delays, 95):6.2f} ms  p99 {percentile(delays, 99):6.2f} ms  "
        f"max {max(delays, default=float('nan')):6.2f} ms  "
        f"({complete}/{len(counts)} watchers got all {expected} events)"
    )


async def measure(server: Server, args: argparse.Namespace) -> list[str]:
    limits = httpx.Limits(
        max_connections=args.runs + args.watchers + 20, max_keepalive_connections=50
    )
    lines = []
    async with httpx.AsyncClient(base_url=server.url, limits=limits, timeout=60) as client:
        # warm-up: the first requests import and compile what the server needs
        await burst(client, argparse.Namespace(**{**vars(args), "runs": 5}))

        cpu = server.cpu_seconds()
        delays, counts = await watched_run(client, args)
        cpu = server.cpu_seconds() - cpu
        lines.append(delivery_line(f"1 run, {args.watchers} watchers", delays, counts, args))
        lines.append(
            f"{'':<28} server CPU {cpu:.2f} s: {cpu * 1e6 / max(1, sum(counts)):.0f} µs per event "
            "delivered (run included)"
        )

        cpu = server.cpu_seconds()
        figures = await burst(client, args)
        cpu = server.cpu_seconds() - cpu
        lines.append(
            f"{figures['runs']} runs of {args.calls} calls   {figures['runs_per_s']:7.1f} runs/s "
            f"(wall {figures['wall_s']:.2f} s; ideal {args.calls * args.latency_ms / 1000:.2f} s)  "
            f"start p50 {figures['start_p50_ms']:.1f} ms  p95 {figures['start_p95_ms']:.1f} ms  "
            f"peak active {figures['peak_active']}  statuses {figures['statuses']}"
        )
        lines.append(
            f"{'':<28} server CPU {cpu:.2f} s: {cpu * 1000 / args.runs:.1f} ms per run "
            "(request, run, folder; status polls included)"
        )

        watched = asyncio.create_task(watched_run(client, args))
        await asyncio.sleep(0.05)
        loaded = await burst(client, args)
        delays, counts = await watched
        lines.append(
            delivery_line(f"same, during {args.runs} runs", delays, counts, args)
            + f"  [burst: {loaded['runs_per_s']:.1f} runs/s, peak active {loaded['peak_active']}]"
        )

        held = await burst(client, args, latency_ms=args.hold_ms)
        lines.append(
            f"{args.runs} runs held {args.calls} x {args.hold_ms:g} ms  peak active "
            f"{held['peak_active']} at once; all ended after {held['wall_s']:.2f} s "
            f"(ideal {args.calls * args.hold_ms / 1000:.2f} s)  statuses {held['statuses']}"
        )
    lines.append(f"server peak RSS {server.peak_rss_mb():.0f} MB")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200, help="runs started at once (200)")
    parser.add_argument("--calls", type=int, default=5, help="LLM calls per run (5)")
    parser.add_argument("--watchers", type=int, default=50, help="watchers of one run (50)")
    parser.add_argument("--watch-ops", type=int, default=50, help="LLM ops of the watched run (50)")
    parser.add_argument("--latency-ms", type=float, default=20.0, help="per mock call (20)")
    parser.add_argument(
        "--hold-ms", type=float, default=1000.0, help="per mock call in phase 4 (1000)"
    )
    parser.add_argument("--durability", choices=["fsync", "os"], default="fsync")
    parser.add_argument("--quick", action="store_true", help="40 runs, 10 watchers, 20 ops")
    args = parser.parse_args()
    if args.quick:
        args.runs, args.watchers, args.watch_ops = 40, 10, 20
    with tempfile.TemporaryDirectory(prefix="lattice-serve-bench-") as tmp:
        root = Path(tmp)
        (root / "workflows").mkdir()
        (root / "workflows" / "burst.json").write_text(
            json.dumps(chain_document(args.calls, "burst"))
        )
        (root / "workflows" / "watched.json").write_text(
            json.dumps(chain_document(args.watch_ops, "watched"))
        )
        server = Server(root, args)
        try:
            print(
                f"lattice serve bench: {os.cpu_count()} cores, python {sys.version.split()[0]}, "
                f"durability {args.durability}, mock calls sleep {args.latency_ms:g} ms, "
                f"load average before {os.getloadavg()[0]:.1f}"
            )
            for line in asyncio.run(measure(server, args)):
                print(line)
            print(f"load average after {os.getloadavg()[0]:.1f}")
        finally:
            server.stop()
        errors = [line for line in server.lines if "Traceback" in line or "ERROR" in line]
        if errors:
            print("server errors:\n" + "".join(errors[:5]))


if __name__ == "__main__":
    main()

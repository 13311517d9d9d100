"""A run on Temporal is one OpenTelemetry trace across workers and resumes
(``tracing.py``): two ``lattice worker`` processes export with OTLP/HTTP to a receiver on
127.0.0.1 that decodes the protobuf, as the local telemetry tests do."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from lattice.lower.compiler import lower_document
from tests.builders import approval
from tests.durable.helpers import worker_process
from tests.durable.test_gateway import APPROVAL_SCRIPT
from tests.telemetry.test_otlp_e2e import Receiver, receiver, span_tree  # noqa: F401

pytest.importorskip("temporalio")

from lattice.durable.temporal.client import answer, connect, follow, start_run
from lattice.durable.temporal.rerun import resume_ended
from lattice.durable.temporal.tracing import run_ids


def traced_worker(address: str, queue: str, folder: Path, url: str, name: str) -> Any:
    folder.mkdir()
    (folder / "lattice.toml").write_text(
        f'[telemetry]\notlp_endpoint = "{url}"\nservice_name = "{name}"\n', encoding="utf-8"
    )
    return worker_process(address, queue, folder)


def stop(process: subprocess.Popen[bytes]) -> None:
    """Ctrl-C: the worker stops and its spans are exported on the way out."""
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def test_a_run_is_one_trace_across_two_workers_and_a_resume(
    temporal_address: str,
    tmp_path: Path,
    receiver: Receiver,  # noqa: F811
) -> None:
    ir = lower_document(approval()).ir
    assert ir is not None
    queue = f"trace-{uuid.uuid4().hex[:10]}"
    rid = f"test-{uuid.uuid4().hex[:12]}"
    first = traced_worker(temporal_address, queue, tmp_path / "a", receiver.url, "worker-a")
    second = None
    try:

        async def until_waiting() -> None:
            client = await connect(temporal_address)
            handle = await start_run(
                client,
                ir,
                run_id=rid,
                inputs={"topic": "tea"},
                provider={"mock_script": APPROVAL_SCRIPT},
                task_queue=queue,
                trace=True,
            )
            assert (await follow(handle))["status"] == "waiting"  # the draft, on worker a

        asyncio.run(until_waiting())
        stop(first)
        second = traced_worker(temporal_address, queue, tmp_path / "b", receiver.url, "worker-b")

        async def interrupt_resume_answer() -> dict[str, Any]:
            client = await connect(temporal_address)
            handle = client.get_workflow_handle(rid)
            await handle.cancel()
            assert (await follow(handle))["status"] == "interrupted"
            await resume_ended(client, rid)
            assert (await follow(client.get_workflow_handle(rid)))["status"] == "waiting"
            await answer(client, rid, ir, "approve", "Send")
            return await follow(client.get_workflow_handle(rid))

        done = asyncio.run(interrupt_resume_answer())
        assert done["status"] == "completed", done
    finally:
        stop(first)
        if second is not None:
            stop(second)

    spans = receiver.spans()
    print("\nthe run's trace, from two workers and two executions:\n" + span_tree(spans))
    trace_id, first_root = run_ids(rid, 1)
    _, second_root = run_ids(rid, 2)
    assert {s["trace_id"] for s in spans} == {f"{trace_id:032x}"}  # one trace
    by_id = {s["span_id"]: s for s in spans}
    roots = [s for s in spans if s["name"] == "invoke_workflow approval"]
    assert {s["span_id"] for s in roots} == {f"{first_root:016x}", f"{second_root:016x}"}
    one, two = sorted(roots, key=lambda s: s["start"])
    assert one["parent"] is None and one["attributes"]["lattice.run.status"] == "interrupted"
    assert (
        two["parent"] == one["span_id"] and two["attributes"]["lattice.run.status"] == "completed"
    )
    ops = {
        s["attributes"].get("lattice.node.id"): s
        for s in spans
        if s["name"].startswith("LLM_WRITE")
    }
    assert ops["draft"]["service"] == "worker-a" and ops["draft"]["parent"] == one["span_id"]
    assert ops["polish"]["service"] == "worker-b" and ops["polish"]["parent"] == two["span_id"]
    chats = [s for s in spans if s["name"].startswith("chat")]
    assert len(chats) == 2 and {by_id[s["parent"]]["name"] for s in chats} <= {
        ops["draft"]["name"],
        ops["polish"]["name"],
    }
    # every span's parent is in the trace: nothing hangs off a span no one exported
    assert all(s["parent"] is None or s["parent"] in by_id for s in spans)

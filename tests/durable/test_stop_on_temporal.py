"""Stopping a run on Temporal at an op boundary, and resuming it (``stops.py``): through
the gateway (the panel's Stop and Resume) and the command line."""

from __future__ import annotations

import threading
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from lattice.server.in_thread import serve_in_thread
from tests.builders import chain, node
from tests.durable.test_gateway import WAIT, gateway, workers
from tests.server.helpers import follow

pytest.importorskip("temporalio")

SCRIPT = {"responses": {"draft": ["A line about tea."]}}


def until_status(client: httpx.Client, run_id: str, status: str) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT
    while True:
        run: dict[str, Any] = client.get(f"/v1/runs/{run_id}").json()
        if run.get("status") == status:
            return run
        assert time.monotonic() < deadline, run
        time.sleep(0.1)


def test_a_run_stopped_through_the_gateway_waits_at_an_op_boundary_and_resumes(
    temporal_address: str, tmp_path: Path, held: tuple[str, threading.Event, threading.Event]
) -> None:
    """Stopped while a tool call runs on a worker: the call finishes and keeps its result,
    the model op after it does not start; the run shows ``interrupted``, resumable, until
    it is resumed, then completes with the model op run once."""
    url, arrived, release = held
    (tmp_path / "lattice.toml").write_text('[http]\nallow_hosts = ["127.0.0.1"]\n')
    queue = f"stop-{uuid.uuid4().hex[:10]}"
    doc = chain(
        node("call", "httpRequest", method="GET", url=f"{url}/slow"),
        node("draft", "prompt", prompt="Write a line about tea"),
    )
    with ExitStack() as stack:
        stack.enter_context(workers(temporal_address, queue, tmp_path, 1))
        base = stack.enter_context(serve_in_thread(gateway(temporal_address, queue, tmp_path)))
        client = stack.enter_context(httpx.Client(base_url=base, timeout=WAIT))
        started = client.post(
            "/v1/runs", json={"document": doc, "inputs": {}, "mock_script": SCRIPT}
        )
        assert started.status_code == 202, started.text
        run_id = started.json()["run_id"]
        assert arrived.wait(WAIT)  # the tool call is on a worker, held there
        stopping = client.post(f"/v1/runs/{run_id}/cancel")
        assert stopping.status_code == 202, stopping.text
        assert client.get(f"/v1/runs/{run_id}").json()["status"] == "running"  # in flight
        refused = client.post(f"/v1/runs/{run_id}/answers", json={"answers": {"x": 1}})
        assert refused.status_code == 409
        release.set()
        stopped = until_status(client, run_id, "interrupted")
        assert stopped["failure"]["resumable"] is True
        assert stopped["failure"]["node_id"] == "draft"
        assert f"/v1/runs/{run_id}/resume" in stopped["failure"]["recovery_action"]
        listed = client.get("/v1/runs").json()["runs"]
        assert [r["status"] for r in listed if r["run_id"] == run_id] == ["interrupted"]
        seen, end = follow(client, run_id, last_event_id=0)
        assert end == "interrupted"
        so_far = [(e["type"], e.get("op_id")) for e in seen]
        assert so_far[-2:] == [("op_started", "draft"), ("run_interrupted", None)], so_far
        resumed = client.post(f"/v1/runs/{run_id}/resume", json={})
        assert resumed.status_code == 202, resumed.text
        done = until_status(client, run_id, "completed")
        assert done["output"] == "A line about tea."
        again = client.post(f"/v1/runs/{run_id}/resume", json={})
        assert again.status_code == 409, again.text
        stop_done = client.post(f"/v1/runs/{run_id}/cancel")
        assert stop_done.status_code == 409, stop_done.text
        everything, end = follow(client, run_id, last_event_id=0)
        assert end == "completed"
        types = [e["type"] for e in everything]
        assert types.count("run_interrupted") == 1 and types.count("run_resumed") == 1
        assert types.index("run_interrupted") < types.index("run_resumed")
        assert types[-1] == "run_finished"
        finished = [e["op_id"] for e in everything if e["type"] == "op_finished"]
        assert finished == ["start", "call", "draft", "end"]  # each op once

"""A server that dies: ``lattice serve`` as a child process, killed mid-run (SIGKILL) or
stopped (SIGTERM); the next server over the same runs folder answers and resumes its runs."""

from __future__ import annotations

import json
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.builders import approval
from tests.server.helpers import (
    APPROVAL_SCRIPT,
    TIMEOUT,
    file_events,
    follow,
    script,
    serve_in_process,
    steps,
    wait_for_status,
)


@pytest.fixture
def space(tmp_path: Path) -> Path:
    flows = tmp_path / "workflows"
    flows.mkdir()
    (flows / "approval.json").write_text(json.dumps(approval()))
    (flows / "approval.mock.json").write_text(json.dumps(APPROVAL_SCRIPT))
    return tmp_path


def serve(space: Path) -> Any:
    return serve_in_process("--runs-dir", space / "runs", "--workflows", space / "workflows")


def segments(events: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    out: list[list[dict[str, Any]]] = []
    for event in events:
        if event["type"] in ("run_started", "run_resumed"):
            out.append([])
        out[-1].append(event)
    return out


def test_a_run_in_flight_when_the_server_is_killed_resumes_on_the_next(space: Path) -> None:
    with serve(space) as first, httpx.Client(base_url=first.url, timeout=TIMEOUT) as client:
        started = client.post(
            "/v1/runs",
            json={"document": steps(6), "mock_script": script(6), "mock_latency_ms": 150},
        )
        assert started.status_code == 202, started.text
        run_id = started.json()["run_id"]
        seen, _ = follow(client, run_id, limit=9)  # s0 done, s1 under way
        assert any(e["type"] == "op_finished" and e["node_id"] == "s0" for e in seen)
        first.kill()

    with serve(space) as second, httpx.Client(base_url=second.url, timeout=TIMEOUT) as client:
        run = client.get(f"/v1/runs/{run_id}").json()
        assert run["status"] == "interrupted"
        assert run["failure"]["category"] == "interrupted"
        listed = client.get("/v1/runs", params={"status": "interrupted"}).json()
        assert run_id in [r["run_id"] for r in listed["runs"]]
        before, status = follow(client, run_id)
        assert status == "interrupted"
        resumed = client.post(f"/v1/runs/{run_id}/resume")
        assert resumed.status_code == 202, resumed.text
        rest, status = follow(client, run_id, last_event_id=before[-1]["seq"])
        assert status == "completed"
        assert client.get(f"/v1/runs/{run_id}").json()["output"] == "answer 5"

    events = file_events(space / "runs" / run_id)
    assert before + rest == events
    first_segment, second_segment = segments(events)
    done_before = {e["node_id"] for e in first_segment if e["type"] == "op_finished"}
    started_after = Counter(e["node_id"] for e in second_segment if e["type"] == "op_started")
    assert "s0" in done_before
    assert not done_before & set(started_after), "no completed op runs again"
    assert set(started_after) >= {"s2", "s3", "s4", "s5", "end"}


def test_a_halted_run_is_answered_after_a_restart(space: Path) -> None:
    with serve(space) as first, httpx.Client(base_url=first.url, timeout=TIMEOUT) as client:
        started = client.post(
            "/v1/runs",
            json={
                "workflow": "approval.json",
                "mock": "approval.mock.json",
                "inputs": {"topic": "x"},
            },
        )
        run_id = started.json()["run_id"]
        wait_for_status(client, run_id, ("halted",))
        first.kill()

    with serve(space) as second, httpx.Client(base_url=second.url, timeout=TIMEOUT) as client:
        run = client.get(f"/v1/runs/{run_id}").json()
        assert run["status"] == "halted"
        assert run["question"]["options"] == ["Send", "Discard"]
        answered = client.post(f"/v1/runs/{run_id}/answers", json={"answers": {"approve": 1}})
        assert answered.status_code == 202, answered.text
        assert wait_for_status(client, run_id, ("completed",))["output"] == "discarded"


def test_stopping_the_server_interrupts_its_runs_and_keeps_them_resumable(space: Path) -> None:
    with serve(space) as first, httpx.Client(base_url=first.url, timeout=TIMEOUT) as client:
        started = client.post(
            "/v1/runs",
            json={"document": steps(20), "mock_script": script(20), "mock_latency_ms": 100},
        )
        run_id = started.json()["run_id"]
        follow(client, run_id, limit=5)
        first.stop()  # SIGTERM: a graceful stop, after which uvicorn raises the signal again
        assert first.process.returncode == -signal.SIGTERM
        assert "Traceback" not in "".join(first.stderr_lines)
    checkpoint = json.loads((space / "runs" / run_id / "checkpoint.json").read_text())
    assert checkpoint["status"] == "interrupted", "the folder says so itself"

    with serve(space) as second, httpx.Client(base_url=second.url, timeout=TIMEOUT) as client:
        assert client.get(f"/v1/runs/{run_id}").json()["status"] == "interrupted"
        assert client.post(f"/v1/runs/{run_id}/resume").status_code == 202
        assert wait_for_status(client, run_id, ("completed",))["output"] == "answer 19"

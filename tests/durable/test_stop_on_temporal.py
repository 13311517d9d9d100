"""Stopping a run on Temporal at an op boundary, and resuming it (``stops.py``): through
the gateway (the panel's Stop and Resume) and the command line."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import threading
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from lattice.errors import LatticeUserError
from lattice.lower.compiler import lower_document
from lattice.server.in_thread import serve_in_thread
from tests.builders import approval, chain, node
from tests.durable.helpers import run_locally, with_worker
from tests.durable.test_cli import LATTICE, lattice
from tests.durable.test_gateway import APPROVAL_SCRIPT, WAIT, gateway, workers
from tests.server.helpers import follow as follow_events

pytest.importorskip("temporalio")

from lattice.durable.temporal.client import answer, follow, start_run
from lattice.durable.temporal.rerun import resume_ended

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
        seen, end = follow_events(client, run_id, last_event_id=0)
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
        everything, end = follow_events(client, run_id, last_event_id=0)
        assert end == "completed"
        types = [e["type"] for e in everything]
        assert types.count("run_interrupted") == 1 and types.count("run_resumed") == 1
        assert types.index("run_interrupted") < types.index("run_resumed")
        assert types[-1] == "run_finished"
        finished = [e["op_id"] for e in everything if e["type"] == "op_finished"]
        assert finished == ["start", "call", "draft", "end"]  # each op once


CHAIN_SCRIPT = {"responses": {"draft": ["A draft."], "polish": ["A polished note."]}}


def test_a_run_on_temporal_is_re_run_from_a_step_and_compared_with_its_parent(
    temporal_address: str, tmp_path: Path
) -> None:
    """The gateway's re-run of a run on Temporal starts a new workflow at the step, with
    the state the parent had there (edited), runs only the ops from there, names its
    parent, and compares with it as two run folders do."""
    queue = f"rerun-{uuid.uuid4().hex[:10]}"
    doc = chain(
        node("draft", "prompt", prompt="Draft a note"),
        node("polish", "prompt", prompt="Polish: {{ $vars.draft.result }}"),
    )
    with ExitStack() as stack:
        stack.enter_context(workers(temporal_address, queue, tmp_path, 1))
        base = stack.enter_context(serve_in_thread(gateway(temporal_address, queue, tmp_path)))
        client = stack.enter_context(httpx.Client(base_url=base, timeout=WAIT))
        body = {"document": doc, "inputs": {}, "mock_script": CHAIN_SCRIPT}
        parent_id = client.post("/v1/runs", json=body).json()["run_id"]
        parent = until_status(client, parent_id, "completed")
        assert parent["rerunnable"] is True
        point = client.get(f"/v1/runs/{parent_id}/rerun", params={"op": "polish"})
        assert point.status_code == 200, point.text
        assert point.json()["visits"] == 1
        assert point.json()["state"]["vars"]["draft"]["result"] == "A draft."
        unknown = client.get(f"/v1/runs/{parent_id}/rerun", params={"op": "nowhere"})
        assert unknown.status_code in (400, 422), unknown.text
        edited = {"vars": {"draft": {"result": "An edited draft."}}}
        started = client.post(f"/v1/runs/{parent_id}/rerun", json={"op": "polish", "state": edited})
        assert started.status_code == 202, started.text
        child_id = started.json()["run_id"]
        assert started.json()["parent"] == {"run_id": parent_id, "op": "polish", "visit": 1}
        child = until_status(client, child_id, "completed")
        assert child["parent"] == {"run_id": parent_id, "op": "polish", "visit": 1}
        assert child["output"] == "A polished note."
        assert child["usage"]["calls"] == 1  # the draft was not made again
        events, _ = follow_events(client, child_id, last_event_id=0)
        assert events[0]["data"]["parent"]["run_id"] == parent_id
        assert [e["op_id"] for e in events if e["type"] == "op_started"] == ["polish", "end"]
        final = client.get(f"/v1/runs/{child_id}/state", params={"at": "final"}).json()
        assert final["vars"]["draft"]["result"] == "An edited draft."
        compared = client.get(f"/v1/runs/{parent_id}/compare/{child_id}")
        assert compared.status_code == 200, compared.text
        diff = compared.json()
        assert diff["rerun"]["op"] == "polish" and diff["rerun"]["steps"] == ["start", "draft"]
        assert diff["output"]["a"] == diff["output"]["b"] == "A polished note."


def test_lattice_runs_stop_then_resume_on_temporal(
    temporal_address: str, tmp_path: Path, held: tuple[str, threading.Event, threading.Event]
) -> None:
    """``lattice runs stop`` stops the run ``lattice run --engine temporal`` follows (it
    reports it interrupted, exit 130, with the command that resumes it); ``lattice resume
    --temporal`` goes on to its end; ``lattice runs diff --temporal`` compares it."""
    url, arrived, release = held
    (tmp_path / "lattice.toml").write_text('[http]\nallow_hosts = ["127.0.0.1"]\n')
    doc = chain(
        node("call", "httpRequest", method="GET", url=f"{url}/slow"),
        node("draft", "prompt", prompt="Write a line about tea"),
    )
    (tmp_path / "doc.json").write_text(json.dumps(doc), encoding="utf-8")
    (tmp_path / "mock.json").write_text(json.dumps(SCRIPT), encoding="utf-8")
    queue = f"stop-{uuid.uuid4().hex[:10]}"
    common = ["--temporal", temporal_address]
    env = {k: v for k, v in os.environ.items() if k != "LATTICE_CONFIG"}
    with workers(temporal_address, queue, tmp_path, 1):
        run = ["run", "doc.json", "--mock", "mock.json", "--engine", "temporal"]
        following = subprocess.Popen(
            [*LATTICE, *run, *common, "--task-queue", queue],
            cwd=tmp_path,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert following.stderr is not None
            first = following.stderr.readline()
            found = re.search(r"run (\S+) started on Temporal", first)
            assert found, first
            run_id = found.group(1)
            assert arrived.wait(WAIT)
            stopped = lattice("runs", "stop", run_id, *common, cwd=tmp_path)
            assert stopped.returncode == 0, stopped.stderr
            assert f"lattice resume {run_id} --temporal {temporal_address}" in stopped.stderr
            release.set()
            _, rest = following.communicate(timeout=WAIT)
        finally:
            if following.poll() is None:
                following.kill()
        assert following.returncode == 130, rest
        assert f"next: lattice resume {run_id} --temporal {temporal_address}" in rest
        shown = lattice("runs", "show", run_id, *common, cwd=tmp_path)
        assert shown.stdout.startswith(f"run {run_id}: interrupted"), shown.stdout
        resumed = lattice("resume", run_id, *common, cwd=tmp_path)
        assert resumed.returncode == 0, resumed.stderr
        assert json.loads(resumed.stdout) == "A line about tea."
        ended = lattice("runs", "stop", run_id, *common, cwd=tmp_path)
        assert ended.returncode == 2 and "completed" in ended.stderr, ended.stderr
        assert "Traceback" not in ended.stderr
        same = lattice("runs", "diff", run_id, run_id, *common, cwd=tmp_path)
        assert same.returncode == 0, same.stderr


def test_an_interrupted_run_is_resumed_as_a_new_execution_that_reads_as_one_run(
    temporal_address: str,
) -> None:
    """Cancelled (Temporal's cancellation) while it waits on a question, the run ends
    interrupted; resumed, a new execution of its workflow asks the question again and goes
    on, with the first execution's events, op records and usage: the draft is not made
    again."""
    ir = lower_document(approval()).ir
    assert ir is not None
    local = run_locally(ir, APPROVAL_SCRIPT, {"topic": "tea"}, answers={"approve": "Send"})
    rid = f"test-{uuid.uuid4().hex[:12]}"

    async def body(client: Any, queue: str) -> tuple[dict[str, Any], dict[str, Any]]:
        handle = await start_run(
            client,
            ir,
            run_id=rid,
            inputs={"topic": "tea"},
            provider={"mock_script": APPROVAL_SCRIPT},
            task_queue=queue,
        )
        assert (await follow(handle))["status"] == "waiting"
        await handle.cancel()
        assert (await follow(handle))["status"] == "interrupted"
        await resume_ended(client, rid)
        with pytest.raises(LatticeUserError, match="only a failed or interrupted run"):
            await resume_ended(client, rid)  # the new execution runs: not resumed twice
        waiting = await follow(client.get_workflow_handle(rid))
        assert waiting["status"] == "waiting" and waiting["question"]["node_id"] == "approve"
        await answer(client, rid, ir, "approve", "Send")
        done = await follow(client.get_workflow_handle(rid))
        record = await client.get_workflow_handle(rid).query("record")
        return done, record

    done, record = asyncio.run(with_worker(temporal_address, body))
    assert done["status"] == "completed"
    assert done["output"] == local.output
    assert done["usage"]["calls"] == local.usage.calls == 2
    events = record["events"]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    types = [e["type"] for e in events]
    assert types.count("run_started") == 1 and types.count("run_resumed") == 1
    resumed = next(e for e in events if e["type"] == "run_resumed")
    assert resumed["data"] == {"segment": 2, "from_op": "approve", "after": "interrupted"}
    assert [e["op_id"] for e in events if e["type"] == "op_started"].count("draft") == 1
    ops = [op["op_id"] for op in record["ops"]]
    assert ops == ["start", "draft", "approve", "approve#switch", "polish", "end"]

"""``lattice serve --engine temporal``: gateways that keep no run of their own.

Two gateway replicas, one Temporal server, two worker processes: runs started through
either replica all complete, and either replica shows any of them (status, list,
events). A run halted on a question survives a restart of every worker and of the
gateway (both killed with ``kill -9``), and completes when answered through the new
gateway.

``LATTICE_GATEWAY_RUNS`` sets how many runs the replicas test starts (40 by default, so
that it stays well under a minute on a loaded 2-core machine; bench/temporal_bench.py
runs 200).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from lattice.config import LatticeConfig
from lattice.lower.compiler import lower_document
from lattice.server.app import ServerSettings
from lattice.server.in_thread import serve_in_thread
from tests.builders import approval, chain, node
from tests.durable.helpers import run_locally, worker_process
from tests.server.helpers import follow, read_sse, serve_in_process, steps

pytest.importorskip("temporalio")

from lattice.durable.temporal.backend import TemporalRuns

RUNS = int(os.environ.get("LATTICE_GATEWAY_RUNS", "40"))
CALLS = 5
WAIT = 120.0
"""Seconds the runs may take at most on a loaded machine (a bound, not a timing)."""
APPROVAL_SCRIPT = {"responses": {"draft": ["A note about tea."], "polish": ["A polished note."]}}


@contextmanager
def workers(address: str, queue: str, cwd: Path, count: int) -> Iterator[list[Any]]:
    processes = [worker_process(address, queue, cwd) for _ in range(count)]
    try:
        yield processes
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            process.wait()


def gateway(address: str, queue: str, runs_dir: Path) -> ServerSettings:
    return ServerSettings(
        runs_dir=runs_dir,
        config=LatticeConfig(),
        backend=TemporalRuns(address, task_queue=queue),
    )


def wait_until_done(client: httpx.Client, run_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT
    while True:
        response = client.get(f"/v1/runs/{run_id}")
        if response.status_code == 503:  # no worker answered yet (workers starting)
            assert time.monotonic() < deadline, response.text
            continue
        assert response.status_code == 200, response.text
        run: dict[str, Any] = response.json()
        if run["status"] not in ("running",):
            return run
        assert time.monotonic() < deadline, f"run {run_id} stayed {run['status']}"
        time.sleep(0.2)


def test_two_replicas_serve_every_run(temporal_address: str, tmp_path: Path) -> None:
    document = steps(CALLS)
    script = {
        "responses": {f"s{i}": [f"answer {i} ({n})" for n in range(RUNS)] for i in range(CALLS)}
    }
    ir = lower_document(document).ir
    assert ir is not None
    queue = f"gw-{uuid.uuid4().hex[:10]}"
    with ExitStack() as stack:
        stack.enter_context(workers(temporal_address, queue, tmp_path, 2))
        urls = [
            stack.enter_context(serve_in_thread(gateway(temporal_address, queue, tmp_path / n)))
            for n in ("a", "b")
        ]
        clients = [stack.enter_context(httpx.Client(base_url=url, timeout=WAIT)) for url in urls]

        def start(n: int) -> str:
            body = {
                "document": document,
                "mock_script": {"responses": {k: [v[n]] for k, v in script["responses"].items()}},
                "inputs": {},
            }
            response = clients[n % 2].post("/v1/runs", json=body)
            assert response.status_code == 202, response.text
            assert response.json()["status"] == "running"
            return str(response.json()["run_id"])

        with ThreadPoolExecutor(8) as pool:
            ids = list(pool.map(start, range(RUNS)))
        assert len(set(ids)) == RUNS
        # each run is shown by the replica that did not start it
        with ThreadPoolExecutor(8) as pool:
            runs = list(
                pool.map(lambda n: wait_until_done(clients[1 - n % 2], ids[n]), range(RUNS))
            )
        assert [r["status"] for r in runs] == ["completed"] * RUNS
        expected = [f"answer {CALLS - 1} ({n})" for n in range(RUNS)]
        assert [r["output"] for r in runs] == expected
        assert all(r["usage"]["calls"] == CALLS for r in runs)
        # both replicas list every run, with its status
        for client in clients:
            listed = client.get("/v1/runs", params={"limit": 500}).json()["runs"]
            mine = {r["run_id"]: r for r in listed if r["run_id"] in set(ids)}
            assert set(mine) == set(ids)
            assert {r["status"] for r in mine.values()} == {"completed"}
            assert {r["workflow"] for r in mine.values()} == {f"steps-{CALLS}"}
        # and streams any run's events, the same from either replica
        for run_id in (ids[0], ids[1], ids[-1]):
            seen = [follow(client, run_id) for client in clients]
            assert seen[0] == seen[1]
            events, end = seen[0]
            assert end == "completed"
            assert [e["type"] for e in events].count("llm_response") == CALLS
            assert events[-1]["type"] == "run_finished"
            assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        # the local engine gives the same output
        local = run_locally(
            ir, {"responses": {k: [v[0]] for k, v in script["responses"].items()}}, {}
        )
        assert local.output == runs[0]["output"]


def test_a_replica_streams_a_run_live_and_answers_what_the_other_started(
    temporal_address: str, tmp_path: Path
) -> None:
    queue = f"gw-{uuid.uuid4().hex[:10]}"
    with ExitStack() as stack:
        stack.enter_context(workers(temporal_address, queue, tmp_path, 1))
        a, b = (
            stack.enter_context(
                httpx.Client(
                    base_url=stack.enter_context(
                        serve_in_thread(gateway(temporal_address, queue, tmp_path / n))
                    ),
                    timeout=WAIT,
                )
            )
            for n in ("a", "b")
        )
        started = a.post(
            "/v1/runs",
            json={
                "document": approval(),
                "mock_script": APPROVAL_SCRIPT,
                "inputs": {"topic": "tea"},
            },
        )
        assert started.status_code == 202, started.text
        run_id = started.json()["run_id"]
        events, end = follow(b, run_id)  # live: the stream ends when the run halts
        assert end == "halted"
        assert events[-1]["type"] == "run_halted"
        run = b.get(f"/v1/runs/{run_id}").json()
        assert run["status"] == "halted"
        assert run["question"]["node_id"] == "approve"
        assert run["question"]["options"] == ["Send", "Discard"]
        refused = b.post(f"/v1/runs/{run_id}/answers", json={"answers": {"approve": "Maybe"}})
        assert refused.status_code == 422, refused.text
        answered = b.post(f"/v1/runs/{run_id}/answers", json={"answers": {"approve": "Send"}})
        assert answered.status_code == 202, answered.text
        more, end = follow(a, run_id, last_event_id=events[-1]["seq"])
        assert end == "completed"
        assert more[0]["seq"] == events[-1]["seq"] + 1
        done = a.get(f"/v1/runs/{run_id}").json()
        assert done["output"] == "A polished note."
        again = a.post(f"/v1/runs/{run_id}/answers", json={"answers": {"approve": "Send"}})
        assert again.status_code == 409
        assert a.get("/v1/runs/no-such-run").status_code == 404
        # the panel's views of the run
        graph = a.get(f"/v1/runs/{run_id}/graph").json()
        assert {"draft", "approve", "polish"} <= {n["id"] for n in graph["nodes"]}
        state = a.get(f"/v1/runs/{run_id}/state", params={"at": "final"}).json()
        assert state["vars"]["polish"]["result"] == "A polished note."
        ops = a.get(f"/v1/runs/{run_id}/ops").json()["ops"]
        assert [o["node_id"] for o in ops][:2] == ["start", "draft"]
        records = a.get(f"/v1/runs/{run_id}/ops", params={"node": "draft"}).json()
        assert records["total"] == 1 and records["records"][0]["node_id"] == "draft"
        assert b.post(f"/v1/runs/{run_id}/resume").status_code == 409


def test_a_question_outlives_every_worker_and_the_gateway(
    temporal_address: str, tmp_path: Path
) -> None:
    ir = lower_document(approval()).ir
    assert ir is not None
    local = run_locally(ir, APPROVAL_SCRIPT, {"topic": "tea"}, answers={"approve": "Send"})
    queue = f"gw-{uuid.uuid4().hex[:10]}"
    args = ("--engine", "temporal", "--temporal", temporal_address, "--task-queue", queue)
    first_workers = [worker_process(temporal_address, queue, tmp_path) for _ in range(2)]
    try:
        with serve_in_process(*args, "--runs-dir", tmp_path / "runs") as server:
            with httpx.Client(base_url=server.url, timeout=WAIT) as client:
                started = client.post(
                    "/v1/runs",
                    json={
                        "document": approval(),
                        "mock_script": APPROVAL_SCRIPT,
                        "inputs": {"topic": "tea"},
                    },
                )
                assert started.status_code == 202, started.text
                run_id = started.json()["run_id"]
                assert wait_until_done(client, run_id)["status"] == "halted"
            server.kill()
            for process in first_workers:
                process.send_signal(signal.SIGKILL)
                process.wait()
    finally:
        for process in first_workers:
            if process.poll() is None:
                process.kill()
                process.wait()
    with (
        workers(temporal_address, queue, tmp_path, 2),
        serve_in_process(*args, "--runs-dir", tmp_path / "other") as server,
        httpx.Client(base_url=server.url, timeout=WAIT) as client,
    ):
        run = wait_until_done(client, run_id)
        assert run["status"] == "halted", run
        assert run["question"]["node_id"] == "approve"
        halted_at = run["finished_at"]  # its time stops at the question, as a local run's
        assert halted_at is not None and halted_at >= run["started_at"], run
        answered = client.post(f"/v1/runs/{run_id}/answers", json={"answers": {"approve": "Send"}})
        assert answered.status_code == 202, answered.text
        done = wait_until_done(client, run_id)
        assert done["status"] == "completed"
        assert done["output"] == local.output
        events, end = follow(client, run_id)
        assert end == "completed"
        assert [e["type"] for e in events].count("run_halted") == 1
        assert [e["ts"] for e in events if e["type"] == "run_halted"] == [halted_at]


def test_a_run_is_cancelled_through_either_replica(temporal_address: str, tmp_path: Path) -> None:
    queue = f"gw-{uuid.uuid4().hex[:10]}"
    with ExitStack() as stack:
        stack.enter_context(workers(temporal_address, queue, tmp_path, 1))
        a, b = (
            stack.enter_context(
                httpx.Client(
                    base_url=stack.enter_context(
                        serve_in_thread(gateway(temporal_address, queue, tmp_path / n))
                    ),
                    timeout=WAIT,
                )
            )
            for n in ("a", "b")
        )
        body = {"document": approval(), "mock_script": APPROVAL_SCRIPT, "inputs": {"topic": "x"}}
        run_id = a.post("/v1/runs", json=body).json()["run_id"]
        assert wait_until_done(b, run_id)["status"] == "halted"
        cancelled = b.post(f"/v1/runs/{run_id}/cancel")
        assert cancelled.status_code == 202, cancelled.text
        run = wait_until_done(a, run_id)
        while run["status"] == "halted":  # the cancellation reaches the workflow
            run = a.get(f"/v1/runs/{run_id}").json()
        assert run["status"] == "interrupted"
        assert run["failure"]["category"] == "interrupted"
        assert a.post(f"/v1/runs/{run_id}/cancel").status_code == 409
        assert follow(b, run_id)[1] == "interrupted"


def test_runs_list_and_open_read_runs_on_temporal(temporal_address: str, tmp_path: Path) -> None:
    queue = f"gw-{uuid.uuid4().hex[:10]}"
    env = {k: v for k, v in os.environ.items() if k != "LATTICE_CONFIG"}
    lattice = [sys.executable, "-m", "lattice.cli"]
    with (
        workers(temporal_address, queue, tmp_path, 1),
        serve_in_thread(gateway(temporal_address, queue, tmp_path / "runs")) as url,
        httpx.Client(base_url=url, timeout=WAIT) as client,
    ):
        body = {
            "document": approval(),
            "mock_script": APPROVAL_SCRIPT,
            "inputs": {"topic": "tea"},
            "answers": {"approve": "Send"},
        }
        run_id = client.post("/v1/runs", json=body).json()["run_id"]
        assert wait_until_done(client, run_id)["status"] == "completed"
        listed = subprocess.run(
            [*lattice, "runs", "list", "--temporal", temporal_address, "--limit", "500"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=WAIT,
        )
        assert listed.returncode == 0, listed.stderr
        (row,) = [line for line in listed.stdout.splitlines() if line.startswith(run_id)]
        assert row.split()[1:3] == ["completed", "approval"]
        assert "2 calls" in row
        missing = subprocess.run(
            [*lattice, "runs", "open", "no-such-run", "--temporal", temporal_address],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=WAIT,
        )
        assert missing.returncode == 2
        assert "no run 'no-such-run'" in missing.stderr
        opened = subprocess.Popen(
            [
                *lattice,
                "runs",
                "open",
                run_id,
                "--temporal",
                temporal_address,
                "--no-browser",
                "--port",
                "0",
            ],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            assert opened.stdout is not None
            page = opened.stdout.readline().strip()
            assert page.endswith(f"/#/runs/{run_id}"), page
            base = page.split("/#/")[0]
            shown = httpx.get(f"{base}/v1/runs/{run_id}", timeout=WAIT).json()
            assert shown["status"] == "completed"
            assert shown["output"] == "A polished note."
        finally:
            opened.terminate()
            opened.wait(WAIT)
            if opened.stdout is not None:
                opened.stdout.close()


def test_a_secret_in_a_gateways_request_is_refused_before_temporal(
    temporal_address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lattice.config import load_config

    secret = "tok-" + uuid.uuid4().hex
    monkeypatch.setenv("GATEWAY_TEST_TOKEN", secret)
    config_file = tmp_path / "lattice.toml"
    config_file.write_text('[secrets]\nallow = ["GATEWAY_TEST_TOKEN"]\n', encoding="utf-8")
    queue = f"gw-{uuid.uuid4().hex[:10]}"
    settings = ServerSettings(
        runs_dir=tmp_path / "runs",
        config=load_config(config_file),
        backend=TemporalRuns(temporal_address, task_queue=queue),
    )
    document = {**approval(), "id": f"leak-{uuid.uuid4().hex[:8]}"}
    with (
        serve_in_thread(settings) as url,
        httpx.Client(base_url=url, timeout=WAIT) as client,
    ):
        refused = client.post(
            "/v1/runs",
            json={
                "document": document,
                "mock_script": APPROVAL_SCRIPT,
                "inputs": {"topic": secret},
            },
        )
        assert refused.status_code == 400, refused.text
        assert secret not in refused.text
        listed = client.get("/v1/runs", params={"workflow": document["id"]}).json()
        assert listed["runs"] == []


def test_serve_with_the_temporal_engine_needs_its_address(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "LATTICE_CONFIG"}
    done = subprocess.run(
        [sys.executable, "-m", "lattice.cli", "serve", "--engine", "temporal"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=WAIT,
    )
    assert done.returncode == 2
    assert "--engine temporal needs --temporal HOST:PORT" in done.stderr


def test_cancel_reaches_only_lattice_runs(temporal_address: str) -> None:
    """The gateway's token is for Lattice's runs: another application's workflow in the
    same namespace, or an id no workflow has, is not found, and nothing is cancelled."""
    import asyncio

    from temporalio.client import WorkflowExecutionStatus

    from lattice.service.backend import RunNotFound

    async def attempt() -> None:
        runs = TemporalRuns(temporal_address, task_queue=f"gw-{uuid.uuid4().hex[:10]}")
        client = await runs.client()
        foreign = await client.start_workflow(
            "SomeoneElsesWorkflow", id=f"other-{uuid.uuid4().hex[:8]}", task_queue="nobody"
        )
        with pytest.raises(RunNotFound):
            await runs.cancel(foreign.id)
        with pytest.raises(RunNotFound):
            await runs.cancel(f"no-such-{uuid.uuid4().hex[:8]}")
        assert (await foreign.describe()).status == WorkflowExecutionStatus.RUNNING
        await foreign.terminate()

    asyncio.run(attempt())


def test_a_secret_in_an_answer_is_refused_before_temporal(
    temporal_address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An answer enters Temporal's history as it is (the workflow's update): one holding a
    secret's value, here as information for an LLM node, is refused and never sent."""
    import asyncio

    from lattice.config import load_config

    secret = "tok-" + uuid.uuid4().hex
    monkeypatch.setenv("GATEWAY_TEST_TOKEN", secret)
    config_file = tmp_path / "lattice.toml"
    config_file.write_text('[secrets]\nallow = ["GATEWAY_TEST_TOKEN"]\n', encoding="utf-8")
    queue = f"gw-{uuid.uuid4().hex[:10]}"
    backend = TemporalRuns(temporal_address, task_queue=queue)
    settings = ServerSettings(
        runs_dir=tmp_path / "runs", config=load_config(config_file), backend=backend
    )
    with (
        workers(temporal_address, queue, tmp_path, 1),
        serve_in_thread(settings) as url,
        httpx.Client(base_url=url, timeout=WAIT) as client,
    ):
        body = {"document": approval(), "mock_script": APPROVAL_SCRIPT, "inputs": {"topic": "x"}}
        run_id = client.post("/v1/runs", json=body).json()["run_id"]
        assert wait_until_done(client, run_id)["status"] == "halted"
        refused = client.post(
            f"/v1/runs/{run_id}/answers", json={"answers": {"draft": f"use {secret}"}}
        )
        assert refused.status_code == 400, refused.text
        assert secret not in refused.text

        async def history() -> bytes:
            connected = await TemporalRuns(temporal_address, task_queue=queue).client()
            events = await connected.get_workflow_handle(run_id).fetch_history()
            return b"".join(event.SerializeToString() for event in events.events)

        assert secret.encode() not in asyncio.run(history())


def test_the_gateway_streams_an_op_as_running_while_its_activity_runs(
    temporal_address: str, tmp_path: Path, held: tuple[str, threading.Event, threading.Event]
) -> None:
    url, arrived, release = held
    (tmp_path / "lattice.toml").write_text('[http]\nallow_hosts = ["127.0.0.1"]\n')
    queue = f"gw-{uuid.uuid4().hex[:10]}"
    doc = chain(node("call", "httpRequest", method="GET", url=f"{url}/slow"))
    with ExitStack() as stack:
        stack.enter_context(workers(temporal_address, queue, tmp_path, 1))
        base = stack.enter_context(serve_in_thread(gateway(temporal_address, queue, tmp_path)))
        client = stack.enter_context(httpx.Client(base_url=base, timeout=WAIT))
        started = client.post("/v1/runs", json={"document": doc, "inputs": {}})
        assert started.status_code == 202, started.text
        run_id = started.json()["run_id"]
        seen: list[dict[str, Any]] = []
        with client.stream("GET", f"/v1/runs/{run_id}/events") as stream:
            for message in read_sse(stream):
                assert message.event != "end", seen
                seen.append(message.data)
                if message.data["type"] == "op_started" and message.data["op_id"] == "call":
                    break
        assert arrived.wait(WAIT)  # the op's activity is on a worker, and held there
        running = client.get(f"/v1/runs/{run_id}").json()
        assert running["status"] == "running"
        assert not any(e["type"] == "op_finished" and e.get("op_id") == "call" for e in seen)
        release.set()
        rest, end = follow(client, run_id, last_event_id=seen[-1]["seq"])
        assert end == "completed"
        finished = [e for e in rest if e["type"] == "op_finished" and e["op_id"] == "call"]
        assert finished and finished[0]["data"]["port"] == "default"


def test_the_op_records_of_a_run_with_branches_page_in_label_order(
    temporal_address: str, tmp_path: Path
) -> None:
    """A branch's op record is labelled like the local engine's (``0002.1.0001``): the
    gateway lists and pages them in that order, where it once failed formatting them."""
    from tests.runtime.test_parallel import fan_out

    queue = f"gw-{uuid.uuid4().hex[:10]}"
    script = {"responses": {"b1": ["one"], "b2": ["two"], "merge": ["both"]}}
    with (
        workers(temporal_address, queue, tmp_path, 1),
        serve_in_thread(gateway(temporal_address, queue, tmp_path / "a")) as url,
        httpx.Client(base_url=url, timeout=WAIT) as client,
    ):
        started = client.post(
            "/v1/runs",
            json={"document": fan_out(2), "mock_script": script, "inputs": {"topic": "tea"}},
        )
        assert started.status_code == 202, started.text
        run_id = started.json()["run_id"]
        assert wait_until_done(client, run_id)["status"] == "completed"
        listed = client.get(f"/v1/runs/{run_id}/ops")
        assert listed.status_code == 200, listed.text
        labels = [op["label"] for op in listed.json()["ops"]]
        assert any("." in label for label in labels), labels  # the branches' ops
        assert labels == sorted(labels, key=lambda label: [int(p) for p in label.split(".")])
        paged: list[str] = []
        after: str | None = None
        while True:
            params: dict[str, Any] = {"limit": 2, **({"after": after} if after else {})}
            page = client.get(f"/v1/runs/{run_id}/ops", params=params).json()
            paged += [op["label"] for op in page["ops"]]
            after = page["next"]
            if after is None:
                break
        assert paged == labels
        records = client.get(f"/v1/runs/{run_id}/ops", params={"node": "b2"}).json()
        assert [r["node_id"] for r in records["records"]] == ["b2"]


def test_a_node_s_op_records_leave_out_another_node_s_of_the_same_file_safe_name(
    temporal_address: str, tmp_path: Path
) -> None:
    """``a"b`` and ``a_b`` are one name as file names; the gateway lists a node's records
    by the op ids its records hold, so each node gets its own."""
    queue = f"gw-{uuid.uuid4().hex[:10]}"
    document = chain(
        node('a"b', "variableStore", operation="set", name="quoted", value=1),
        node("a_b", "variableStore", operation="set", name="plain", value=2),
    )
    with (
        workers(temporal_address, queue, tmp_path, 1),
        serve_in_thread(gateway(temporal_address, queue, tmp_path / "a")) as url,
        httpx.Client(base_url=url, timeout=WAIT) as client,
    ):
        started = client.post("/v1/runs", json={"document": document, "inputs": {}})
        assert started.status_code == 202, started.text
        run_id = started.json()["run_id"]
        assert wait_until_done(client, run_id)["status"] == "completed"
        for node_id in ('a"b', "a_b"):
            page = client.get(f"/v1/runs/{run_id}/ops", params={"node": node_id}).json()
            assert (page["total"], [r["node_id"] for r in page["records"]]) == (1, [node_id])

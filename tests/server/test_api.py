"""``lattice serve`` end to end: one real server (uvicorn on 127.0.0.1, in a thread) for
the module, driven over HTTP with httpx."""

from __future__ import annotations

import asyncio
import builtins
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import httpx
import pytest

from lattice.cli import main
from lattice.config import LatticeConfig, SecretsConfig
from lattice.errors import LatticeUserError
from lattice.files import atomic_write_text
from lattice.runs.ownership import claim
from lattice.runs.view import list_runs
from lattice.server.app import ServerSettings
from lattice.server.in_thread import serve_in_thread
from lattice.server.store import LoopRecorder
from tests.builders import approval, chain, node
from tests.conftest import EXAMPLES
from tests.server.helpers import (
    APPROVAL_SCRIPT,
    TIMEOUT,
    file_events,
    follow,
    read_sse,
    script,
    steps,
    wait_for_status,
)

SECRET_NAME = "LATTICE_SERVER_TEST_SECRET"
SECRET = "hunter2-not-for-anyone"
MAX_BODY = 64 * 1024


@pytest.fixture(scope="module")
def space(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A workflows folder (with a few documents and mock scripts), a runs folder and a
    file outside both."""
    root = tmp_path_factory.mktemp("serve")
    flows = root / "workflows"
    (flows / "nested").mkdir(parents=True)
    shutil.copy(EXAMPLES / "hello-world.json", flows / "hello.json")
    shutil.copy(EXAMPLES / "hello-world.mock.json", flows / "hello.mock.json")
    (flows / "approval.json").write_text(json.dumps(approval()))
    (flows / "approval.mock.json").write_text(json.dumps(APPROVAL_SCRIPT))
    (flows / "nested" / "steps.json").write_text(json.dumps(steps(3)))
    (root / "outside.json").write_text(json.dumps(steps(1)))
    (root / "outside.mock.json").write_text(json.dumps(script(1)))
    (flows / "escape.json").symlink_to(root / "outside.json")
    return root


@pytest.fixture(scope="module")
def base_url(space: Path) -> Iterator[str]:
    os.environ[SECRET_NAME] = SECRET
    settings = ServerSettings(
        runs_dir=space / "runs",
        workflows_dir=space / "workflows",
        config=LatticeConfig(secrets=SecretsConfig(allow=[SECRET_NAME])),
        max_body_bytes=MAX_BODY,
        max_active_runs=8,
    )
    try:
        with serve_in_thread(settings) as url:
            yield url
    finally:
        os.environ.pop(SECRET_NAME, None)


@pytest.fixture
def client(base_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base_url, timeout=TIMEOUT) as client:
        yield client


def start(client: httpx.Client, **body: Any) -> str:
    response = client.post("/v1/runs", json=body)
    assert response.status_code == 202, response.text
    data = response.json()
    assert response.headers["location"] == f"/v1/runs/{data['run_id']}"
    assert data["links"]["events"] == f"/v1/runs/{data['run_id']}/events"
    return str(data["run_id"])


def start_steps(client: httpx.Client, count: int, latency_ms: float = 0, **body: Any) -> str:
    return start(
        client,
        document=steps(count),
        mock_script=script(count),
        mock_latency_ms=latency_ms,
        **body,
    )


def requests_by_node(events: list[dict[str, Any]]) -> Counter[str]:
    return Counter(e["node_id"] for e in events if e["type"] == "llm_request")


def assert_error(response: httpx.Response, status: int, error: str | None = None) -> Any:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert isinstance(body["message"], str) and body["message"]
    assert "Traceback" not in response.text
    if error is not None:
        assert body["error"] == error, body
    return body


# -- a run from start to result -----------------------------------------------------------


def test_healthz(client: httpx.Client) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json()["status"] == "ok"


def test_start_then_stream_every_event_then_the_result(client: httpx.Client, space: Path) -> None:
    run_id = start_steps(client, 3, latency_ms=20)
    events, status = follow(client, run_id)
    assert status == "completed"
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert events[0]["type"] == "run_started"
    assert events[-1]["type"] == "run_finished"
    assert events == file_events(space / "runs" / run_id), "SSE carries events.jsonl's objects"
    run = client.get(f"/v1/runs/{run_id}").json()
    assert run["status"] == "completed"
    assert run["output"] == "answer 2"
    assert run["usage"]["calls"] == 3
    assert run["workflow"] == "steps-3"
    assert run["failure"] is None and run["question"] is None
    assert run["finished_at"] and run["started_at"]


def test_reconnecting_with_last_event_id_misses_nothing_and_repeats_nothing(
    client: httpx.Client, space: Path
) -> None:
    run_id = start_steps(client, 6, latency_ms=40)
    first, status = follow(client, run_id, limit=5)
    assert status is None
    assert [e["seq"] for e in first] == [1, 2, 3, 4, 5]
    middle, status = follow(client, run_id, last_event_id=5, limit=4)
    assert status is None
    rest, status = follow(client, run_id, last_event_id=middle[-1]["seq"])
    assert status == "completed"
    seen = [e["seq"] for e in first + middle + rest]
    assert seen == list(range(1, len(seen) + 1)), "no gap and no duplicate"
    assert first + middle + rest == file_events(space / "runs" / run_id)
    # the query parameter works as the header does (for clients that cannot set headers)
    tail, status = follow(client, run_id, params={"last_event_id": 7})
    assert status == "completed"
    assert [e["seq"] for e in tail] == seen[7:]


def test_a_finished_run_replays_and_closes(client: httpx.Client) -> None:
    run_id = start_steps(client, 1)
    wait_for_status(client, run_id, ("completed",))
    events, status = follow(client, run_id)
    assert status == "completed"
    assert events[-1]["type"] == "run_finished"
    nothing, status = follow(client, run_id, last_event_id=events[-1]["seq"])
    assert (nothing, status) == ([], "completed")


def test_many_watchers_of_one_run_see_the_same_events(client: httpx.Client, base_url: str) -> None:
    run_id = start_steps(client, 5, latency_ms=30)
    results: list[list[dict[str, Any]]] = []

    def watch() -> None:
        with httpx.Client(base_url=base_url, timeout=TIMEOUT) as own:
            events, status = follow(own, run_id)
            assert status == "completed"
            results.append(events)

    watchers = [threading.Thread(target=watch) for _ in range(6)]
    for watcher in watchers:
        watcher.start()
    for watcher in watchers:
        watcher.join(TIMEOUT)
    assert len(results) == 6
    assert all(events == results[0] for events in results)
    assert results[0][-1]["type"] == "run_finished"


def test_timing_adds_the_emission_time_as_a_comment(client: httpx.Client) -> None:
    run_id = start_steps(client, 2, latency_ms=30)
    with client.stream("GET", f"/v1/runs/{run_id}/events", params={"timing": "true"}) as response:
        messages = [m for m in read_sse(response) if m.event == "message"]
    live = [m for m in messages if m.comments]
    assert live, "events delivered live carry their emission time"
    for message in live:
        emitted = float(message.comments[0].removeprefix("emitted "))
        assert abs(emitted - time.time()) < 60


def watch_with_messages(
    base_url: str, run_id: str, params: dict[str, Any]
) -> tuple[list[Any], str | None]:
    """Every SSE message of a run's stream (recorded events and deltas alike), in order,
    and the status of its end."""
    messages: list[Any] = []
    with (
        httpx.Client(base_url=base_url, timeout=TIMEOUT) as own,
        own.stream("GET", f"/v1/runs/{run_id}/events", params=params) as response,
    ):
        for message in read_sse(response):
            if message.event == "end":
                return messages, message.data["status"]
            messages.append(message)
    return messages, None


def test_a_watcher_asking_for_deltas_gets_an_answer_s_pieces_before_its_completion(
    client: httpx.Client, base_url: str, space: Path
) -> None:
    """Three calls, each answered in 4 pieces over 600 ms: a watcher with ``?deltas=1``
    gets the pieces of the last one (by then it surely follows) in order, between its
    request and its completion, as messages without an id; a watcher without the option
    gets none; the run folder records none; a watcher that comes after gets none."""
    answers = [f"answer {i}: " + "a long streamed answer, " * 8 for i in range(3)]
    run_id = start(
        client,
        document=steps(3),
        mock_script={"responses": {f"s{i}": [answers[i]] for i in range(3)}},
        mock_latency_ms=600,
        mock_pieces=4,
    )
    results: dict[str, tuple[list[Any], str | None]] = {}

    def watch(name: str, params: dict[str, Any]) -> None:
        results[name] = watch_with_messages(base_url, run_id, params)

    watchers = [
        threading.Thread(target=watch, args=("deltas", {"deltas": "1"})),
        threading.Thread(target=watch, args=("plain", {})),
    ]
    for watcher in watchers:
        watcher.start()
    for watcher in watchers:
        watcher.join(TIMEOUT)
    with_deltas, status = results["deltas"]
    assert status == "completed"
    last = [
        m
        for m in with_deltas
        if m.data.get("node_id") == "s2"
        and m.data["type"] in ("llm_request", "llm_delta", "llm_response")
    ]
    assert last[0].data["type"] == "llm_request" and last[-1].data["type"] == "llm_response"
    pieces = [m for m in last if m.event == "llm_delta"]
    assert len(pieces) >= 2 and all(m.id is None for m in pieces)
    assert all(m.data["type"] == "llm_delta" and m.data["data"]["attempt"] == 1 for m in pieces)
    text = "".join(m.data["data"]["text"] for m in pieces)
    # the pieces come in order; the last few characters may be held back (what could be
    # the start of a secret) until the completion brings them
    assert answers[2].startswith(text) and len(text) > len(answers[2]) // 2
    plain, status = results["plain"]
    assert status == "completed"
    assert plain and all(m.event == "message" and m.id is not None for m in plain)
    assert [m.data for m in plain] == [m.data for m in with_deltas if m.event == "message"]
    recorded = file_events(space / "runs" / run_id)
    assert "llm_delta" not in {e["type"] for e in recorded}
    assert [e["seq"] for e in recorded] == list(range(1, len(recorded) + 1))
    again, status = watch_with_messages(base_url, run_id, {"deltas": "1"})
    assert status == "completed" and again
    assert all(m.event == "message" for m in again)


def test_a_secret_cut_between_pieces_never_reaches_a_watcher(
    client: httpx.Client, base_url: str
) -> None:
    answer = f"the key: {SECRET}, and then enough text to pass the held-back part on."
    run_id = start(
        client,
        document=steps(1),
        mock_script={"responses": {"s0": [answer]}},
        mock_latency_ms=1500,
        mock_pieces=len(answer) // 3,
    )
    messages, status = watch_with_messages(base_url, run_id, {"deltas": "1"})
    assert status == "completed"
    text = "".join(m.data["data"]["text"] for m in messages if m.event == "llm_delta")
    assert "***" in text and SECRET not in text


# -- questions, failures, cancel, resume ----------------------------------------------------


def test_a_halted_question_is_answered_and_the_run_completes(client: httpx.Client) -> None:
    run_id = start(
        client, workflow="approval.json", mock="approval.mock.json", inputs={"topic": "tea"}
    )
    events, status = follow(client, run_id)
    assert status == "halted"
    run = client.get(f"/v1/runs/{run_id}").json()
    assert run["status"] == "halted"
    question = run["question"]
    assert question["node_id"] == "approve"
    assert question["question"] == "Send the note?"
    assert question["options"] == ["Send", "Discard"]
    assert question["answer"]["href"] == f"/v1/runs/{run_id}/answers"
    assert run["failure"]["category"] == "waiting_for_answer"
    assert run["failure"]["recovery_action"].startswith(f"POST /v1/runs/{run_id}/answers")

    bad = client.post(f"/v1/runs/{run_id}/answers", json={"answers": {"approve": "Maybe"}})
    body = assert_error(bad, 422)
    assert body["diagnostics"][0]["pointer"] == "/answers"
    assert client.get(f"/v1/runs/{run_id}").json()["status"] == "halted", (
        "a refused answer changes nothing"
    )
    assert_error(client.post(f"/v1/runs/{run_id}/resume"), 409, "conflict")

    answered = client.post(f"/v1/runs/{run_id}/answers", json={"answers": {"approve": "Send"}})
    assert answered.status_code == 202, answered.text
    rest, status = follow(client, run_id, last_event_id=events[-1]["seq"])
    assert status == "completed"
    assert rest[0]["type"] == "run_resumed"
    assert any(e["type"] == "human_answer" for e in rest)
    run = client.get(f"/v1/runs/{run_id}").json()
    assert run["status"] == "completed"
    assert run["output"] == "a polished note"
    assert requests_by_node(events + rest) == {"draft": 1, "polish": 1}
    assert_error(
        client.post(f"/v1/runs/{run_id}/answers", json={"answers": {"approve": "Send"}}),
        409,
        "conflict",
    )


def test_an_agent_run_without_grants_says_to_grant_and_start_again(
    client: httpx.Client, space: Path
) -> None:
    run_id = start(
        client,
        document=json.loads((EXAMPLES / "fix-a-bug.json").read_text()),
        mock_script=json.loads((EXAMPLES / "fix-a-bug.mock.json").read_text()),
        inputs=json.loads((EXAMPLES / "fix-a-bug.inputs.json").read_text()),
    )
    _, status = follow(client, run_id)
    assert status == "failed"
    failure = client.get(f"/v1/runs/{run_id}").json()["failure"]
    assert failure["node_id"] == "explore"
    # a resume keeps the run's grants (none): it would fail the same way
    assert "/resume" not in failure["recovery_action"]
    assert "start a new run" in failure["recovery_action"]
    assert failure["resumable"] is False
    before = file_events(space / "runs" / run_id)

    refused = client.post(f"/v1/runs/{run_id}/resume")
    assert_error(refused, 409, "not_resumable")
    assert refused.json()["status"] == "failed"
    assert "a resume would repeat" in refused.json()["message"]
    assert "start a new run" in refused.json()["message"]
    assert client.get(f"/v1/runs/{run_id}").json()["status"] == "failed"
    assert file_events(space / "runs" / run_id) == before


def test_a_failed_run_resumes_without_asking_a_model_again(
    client: httpx.Client, space: Path
) -> None:
    doc = steps(3)
    run_id = start(client, document=doc, mock_script=script(3, given=1))
    events, status = follow(client, run_id)
    assert status == "failed"
    run = client.get(f"/v1/runs/{run_id}").json()
    assert run["failure"]["category"] == "mock_exhausted"
    assert run["failure"]["node_id"] == "s1"
    assert f"POST /v1/runs/{run_id}/resume" in run["failure"]["recovery_action"]
    assert run["failure"]["resumable"] is True
    assert str(space) not in json.dumps(run), "no server path in the answer"
    assert run["usage"]["calls"] == 1

    approvals = {"$approvals": {"*": "allow"}}
    smuggled = client.post(
        f"/v1/runs/{run_id}/resume", json={"mock_script": script(3), "answers": approvals}
    )
    assert "/answers" in assert_error(smuggled, 422, "invalid_request")["message"]
    assert file_events(space / "runs" / run_id) == events, "a refused resume changes nothing"

    resumed = client.post(f"/v1/runs/{run_id}/resume", json={"mock_script": script(3)})
    assert resumed.status_code == 202, resumed.text
    rest, status = follow(client, run_id, last_event_id=events[-1]["seq"])
    assert status == "completed"
    all_events = file_events(space / "runs" / run_id)
    assert events + rest == all_events
    assert requests_by_node(all_events) == {"s0": 1, "s1": 2, "s2": 1}, (
        "s0 completed and is not asked again; s1 failed and runs again"
    )
    run = client.get(f"/v1/runs/{run_id}").json()
    assert run["status"] == "completed"
    assert run["output"] == "answer 2"
    assert_error(client.post(f"/v1/runs/{run_id}/resume"), 409, "conflict")


def test_a_resume_of_a_run_another_process_owns_is_a_conflict_that_writes_nothing(
    client: httpx.Client, space: Path
) -> None:
    run_id = start(client, document=steps(2), mock_script=script(2, given=1))
    _, status = follow(client, run_id)
    assert status == "failed"
    folder = space / "runs" / run_id
    # the stream's end can go out before the folder's last files are written: wait until
    # it says it failed and its files stay the same
    deadline = time.monotonic() + TIMEOUT
    before: dict[str, bytes] = {}
    while True:
        now = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
        if now == before and json.loads(now["checkpoint.json"]).get("status") == "failed":
            break
        assert time.monotonic() < deadline, "the run's folder never settled"
        before = now
        time.sleep(0.2)
    held = claim(folder)  # as a `lattice resume` of it would, between two status reads
    # the claim writes its own owner.lock; what the refused resume must leave alone is after it
    before = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    try:
        refused = client.post(f"/v1/runs/{run_id}/resume", json={"mock_script": script(2)})
    finally:
        held.release()
    body = assert_error(refused, 409, "conflict")
    assert f"is running (process {os.getpid()} on " in body["message"]
    assert {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()} == before
    resumed = client.post(f"/v1/runs/{run_id}/resume", json={"mock_script": script(2)})
    assert resumed.status_code == 202, resumed.text
    assert follow(client, run_id)[1] == "completed"


def test_after_the_end_event_the_run_reads_as_it_ended_though_its_folder_lags(
    client: httpx.Client, space: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A disk slow to take the run's last files (other runs syncing) must not show a
    client that watched until ``end`` an older status: the writes of the final
    ``checkpoint.json`` and ``result.json`` are held back here until the test has read."""
    disk = threading.Event()
    held: list[threading.Thread] = []
    write = LoopRecorder.write_text

    def slow_last_files(self: LoopRecorder, name: str, text: str) -> None:
        last = name == "result.json" or (
            name == "checkpoint.json" and json.loads(text)["status"] != "running"
        )
        if not last:
            write(self, name, text)
            return
        path = self.run_dir / name if self.run_dir is not None else Path(name)

        def later() -> None:
            disk.wait(TIMEOUT)
            atomic_write_text(path, text)

        held.append(threading.Thread(target=later))
        held[-1].start()

    monkeypatch.setattr(LoopRecorder, "write_text", slow_last_files)
    try:
        run_id = start_steps(client, 2)
        _, status = follow(client, run_id)
        assert status == "completed"
        checkpoint = json.loads((space / "runs" / run_id / "checkpoint.json").read_text())
        assert checkpoint["status"] == "running", "the folder lags behind the end event"
        run = client.get(f"/v1/runs/{run_id}").json()
        listed = {r["run_id"]: r for r in client.get("/v1/runs").json()["runs"]}[run_id]
    finally:
        disk.set()
        for thread in held:
            thread.join()
    assert run["status"] == "completed"
    assert run["output"] == "answer 1" and run["finished_at"] is not None
    assert run["usage"]["calls"] == 2
    assert listed["status"] == "completed" and listed["calls"] == 2
    assert client.get(f"/v1/runs/{run_id}").json() == {**run, "finished_at": ANY}


def test_a_run_without_a_provider_names_the_api_fields_not_cli_flags(
    client: httpx.Client,
) -> None:
    run_id = start(client, document=steps(1))
    _, status = follow(client, run_id)
    assert status == "failed"
    failure = client.get(f"/v1/runs/{run_id}").json()["failure"]
    assert failure["category"] == "provider_disabled"
    said = json.dumps(failure)
    assert "mock_script" in said and "--mock" not in said and "--provider" not in said


def test_cancel_stops_at_an_op_boundary_and_the_run_resumes(
    client: httpx.Client, space: Path
) -> None:
    run_id = start_steps(client, 8, latency_ms=60)
    seen, _ = follow(client, run_id, limit=6)  # into the first steps
    cancelled = client.post(f"/v1/runs/{run_id}/cancel")
    assert cancelled.status_code == 202, cancelled.text
    events, status = follow(client, run_id, last_event_id=seen[-1]["seq"])
    assert status == "interrupted"
    assert events[-1]["type"] == "run_interrupted"
    run = client.get(f"/v1/runs/{run_id}").json()
    assert run["status"] == "interrupted"
    assert run["failure"]["category"] == "interrupted"
    assert_error(client.post(f"/v1/runs/{run_id}/cancel"), 409, "conflict")

    resumed = client.post(f"/v1/runs/{run_id}/resume")
    assert resumed.status_code == 202, resumed.text
    wait_for_status(client, run_id, ("completed",))
    all_events = file_events(space / "runs" / run_id)
    assert requests_by_node(all_events) == {f"s{i}": 1 for i in range(8)}, (
        "no op runs twice: the run stopped between two ops"
    )
    finished = [e["node_id"] for e in all_events if e["type"] == "op_finished"]
    assert len(finished) == len(set(finished))


def test_cli_and_server_see_each_others_runs(
    client: httpx.Client, space: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flows = space / "workflows"
    run_id = start(client, workflow="hello.json", mock="hello.mock.json", inputs={"name": "Ada"})
    wait_for_status(client, run_id, ("completed",))
    assert run_id in list_runs(space / "runs"), "lattice runs list sees a run started over HTTP"

    code = main(
        [
            "run",
            str(flows / "hello.json"),
            "--mock",
            str(flows / "hello.mock.json"),
            "--input",
            "name=Grace",
            "--runs-dir",
            str(space / "runs"),
        ]
    )
    assert code == 0
    capsys.readouterr()
    listed = client.get("/v1/runs", params={"workflow": "hello-world", "limit": 500}).json()
    ids = [r["run_id"] for r in listed["runs"]]
    assert run_id in ids and len(ids) >= 2
    cli_run = next(r for r in listed["runs"] if r["workflow_name"] is None)
    assert cli_run["status"] == "completed"
    events, status = follow(client, cli_run["run_id"])
    assert status == "completed"
    assert events[0]["data"]["inputs"] == {"name": "Grace"}


def test_listing_is_newest_first_paginated_and_filtered(client: httpx.Client) -> None:
    for _ in range(3):
        start_steps(client, 1)
    failed = start(client, document=steps(1), mock_script=script(1, given=0))
    wait_for_status(client, failed, ("failed",))
    page = client.get("/v1/runs", params={"limit": 2}).json()
    assert len(page["runs"]) == 2 and page["next"]
    after = client.get("/v1/runs", params={"limit": 2, "before": page["next"]}).json()
    ids = [r["run_id"] for r in page["runs"] + after["runs"]]
    assert ids == sorted(ids, reverse=True) and len(set(ids)) == 4
    only_failed = client.get("/v1/runs", params={"status": "failed", "limit": 500}).json()
    assert failed in [r["run_id"] for r in only_failed["runs"]]
    assert {r["status"] for r in only_failed["runs"]} == {"failed"}
    assert_error(client.get("/v1/runs", params={"status": "bogus"}), 422, "invalid_request")


# -- workflows and checks --------------------------------------------------------------------


def test_workflows_are_listed_and_shown(client: httpx.Client) -> None:
    names = {w["name"] for w in client.get("/v1/workflows").json()["workflows"]}
    assert {"hello.json", "approval.json", "nested/steps.json"} <= names
    assert not any(name.endswith(".mock.json") for name in names)
    assert "escape.json" not in names, "a link leading outside is not listed"
    shown = client.get("/v1/workflows/nested/steps.json").json()
    assert shown["id"] == "steps-3"
    assert shown["document"]["nodes"][1]["id"] == "s0"
    assert shown["execir"]["entry"] == "start"
    assert shown["diagnostics"] == []
    assert_error(client.get("/v1/workflows/missing.json"), 404, "not_found")


def test_check_reports_every_diagnostic_with_its_location(client: httpx.Client) -> None:
    doc = chain(node("a", "promt", prompt="x"), node("b", "prompt"))
    checked = client.post("/v1/check", json={"document": doc})
    assert checked.status_code == 200
    body = checked.json()
    assert body["valid"] is False
    codes = {(d["code"], d["pointer"]) for d in body["diagnostics"]}
    assert ("unknown-node-type", "/nodes/1/type") in codes
    assert any(d["nodeId"] == "b" for d in body["diagnostics"])
    assert client.post("/v1/check", json={"document": steps(2)}).json() == {
        "valid": True,
        "diagnostics": [],
    }


def test_documents_are_lowered_off_the_event_loop(
    client: httpx.Client, space: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lowering grows with the document (a 949 KB document took 31.8 s before it was
    linear): on the loop it would hold up /healthz and every event stream meanwhile."""
    from lattice.server import workflows

    on_loop: list[bool] = []
    real = workflows.lower_document

    def spy(*args: Any, **kwargs: Any) -> Any:
        try:
            asyncio.get_running_loop()
            on_loop.append(True)
        except RuntimeError:
            on_loop.append(False)
        return real(*args, **kwargs)

    monkeypatch.setattr(workflows, "lower_document", spy)
    (space / "workflows" / "fresh.json").write_text(json.dumps(steps(1)))
    assert client.post("/v1/check", json={"document": steps(1)}).status_code == 200
    assert client.post("/v1/graph", json={"document": steps(1)}).status_code == 200
    start(client, document=steps(1), mock_script=script(1))
    start(client, workflow="fresh.json", mock_script=script(1))
    assert on_loop == [False, False, False, False]


def test_an_invalid_document_is_refused_with_its_diagnostics(
    client: httpx.Client, space: Path
) -> None:
    runs = space / "runs"  # made by the first run this server starts
    before = set(runs.iterdir()) if runs.exists() else set()
    doc = chain(node("a", "promt", prompt="x"), node("b", "prompt"))
    body = assert_error(client.post("/v1/runs", json={"document": doc}), 422, "invalid_document")
    assert {d["pointer"] for d in body["diagnostics"]} >= {"/nodes/1/type"}
    assert all({"code", "severity", "message", "pointer"} <= set(d) for d in body["diagnostics"])
    body = assert_error(
        client.post("/v1/runs", json={"document": {"nodes": "many"}}), 422, "invalid_document"
    )
    assert body["diagnostics"]
    assert (set(runs.iterdir()) if runs.exists() else set()) == before, "nothing was written"


def test_invalid_inputs_and_requests(client: httpx.Client) -> None:
    body = assert_error(
        client.post(
            "/v1/runs",
            json={
                "workflow": "approval.json",
                "mock": "approval.mock.json",
                "inputs": {"topic": ""},
            },
        ),
        422,
        "input_error",
    )
    assert body["diagnostics"][0]["pointer"] == "/inputs/topic"
    body = assert_error(
        client.post(
            "/v1/runs",
            json={"workflow": "approval.json", "mock": "approval.mock.json", "inputs": {"x": 1}},
        ),
        422,
    )
    assert {d["pointer"] for d in body["diagnostics"]} == {"/inputs"}
    body = assert_error(
        client.post("/v1/runs", json={"document": steps(1), "inputs": [1]}), 422, "invalid_request"
    )
    assert body["diagnostics"][0]["pointer"] == "/inputs"
    assert_error(client.post("/v1/runs", json={"document": steps(1), "surprise": 1}), 422)
    assert_error(client.post("/v1/runs", json={}), 422, "invalid_request")
    assert_error(
        client.post("/v1/runs", json={"workflow": "hello.json", "document": steps(1)}),
        422,
        "invalid_request",
    )
    assert_error(
        client.post("/v1/runs", content=b"{not json", headers={"content-type": "application/json"}),
        400,
        "invalid_json",
    )
    assert_error(
        client.post("/v1/runs", json={"document": steps(1), "mock_script": {"responses": []}}),
        400,
        "mock_error",
    )
    surrogate = json.dumps({"document": steps(1)})[:-1] + ', "mock_script": {"default": "\\ud800"}}'
    body = assert_error(
        client.post("/v1/runs", content=surrogate, headers={"content-type": "application/json"}),
        400,
        "mock_error",
    )
    assert "lone surrogate" in body["message"]
    assert_error(client.post("/v1/runs", json={"document": steps(1), "provider": "psychic"}), 422)
    assert_error(client.get("/v1/nothing-here"), 404, "not_found")


def test_unknown_runs_are_404(client: httpx.Client) -> None:
    for method, path in [
        ("GET", "/v1/runs/20260101T000000-00000000"),
        ("GET", "/v1/runs/20260101T000000-00000000/events"),
        ("POST", "/v1/runs/20260101T000000-00000000/resume"),
        ("POST", "/v1/runs/20260101T000000-00000000/cancel"),
        ("GET", "/v1/runs/..%2F..%2Fetc"),
        ("GET", "/v1/runs/.."),
    ]:
        assert_error(client.request(method, path), 404)
    assert_error(
        client.post("/v1/runs/nope/answers", json={"answers": {"a": "b"}}), 404, "not_found"
    )


def test_paths_outside_the_workflows_folder_are_refused(client: httpx.Client) -> None:
    for name in ["../outside.json", "/etc/passwd", "nested/../../outside.json", "escape.json"]:
        assert_error(client.post("/v1/runs", json={"workflow": name}), 400, "invalid_path")
    assert_error(
        client.post("/v1/runs", json={"document": steps(1), "mock": "../outside.mock.json"}),
        400,
        "invalid_path",
    )
    assert_error(
        client.post("/v1/runs", json={"document": steps(1), "fixtures": "/etc/hostname"}),
        400,
        "invalid_path",
    )
    assert_error(client.get("/v1/workflows/../outside.json"), 404)
    assert_error(client.get("/v1/workflows/nested%2F..%2F..%2Foutside.json"), 400, "invalid_path")


def test_an_oversized_body_is_413(client: httpx.Client) -> None:
    doc = steps(1)
    doc["description"] = "x" * (MAX_BODY + 10)
    assert_error(client.post("/v1/runs", json={"document": doc}), 413, "body_too_large")

    def chunks() -> Iterator[bytes]:
        yield b'{"document": {"description": "'
        for _ in range(MAX_BODY // 1000 + 2):
            yield b"y" * 1000
        yield b'"}}'

    chunked = client.post(
        "/v1/check", content=chunks(), headers={"content-type": "application/json"}
    )
    assert_error(chunked, 413, "body_too_large")


def test_inline_documents_read_no_files_and_use_only_configured_mcp_servers(
    client: httpx.Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    skill = tmp_path / ".claude" / "skills" / "leaky" / "SKILL.md"
    skill.parent.mkdir(parents=True)
    skill.write_text("THE SERVER'S OWN SKILL")
    monkeypatch.setenv("HOME", str(tmp_path))
    doc = chain(node("k", "skill", name="leaky", scope="personal", description="d"))
    body = client.post("/v1/check", json={"document": doc}).json()
    assert body["valid"] is True
    assert [d["code"] for d in body["diagnostics"]] == ["skill-unresolved"]
    run_id = start(client, document=doc, mock_script={"responses": {"k": ["ok"]}})
    run = wait_for_status(client, run_id, ("completed",))
    assert run["output"] == "ok"
    assert "THE SERVER'S OWN SKILL" not in json.dumps(client.get(f"/v1/runs/{run_id}").json())

    mcp = chain(node("m", "mcp", serverId="attacker", toolName="x", parameters={}))
    body = assert_error(client.post("/v1/runs", json={"document": mcp}), 422, "invalid_document")
    assert "mcp-server-unknown" in {d["code"] for d in body["diagnostics"]}


def test_secrets_are_masked_in_responses_and_events(client: httpx.Client, space: Path) -> None:
    run_id = start(
        client, workflow="approval.json", mock="approval.mock.json", inputs={"topic": SECRET}
    )
    events, status = follow(client, run_id)
    assert status == "halted"
    text = json.dumps(events)
    assert SECRET not in text and "***" in text
    assert SECRET not in client.get(f"/v1/runs/{run_id}").text
    assert SECRET not in (space / "runs" / run_id / "events.jsonl").read_text()


def test_more_active_runs_than_allowed_is_429(client: httpx.Client) -> None:
    running = [start_steps(client, 40, latency_ms=100) for _ in range(8)]
    refused = client.post("/v1/runs", json={"document": steps(1), "mock_script": script(1)})
    assert_error(refused, 429, "too_many_active_runs")
    assert refused.headers["retry-after"] == "1"
    for run_id in running:
        assert client.post(f"/v1/runs/{run_id}/cancel").status_code == 202
    for run_id in running:
        wait_for_status(client, run_id, ("interrupted",))
    start_steps(client, 1)


def test_a_run_of_another_process_is_followed_until_it_stops(
    client: httpx.Client, space: Path
) -> None:
    """A run another process is running (``lattice run``) streams by following its
    folder's events.jsonl."""
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        folder = space / "runs" / "20260101T000000-0123abcd"
        folder.mkdir(parents=True)
        checkpoint = {
            "run_id": folder.name,
            "status": "running",
            "owner": {"pid": owner.pid, "host": socket.gethostname()},
            "meta": {"workflow": "elsewhere"},
        }
        (folder / "checkpoint.json").write_text(json.dumps(checkpoint))

        def event(seq: int, kind: str) -> str:
            return json.dumps(
                {"seq": seq, "ts": "t", "run_id": folder.name, "type": kind, "data": {}}
            )

        (folder / "events.jsonl").write_text(event(1, "run_started") + "\n")
        assert client.get(f"/v1/runs/{folder.name}").json()["status"] == "running"
        assert_error(client.post(f"/v1/runs/{folder.name}/resume"), 409, "conflict")
        assert_error(client.post(f"/v1/runs/{folder.name}/cancel"), 409, "conflict")

        def finish_later() -> None:
            time.sleep(0.4)
            with (folder / "events.jsonl").open("a") as handle:
                handle.write(event(2, "op_started") + "\n" + event(3, "run_finished") + "\n")
                handle.write('{"seq": 4, "torn')
            (folder / "checkpoint.json").write_text(
                json.dumps({**checkpoint, "status": "completed"})
            )

        writer = threading.Thread(target=finish_later)
        writer.start()
        events, status = follow(client, folder.name)
        writer.join()
        assert status == "completed"
        assert [e["seq"] for e in events] == [1, 2, 3], "a torn last line is not sent"
    finally:
        owner.kill()
        owner.wait()


def test_lattice_resume_continues_a_run_started_over_http(
    client: httpx.Client, space: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = start(client, document=steps(2), mock_script=script(2, given=1))
    wait_for_status(client, run_id, ("failed",))
    folder = space / "runs" / run_id
    assert main(["resume", str(folder)]) == 1, "the run's own inline script, still short"
    fuller = tmp_path / "fuller.mock.json"
    fuller.write_text(json.dumps(script(2)))
    assert main(["resume", run_id, "--runs-dir", str(space / "runs"), "--mock", str(fuller)]) == 0
    assert json.loads(capsys.readouterr().out) == "answer 1"
    run = client.get(f"/v1/runs/{run_id}").json()
    assert run["status"] == "completed"
    assert requests_by_node(file_events(folder)) == {"s0": 1, "s1": 3}


class CountedFile:
    """A file whose reads are counted (``ReadBytes``)."""

    def __init__(self, file: Any, counter: ReadBytes) -> None:
        self._file = file
        self._counter = counter

    def read(self, *args: Any) -> Any:
        data = self._file.read(*args)
        with self._counter.lock:
            self._counter.total += len(data)
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)

    def __enter__(self) -> CountedFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self._file.close()


class ReadBytes:
    """How many bytes of ``path`` are read, whoever reads them."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
        self.path = str(path)
        self.total = 0
        self.lock = threading.Lock()
        for module in (io, builtins):
            monkeypatch.setattr(module, "open", self._spy(module.open))

    def _spy(self, real: Any) -> Any:
        def spy(file: Any, *args: Any, **kwargs: Any) -> Any:
            opened = real(file, *args, **kwargs)
            if not isinstance(file, int) and os.fspath(file) == self.path:
                return CountedFile(opened, self)
            return opened

        return spy


def test_watchers_of_another_process_s_run_share_one_reader_of_its_events(
    client: httpx.Client, space: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Six watchers of a run another process runs: its events.jsonl is read once for all
    of them as it grows (each new byte once), not once per watcher at every poll, and
    every watcher gets every event, in order, once."""
    monkeypatch.setattr("lattice.server.events.POLL_SECONDS", 0.02)
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    folder = space / "runs" / "20260101T000000-0123beef"
    folder.mkdir(parents=True)
    checkpoint = {
        "run_id": folder.name,
        "status": "running",
        "owner": {"pid": owner.pid, "host": socket.gethostname()},
    }
    (folder / "checkpoint.json").write_text(json.dumps(checkpoint))
    path = folder / "events.jsonl"

    def append(seq: int) -> None:
        with path.open("a") as handle:
            handle.write(json.dumps({"seq": seq, "ts": "t", "run_id": folder.name, "type": "tick"}))
            handle.write("\n")

    for seq in range(1, 41):
        append(seq)
    read = ReadBytes(monkeypatch, path.resolve())
    received: list[list[int]] = [[] for _ in range(6)]
    ends: list[str | None] = [None] * 6

    def watch(index: int) -> None:
        with (
            httpx.Client(base_url=str(client.base_url), timeout=TIMEOUT) as own,
            own.stream("GET", f"/v1/runs/{folder.name}/events") as response,
        ):
            for message in read_sse(response):
                if message.event == "end":
                    ends[index] = message.data["status"]
                    return
                received[index].append(message.data["seq"])

    def everyone_has(seq: int) -> None:
        deadline = time.monotonic() + TIMEOUT
        while not all(seqs and seqs[-1] >= seq for seqs in received):
            assert time.monotonic() < deadline, [len(seqs) for seqs in received]
            time.sleep(0.005)

    watchers = [threading.Thread(target=watch, args=(i,)) for i in range(6)]
    try:
        for thread in watchers:
            thread.start()
        everyone_has(40)
        for seq in range(41, 61):
            append(seq)
            everyone_has(seq)
        (folder / "checkpoint.json").write_text(json.dumps({**checkpoint, "status": "completed"}))
        for thread in watchers:
            thread.join(TIMEOUT)
    finally:
        owner.kill()
        owner.wait()
    assert received == [list(range(1, 61))] * 6
    assert ends == ["completed"] * 6
    # Each watcher may read the file once when it comes; then one reader reads each byte.
    assert read.total <= 8 * path.stat().st_size


def test_a_run_refused_after_a_slow_start_is_an_error_not_a_started_run(
    client: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The start request answers once the run has emitted its first event or ended,
    however long its folder takes to start (it used to give up after 10,000 turns of the
    loop and answer 202 for a run that then failed to start)."""

    async def slow_full_disk(self: Any) -> None:
        await asyncio.sleep(1.0)
        raise LatticeUserError("cannot sync the run folder: disk full")

    monkeypatch.setattr(LoopRecorder, "sync_started", slow_full_disk)
    response = client.post("/v1/runs", json={"document": steps(1), "mock_script": script(1)})
    body = assert_error(response, 400, "user_error")
    assert body["message"] == "cannot sync the run folder: disk full"


def test_a_run_on_temporal_is_never_offered_a_resume() -> None:
    pytest.importorskip("fastapi")
    from lattice.server.remote import run_json
    from lattice.service.backend import RunView

    flaky = {"category": "provider_error", "details": {}}
    shown = run_json(RunView("r2", "failed", failure=flaky))["failure"]
    assert shown["resumable"] is False  # POST .../resume is a 409 on Temporal
    assert "start the run again" in shown["recovery_action"]

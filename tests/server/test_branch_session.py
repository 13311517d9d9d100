"""A branch session over the gateway: each message is a halted question answered with
``POST /v1/runs/{id}/answers``, each reply arrives on the event stream, and ``/done``
ends the session with its summary (the question/answer flow of an askUserQuestion, one
message at a time)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lattice.server.app import ServerSettings
from lattice.server.in_thread import serve_in_thread
from tests.conftest import EXAMPLES
from tests.server.helpers import TIMEOUT, follow

NODE = "branchSession-review"
SCRIPT = json.loads((EXAMPLES / "branch-session.mock.json").read_text())
MESSAGES = json.loads((EXAMPLES / "branch-session.answers.json").read_text())[NODE]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("session-gateway")


@pytest.fixture(scope="module")
def client(root: Path) -> Iterator[httpx.Client]:
    settings = ServerSettings(runs_dir=root / "runs", workflows_dir=root)
    with serve_in_thread(settings) as url, httpx.Client(base_url=url, timeout=TIMEOUT) as client:
        yield client


def requests_by_op(events: list[dict[str, Any]]) -> Counter[str]:
    return Counter(e["op_id"] for e in events if e["type"] == "llm_request")


def test_a_session_is_driven_message_by_message(client: httpx.Client, root: Path) -> None:
    started = client.post(
        "/v1/runs",
        json={
            "document": json.loads((EXAMPLES / "branch-session.json").read_text()),
            "mock_script": SCRIPT,
            "inputs": json.loads((EXAMPLES / "branch-session.inputs.json").read_text()),
        },
    )
    assert started.status_code == 202, started.text
    run_id = started.json()["run_id"]
    events, status = follow(client, run_id)
    assert status == "halted"
    question = client.get(f"/v1/runs/{run_id}").json()["question"]
    assert question["node_id"] == NODE
    assert question["options"] == []
    assert question["session"] is True  # the panel offers "End the session" (/done)
    assert question["question"].startswith("Branch session: Review the plan together")

    replies = SCRIPT["responses"][NODE]
    for number, message in enumerate(MESSAGES[:-1]):
        answered = client.post(f"/v1/runs/{run_id}/answers", json={"answers": {NODE: message}})
        assert answered.status_code == 202, answered.text
        rest, status = follow(client, run_id, last_event_id=events[-1]["seq"])
        events += rest
        assert status == "halted", f"message {number} did not halt for the next one"
        run = client.get(f"/v1/runs/{run_id}").json()
        # the reply is the next question, and the transcript grew by one turn
        assert run["question"]["question"].startswith(replies[number])
        answers = [e["data"]["answer"] for e in rest if e["type"] == "human_answer"]
        assert answers == [{"text": message}]

    done = client.post(f"/v1/runs/{run_id}/answers", json={"answers": {NODE: "/done"}})
    assert done.status_code == 202, done.text
    rest, status = follow(client, run_id, last_event_id=events[-1]["seq"])
    events += rest
    assert status == "completed"
    run = client.get(f"/v1/runs/{run_id}").json()
    assert run["output"] == SCRIPT["responses"]["prompt-checklist"][0]
    # one request per message, one summary: nothing asked twice across the resumes
    assert requests_by_op(events) == {
        "prompt-plan": 1,
        f"{NODE}#reply": len(MESSAGES) - 1,
        f"{NODE}#summary": 1,
        "prompt-checklist": 1,
    }
    final = json.loads((root / "runs" / run_id / "state_final.json").read_text())
    session = final["vars"][NODE]
    assert [t["person"] for t in session["transcript"]] == MESSAGES[:-1]
    assert session["result"] == replies[-1]


def test_a_single_answer_is_one_message(client: httpx.Client) -> None:
    """An answer given when the run starts is the session's first message, used once:
    the run then halts for the next one instead of sending it again."""
    started = client.post(
        "/v1/runs",
        json={
            "document": json.loads((EXAMPLES / "branch-session.json").read_text()),
            "mock_script": SCRIPT,
            "inputs": json.loads((EXAMPLES / "branch-session.inputs.json").read_text()),
            "answers": {NODE: MESSAGES[0]},
        },
    )
    assert started.status_code == 202, started.text
    run_id = started.json()["run_id"]
    events, status = follow(client, run_id)
    assert status == "halted"
    assert [e["data"]["answer"] for e in events if e["type"] == "human_answer"] == [
        {"text": MESSAGES[0]}
    ]
    assert requests_by_op(events)[f"{NODE}#reply"] == 1

"""The gateway answers a prompt step's AskUserQuestion as it answers an askUserQuestion
node: the halted run shows the question, ``POST /v1/runs/{id}/answers`` resumes it, and
the model gets the answer as the tool's result."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from lattice.config import AgentsConfig, LatticeConfig
from lattice.server.app import ServerSettings
from lattice.server.in_thread import serve_in_thread
from tests.builders import chain, node, op_record
from tests.server.helpers import TIMEOUT, follow

ASK = {
    "$tool_calls": [
        {
            "name": "AskUserQuestion",
            "arguments": {
                "questions": [
                    {"question": "Which colour?", "options": [{"label": "Red"}, {"label": "Blue"}]}
                ]
            },
        }
    ]
}


def test_the_gateway_answers_a_prompt_steps_question(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    config = LatticeConfig(agents=AgentsConfig(workspace=str(project), allow=["read"]))
    settings = ServerSettings(runs_dir=tmp_path / "runs", config=config)
    document = chain(node("pick", "prompt", prompt="Ask the user for a colour, then name it."))
    script = {"responses": {"pick": [ASK, "Blue it is."]}}
    with serve_in_thread(settings) as url, httpx.Client(base_url=url, timeout=TIMEOUT) as client:
        started = client.post("/v1/runs", json={"document": document, "mock_script": script})
        assert started.status_code == 202, started.text
        run_id = started.json()["run_id"]
        events, status = follow(client, run_id)
        assert status == "halted"
        run = client.get(f"/v1/runs/{run_id}").json()
        question = run["question"]
        assert (question["node_id"], question["question"]) == ("pick", "Which colour?")
        assert question["options"] == ["Red", "Blue"]
        answered = client.post(f"/v1/runs/{run_id}/answers", json={"answers": {"pick": "Blue"}})
        assert answered.status_code == 202, answered.text
        _, status = follow(client, run_id, last_event_id=events[-1]["seq"])
        assert status == "completed"
        assert client.get(f"/v1/runs/{run_id}").json()["output"] == "Blue it is."
    folder = tmp_path / "runs" / run_id
    (call,) = op_record(folder, "pick")["transcript"]["turns"][0]["tool_calls"]
    assert '"Which colour?"="Blue"' in call["result"]
    sent = [json.loads(line) for line in (folder / "journal.jsonl").read_text().splitlines()]
    assert sum(line["kind"] == "request" for line in sent) == 2  # the first turn not re-sent

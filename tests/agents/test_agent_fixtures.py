"""``--fixtures`` record and replay agent turns as they do model calls: a run whose
sub-agent and prompt step call tools is recorded from the real OpenAI SDK against a local
server, then replayed with the server stopped and no provider: the same result and the
same tool calls."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lattice.cli import main
from lattice.llm.fake_server import FakeLLMServer, ToolTurn, serve
from tests.builders import chain, node, op_record

NOTES = "the plan: rename x to y\n"


def answer(body: dict[str, Any]) -> str | ToolTurn:
    """A model that, offered tools, reads and searches first, then answers with what the
    tools gave it; with no tools it answers at once."""
    results = [m["content"] for m in body["messages"] if m.get("role") == "tool"]
    if results:
        return "seen: " + " | ".join(str(r).strip() for r in results)
    if body.get("tools"):
        return ToolTurn(
            [
                ("call_r", "Read", json.dumps({"file_path": "notes.txt"})),
                ("call_g", "Grep", json.dumps({"pattern": "rename"})),
            ],
            text="Looking first.",
        )
    return "no tools"


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeLLMServer]:
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    monkeypatch.chdir(tmp_path)
    for name in ("LATTICE_CONFIG", "LATTICE_PROVIDER", "LATTICE_OPENAI_MODEL"):
        monkeypatch.delenv(name, raising=False)
    with serve(answer) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url + "/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        yield srv


def tool_calls(folder: Path, op_id: str) -> list[tuple[str, str, Any, str]]:
    turns = op_record(folder, op_id)["transcript"]["turns"]
    return [
        (c["id"], c["name"], c["arguments"], c["result"]) for t in turns for c in t["tool_calls"]
    ]


def test_an_agent_run_is_recorded_and_replayed_offline(
    server: FakeLLMServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "notes.txt").write_text(NOTES)
    doc = tmp_path / "flow.json"
    doc.write_text(
        json.dumps(
            chain(
                node("inspect", "subAgent", prompt="Read notes.txt and say what it plans."),
                node("confirm", "prompt", prompt="Check the plan from the previous step."),
            )
        )
    )
    fixtures = tmp_path / "agent.jsonl"
    grant = ("--workspace", str(project), "--allow", "read")

    def run(runs: str, *extra: str) -> tuple[str, Path]:
        args = ["run", str(doc), "--runs-dir", str(tmp_path / runs), "--fixtures", str(fixtures)]
        code = main([*args, *grant, *extra])
        out, err = capsys.readouterr()
        assert code == 0, err
        (folder,) = (tmp_path / runs).iterdir()
        return out, folder

    recorded, first = run("recorded", "--record", "--provider", "openai")
    sent = len(server.received)
    assert sent == 4  # two agents, each a tool turn and a final turn
    lines = [json.loads(line) for line in fixtures.read_text().splitlines()]
    assert [bool(line.get("tool_calls")) for line in lines] == [True, False, True, False]
    assert "seen:" in recorded and "the plan: rename x to y" in recorded

    server.stop()  # offline from here on, and no --provider: only the fixtures answer
    replayed, second = run("replayed")
    assert replayed == recorded
    assert len(server.received) == sent
    for op_id in ("inspect", "confirm"):
        calls = tool_calls(first, op_id)
        assert [name for _, name, _, _ in calls] == ["Read", "Grep"]
        assert tool_calls(second, op_id) == calls

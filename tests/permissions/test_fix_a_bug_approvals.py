"""The fix-a-bug example with Claude Code's ``ask`` rules on Bash and Edit: approved at
the terminal, with ``lattice resume`` and through the gateway (the panel's door:
tests/panel/test_approvals.py), each leads to the same
files and the same result, and each decision is journaled with the door it came by."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lattice.cli.main import main
from lattice.config import AgentsConfig, LatticeConfig
from lattice.server.app import ServerSettings
from lattice.server.in_thread import serve_in_thread
from lattice.workspace import sandbox_problem
from tests.builders import example_args
from tests.conftest import EXAMPLES
from tests.server.helpers import follow

pytestmark = pytest.mark.skipif(
    sandbox_problem() is not None, reason=f"no sandbox here: {sandbox_problem()}"
)
FIXED = "    return sum(values) / len(values)\n"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    root = tmp_path / "project"
    shutil.copytree(EXAMPLES / "fix-a-bug-project", root)
    (root / ".claude").mkdir()
    (root / ".claude/settings.json").write_text(
        json.dumps({"permissions": {"ask": ["Bash", "Edit"]}})
    )
    return root


def run_args(project: Path, runs: Path) -> list[str]:
    return [*example_args("fix-a-bug", project, runs), "--json"]


def outcome(folder: Path) -> tuple[Any, list[tuple[str, str, str]]]:
    """The run's output and its journaled decisions (id, decision, door)."""
    result = json.loads((folder / "result.json").read_text())
    lines = [json.loads(line) for line in (folder / "journal.jsonl").read_text().splitlines()]
    decided = [(x["id"], x["decision"], x["door"]) for x in lines if x["kind"] == "tool_decision"]
    calls = [x["tool"] for x in lines if x["kind"] == "tool_call"]
    assert calls == ["Glob", "Grep", "Read", "Read", "Read", "Edit", "Bash"], "each call once"
    return result["output"], decided


EXPECTED_OUTPUT = {
    "changed_files": ["tally/stats.py"],
    "test_command": "python3 -m unittest discover -s tests",
    "tests_passed": True,
    "summary": "mean() divides by len(values); the three tests pass.",
}


def test_approved_with_lattice_resume(
    project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "runs"
    assert main(run_args(project, runs)) == 3, "halted: the Edit waits"
    (folder,) = runs.iterdir()
    assert "(len(values) + 1)" in (project / "tally/stats.py").read_text()
    capsys.readouterr()
    assert main(["runs", "list", "--waiting", "--runs-dir", str(runs)]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert (
        listed[0].startswith(f"{folder.name}  halted") and "[waiting_for_approval] fix" in listed[0]
    )
    assert listed[1:] == ["    approve fix.1.1: Edit tally/stats.py"]
    assert main(["resume", str(folder), "--approve", "fix.1.1"]) == 3, "the Bash waits"
    capsys.readouterr()
    assert main(["runs", "list", "--waiting", "--runs-dir", str(runs)]) == 0
    assert (
        "    approve fix.2.1: Bash python3 -m unittest discover -s tests" in capsys.readouterr().out
    )
    assert FIXED in (project / "tally/stats.py").read_text()
    assert main(["resume", str(folder), "--approve", "fix.2.1"]) == 0
    output, decided = outcome(folder)
    assert output == EXPECTED_OUTPUT
    assert decided == [
        ("fix.1.1", "allow", "lattice resume"),
        ("fix.2.1", "allow", "lattice resume"),
    ]


def test_a_decision_on_a_call_not_waiting_is_refused(
    project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "runs"
    assert main(run_args(project, runs)) == 3, "halted: the Edit waits"
    (folder,) = runs.iterdir()
    journal = (folder / "journal.jsonl").read_text()
    capsys.readouterr()
    assert main(["resume", str(folder), "--approve", "fix.9.9"]) == 2
    err = capsys.readouterr().err
    assert "fix.9.9: not waiting for a decision" in err and "waits for: fix.1.1" in err
    assert (folder / "journal.jsonl").read_text() == journal, "nothing was done"
    assert main(["resume", str(folder), "--approve", "fix.1.1"]) == 3, "the Bash waits"
    assert main(["resume", str(folder), "--deny", "fix.1.1", "--reason", "late"]) == 2
    assert "waits for: fix.2.1" in capsys.readouterr().err


def test_approved_at_the_terminal(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys: list[str] = []

    def press(prompt: str) -> str:
        keys.append(prompt)
        return "y"

    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    monkeypatch.setattr("lattice.cli.common.read_key", press)
    runs = tmp_path / "runs"
    assert main(run_args(project, runs)) == 0
    assert len(keys) == 2, "asked for the Edit, then the Bash"
    (folder,) = runs.iterdir()
    assert FIXED in (project / "tally/stats.py").read_text()
    output, decided = outcome(folder)
    assert output == EXPECTED_OUTPUT
    assert decided == [("fix.1.1", "allow", "terminal"), ("fix.2.1", "allow", "terminal")]


@pytest.fixture
def gateway(project: Path, tmp_path: Path) -> Iterator[httpx.Client]:
    config = LatticeConfig(
        agents=AgentsConfig(workspace=str(project), allow=["read", "write", "shell"])
    )
    settings = ServerSettings(
        runs_dir=tmp_path / "runs", workflows_dir=tmp_path / "flows", config=config
    )
    (tmp_path / "flows").mkdir()
    with serve_in_thread(settings) as url, httpx.Client(base_url=url, timeout=60) as client:
        yield client


@pytest.mark.parametrize(
    ("headers", "door"),
    [({}, "gateway"), ({"X-Lattice-Client": "panel"}, "panel")],
    ids=["gateway", "panel"],
)
def test_approved_through_the_gateway(
    gateway: httpx.Client, project: Path, tmp_path: Path, headers: dict[str, str], door: str
) -> None:
    """The panel answers through the same route; its header makes the journal say so."""
    started = gateway.post(
        "/v1/runs",
        json={
            "document": json.loads((EXAMPLES / "fix-a-bug.json").read_text()),
            "mock_script": json.loads((EXAMPLES / "fix-a-bug.mock.json").read_text()),
            "inputs": json.loads((EXAMPLES / "fix-a-bug.inputs.json").read_text()),
        },
    )
    assert started.status_code == 202, started.text
    run_id = started.json()["run_id"]
    last = None
    for expected_id, tool in (("fix.1.1", "Edit"), ("fix.2.1", "Bash")):
        events, status = follow(gateway, run_id, last_event_id=last)
        assert status == "halted"
        (requested,) = [e["data"] for e in events if e["type"] == "approval_requested"]
        assert requested["id"] == expected_id and requested["tool"] == tool
        run = gateway.get(f"/v1/runs/{run_id}").json()
        question = run["question"]
        assert question["kind"] == "waiting_for_approval"
        assert [a["id"] for a in question["approvals"]] == [expected_id]
        assert question["answer"]["body"] == {"approvals": {expected_id: "allow"}}
        last = events[-1]["seq"]
        answered = gateway.post(
            f"/v1/runs/{run_id}/answers", json=question["answer"]["body"], headers=headers
        )
        assert answered.status_code == 202, answered.text
    _, status = follow(gateway, run_id, last_event_id=last)
    assert status == "completed"
    output, decided = outcome(tmp_path / "runs" / run_id)
    assert output == EXPECTED_OUTPUT
    assert decided == [("fix.1.1", "allow", door), ("fix.2.1", "allow", door)]
    assert FIXED in (project / "tally/stats.py").read_text()


def test_a_decision_on_a_call_no_longer_waiting_is_refused(gateway: httpx.Client) -> None:
    """A page still showing the Edit's halt does not answer the Bash's: 409, nothing runs."""
    started = gateway.post(
        "/v1/runs",
        json={
            "document": json.loads((EXAMPLES / "fix-a-bug.json").read_text()),
            "mock_script": json.loads((EXAMPLES / "fix-a-bug.mock.json").read_text()),
            "inputs": json.loads((EXAMPLES / "fix-a-bug.inputs.json").read_text()),
        },
    )
    run_id = started.json()["run_id"]
    events, status = follow(gateway, run_id)
    assert status == "halted"
    assert gateway.post(
        f"/v1/runs/{run_id}/answers", json={"approvals": {"fix.1.1": "allow"}}
    ).is_success
    _, status = follow(gateway, run_id, last_event_id=events[-1]["seq"])
    assert status == "halted", "for the Bash"
    again = gateway.post(f"/v1/runs/{run_id}/answers", json={"approvals": {"fix.1.1": "deny"}})
    assert again.status_code == 409, again.text
    assert again.json()["waiting"] == ["fix.2.1"]
    assert "fix.1.1: not waiting for a decision" in again.json()["message"]
    assert gateway.get(f"/v1/runs/{run_id}").json()["status"] == "halted"


def test_a_bad_approval_is_refused_by_the_gateway(gateway: httpx.Client) -> None:
    answered = gateway.post("/v1/runs/nope/answers", json={"approvals": {"x": "maybe"}})
    assert answered.status_code == 422
    assert "an approval is one of allow, allow_run, deny" in answered.text


def test_a_run_says_its_permissions_and_a_mode_it_refused(
    project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (project / ".claude/settings.local.json").write_text(
        json.dumps({"permissions": {"defaultMode": "bypassPermissions"}})
    )
    assert main(run_args(project, tmp_path / "runs")) == 3, "ask rules still ask"
    err = capsys.readouterr().err
    assert "lattice: permissions: 2 ask; mode default (default)" in err
    assert "bypassPermissions" in err and "needs --bypass-permissions" in err


def test_a_reason_goes_with_a_denial(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "run").mkdir()
    assert main(["resume", str(tmp_path / "run"), "--approve", "x.1.1", "--reason", "no"]) == 2
    assert "--reason goes with --deny" in capsys.readouterr().err

"""The add-a-feature example end to end: prompt steps act as the main agent, the plan is
confirmed with the person through AskUserQuestion (at the terminal, or by a resume), a
sub-agent that names no tools implements it, and the checks run the tests in the sandbox
and fix what fails."""

from __future__ import annotations

import io
import json
import shutil
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from lattice.cli import main
from lattice.workspace import sandbox_problem
from tests.agents.test_fix_a_bug import project_tests
from tests.builders import example_args, op_record
from tests.conftest import EXAMPLES

pytestmark = pytest.mark.skipif(
    sandbox_problem() is not None, reason=f"no sandbox here: {sandbox_problem()}"
)
NAME = "add-a-feature"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def start(tmp_path: Path, *extra: str) -> tuple[int, Path, Path]:
    """Run the example over a copy of its project: (exit code, project, runs folder)."""
    project = tmp_path / "project"
    shutil.copytree(EXAMPLES / f"{NAME}-project", project)
    runs = tmp_path / "runs"
    code = main([*example_args(NAME, project, runs), *extra])
    return code, project, runs


def journal(folder: Path) -> list[dict[str, Any]]:
    text = (folder / "journal.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines()]


def check_the_work(folder: Path, project: Path, answer: str) -> None:
    """The feature is in, the tests pass, and every step did what Claude Code would."""
    after = project_tests(project)
    assert after.returncode == 0, after.stderr
    assert "Ran 4 tests" in after.stderr
    assert "def median(" in (project / "tally/stats.py").read_text()
    calls = {}
    for node in ("interview", "plan", "confirm", "implement", "checks"):
        record = op_record(folder, node)
        assert record["kind"] == "AGENT", node
        calls[node] = [
            (call["name"], call["is_error"])
            for turn in record["transcript"]["turns"]
            for call in turn["tool_calls"]
        ]
    assert calls == {
        "interview": [("Glob", False), ("Read", False)],
        "plan": [("Read", False), ("Bash", False)],  # the read-only shell runs the tests
        "confirm": [("AskUserQuestion", False)],
        "implement": [("Edit", False), ("MultiEdit", False)],  # it named no tools
        "checks": [("Bash", True), ("Edit", False), ("Bash", False)],  # fails, fixed, passes
    }
    asked = op_record(folder, "confirm")["transcript"]["turns"][0]["tool_calls"][0]
    assert f'="{answer}"' in asked["result"]
    checks = op_record(folder, "checks")["transcript"]["turns"]
    assert "FAILED" in checks[0]["tool_calls"][0]["result"]
    assert "OK" in checks[2]["tool_calls"][0]["result"]
    lines = journal(folder)
    runs_of = Counter(
        (line["op_id"], line["key"])
        for line in lines
        if line["kind"] == "tool_call" and line["tool"] != "AskUserQuestion"
    )
    assert set(runs_of.values()) == {1}, "a tool call ran twice"
    sent = Counter(
        (line["op_id"], line["prompt_hash"]) for line in lines if line["kind"] == "request"
    )
    assert set(sent.values()) == {1}, "a recorded model turn was sent again"


def test_the_person_confirms_the_plan_at_the_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "stdin", _Terminal(""))
    typed: list[str] = []

    def prompt(*_: Any, **__: Any) -> str:
        typed.append("1")
        return "1"

    monkeypatch.setattr("rich.prompt.Prompt.ask", prompt)
    code, project, runs = start(tmp_path)
    assert code == 0
    assert typed == ["1"]  # asked once
    err = capsys.readouterr().err
    assert "Implement this plan?" in err and "1. Yes, implement it" in err
    (folder,) = runs.iterdir()
    check_the_work(folder, project, "Yes, implement it")


def test_the_run_halts_on_the_question_and_a_resume_answers_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))  # no terminal: the run halts
    code, project, runs = start(tmp_path)
    assert code == 3
    err = capsys.readouterr().err
    assert "[waiting_for_answer] at confirm: waiting for an answer to 'Implement this plan?" in err
    (folder,) = runs.iterdir()
    assert "def median(" not in (project / "tally/stats.py").read_text()  # nothing changed yet
    assert main(["runs", "show", str(folder)]) == 0
    assert ": halted" in capsys.readouterr().out
    assert main(["resume", str(folder), "--answer", "confirm=Yes, implement it"]) == 0
    check_the_work(folder, project, "Yes, implement it")
    events = (folder / "events.jsonl").read_text().splitlines()
    assert sum('"type":"run_halted"' in line for line in events) == 1  # asked once

"""Prompt steps as turns of the main agent: under a grant they get the granted tools and
AskUserQuestion, which halts the run as an askUserQuestion node does; without a grant
they stay one model call."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from lattice.cli import main
from lattice.ir.models import AgentOp, LLMWriteOp
from lattice.llm.examples import example_value
from lattice.llm.mock import MockProvider
from lattice.lower import lower
from lattice.lower.main_agent import under_grant
from lattice.runs.journal import read_journal
from lattice.runtime import Runner, RunStore
from lattice.runtime.settings import AgentSettings, RuntimeSettings
from lattice.service.mocks import plan_mocks
from lattice.workspace import WorkspaceGrant
from tests.builders import chain, corpus_params, lower_ok, node, op_record
from tests.conftest import CORPUS, corpus_files

ASK = {
    "$tool_calls": [
        {
            "name": "AskUserQuestion",
            "arguments": {
                "questions": [
                    {
                        "question": "Go ahead with the plan?",
                        "options": [{"label": "Yes"}, {"label": "No, change it"}],
                    }
                ]
            },
        }
    ]
}
READ = {"$tool_calls": [{"name": "Read", "arguments": {"file_path": "notes.txt"}}]}


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture()
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))  # no terminal unless a test says so
    project = tmp_path / "project"
    project.mkdir()
    (project / "notes.txt").write_text("the plan: rename x to y\n")
    doc = chain(
        node("confirm", "prompt", prompt="Read notes.txt and confirm the plan with the user.")
    )
    paths = {"project": project, "runs": tmp_path / "runs"}
    for name, data in (
        ("doc", doc),
        ("mock", {"responses": {"confirm": [READ, ASK, "The plan is approved."]}}),
    ):
        paths[name] = tmp_path / f"{name}.json"
        paths[name].write_text(json.dumps(data))
    return paths


def run(paths: dict[str, Path], *extra: Any) -> int:
    args = ["run", paths["doc"], "--mock", paths["mock"], "--runs-dir", paths["runs"], *extra]
    return main([str(a) for a in args])


def granted(paths: dict[str, Path]) -> tuple[str, ...]:
    return ("--workspace", str(paths["project"]), "--allow", "read")


def test_without_a_grant_a_prompt_step_is_one_model_call() -> None:
    ir = lower_ok(chain(node("p", "prompt", prompt="Say hi")))
    assert isinstance(ir.ops["p"], LLMWriteOp) and ir.ops["p"].main_agent
    assert under_grant(ir, WorkspaceGrant()) is ir
    acting = under_grant(ir, WorkspaceGrant(root=Path("."), read=True))
    op = acting.ops["p"]
    assert isinstance(op, AgentOp) and op.agent_type == "main"
    assert op.tools == ["*", "AskUserQuestion"] and op.prompt == "Say hi"


def test_the_main_agent_keeps_the_previous_steps_result_as_context() -> None:
    doc = chain(
        node("plan", "prompt", prompt="Plan it"),
        node("confirm", "prompt", prompt="Confirm the plan from the previous step"),
    )
    plain = lower_ok(doc)
    acting = under_grant(plain, WorkspaceGrant(root=Path("."), read=True))
    assert acting.ops["confirm"].context == plain.ops["confirm"].context == ["$vars.plan.result"]
    assert acting.ops["confirm"].reads == plain.ops["confirm"].reads


def test_a_prompt_step_asks_halts_and_goes_on_after_resume(
    setup: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(setup, *granted(setup)) == 3
    err = capsys.readouterr().err
    assert "waiting for an answer to 'Go ahead with the plan?' (options: Yes, No, change it)" in err
    (folder,) = setup["runs"].iterdir()
    assert f"lattice resume {folder} --answer confirm=<option label or index>" in err
    assert main(["resume", str(folder), "--answer", "confirm=Yes"]) == 0
    record = op_record(folder, "confirm")
    turns = record["transcript"]["turns"]
    calls = [(c["name"], c["result"]) for t in turns for c in t["tool_calls"]]
    assert calls[0] == ("Read", "     1\tthe plan: rename x to y")
    assert calls[1][0] == "AskUserQuestion" and '"Go ahead with the plan?"="Yes"' in calls[1][1]
    journal = [json.loads(line) for line in (folder / "journal.jsonl").read_text().splitlines()]
    requests = [line["prompt_hash"] for line in journal if line["kind"] == "request"]
    assert len(requests) == len(set(requests)) == 3  # no recorded turn sent again
    reads = [line for line in journal if line["kind"] == "tool_call" and line["tool"] == "Read"]
    assert len(reads) == 1  # the Read ran once
    assert read_journal(folder) is not None
    assert json.loads((folder / "result.json").read_text())["output"] == "The plan is approved."


@pytest.mark.parametrize("mode", ["default", "plan"])
def test_asking_the_person_needs_no_permission(
    setup: dict[str, Path], capsys: pytest.CaptureFixture[str], mode: str
) -> None:
    rules = ("--permission-mode", mode, "--ask-rule", "Read", "--no-claude-settings")
    setup["mock"].write_text(json.dumps({"responses": {"confirm": [ASK, "Approved."]}}))
    assert run(setup, *granted(setup), *rules) == 3
    err = capsys.readouterr().err
    assert "waiting for an answer to 'Go ahead with the plan?'" in err  # not an approval
    (folder,) = setup["runs"].iterdir()
    assert main(["resume", str(folder), "--answer", "confirm=Yes"]) == 0
    capsys.readouterr()
    assert main(["check", str(setup["doc"]), *granted(setup), *rules]) == 0
    listed = capsys.readouterr().out
    assert "AskUserQuestion  allowed: asking the person needs no permission" in listed


def test_a_person_at_the_terminal_answers_the_tool(
    setup: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "stdin", _Terminal(""))
    typed: list[str] = []

    def ask(*_: Any, **__: Any) -> str:
        typed.append("2")
        return "2"

    monkeypatch.setattr("rich.prompt.Prompt.ask", ask)
    assert run(setup, *granted(setup)) == 0
    assert typed == ["2"]
    err = capsys.readouterr().err
    assert "Go ahead with the plan?" in err and "2. No, change it" in err
    (folder,) = setup["runs"].iterdir()
    calls = op_record(folder, "confirm")["transcript"]["turns"][1]["tool_calls"]
    assert '"Go ahead with the plan?"="No, change it"' in calls[0]["result"]


def test_a_prompt_step_that_needs_no_tool_costs_one_request(
    setup: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    setup["mock"].write_text(json.dumps({"responses": {"confirm": ["Nothing to do."]}}))
    assert run(setup, *granted(setup)) == 0
    (folder,) = setup["runs"].iterdir()
    (turn,) = op_record(folder, "confirm")["transcript"]["turns"]
    assert turn["tools_offered"] is True
    journal = (folder / "journal.jsonl").read_text()
    assert journal.count('"kind":"request"') == 1


@pytest.mark.parametrize("path", corpus_params(corpus_files(), CORPUS))
def test_each_corpus_step_that_needs_no_tool_costs_one_request_under_a_grant(
    path: Path, tmp_path: Path
) -> None:
    """docs/agents.md, "What it costs": with answers that call no tool, a granted run of
    each corpus document sends exactly the requests an ungranted one does, node by node;
    its prompt steps' requests carry the tool definitions, and nothing else changes."""
    ir = lower(path)
    plan = plan_mocks(ir)  # made without a grant: final answers only
    inputs = example_value(ir.inputs_schema) if ir.inputs_schema else {}

    def requests(grant: WorkspaceGrant) -> list[Any]:
        provider = MockProvider(plan.script["responses"], tools=plan.script.get("tools"))
        settings = RuntimeSettings(agents=AgentSettings(grant=grant))
        runner = Runner(
            ir, provider=provider, store=RunStore(None), answers=plan.answers, settings=settings
        )
        result = runner.run(inputs)
        assert result.status == "completed", result.failure
        return provider.calls

    plain = requests(WorkspaceGrant())
    project = tmp_path / "project"
    project.mkdir()
    acting = requests(WorkspaceGrant(root=project, read=True, write=True, shell=True))
    assert [r.node_id for r in acting] == [r.node_id for r in plain]
    assert not any(r.tools for r in plain)
    steps = {
        op.source_node for op in ir.ops.values() if isinstance(op, LLMWriteOp) and op.main_agent
    }
    for request in acting:
        if request.node_id in steps:
            assert {t.name for t in request.tools} >= {"Read", "Bash", "AskUserQuestion"}

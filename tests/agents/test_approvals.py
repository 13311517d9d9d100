"""Approvals of agents' tool calls: rules decide each call of a turn, a call that asks
halts the run until a person answers, and a resumed run neither asks again nor runs a
decided call twice."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from lattice.permissions import Permissions
from lattice.permissions.approvals import APPROVALS, ApprovalDecision, ApprovalRequest
from lattice.permissions.settings import parse_rules
from lattice.runs.store import RunStore
from lattice.runtime.runner import Runner
from lattice.runtime.settings import AgentSettings, RuntimeSettings
from tests.agents.fixtures import ScriptedModel, answer, calls, recording_agents
from tests.agents.test_loop import agent_ir
from tests.builders import op_record

EDIT = ("Edit", {"file_path": "app.py", "old_string": "a - b", "new_string": "a + b"})
DONE = '{"fixed": true, "file": "app.py"}'


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "app.py").write_text("def add(a, b):\n    return a - b\n")
    (root / "secret.txt").write_text("hunter2\n")
    return root


def agents(workspace: Path, **rules: list[str]) -> AgentSettings:
    parsed = parse_rules(rules, "test: {behavior}[{index}]", workspace)
    base = recording_agents(workspace, read=True, write=True)
    return replace(base, permissions=Permissions(parsed, home=workspace))


def start(ir: Any, model: ScriptedModel, settings: AgentSettings, tmp_path: Path) -> Any:
    runner = Runner(
        ir,
        provider=model,
        settings=RuntimeSettings(agents=settings),
        store=RunStore(tmp_path / "runs"),
    )
    return runner.run({})


def resume(
    folder: Path, model: ScriptedModel, settings: AgentSettings, approvals: dict[str, Any]
) -> Any:
    return Runner.resume(
        folder,
        provider=model,
        settings=RuntimeSettings(agents=settings),
        answers={APPROVALS: approvals},
    )


def journal(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (folder / "journal.jsonl").read_text().splitlines()]


def test_three_parallel_calls_one_denied_the_others_run_and_the_model_is_told(
    workspace: Path, tmp_path: Path
) -> None:
    model = ScriptedModel(
        {
            "fix": [
                calls(
                    ("Read", {"file_path": "app.py"}),
                    ("Read", {"file_path": "secret.txt"}),
                    ("LS", {"path": "."}),
                ),
                answer(DONE),
            ]
        }
    )
    settings = agents(workspace, deny=["Read(./secret.txt)"])
    result = start(agent_ir(), model, settings, tmp_path)
    assert result.status == "completed", result.failure
    told = [m for m in model.requests[1].messages if m.role == "tool"]
    assert [m.tool_call_id for m in told] == ["call_0", "call_1", "call_2"]
    assert "return a - b" in told[0].content and not told[0].is_error
    assert told[1].is_error and "hunter2" not in told[1].content
    assert told[1].content.startswith(
        "Error: Permission to use Read was denied by deny rule 'Read(./secret.txt)' (test: deny[0])"
    )
    assert "app.py" in told[2].content and not told[2].is_error
    decided = [line for line in journal(result.run_dir) if line["kind"] == "tool_decision"]
    assert [(d["tool"], d["decision"], d["by"]) for d in decided] == [("Read", "deny", "rule")]


def fix_turns() -> list[Any]:
    return [calls(("Read", {"file_path": "app.py"})), calls(EDIT), answer(DONE)]


def test_an_edit_that_asks_halts_the_run_with_its_diff_and_resumes_once_approved(
    workspace: Path, tmp_path: Path
) -> None:
    settings = agents(workspace, ask=["Edit"])
    model = ScriptedModel({"fix": fix_turns()})
    halted = start(agent_ir(), model, settings, tmp_path)
    assert halted.status == "halted"
    assert halted.failure.category == "waiting_for_approval"
    (request,) = halted.failure.details["approvals"]
    assert request["id"] == "fix.2.1" and request["tool"] == "Edit"
    assert "-    return a - b\n+    return a + b" in request["diff"]
    assert request["why"] == "ask rule 'Edit' (test: ask[0])"
    assert (workspace / "app.py").read_text().endswith("a - b\n"), "nothing applied yet"
    assert "--approve fix.2.1" in halted.failure.recovery_action
    # resumed with the approval: the model's two turns and the Read are not done again
    later = ScriptedModel({"fix": [answer(DONE)]})
    done = resume(
        halted.run_dir,
        later,
        settings,
        {"fix.2.1": {"decision": "allow", "door": "lattice resume"}},
    )
    assert done.status == "completed", done.failure
    assert len(later.requests) == 1
    assert (workspace / "app.py").read_text().endswith("a + b\n")
    lines = journal(done.run_dir)
    decided = [line for line in lines if line["kind"] == "tool_decision"]
    assert [(d["id"], d["decision"], d["by"], d["door"]) for d in decided] == [
        ("fix.2.1", "allow", "person", "lattice resume")
    ]
    assert sum(1 for line in lines if line["kind"] == "tool_call") == 2  # Read, Edit: once each
    turns = op_record(done.run_dir, "fix")["transcript"]["turns"]
    assert [[c["name"] for c in t["tool_calls"]] for t in turns] == [["Read"], ["Edit"], []]


def test_a_denial_with_a_reason_reaches_the_model_and_the_run_goes_on(
    workspace: Path, tmp_path: Path
) -> None:
    settings = agents(workspace, ask=["Edit"])
    halted = start(agent_ir(), ScriptedModel({"fix": fix_turns()}), settings, tmp_path)
    later = ScriptedModel({"fix": [answer(DONE)]})
    done = resume(
        halted.run_dir, later, settings, {"*": {"decision": "deny", "reason": "not this file"}}
    )
    assert done.status == "completed", done.failure
    told = [m for m in later.requests[0].messages if m.role == "tool"][-1]
    assert told.is_error and "denied by the user: not this file" in told.content
    assert (workspace / "app.py").read_text().endswith("a - b\n")


def test_parallel_calls_that_ask_are_decided_one_by_one(workspace: Path, tmp_path: Path) -> None:
    two_edits = calls(
        EDIT,
        ("Write", {"file_path": "notes.md", "content": "fixed\n"}),
        ("Read", {"file_path": "app.py"}),
    )
    settings = agents(workspace, ask=["Edit"])
    model = ScriptedModel({"fix": [two_edits, answer(DONE)]})
    halted = start(agent_ir(), model, settings, tmp_path)
    assert [r["id"] for r in halted.failure.details["approvals"]] == ["fix.1.1", "fix.1.2"]
    later = ScriptedModel({"fix": [answer(DONE)]})
    done = resume(halted.run_dir, later, settings, {"fix.1.1": "allow", "fix.1.2": "deny"})
    assert done.status == "completed", done.failure
    assert (workspace / "app.py").read_text().endswith("a + b\n")
    assert not (workspace / "notes.md").exists()
    told = [m for m in later.requests[0].messages if m.role == "tool"]
    assert [m.is_error for m in told] == [False, True, False]


def test_a_person_at_the_terminal_answers_without_a_halt(workspace: Path, tmp_path: Path) -> None:
    asked: list[ApprovalRequest] = []

    def person(request: ApprovalRequest) -> ApprovalDecision:
        asked.append(request)
        return ApprovalDecision("allow_run", "person", "terminal")

    settings = replace(agents(workspace, ask=["Edit"]), approver=person)
    twice = [
        calls(EDIT),
        calls(("Write", {"file_path": "notes.md", "content": "x\n"})),
        answer(DONE),
    ]
    result = start(agent_ir(), ScriptedModel({"fix": twice}), settings, tmp_path)
    assert result.status == "completed", result.failure
    # allowed for the rest of the run: the Write (an edit too) does not ask again
    assert [r.tool for r in asked] == ["Edit"]
    assert (workspace / "notes.md").read_text() == "x\n"
    decided = [line for line in journal(result.run_dir) if line["kind"] == "tool_decision"]
    assert [(d["tool"], d["decision"], d["door"]) for d in decided] == [
        ("Edit", "allow_run", "terminal"),
        ("Write", "allow", "allowed for the rest of the agent's run"),
    ]


def test_no_wait_refuses_what_no_one_can_approve(workspace: Path, tmp_path: Path) -> None:
    settings = replace(agents(workspace, ask=["Edit"]), no_wait=True)
    model = ScriptedModel({"fix": fix_turns()})
    result = start(agent_ir(), model, settings, tmp_path)
    assert result.status == "completed", result.failure
    told = [m for m in model.requests[2].messages if m.role == "tool"][-1]
    assert told.is_error and "denied by --no-wait: no one could approve it" in told.content


def test_a_tool_denied_as_a_whole_is_not_offered_and_plan_mode_offers_reads_only(
    workspace: Path, tmp_path: Path
) -> None:
    model = ScriptedModel({"fix": [answer(DONE)]})
    result = start(agent_ir(), model, agents(workspace, deny=["Write"]), tmp_path / "a")
    assert result.status == "completed", result.failure
    assert [t.name for t in model.requests[0].tools] == [
        "Read",
        "LS",
        "Glob",
        "Grep",
        "Edit",
        "MultiEdit",
    ]
    planning = replace(
        agents(workspace), permissions=Permissions((), "plan", "--permission-mode", home=workspace)
    )
    model = ScriptedModel({"fix": [answer(DONE)]})
    assert start(agent_ir(), model, planning, tmp_path / "b").status == "completed"
    assert [t.name for t in model.requests[0].tools] == ["Read", "LS", "Glob", "Grep"]


def test_approve_all_answers_the_calls_waiting_not_the_ones_asked_later(
    workspace: Path, tmp_path: Path
) -> None:
    """``"*"`` (``--approve-all``) is every call waiting: a call the model makes after
    the resume, which no one saw, asks again rather than riding on it."""
    settings = agents(workspace, ask=["Edit", "Write"])
    halted = start(agent_ir(), ScriptedModel({"fix": fix_turns()}), settings, tmp_path)
    assert [r["id"] for r in halted.failure.details["approvals"]] == ["fix.2.1"]
    unseen = ("Write", {"file_path": "app.py", "content": "import os; os.system('rm -rf ~')\n"})
    later = ScriptedModel({"fix": [calls(unseen), answer(DONE)]})
    again = resume(halted.run_dir, later, settings, {"*": "allow"})
    assert again.status == "halted", again.failure
    assert [r["id"] for r in again.failure.details["approvals"]] == ["fix.3.1"]
    assert (workspace / "app.py").read_text().endswith("a + b\n"), "the approved edit only"


def test_allow_for_the_run_on_a_command_allows_that_command_not_every_command(
    workspace: Path,
) -> None:
    """As Claude Code's "don't ask again for `git diff` commands": a person's
    ``allow_run`` on ``git diff --stat`` allows ``git diff`` with any arguments for the
    rest of the agent's run, and still asks for ``git push`` or ``rm``; a compound
    command is allowed only when each of its parts is."""
    import asyncio

    from lattice.agents.gate import CallGate, Pass
    from lattice.llm.base import ToolCall

    asked: list[str] = []

    def person(request: ApprovalRequest) -> ApprovalDecision:
        asked.append(request.arguments["command"])
        return ApprovalDecision("allow_run", "person", "terminal")

    gate = CallGate(
        Permissions(parse_rules({"ask": ["Bash"]}, "test", workspace), home=workspace),
        workspace,
        "fix",
        approver=person,
    )

    def run(command: str) -> Any:
        call = ToolCall(id="c", name="Bash", arguments={"command": command})
        return asyncio.run(gate.check(call, "fix.1.1", "k", None, None, None))

    assert isinstance(run("git diff --stat"), Pass)
    assert isinstance(run("git diff HEAD~1 -- src"), Pass)
    assert isinstance(run("python3 -m unittest discover -s tests"), Pass)
    assert isinstance(run("python3 -m unittest -v"), Pass)
    assert isinstance(run("git diff && git status"), Pass)  # asks: git status is new
    assert isinstance(run("git status"), Pass)
    assert isinstance(run("git push origin main"), Pass)
    assert isinstance(run("git diff; rm -rf build"), Pass)
    assert asked == [
        "git diff --stat",
        "python3 -m unittest discover -s tests",
        "git diff && git status",
        "git push origin main",
        "git diff; rm -rf build",
    ]
    assert [r.text for r in gate.allowed_commands][:3] == [
        "Bash(git diff:*)",
        "Bash(python3 -m unittest:*)",
        "Bash(git diff:*)",
    ]


def test_allow_for_the_run_outlives_the_halts_after_it(workspace: Path, tmp_path: Path) -> None:
    """An edit allowed for the rest of the run at the first halt still allows the later
    Write after a second halt and resume (the allowance is taken up again from the
    journal, not only from decisions made in this process)."""
    settings = agents(workspace, ask=["Edit", "Read(secret.txt)"])
    turns = [
        calls(EDIT),
        calls(("Read", {"file_path": "secret.txt"})),
        calls(("Write", {"file_path": "notes.md", "content": "x\n"})),
        answer(DONE),
    ]
    first = start(agent_ir(), ScriptedModel({"fix": turns}), settings, tmp_path)
    assert [r["id"] for r in first.failure.details["approvals"]] == ["fix.1.1"]
    second = resume(
        first.run_dir, ScriptedModel({"fix": turns[1:]}), settings, {"fix.1.1": "allow_run"}
    )
    assert second.status == "halted", second.failure
    assert [r["tool"] for r in second.failure.details["approvals"]] == ["Read"]
    done = resume(second.run_dir, ScriptedModel({"fix": turns[2:]}), settings, {"fix.2.1": "allow"})
    assert done.status == "completed", done.failure
    assert (workspace / "notes.md").read_text() == "x\n"
    decided = [line for line in journal(done.run_dir) if line["kind"] == "tool_decision"]
    assert decided[-1]["tool"] == "Write"
    assert decided[-1]["door"] == "allowed for the rest of the agent's run"

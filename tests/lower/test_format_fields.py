"""Fields of the format Lattice now uses or shows: slashCommandOptions (model, hooks,
allowedTools), skill source/executionMode/executionPrompt, codex promptMode, and the
notes ``lattice lower`` prints for fields that do not change a run."""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path

import jmespath
import pytest

from lattice.cli import main
from lattice.ir.models import AgentOp, TransformOp
from lattice.lower import lower_document


def node(node_id: str, type_: str, **data: object) -> dict[str, object]:
    return {"id": node_id, "type": type_, "name": node_id, "data": data}


def chain(*middle: dict[str, object], **envelope: object) -> dict[str, object]:
    nodes = [node("start", "start"), *middle, node("end", "end")]
    ids = [str(n["id"]) for n in nodes]
    return {
        "id": "f",
        "name": "f",
        "nodes": nodes,
        **envelope,
        "connections": [{"from": a, "to": b} for a, b in pairwise(ids)],
    }


def agent(node_id: str, **data: object) -> dict[str, object]:
    return node(node_id, "subAgent", agentDefinition="You help.", prompt="Help.", **data)


def test_the_slash_command_model_is_the_default_model_class() -> None:
    doc = chain(
        agent("a"),
        agent("b", model="haiku"),
        agent("c", model="inherit"),
        slashCommandOptions={"model": "opus"},
    )
    result = lower_document(doc)
    assert result.ir is not None
    classes = {k: op.model_class for k, op in result.ir.ops.items() if isinstance(op, AgentOp)}
    assert classes == {"a": "large", "b": "small", "c": "large"}
    assert any("model class 'large'" in note for note in result.ir.workflow.notes or [])


def test_hooks_are_listed_in_a_warning_and_never_run() -> None:
    hooks = {
        "PreToolUse": [
            {"matcher": "Bash", "hooks": [{"type": "command", "command": "touch /tmp/x"}]}
        ],
        "Stop": [
            {
                "hooks": [
                    {"type": "command", "command": "echo"},
                    {"type": "command", "command": "ls"},
                ]
            }
        ],
    }
    result = lower_document(
        chain(agent("a"), slashCommandOptions={"hooks": hooks, "allowedTools": "Bash"})
    )
    assert result.ir is not None
    (warning,) = [d for d in result.warnings if d.code == "hooks-not-run"]
    assert "PreToolUse (1 command(s)), Stop (2 command(s))" in warning.message
    assert warning.pointer == "/slashCommandOptions/hooks"
    assert any("asks for Bash (asked for only" in n for n in result.ir.workflow.notes or [])
    assert result.ir.workflow.tools_asked == ["Bash"]
    plain = lower_document(chain(agent("a")))
    assert plain.ir is not None and plain.ir.workflow.tools_asked is None


def write_skill(root: Path, folder: str, text: str) -> None:
    skill = root / folder / "skills" / "notes"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text(text)


def test_a_loaded_skill_is_its_text_for_the_next_node(tmp_path: Path) -> None:
    write_skill(tmp_path, ".github", "Use `semver` and 'quotes'.\n")
    write_skill(tmp_path, ".claude", "the claude one")
    skill = node(
        "notes",
        "skill",
        name="notes",
        description="d",
        scope="project",
        source="copilot",
        executionMode="load",
    )
    result = lower_document(chain(skill, agent("write")), base_dir=tmp_path)
    assert result.ir is not None
    op = result.ir.ops["notes"]
    assert isinstance(op, TransformOp)
    assert jmespath.search(op.expression, {}) == "Use `semver` and 'quotes'.\n"
    write = result.ir.ops["write"]
    assert isinstance(write, AgentOp) and "$vars.notes.result" in write.context


def test_an_executed_skill_takes_its_execution_prompt(tmp_path: Path) -> None:
    write_skill(tmp_path, ".claude", "the claude one")
    skill = node(
        "notes",
        "skill",
        name="notes",
        description="d",
        scope="project",
        executionPrompt="Summarise {{ $in.topic }}.",
    )
    result = lower_document(chain(skill), base_dir=tmp_path)
    assert result.ir is not None
    op = result.ir.ops["notes"]
    assert isinstance(op, AgentOp) and op.tools == ["*"]  # an executing skill acts
    assert op.prompt == "Summarise {{ $in.topic }}." and op.system == "the claude one"


def test_an_ai_generated_codex_prompt_needs_no_prompt() -> None:
    codex = node(
        "cx",
        "codex",
        label="cx",
        promptMode="ai-generated",
        prompt="",
        model="gpt-5-codex",
        reasoningEffort="high",
        sandbox="read-only",
    )
    result = lower_document(chain(codex))
    assert result.ir is not None, result.errors
    op = result.ir.ops["cx"]
    assert isinstance(op, AgentOp) and "'cx'" in op.prompt  # its sandbox makes it an agent
    notes = result.ir.workflow.notes or []
    assert any("codex.sandbox 'read-only'" in n and "docs/agents.md" in n for n in notes)
    assert any("codex.reasoningEffort" in n for n in notes)


def test_lattice_lower_prints_the_notes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = chain(
        agent("a", tools="Read,Grep", memory="project", color="red", builtInType="explore"),
        tour=[{"order": 1, "title": "t", "description": "d", "nodeIds": ["a"]}],
    )
    path = tmp_path / "flow.json"
    path.write_text(json.dumps(doc))
    assert main(["lower", str(path)]) == 0
    err = capsys.readouterr().err
    for said in (
        "subAgent.tools 'Read,Grep'",
        "subAgent.builtInType 'explore'",
        "subAgent.memory 'project'",
        "tour: 1 step(s)",
    ):
        assert f"{path}: note: node 'a' {said}" in err or f"note: {said}" in err, said


def test_a_sub_agent_flow_model_is_its_nodes_model_unless_they_name_one() -> None:
    flow = {
        "id": "review",
        "name": "review",
        "nodes": [
            node("s", "start"),
            agent("read"),
            agent("judge", model="haiku"),
            node("e", "end"),
        ],
        "connections": [
            {"from": "s", "to": "read"},
            {"from": "read", "to": "judge"},
            {"from": "judge", "to": "e"},
        ],
    }
    call = node("call", "subAgentFlow", subAgentFlowId="review", label="call", model="opus")
    result = lower_document(chain(call, subAgentFlows=[flow]))
    assert result.ir is not None, result.errors
    classes = {k: op.model_class for k, op in result.ir.ops.items() if isinstance(op, AgentOp)}
    assert classes == {"call__read": "large", "call__judge": "small"}


def test_a_sub_agent_flow_model_that_is_not_a_name_does_not_crash_lowering() -> None:
    flow = {
        "id": "review",
        "name": "review",
        "nodes": [node("s", "start"), agent("read"), node("e", "end")],
        "connections": [{"from": "s", "to": "read"}, {"from": "read", "to": "e"}],
    }
    for model in (["opus"], {"x": 1}, 3):
        call = node("call", "subAgentFlow", subAgentFlowId="review", label="call", model=model)
        result = lower_document(chain(call, subAgentFlows=[flow]))  # found by the fuzzer
        assert result.ir is None or result.ir.ops["call__read"].model_class == "default"

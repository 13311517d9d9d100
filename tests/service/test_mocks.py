"""``lattice mock init``: the script it writes runs each document to completion offline,
MCP and HTTP nodes included, with no server started and no op failing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lattice.cli import main
from lattice.ir.models import LLMWriteOp
from lattice.llm.examples import example_value
from lattice.lower import lower
from lattice.service.mocks import LOOP_ANSWERS, answers_file, mock_script, plan_mocks
from tests.builders import corpus_params
from tests.conftest import CORPUS, EXAMPLES, REPO, corpus_files, example_workspace

WORKFLOWS = sorted(
    p
    for p in (REPO / "workflows" / "examples").rglob("*.json")
    if not p.name.endswith((".mock.json", ".answers.json", ".inputs.json"))
)
"""The shipped examples (workflows/pipelines/vpvc.json checks patches against a
repository given with --repo, so it runs with its own script: tests/examples)."""


def run_with_init(
    path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], grant: tuple[str, ...] = ()
) -> list[dict[str, Any]]:
    """``mock init`` then ``run`` (both given ``grant``'s flags): the run completes, no op
    fails (no failure route is taken), every tool call is answered by the script and no
    tool server is opened. Returns the run's events."""
    mock = tmp_path / "flow.mock.json"
    assert main(["mock", "init", str(path), "-o", str(mock), *grant]) == 0
    runs = tmp_path / "runs"
    args = ["run", str(path), "--mock", str(mock), "--runs-dir", str(runs), *grant]
    answers = tmp_path / "flow.answers.json"
    if answers.exists():
        args += ["--answers", str(answers)]
    shipped = path.with_name(path.name.removesuffix(".json") + ".inputs.json")
    ir = lower(path)
    if shipped.exists():
        args += ["--inputs", str(shipped)]
    elif ir.inputs_schema:
        inputs = tmp_path / "inputs.json"
        inputs.write_text(json.dumps(example_value(ir.inputs_schema)))
        args += ["--inputs", str(inputs)]
    code = main(args)
    err = capsys.readouterr().err
    assert code == 0, err
    assert "completed" in err
    (events_file,) = runs.glob("*/events.jsonl")
    events = [json.loads(line) for line in events_file.read_text().splitlines()]
    finished = [e for e in events if e["type"] == "op_finished"]
    assert finished and all(e["data"].get("port") != "failed" for e in finished), path.name
    assert not [e for e in events if e["type"] == "tool_session_opened"]
    calls = [e for e in events if e["type"] == "tool_call"]
    assert all(e["data"].get("mocked") is True for e in calls)
    return events


def test_the_shipped_workflows_are_walked() -> None:
    assert len(WORKFLOWS) >= 12
    assert sum(any(op.kind == "TOOL_CALL" for op in lower(p).ops.values()) for p in WORKFLOWS) >= 5


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_mock_init_runs_each_shipped_workflow(
    path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_with_init(path, tmp_path, capsys)


def test_mock_init_runs_each_corpus_document(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if not CORPUS.is_dir():
        pytest.skip(f"the corpus is not beside this checkout ({CORPUS})")
    documents = corpus_files()
    assert len(documents) >= 14
    for number, path in enumerate(documents):
        folder = tmp_path / str(number)
        folder.mkdir()
        run_with_init(path, folder, capsys)


def _granted(workspace: Path) -> tuple[str, ...]:
    return ("--workspace", str(workspace), "--allow", "read,write,shell")


@pytest.mark.parametrize("path", corpus_params(corpus_files(), CORPUS))
@pytest.mark.parametrize("grant", [False, True], ids=["no-grant", "granted"])
def test_mock_init_runs_each_corpus_document_with_and_without_a_grant(
    path: Path, grant: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each corpus document runs to the end with the script ``mock init`` writes: without
    a grant, and with a workspace granted, where its sub-agents, skills and prompt steps
    act (scripted tool calls, the main agent's AskUserQuestion answered from the answers
    file) and each agent op ends with its final answer."""
    flags: tuple[str, ...] = ()
    if grant:
        workspace = example_workspace(EXAMPLES / "fix-a-bug.json", tmp_path)
        assert workspace is not None
        flags = _granted(workspace)
    events = run_with_init(path, tmp_path, capsys, flags)
    agents = [e for e in events if e["type"] == "agent_finished"]
    asked = [
        e
        for e in events
        if e["type"] == "tool_call_started" and e["data"].get("tool") == "AskUserQuestion"
    ]
    if not grant:
        assert not [e for e in events if e["type"] == "tool_call_started"]
        return
    assert agents, "a granted run of a corpus document has agents"
    steps = [op for op in lower(path).ops.values() if isinstance(op, LLMWriteOp) and op.main_agent]
    assert bool(asked) == bool(steps)  # each prompt step that runs once asks, and is answered
    assert sum(e["data"]["tool_calls"] for e in agents) >= len(asked)


def test_the_script_has_the_shapes_nodes_expect() -> None:
    ir = lower(REPO / "workflows" / "examples" / "support-triage.json")
    script = mock_script(ir)["responses"]
    classify = next(op for op in ir.ops.values() if op.source_node == "classify")
    assert set(script) >= {"classify", "review"}
    assert isinstance(script["review"][0], dict)
    assert len(script["review"]) == LOOP_ANSWERS  # on the revision loop
    assert getattr(classify, "output_schema", None) is not None
    assert answers_file(ir) == {}


def test_questions_take_the_shortest_way_to_an_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = REPO / "workflows" / "examples" / "release-announcement.json"
    mock = tmp_path / "release.mock.json"
    assert main(["mock", "init", str(path), "-o", str(mock)]) == 0
    answers = json.loads((tmp_path / "release.answers.json").read_text())
    ir = lower(path)
    assert answers == {"confirm": "Cancel"}  # straight to an end; Publish posts first
    err = capsys.readouterr().err
    assert "confirm: answers 'Cancel' of 3: the shortest way to an end" in err
    assert "--answers" in err
    assert [c.label for c in plan_mocks(ir).choices] == ["Cancel"]


def test_the_run_hint_names_the_inputs_a_run_needs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    triage = REPO / "workflows" / "examples" / "support-triage.json"
    assert main(["mock", "init", str(triage), "-o", str(tmp_path / "t.mock.json")]) == 0
    hint = capsys.readouterr().err.splitlines()[-1]
    assert hint.endswith(f"--inputs {triage.with_name('support-triage.inputs.json')}")
    copy = tmp_path / "triage.json"  # no inputs file beside it
    copy.write_text(triage.read_text())
    assert main(["mock", "init", str(copy), "-o", str(tmp_path / "c.mock.json")]) == 0
    hint = capsys.readouterr().err.splitlines()[-1]
    assert "--input ticket=…" in hint and "--inputs" not in hint


def test_a_document_without_questions_gets_no_answers_file_nor_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """README and docs/mocks.md: the answers file exists only when there are questions."""
    path = REPO / "workflows" / "examples" / "hello-world.json"
    mock = tmp_path / "flow.mock.json"
    assert main(["mock", "init", str(path), "-o", str(mock)]) == 0
    hint = capsys.readouterr().err.splitlines()[-1]
    assert not (tmp_path / "flow.answers.json").exists()
    assert hint.startswith(f"lattice: run it: lattice run {path} --mock {mock}")
    assert "--answers" not in hint


def _node(node_id: str, type_: str, **data: object) -> dict[str, object]:
    return {"id": node_id, "type": type_, "name": node_id, "data": data}


def _agent(node_id: str) -> dict[str, object]:
    return _node(node_id, "subAgent", agentDefinition="You help.", prompt=f"Do {node_id}.")


def _edge(source: str, target: str, port: str = "output") -> dict[str, str]:
    return {"from": source, "to": target, "fromPort": port}


def test_a_loop_with_parallel_branches_gets_answers_for_every_pass_and_leaves(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A review loop whose body forks into two analysts; the verdict's first branch goes
    back into the loop. The branches need an answer per pass, and the verdict must take
    the way out."""
    document = {
        "id": "loop-fork",
        "name": "loop-fork",
        "nodes": [
            _node("start", "start"),
            _agent("draft"),
            _agent("legal"),
            _agent("style"),
            _agent("merge"),
            _node(
                "verdict",
                "ifElse",
                evaluationTarget="the merged review",
                branches=[
                    {"label": "Revise", "condition": "the reviewers want changes"},
                    {"label": "Done", "condition": "otherwise"},
                ],
            ),
            _node("end", "end"),
        ],
        "connections": [
            _edge("start", "draft"),
            _edge("draft", "legal"),
            _edge("draft", "style"),
            _edge("legal", "merge"),
            _edge("style", "merge"),
            _edge("merge", "verdict"),
            _edge("verdict", "draft", "branch-0"),
            _edge("verdict", "end", "branch-1"),
        ],
    }
    path = tmp_path / "loop-fork.json"
    path.write_text(json.dumps(document))
    responses = mock_script(lower(path))["responses"]
    assert len(responses["legal"]) == len(responses["style"]) == LOOP_ANSWERS
    assert responses["verdict"][0] == "Done"
    run_with_init(path, tmp_path, capsys)


def test_tool_results_hold_what_later_nodes_read() -> None:
    ir = lower(REPO / "workflows" / "examples" / "world-clock.json")
    tools = mock_script(ir)["tools"]
    clock = tools["clock"][0]
    assert {"datetime", "day_of_week", "timezone"} <= set(clock)
    member = tools["member"][0]
    assert member["status"] == 200
    assert {"start", "end"} <= set(member["body"]["working_hours"])


def test_the_description_speaks_of_tools_only_when_the_script_has_some() -> None:
    examples = REPO / "workflows" / "examples"
    with_tools = mock_script(lower(examples / "world-clock.json"))
    without = mock_script(lower(examples / "support-triage.json"))
    assert "tools" in with_tools and "Drop an entry of tools" in with_tools["description"]
    assert "tools" not in without and "tools" not in without["description"]


def test_an_mcp_ai_mode_gets_arguments_of_its_parameters_schema() -> None:
    ir = lower(REPO / "workflows" / "examples" / "meeting-prep.json")
    arguments = mock_script(ir)["responses"]["schedule"][0]
    op = ir.ops["schedule"]
    assert isinstance(op, LLMWriteOp) and op.output_schema is not None
    assert set(op.output_schema["required"]) <= set(arguments)

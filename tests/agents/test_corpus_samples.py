"""Upstream's samples with a workspace granted: their explore, plan and general-purpose
sub-agents run as AGENT ops, and their run folders show the tool calls they made."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lattice.ir.models import AgentOp, AskOp
from lattice.lower import lower
from lattice.service.mocks import plan_mocks
from lattice.workspace import WorkspaceGrant, sandbox_problem
from tests.builders import op_records
from tests.cli.test_run import cli, write_json
from tests.conftest import CORPUS, EXAMPLES

SAMPLES = ("github-issue-planning-sample", "daily-dev-flow-with-worktree-sample.en")
pytestmark = pytest.mark.skipif(sandbox_problem() is not None, reason="no sandbox here")


def sample(name: str) -> Path:
    found = sorted(CORPUS.glob(f"*{name}.json"))
    if not found:
        pytest.skip(f"the corpus ({CORPUS}) is not here")
    return found[0]


@pytest.mark.parametrize("name", SAMPLES)
def test_built_in_agents_of_upstream_samples_call_their_tools(
    name: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = sample(name)
    ir = lower(path)
    builtin = {
        op.source_node: op.agent_type
        for op in ir.ops.values()
        if isinstance(op, AgentOp) and op.agent_type in ("explore", "plan", "general-purpose")
    }
    assert {"explore", "plan", "general-purpose"} <= set(builtin.values())
    project = tmp_path / "project"
    shutil.copytree(EXAMPLES / "fix-a-bug-project", project)
    grant = WorkspaceGrant(root=project, read=True, write=True, shell=True)
    plan = plan_mocks(ir, grant=grant)  # prompt steps ask once: the plan's answers answer them
    mock = write_json(tmp_path / "mock.json", plan.script)
    # the first option of each question: the way through the samples' agents (mock init's
    # own answers take the shortest way to an end, which leaves some of them out)
    first = {op.source_node: op.options[0].label for op in ir.ops.values() if isinstance(op, AskOp)}
    answers = write_json(tmp_path / "answers.json", {**plan.answers, **first})
    runs = tmp_path / "runs"
    code, _, err = cli(
        capsys,
        "run",
        path,
        "--mock",
        mock,
        "--answers",
        answers,
        "--runs-dir",
        runs,
        "--workspace",
        project,
        "--allow",
        "read,write,shell",
    )
    assert code == 0, err
    (folder,) = runs.iterdir()
    ran = {}
    for record in op_records(folder):
        if record.get("kind") == "AGENT":
            turns = record["transcript"]["turns"]
            ran[record["op_id"]] = [c["name"] for t in turns for c in t["tool_calls"]]
    visited = {node for node in builtin if node in ran}
    assert {builtin[node] for node in visited} == {"explore", "plan", "general-purpose"}
    for node in visited:
        assert {"Read", "LS", "Glob", "Grep"} <= set(ran[node]), node
        if builtin[node] == "general-purpose":
            assert {"Write", "Edit", "MultiEdit", "Bash"} <= set(ran[node]), node

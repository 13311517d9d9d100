"""``lattice mock init`` scripts agent nodes: one call of each granted tool, then the answer."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from lattice.lower import lower
from lattice.service.mocks import mock_script
from lattice.workspace import WorkspaceGrant, sandbox_problem
from tests.builders import op_record
from tests.cli.test_run import cli
from tests.conftest import EXAMPLES

FIX = EXAMPLES / "fix-a-bug.json"


def test_without_a_grant_an_agent_gets_only_its_answer() -> None:
    script = mock_script(lower(FIX))["responses"]
    assert [len(turns) for turns in script.values()] == [1, 1, 1]
    assert set(script["plan"][0]) == {"file", "old_string", "new_string", "reason"}


def test_read_only_grant_scripts_one_turn_of_reads(tmp_path: Path) -> None:
    grant = WorkspaceGrant(root=tmp_path, read=True)
    explore, answer = mock_script(lower(FIX), grant)["responses"]["explore"]
    assert [c["name"] for c in explore["$tool_calls"]] == ["Read", "LS", "Glob", "Grep"]
    assert set(answer) == {"files", "summary"}


@pytest.mark.skipif(sandbox_problem() is not None, reason="no sandbox here")
def test_the_script_it_writes_runs_every_granted_tool(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    project = tmp_path / "project"
    shutil.copytree(EXAMPLES / "fix-a-bug-project", project)
    grants = ["--workspace", project, "--allow", "read,write,shell"]
    mock = tmp_path / "mock.json"
    code, _, err = cli(capsys, "mock", "init", FIX, "-o", mock, *grants)
    assert code == 0 and "--allow read,write,shell" in err
    fix_turns = json.loads(mock.read_text())["responses"]["fix"]
    names = [[c["name"] for c in turn["$tool_calls"]] for turn in fix_turns[:-1]]
    assert names == [["Read", "LS", "Glob", "Grep"], ["Write"], ["Edit"], ["MultiEdit"], ["Bash"]]
    runs = tmp_path / "runs"
    inputs = EXAMPLES / "fix-a-bug.inputs.json"
    code, _, err = cli(
        capsys, "run", FIX, "--mock", mock, "--inputs", inputs, "--runs-dir", runs, *grants
    )
    assert code == 0, err
    record = op_record(next(runs.iterdir()), "fix")
    calls = [c for turn in record["transcript"]["turns"] for c in turn["tool_calls"]]
    assert [c["name"] for c in calls if not c["is_error"]] == [
        "Read",
        "LS",
        "Glob",
        "Grep",
        "Write",
        "Edit",
        "MultiEdit",
        "Bash",
    ]
    assert (project / "lattice-mock.txt").read_text() == "edited by a lattice mock agent script\n"

"""The shipped example: three built-in agents fix a failing test in a copied project."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lattice.cli.main import main
from lattice.runs.view import show_run
from lattice.workspace import sandbox_problem
from tests.builders import example_args, op_record
from tests.conftest import REPO

EXAMPLES = REPO / "workflows" / "examples"
pytestmark = pytest.mark.skipif(
    sandbox_problem() is not None, reason=f"no sandbox here: {sandbox_problem()}"
)


def project_tests(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "unittest", "discover", "-s", "tests"],
        cwd=root,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        timeout=60,
    )


def test_the_agents_fix_the_bug_and_the_tests_pass(tmp_path: Path) -> None:
    project = tmp_path / "project"
    shutil.copytree(EXAMPLES / "fix-a-bug-project", project)
    assert project_tests(project).returncode != 0, "the copied project's test fails first"
    runs = tmp_path / "runs"
    code = main(example_args("fix-a-bug", project, runs))
    assert code == 0
    after = project_tests(project)
    assert after.returncode == 0, after.stderr
    assert "Ran 3 tests" in after.stderr
    (folder,) = runs.iterdir()
    calls = {}
    for node in ("explore", "plan", "fix"):
        record = op_record(folder, node)
        calls[node] = [
            (call["name"], call["is_error"])
            for turn in record["transcript"]["turns"]
            for call in turn["tool_calls"]
        ]
    assert calls == {
        "explore": [("Glob", False), ("Grep", False), ("Read", False), ("Read", False)],
        "plan": [("Read", False)],
        "fix": [("Edit", False), ("Bash", False)],
    }
    fix = op_record(folder, "fix")
    bash = fix["transcript"]["turns"][1]["tool_calls"][0]["result"]
    assert "Ran 3 tests" in bash and "OK" in bash and "[exit code 0]" in bash
    (change,) = fix["changes"]
    diff = (folder / change["diff_file"]).read_text()
    assert "-    return sum(values) / (len(values) + 1)" in diff
    assert "+    return sum(values) / len(values)" in diff
    result = json.loads((folder / "result.json").read_text())
    assert result["output"]["tests_passed"] is True
    assert [(c["op"], c["path"], c["diff_file"]) for c in result["changes"]] == [
        ("fix", "tally/stats.py", "changes/fix-1.diff")
    ]
    shown = show_run(folder)
    assert "AGENT      explore" in shown and "3 turn(s), 4 tool call(s)" in shown
    assert "files agents changed:\n  tally/stats.py  by fix  diff: changes/fix-1.diff" in shown
    # the example itself is untouched: the run changed the copy only
    assert "(len(values) + 1)" in (EXAMPLES / "fix-a-bug-project/tally/stats.py").read_text()

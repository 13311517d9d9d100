"""``kill -9`` of the add-a-feature example at 10 random moments: every run resumes to the
same result and files as an uninterrupted one, with no recorded request sent again, no
recorded tool call run again and the person's answer taken once.

The example runs with a workspace granted, so its prompt steps are the main agent (one of
them asks the person through AskUserQuestion, answered by the example's answers file),
against a local OpenAI-compatible server that answers each turn as the example's mock
script does.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from lattice.llm.fake_server import ToolTurn
from lattice.workspace import sandbox_problem
from tests.agents.killing import killed_run, redone, reference_run, scripted_turn
from tests.builders import example_args
from tests.conftest import EXAMPLES
from tests.runs.test_crash import Forker

pytestmark = pytest.mark.skipif(
    sandbox_problem() is not None, reason=f"no sandbox here: {sandbox_problem()}"
)
NAME = "add-a-feature"
KILLS = 10
PROJECT = EXAMPLES / f"{NAME}-project"
SCRIPT = json.loads((EXAMPLES / f"{NAME}.mock.json").read_text())["responses"]
NODE_BY_PROMPT = {
    "Interview the user about the development task": "interview",
    "Plan the implementation of the task": "plan",
    "Present the implementation plan": "confirm",
    "Implement the plan the user approved": "implement",
    "Run the tests and fix what fails": "checks",
}


def answer(body: dict[str, Any]) -> str | ToolTurn:
    return scripted_turn(SCRIPT, NODE_BY_PROMPT, body)


@pytest.fixture(scope="module")
def lattice() -> Iterator[Forker]:
    yield Forker()


def run_args(runs: Path, workspace: Path) -> list[str]:
    return example_args(NAME, workspace, runs, mock=False, answers=True)


def outcome(folder: Path, project: Path) -> dict[str, Any]:
    final = json.loads((folder / "state_final.json").read_text())
    return {
        "output": final["vars"]["checks"]["result"],
        "stats": (project / "tally/stats.py").read_text(),
        "tests": (project / "tests/test_stats.py").read_text(),
    }


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("add-a-feature-kill")


@pytest.fixture(scope="module")
def reference(lattice: Forker, workdir: Path) -> dict[str, Any]:
    return reference_run(lattice, workdir, answer, PROJECT, run_args, outcome)


def scenario(lattice: Forker, work: Path, reference: dict[str, Any], number: int) -> bool:
    ran = killed_run(
        lattice,
        work,
        answer,
        PROJECT,
        run_args,
        name=str(number),
        rng=random.Random(2000 + number),
        span=reference["span"],
        resume_kills=1,
    )
    if ran is None:
        return False
    folder, project = ran
    assert outcome(folder, project) == {k: v for k, v in reference.items() if k != "span"}
    assert redone(folder) == ([], []), "a recorded request or tool call was done again"
    asked = [
        json.loads(line)
        for line in (folder / "journal.jsonl").read_text().splitlines()
        if '"tool_result"' in line and "User has answered" in line
    ]
    assert len(asked) == 1, "the person's answer was taken more than once"
    return True


def test_kill_9_of_the_main_agent_redoes_nothing_recorded(
    lattice: Forker, workdir: Path, reference: dict[str, Any]
) -> None:
    assert "all 4 tests pass" in reference["output"]
    assert "(ordered[middle - 1] + ordered[middle]) / 2" in reference["stats"]
    with ThreadPoolExecutor(max_workers=2) as pool:
        outcomes = list(pool.map(lambda n: scenario(lattice, workdir, reference, n), range(KILLS)))
    assert sum(outcomes) >= KILLS // 2, f"only {sum(outcomes)} of {KILLS} runs were killed mid-way"

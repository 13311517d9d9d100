"""``kill -9`` of agent runs at random moments: every resume completes with the same answer
and the same files as an uninterrupted run, sends no recorded request again and runs no
recorded tool call again.

``lattice run`` of the shipped fix-a-bug example (three agents: reads, an edit, the
project's tests in the sandbox) against a local OpenAI-compatible server that answers
each turn as the example's mock script does (tool calls, then the final answer), after a
delay. Each run is killed with SIGKILL at a random moment once its folder exists, then
resumed (the first resume of some runs killed too) until it completes. The journal tells
what was re-done: a ``request`` line for a request whose answer was already journaled is
a re-sent request, a ``tool_call`` line for a call whose result was already journaled a
re-run tool call.
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
KILLS = 20
RESUME_KILLS = 8
PROJECT = EXAMPLES / "fix-a-bug-project"
SCRIPT = json.loads((EXAMPLES / "fix-a-bug.mock.json").read_text())["responses"]
NODE_BY_PROMPT = {
    "Use Glob/Grep/Read to find the test": "explore",
    "propose the smallest fix": "plan",
    "Apply this fix": "fix",
}


def answer(body: dict[str, Any]) -> str | ToolTurn:
    return scripted_turn(SCRIPT, NODE_BY_PROMPT, body)


@pytest.fixture(scope="module")
def lattice() -> Iterator[Forker]:
    yield Forker()


def run_args(runs: Path, workspace: Path) -> list[str]:
    return example_args("fix-a-bug", workspace, runs, mock=False)


def outcome(folder: Path, project: Path) -> dict[str, Any]:
    final = json.loads((folder / "state_final.json").read_text())
    return {
        "output": final["vars"]["fix"]["result"],
        "stats": (project / "tally/stats.py").read_text(),
    }


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("agent-kill")


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
        rng=random.Random(1000 + number),
        span=reference["span"],
        resume_kills=1 if number < RESUME_KILLS else 0,
    )
    if ran is None:
        return False
    folder, project = ran
    assert outcome(folder, project) == {k: v for k, v in reference.items() if k != "span"}
    assert redone(folder) == ([], []), "a recorded request or tool call was done again"
    assert (folder / "changes" / "fix-1.diff").read_text().count("+    return sum") == 1
    return True


def test_kill_9_of_agent_runs_redoes_nothing_recorded(
    lattice: Forker, workdir: Path, reference: dict[str, Any]
) -> None:
    assert "return sum(values) / len(values)" in reference["stats"]
    with ThreadPoolExecutor(max_workers=2) as pool:
        outcomes = list(pool.map(lambda n: scenario(lattice, workdir, reference, n), range(KILLS)))
    killed = sum(outcomes)
    assert killed >= KILLS // 2, f"only {killed} of {KILLS} runs were killed mid-way"

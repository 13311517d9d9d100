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
import shutil
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from lattice.llm.fake_server import ToolTurn, serve
from lattice.workspace import sandbox_problem
from tests.agents.test_kill import kill_at_random, redone, resume_until_done
from tests.conftest import EXAMPLES
from tests.runs.test_crash import Forker, configure, finish, started

pytestmark = pytest.mark.skipif(
    sandbox_problem() is not None, reason=f"no sandbox here: {sandbox_problem()}"
)
NAME = "add-a-feature"
KILLS = 10
LATENCY = 0.05
SCRIPT = json.loads((EXAMPLES / f"{NAME}.mock.json").read_text())["responses"]
NODE_BY_PROMPT = {
    "Interview the user about the development task": "interview",
    "Plan the implementation of the task": "plan",
    "Present the implementation plan": "confirm",
    "Implement the plan the user approved": "implement",
    "Run the tests and fix what fails": "checks",
}


def answer(body: dict[str, Any]) -> str | ToolTurn:
    """The example's scripted turn for this request (its node from the prompt, its turn
    from the tool calls already in the conversation)."""
    messages = body["messages"]
    text = json.dumps(messages)
    node = next(node for marker, node in NODE_BY_PROMPT.items() if marker in text)
    turn = sum(1 for m in messages if m.get("role") == "assistant" and m.get("tool_calls"))
    item = SCRIPT[node][turn]
    if isinstance(item, dict) and "$tool_calls" in item:
        calls = [
            (f"call_{turn}_{i}", call["name"], json.dumps(call["arguments"]))
            for i, call in enumerate(item["$tool_calls"])
        ]
        return ToolTurn(calls)
    return str(item)


@pytest.fixture(scope="module")
def lattice() -> Iterator[Forker]:
    yield Forker()


def run_args(runs: Path, workspace: Path) -> list[str]:
    return [
        "run",
        str(EXAMPLES / f"{NAME}.json"),
        "--inputs",
        str(EXAMPLES / f"{NAME}.inputs.json"),
        "--answers",
        str(EXAMPLES / f"{NAME}.answers.json"),
        "--workspace",
        str(workspace),
        "--allow",
        "read,write,shell",
        "--runs-dir",
        str(runs),
    ]


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
    with serve(answer, latency=LATENCY) as server:
        config = configure(workdir, server)
        project = shutil.copytree(EXAMPLES / f"{NAME}-project", workdir / "ref-project")
        runs = workdir / "ref-runs"
        process = lattice(workdir, config, *run_args(runs, project))
        ready = started(runs)
        while not ready() and process.poll() is None:
            time.sleep(0.005)
        begun = time.monotonic()
        code, err = finish(process)
        assert code == 0, err
    (folder,) = runs.iterdir()
    return {**outcome(folder, project), "span": time.monotonic() - begun}


def scenario(lattice: Forker, work: Path, reference: dict[str, Any], number: int) -> bool:
    rng = random.Random(2000 + number)
    with serve(answer, latency=LATENCY) as server:
        config = configure(work, server)
        project = shutil.copytree(EXAMPLES / f"{NAME}-project", work / f"project{number}")
        runs = work / f"runs{number}"
        process = lattice(work, config, *run_args(runs, project))
        if not kill_at_random(process, started(runs), rng, reference["span"]):
            assert finish(process)[0] == 0
            return False
        (folder,) = runs.iterdir()
        resume_until_done(lattice, work, config, folder, rng, 1, reference["span"])
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

"""``kill -9`` of runs whose agent waits for approvals, at random moments: before the halt
is written, while it waits, after a decision, during the approved call. Every run ends
with the same files and answer as one never killed, and its journal shows that no
recorded request was sent again, no recorded tool call ran again, no call was decided
twice and no decided call was asked for again.

``lattice run`` of the fix-a-bug example with Claude Code's ``ask`` rules on Bash and
Edit against a local OpenAI-compatible server that answers as the example's mock script;
each process is killed at a random moment or let finish, then resumed with the approvals
the journal says are pending (as a person would: ``lattice resume --approve ID``).
"""

from __future__ import annotations

import json
import random
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from lattice.llm.fake_server import serve
from lattice.workspace import sandbox_problem
from tests.agents.killing import LATENCY, journal_lines, kill_at_random, redone
from tests.agents.test_kill import PROJECT, answer, run_args
from tests.runs.test_crash import Forker, configure, finish, started

pytestmark = pytest.mark.skipif(
    sandbox_problem() is not None, reason=f"no sandbox here: {sandbox_problem()}"
)
RUNS = 12
SETTINGS = {"permissions": {"ask": ["Bash", "Edit"]}}


@pytest.fixture(scope="module")
def lattice() -> Forker:
    return Forker()


def pending_approvals(folder: Path) -> list[str]:
    """The ids of calls asked for and not decided, in the journal."""
    decided = {line["key"] for line in journal_lines(folder) if line.get("kind") == "tool_decision"}
    asked = [
        line
        for line in journal_lines(folder)
        if line.get("kind") == "approval_request" and line["key"] not in decided
    ]
    return list(dict.fromkeys(line["id"] for line in asked))


def asked_again(folder: Path) -> list[str]:
    """Calls decided more than once, or asked for after their decision."""
    decided: set[str] = set()
    wrong = []
    for line in journal_lines(folder):
        kind = line.get("kind")
        if kind == "tool_decision":
            if line["key"] in decided:
                wrong.append(f"decided twice: {line['id']}")
            decided.add(line["key"])
        elif kind == "approval_request" and line["key"] in decided:
            wrong.append(f"asked again: {line['id']}")
    return wrong


def status(folder: Path) -> str | None:
    try:
        return json.loads((folder / "checkpoint.json").read_text()).get("status")
    except (OSError, ValueError):
        return None


def scenario(lattice: Forker, work: Path, number: int) -> int:
    """One run killed at random moments until it completes; how many kills it took."""
    rng = random.Random(2000 + number)
    kills = 0
    with serve(answer, latency=LATENCY) as server:
        config = configure(work, server)
        project = shutil.copytree(PROJECT, work / f"project{number}")
        (project / ".claude").mkdir()
        (project / ".claude/settings.json").write_text(json.dumps(SETTINGS))
        runs = work / f"runs{number}"
        process = lattice(work, config, *run_args(runs, project))
        if kill_at_random(process, started(runs), rng, 0.6):
            kills += 1
        else:
            assert finish(process)[0] == 3
        (folder,) = runs.iterdir()
        for _ in range(20):
            if status(folder) == "completed":
                break
            approve = [arg for i in pending_approvals(folder) for arg in ("--approve", i)]
            process = lattice(work, config, "resume", str(folder), *approve)
            if rng.random() < 0.6 and kill_at_random(process, lambda: True, rng, 0.4):
                kills += 1
                continue
            code, err = finish(process)
            assert code in (0, 3), err
        assert status(folder) == "completed"
    assert "    return sum(values) / len(values)\n" in (project / "tally/stats.py").read_text()
    output = json.loads((folder / "state_final.json").read_text())["vars"]["fix"]["result"]
    assert output["tests_passed"] is True
    assert redone(folder) == ([], []), "a recorded request or tool call was done again"
    assert asked_again(folder) == []
    decided = [
        (line["id"], line["decision"])
        for line in journal_lines(folder)
        if line.get("kind") == "tool_decision"
    ]
    assert decided == [("fix.1.1", "allow"), ("fix.2.1", "allow")], "no decision lost"
    return kills


def test_kill_9_of_runs_waiting_for_approvals_redoes_and_reasks_nothing(
    lattice: Forker, tmp_path: Path
) -> None:
    with ThreadPoolExecutor(max_workers=2) as pool:
        kills = list(pool.map(lambda n: scenario(lattice, tmp_path, n), range(RUNS)))
    print(f"{sum(kills)} kills in {RUNS} runs: {kills}")
    assert sum(kills) >= 30, f"only {sum(kills)} kills in {RUNS} runs"

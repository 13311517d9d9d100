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
import shutil
import signal
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from lattice.llm.fake_server import FakeLLMServer, ToolTurn, serve
from lattice.workspace import sandbox_problem
from tests.conftest import EXAMPLES
from tests.runs.test_crash import Forker, Process, configure, finish, started

pytestmark = pytest.mark.skipif(
    sandbox_problem() is not None, reason=f"no sandbox here: {sandbox_problem()}"
)
KILLS = 20
RESUME_KILLS = 8
LATENCY = 0.05
SCRIPT = json.loads((EXAMPLES / "fix-a-bug.mock.json").read_text())["responses"]
NODE_BY_PROMPT = {
    "Use Glob/Grep/Read to find the test": "explore",
    "propose the smallest fix": "plan",
    "Apply this fix": "fix",
}


def answer(body: dict[str, Any]) -> str | ToolTurn:
    """The example's scripted turn for this request: its node from the prompt, its turn
    from the tool calls already in the conversation."""
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
    return json.dumps(item)


@pytest.fixture(scope="module")
def lattice() -> Iterator[Forker]:
    yield Forker()


def kill_at_random(
    process: Process, ready: Callable[[], bool], rng: random.Random, span: float
) -> bool:
    """SIGKILL ``process`` at a random moment of the ``span`` seconds after ``ready()``;
    False if it ended first."""
    deadline = time.monotonic() + 30
    while not ready() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(rng.uniform(0, span))
    if process.poll() is not None:
        return False
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=10)
    return True


def run_args(work: Path, runs: Path, workspace: Path) -> list[str]:
    return [
        "run",
        str(EXAMPLES / "fix-a-bug.json"),
        "--inputs",
        str(EXAMPLES / "fix-a-bug.inputs.json"),
        "--workspace",
        str(workspace),
        "--allow",
        "read,write,shell",
        "--runs-dir",
        str(runs),
    ]


def fresh_project(work: Path, name: str) -> Path:
    project = work / name
    shutil.copytree(EXAMPLES / "fix-a-bug-project", project)
    return project


def redone(folder: Path) -> tuple[list[str], list[str]]:
    """(requests sent again after their answer was journaled, tool calls run again after
    their result was journaled), from the journal's lines in order."""
    answered: set[tuple[Any, Any]] = set()
    finished: set[tuple[Any, Any]] = set()
    resent: list[str] = []
    rerun: list[str] = []
    for raw in (folder / "journal.jsonl").read_text().splitlines():
        try:
            line = json.loads(raw)
        except json.JSONDecodeError:
            continue  # a line torn by the kill
        kind = line.get("kind")
        if kind == "request" and (line["op_id"], line["prompt_hash"]) in answered:
            resent.append(f"{line['op_id']} {line['prompt_hash'][:12]}")
        elif kind == "answer":
            answered.add((line["op_id"], line["prompt_hash"]))
        elif kind == "tool_call" and (line["op_id"], line["key"]) in finished:
            rerun.append(f"{line['op_id']} {line['tool']}")
        elif kind == "tool_result":
            finished.add((line["op_id"], line["key"]))
    return resent, rerun


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("agent-kill")


@pytest.fixture(scope="module")
def reference(lattice: Forker, workdir: Path) -> dict[str, Any]:
    with serve(answer, latency=LATENCY) as server:
        config = configure(workdir, server)
        project = fresh_project(workdir, "ref-project")
        runs = workdir / "ref-runs"
        process = lattice(workdir, config, *run_args(workdir, runs, project))
        ready = started(runs)
        while not ready() and process.poll() is None:
            time.sleep(0.005)
        begun = time.monotonic()
        code, err = finish(process)
        span = time.monotonic() - begun
        assert code == 0, err
    (folder,) = runs.iterdir()
    final = json.loads((folder / "state_final.json").read_text())
    return {
        "output": final["vars"]["fix"]["result"],
        "stats": (project / "tally/stats.py").read_text(),
        "span": span,
    }


def resume_until_done(
    lattice: Forker,
    work: Path,
    config: Path,
    folder: Path,
    rng: random.Random,
    kills: int,
    span: float,
) -> int:
    resumes = 0
    while True:
        if json.loads((folder / "checkpoint.json").read_text()).get("status") == "completed":
            return resumes  # killed after it had completed, before its process ended
        process = lattice(work, config, "resume", str(folder))
        resumes += 1
        killed = resumes <= kills and kill_at_random(process, lambda: True, rng, span)
        if not killed:
            code, err = finish(process)
            assert code == 0, err
            return resumes


def scenario(lattice: Forker, work: Path, reference: dict[str, Any], number: int) -> bool:
    rng = random.Random(1000 + number)
    with serve(answer, latency=LATENCY) as server:
        config = configure(work, server)
        project = fresh_project(work, f"project{number}")
        runs = work / f"runs{number}"
        process = lattice(work, config, *run_args(work, runs, project))
        span = reference["span"]
        if not kill_at_random(process, started(runs), rng, span):
            assert finish(process)[0] == 0
            return False
        (folder,) = runs.iterdir()
        kills = 1 if number < RESUME_KILLS else 0
        resume_until_done(lattice, work, config, folder, rng, kills, span)
        check_server_saw(server)
    final = json.loads((folder / "state_final.json").read_text())
    assert final["vars"]["fix"]["result"] == reference["output"]
    assert (project / "tally/stats.py").read_text() == reference["stats"]
    assert redone(folder) == ([], []), "a recorded request or tool call was done again"
    assert (folder / "changes" / "fix-1.diff").read_text().count("+    return sum") == 1
    return True


def check_server_saw(server: FakeLLMServer) -> None:
    assert server.received, "the model was asked at least once"


def test_kill_9_of_agent_runs_redoes_nothing_recorded(
    lattice: Forker, workdir: Path, reference: dict[str, Any]
) -> None:
    assert "return sum(values) / len(values)" in reference["stats"]
    with ThreadPoolExecutor(max_workers=2) as pool:
        outcomes = list(pool.map(lambda n: scenario(lattice, workdir, reference, n), range(KILLS)))
    killed = sum(outcomes)
    assert killed >= KILLS // 2, f"only {killed} of {KILLS} runs were killed mid-way"

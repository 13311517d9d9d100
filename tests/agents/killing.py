"""What the agent kill tests share: a local OpenAI-compatible server answering each turn as
an example's mock script does, an uninterrupted reference run, runs killed with SIGKILL at
random moments and resumed until they complete, and what a journal says was done again."""

from __future__ import annotations

import json
import random
import shutil
import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from lattice.llm.fake_server import ToolTurn, serve
from tests.runs.test_crash import Forker, Process, configure, finish, started

LATENCY = 0.05
"""Seconds the server takes to answer each turn."""
Answer = Callable[[dict[str, Any]], str | ToolTurn]
RunArgs = Callable[[Path, Path], list[str]]
"""(runs folder, workspace) → the arguments of ``lattice run``."""
Outcome = Callable[[Path, Path], dict[str, Any]]
"""(run folder, workspace) → what a run left that must match the reference run's."""


def scripted_turn(
    script: Mapping[str, list[Any]], node_by_prompt: Mapping[str, str], body: dict[str, Any]
) -> str | ToolTurn:
    """The mock ``script``'s turn for a request: its node from a marker of its prompt
    (``node_by_prompt``), its turn from the tool calls already in the conversation."""
    messages = body["messages"]
    text = json.dumps(messages)
    node = next(node for marker, node in node_by_prompt.items() if marker in text)
    turn = sum(1 for m in messages if m.get("role") == "assistant" and m.get("tool_calls"))
    item = script[node][turn]
    if isinstance(item, dict) and "$tool_calls" in item:
        calls = [
            (f"call_{turn}_{i}", call["name"], json.dumps(call["arguments"]))
            for i, call in enumerate(item["$tool_calls"])
        ]
        return ToolTurn(calls)
    return item if isinstance(item, str) else json.dumps(item)


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


def journal_lines(folder: Path) -> list[dict[str, Any]]:
    """The journal of the run in ``folder``, without a line a kill tore."""
    lines = []
    for raw in (folder / "journal.jsonl").read_text().splitlines():
        try:
            lines.append(json.loads(raw))
        except json.JSONDecodeError:
            continue
    return lines


def redone(folder: Path) -> tuple[list[str], list[str]]:
    """(requests sent again after their answer was journaled, tool calls run again after
    their result was journaled), from the journal's lines in order."""
    answered: set[tuple[Any, Any]] = set()
    finished: set[tuple[Any, Any]] = set()
    resent: list[str] = []
    rerun: list[str] = []
    for line in journal_lines(folder):
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


def resume_until_done(
    lattice: Forker,
    work: Path,
    config: Path,
    folder: Path,
    rng: random.Random,
    kills: int,
    span: float,
) -> int:
    """Resume the run in ``folder`` until it completes, the first ``kills`` resumes
    killed at random; the number of resumes."""
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


def reference_run(
    lattice: Forker, work: Path, answer: Answer, project: Path, args: RunArgs, outcome: Outcome
) -> dict[str, Any]:
    """An uninterrupted run over a copy of ``project``: its ``outcome`` and ``span``, the
    seconds it took once its folder existed."""
    with serve(answer, latency=LATENCY) as server:
        config = configure(work, server)
        workspace = shutil.copytree(project, work / "ref-project")
        runs = work / "ref-runs"
        process = lattice(work, config, *args(runs, workspace))
        ready = started(runs)
        while not ready() and process.poll() is None:
            time.sleep(0.005)
        begun = time.monotonic()
        code, err = finish(process)
        span = time.monotonic() - begun
        assert code == 0, err
    (folder,) = runs.iterdir()
    return {**outcome(folder, workspace), "span": span}


def killed_run(
    lattice: Forker,
    work: Path,
    answer: Answer,
    project: Path,
    args: RunArgs,
    *,
    name: str,
    rng: random.Random,
    span: float,
    resume_kills: int,
) -> tuple[Path, Path] | None:
    """A run over a copy of ``project`` killed at a random moment of ``span`` seconds,
    then resumed until it completes (the first ``resume_kills`` resumes killed too): its
    folder and workspace, or None when it ended before the kill."""
    with serve(answer, latency=LATENCY) as server:
        config = configure(work, server)
        workspace = shutil.copytree(project, work / f"project{name}")
        runs = work / f"runs{name}"
        process = lattice(work, config, *args(runs, workspace))
        if not kill_at_random(process, started(runs), rng, span):
            assert finish(process)[0] == 0
            return None
        (folder,) = runs.iterdir()
        resume_until_done(lattice, work, config, folder, rng, resume_kills, span)
        assert server.received, "the model was asked at least once"
    return folder, workspace

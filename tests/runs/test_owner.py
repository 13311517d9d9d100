"""One process at a time owns a run folder: real ``lattice resume`` processes.

A run is killed with SIGKILL while a request is in flight, then two ``lattice resume``
of its folder start at the same moment (forked from a preloaded forkserver, see
``test_crash``), against a local OpenAI-compatible server. Exactly one of them runs the
rest of the run; the other is refused (exit 2) before it has written anything, naming
the process that runs it. The folder then reads as one run resumed once: strictly
increasing event numbers, each op committed once, each remaining request sent once.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lattice.llm.fake_server import FakeLLMServer, serve
from tests.runs.test_crash import (
    LATENCY,
    Forker,
    Lattice,
    answer,
    configure,
    document,
    finish,
    lattice_subprocess,
    requests_of,
)

TRIALS = 8
REFUSED = 2
"""The exit code of a resume refused because another process runs the run."""


@pytest.fixture(scope="module")
def lattice() -> Iterator[Forker]:
    yield Forker()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("owner")
    (work / "flow.json").write_text(json.dumps(document()), encoding="utf-8")
    return work


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def killed_run(
    lattice: Forker, work: Path, config: Path, server: FakeLLMServer, runs: Path
) -> Path:
    """A run killed with SIGKILL while its second request is in flight."""
    process = lattice(
        work, config, "run", "flow.json", "--input", "topic=tides", "--runs-dir", str(runs)
    )
    wait_for(lambda: len(server.received) >= 2 or process.poll() is not None, "a second request")
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=10)
    (folder,) = runs.iterdir()
    return folder


def events_of(folder: Path) -> list[dict[str, Any]]:
    lines = (folder / "events.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def op_commits(folder: Path) -> Counter[tuple[object, object]]:
    """How many times each op (``op_seq``, ``op_id``) was committed to the journal."""
    lines = (folder / "journal.jsonl").read_text(encoding="utf-8").splitlines()
    ops = (json.loads(line) for line in lines)
    return Counter((op["op_seq"], op["op_id"]) for op in ops if op.get("kind") == "op")


def race(lattice: Forker, work: Path, number: int) -> str:
    """Two resumes of one killed run at once; how the loser was refused."""
    with serve(answer, latency=LATENCY) as server:
        config = configure(work, server)
        folder = killed_run(lattice, work, config, server, work / f"runs{number}")
        sent_before = len(server.received)
        first = lattice_subprocess(work, config, "resume", str(folder))
        second = lattice_subprocess(work, config, "resume", str(folder))
        (code_a, err_a), (code_b, err_b) = finish(first), finish(second)
        sent = requests_of(server, sent_before)
    assert sorted((code_a, code_b)) == [0, REFUSED], (err_a, err_b)
    loser = err_b if code_a == 0 else err_a
    events = events_of(folder)
    seqs = [event["seq"] for event in events]
    assert seqs == sorted(set(seqs)), "event numbers are unique and increase"
    assert [event["type"] for event in events].count("run_resumed") == 1
    assert events[-1]["type"] == "run_finished"
    assert max(op_commits(folder).values()) == 1, "an op was committed twice"
    assert max(Counter(sent).values()) == 1, "a request was sent by both resumes"
    if "running (process " in loser:
        return "running"
    assert "already completed" in loser, loser  # the winner had finished before
    return "completed"


def test_two_resumes_started_together_run_it_once(lattice: Forker, workdir: Path) -> None:
    refusals = Counter(race(lattice, workdir, n) for n in range(TRIALS))
    # the run's remaining calls take far longer than starting a forked process
    assert refusals["running"] >= TRIALS // 2, refusals


def test_the_owner_is_named_and_kill_9_frees_the_folder(lattice: Forker, workdir: Path) -> None:
    hold = threading.Event()

    def held_answer(body: dict[str, Any]) -> str:
        if "DRAFT from" in json.dumps(body):
            hold.wait(30)  # the resume owning the folder waits here
        return answer(body)

    with serve(held_answer, latency=LATENCY) as server:
        config = configure(workdir, server)
        folder = killed_run(lattice, workdir, config, server, workdir / "held")
        owner = lattice(workdir, config, "resume", str(folder))
        # the killed run sent DRAFT once: the second is the owner's, held
        wait_for(
            lambda: sum("DRAFT from" in r.user_text() for r in server.received) == 2,
            "the owner's DRAFT request",
        )
        refused: Lattice = lattice(workdir, config, "resume", str(folder))
        code, err = finish(refused)
        assert code == REFUSED
        assert f"is running (process {owner.pid} on " in err
        owner.send_signal(signal.SIGKILL)
        owner.communicate(timeout=10)
        hold.set()
        later = lattice(workdir, config, "resume", str(folder))
        code, err = finish(later)
    assert code == 0, err
    checkpoint = json.loads((folder / "checkpoint.json").read_text(encoding="utf-8"))
    assert checkpoint["status"] == "completed"
    assert checkpoint["owner"]["pid"] == later.pid

"""``kill -9`` at random moments: a run, and a resume, killed and resumed again.

A subprocess runs a workflow of several model calls (one of them repaired) against a
local OpenAI-compatible server that answers every request after a delay and logs it.
Each run is killed with SIGKILL at a random moment once its folder exists, then resumed
(itself killed sometimes) until it completes. After each: the final state is the one an
uninterrupted run reaches, no request whose answer the folder had recorded is sent
again, and ``events.jsonl`` has strictly increasing sequence numbers with one marked
segment per resume.

The killed processes are forked from a server process that has already imported
``lattice`` and the OpenAI SDK (``multiprocessing``'s forkserver, preloaded): each is its
own process running ``lattice.cli.main.main(argv)`` in its own folder and environment,
killed with SIGKILL like any other, but without a second of imports before it does
anything, so the kills land in the run or the resume rather than in its start-up. The
reference run is a plain ``python -m lattice.cli.main`` subprocess.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from lattice.llm.fake_server import FakeLLMServer, serve
from lattice.runs.oplog import OPS_FILE, op_entries, safe_name
from tests.builders import chain, node

SCORE_SCHEMA = {
    "type": "object",
    "properties": {"score": {"type": "integer"}},
    "required": ["score"],
    "additionalProperties": False,
}
KILLS = 20
RESUME_KILLS = 10
LATENCY = 0.05


def answer(body: dict[str, Any]) -> str:
    """A reply unique to the request; the scoring node's first answer breaks its schema."""
    text = json.dumps(body.get("messages", []), sort_keys=True)
    if "SCORE the draft" in text and "broke the contract" not in text:
        return '{"score": "high"}'
    if "SCORE the draft" in text or "broke the contract" in text:
        return '{"score": 7}'
    return "reply-" + hashlib.sha256(text.encode()).hexdigest()[:16]


def document() -> dict[str, Any]:
    doc = chain(
        node("idea", "prompt", prompt="IDEA about {{ $in.topic }}"),
        node(
            "log1", "variableStore", operation="append", name="log", value="{{ $vars.idea.result }}"
        ),
        node("draft", "prompt", prompt="DRAFT from {{ $vars.idea.result }}"),
        node(
            "score",
            "prompt",
            prompt="SCORE the draft {{ $vars.draft.result }}",
            outputSchema=SCORE_SCHEMA,
        ),
        node(
            "log2",
            "variableStore",
            operation="append",
            name="log",
            value="{{ $vars.draft.result }}",
        ),
        node(
            "polish",
            "prompt",
            prompt="POLISH {{ $vars.draft.result }} scored {{ $vars.score.result.score }}",
        ),
        node("title", "prompt", prompt="TITLE for {{ $vars.polish.result }}"),
    )
    doc["nodes"][0]["data"]["inputs"] = {
        "type": "object",
        "properties": {"topic": {"type": "string"}},
        "required": ["topic"],
    }
    doc["nodes"][-1]["data"]["output"] = "$vars.title.result"
    return doc


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("crash")
    (work / "flow.json").write_text(json.dumps(document()), encoding="utf-8")
    return work


def configure(work: Path, server: FakeLLMServer) -> Path:
    """A lattice.toml pointing the openai provider at ``server``."""
    config = work / f"lattice-{server.base_url.rsplit(':', 1)[1]}.toml"
    config.write_text(
        f'[llm]\nprovider = "openai"\n[providers.openai]\nbase_url = "{server.base_url}/v1"\n'
        "[runtime]\nmax_retries = 0\n",
        encoding="utf-8",
    )
    return config


def environment(config: Path, key: str = "sk-test") -> dict[str, str]:
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith(("LATTICE_", "OPENAI_"))},
        "OPENAI_API_KEY": key,
        "LATTICE_CONFIG": str(config),
    }


def lattice_subprocess(
    work: Path, config: Path, *args: str, key: str = "sk-test"
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "lattice.cli.main", *args],
        cwd=work,
        env=environment(config, key),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


PRELOAD = ["lattice.cli.main", "lattice.cli.run", "lattice.llm.openai_provider", "openai"]
"""What ``lattice run`` and ``lattice resume`` with the openai provider import."""


def _lattice_main(args: list[str], work: str, env: dict[str, str], out: str, err: str) -> None:
    """A forked child: ``lattice ARGS`` in ``work`` with exactly ``env``, its stdout and
    stderr going to the files ``out`` and ``err`` (stdin is /dev/null already)."""
    os.chdir(work)
    os.environ.clear()
    os.environ.update(env)
    for fd, path in ((1, out), (2, err)):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(target, fd)
        os.close(target)
    from lattice.cli.main import main

    sys.exit(main(args))


class Lattice:
    """A ``lattice`` process forked from the preloaded server, with the part of
    ``subprocess.Popen``'s interface these tests use."""

    def __init__(
        self,
        context: Any,
        lock: threading.Lock,
        work: Path,
        env: dict[str, str],
        args: tuple[str, ...],
        number: int,
    ) -> None:
        self.err = work / f"stderr-{os.getpid()}-{number}.txt"
        self.lock = lock
        self.process = context.Process(
            target=_lattice_main,
            args=(list(args), str(work), env, os.devnull, str(self.err)),
        )
        self.process.start()
        self.pid = self.process.pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        # Under the lock that ``start`` holds too: ``Process.start`` polls every child
        # (``multiprocessing.process._cleanup``), and two threads reading one forkserver
        # sentinel at once leave the loser an EOF that multiprocessing reports as 255.
        if self.returncode is None:
            with self.lock:
                self.returncode = self.process.exitcode
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def communicate(self, timeout: float) -> tuple[bytes, bytes]:
        deadline = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired("lattice", timeout)
            time.sleep(0.005)
        return b"", self.err.read_bytes() if self.err.exists() else b""


class Forker:
    """Starts ``lattice`` processes from a forkserver that preloaded ``PRELOAD``, with
    ``key`` as their ``OPENAI_API_KEY``."""

    def __init__(self, key: str = "sk-test") -> None:
        self.key = key
        self.context = multiprocessing.get_context("forkserver")
        self.context.set_forkserver_preload(PRELOAD)
        self.started = 0
        # the scenarios start and poll processes from three threads: see Lattice.poll
        self.lock = threading.Lock()

    def __call__(self, work: Path, config: Path, *args: str) -> Lattice:
        with self.lock:
            self.started += 1
            env = environment(config, self.key)
            return Lattice(self.context, self.lock, work, env, args, self.started)


@pytest.fixture(scope="module")
def lattice() -> Iterator[Forker]:
    yield Forker()


Process = subprocess.Popen[bytes] | Lattice


def finish(process: Process) -> tuple[int, str]:
    _, err = process.communicate(timeout=60)
    assert process.returncode is not None
    return process.returncode, err.decode()


def kill_at_random(process: Process, ready: Callable[[], bool], rng: random.Random) -> bool:
    """SIGKILL ``process`` at a random moment once ``ready()``; False if it ended first."""
    deadline = time.monotonic() + 30
    while not ready() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(rng.uniform(0, 8 * LATENCY))
    if process.poll() is not None:
        return False
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=10)
    return True


def started(runs: Path) -> Callable[[], bool]:
    """True once a run folder under ``runs`` has its checkpoint."""
    return lambda: runs.is_dir() and any((f / "checkpoint.json").exists() for f in runs.iterdir())


def requests_of(server: FakeLLMServer, start: int) -> list[str]:
    return [json.dumps(r.body.get("messages"), sort_keys=True) for r in server.received[start:]]


def recorded_answers(folder: Path) -> set[str]:
    lines = (folder / "journal.jsonl").read_text(encoding="utf-8").splitlines()
    texts = set()
    for line in lines:
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            continue
        if data.get("kind") == "answer":
            texts.add(data["text"])
    return texts


def check_events(folder: Path, resumes: int) -> None:
    events = [json.loads(line) for line in (folder / "events.jsonl").read_text().splitlines()]
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(set(seqs)), "sequence numbers strictly increase"
    segments = [e["data"]["segment"] for e in events if e["type"] == "run_resumed"]
    # a resume killed while it starts may leave no event: the others count on from 2
    assert segments == list(range(2, len(segments) + 2))
    assert 1 <= len(segments) <= resumes
    # the run may be killed after its checkpoint, before its run_started line is written
    assert [e["type"] for e in events].count("run_started") <= 1
    assert events[-1]["type"] == "run_finished"


@pytest.fixture(scope="module")
def reference(workdir: Path) -> dict[str, Any]:
    with serve(answer, latency=LATENCY) as server:
        config = configure(workdir, server)
        process = lattice_subprocess(
            workdir, config, "run", "flow.json", "--input", "topic=tides", "--runs-dir", "ref"
        )
        code, err = finish(process)
        assert code == 0, err
        calls = requests_of(server, 0)
    (folder,) = (workdir / "ref").iterdir()
    assert len(calls) == 6  # five model nodes, one repair
    return {"vars": json.loads((folder / "state_final.json").read_text())["vars"], "calls": calls}


def resent_calls(server: FakeLLMServer, start: int, known: set[str]) -> list[str]:
    """Requests since ``start`` whose answer the folder had already recorded."""
    return [r for r in requests_of(server, start) if answer({"messages": json.loads(r)}) in known]


def completed(folder: Path) -> bool:
    """Whether the run's checkpoint says it completed (a kill can land after that)."""
    return bool(json.loads((folder / "checkpoint.json").read_text()).get("status") == "completed")


def resume_until_done(
    lattice: Forker,
    work: Path,
    config: Path,
    folder: Path,
    server: FakeLLMServer,
    rng: random.Random,
    kills: int,
) -> int:
    """Resume ``folder`` (killing the first ``kills`` resumes) until it completes; the
    number of resumes."""
    resumes = 0
    while True:
        if completed(folder):
            return resumes  # killed after it had completed, before its process ended
        known = recorded_answers(folder)
        start = len(server.received)
        process = lattice(work, config, "resume", str(folder))
        resumes += 1
        killed = resumes <= kills and kill_at_random(process, lambda: True, rng)
        if not killed:
            code, err = finish(process)
            assert code == 0, err
        assert resent_calls(server, start, known) == [], "a recorded answer was asked again"
        if not killed:
            return resumes


def scenario(lattice: Forker, work: Path, reference: dict[str, Any], number: int) -> bool:
    """Run, kill, resume (killing the first resume when ``number`` is below RESUME_KILLS)
    and check; False when the run ended before the kill."""
    rng = random.Random(number)
    with serve(answer, latency=LATENCY) as server:
        config = configure(work, server)
        runs = work / f"runs{number}"
        process = lattice(
            work, config, "run", "flow.json", "--input", "topic=tides", "--runs-dir", str(runs)
        )
        if not kill_at_random(process, started(runs), rng):
            assert finish(process)[0] == 0
            return False
        (folder,) = runs.iterdir()
        kills = 1 if number < RESUME_KILLS else 0
        resumes = resume_until_done(lattice, work, config, folder, server, rng, kills)
        final = json.loads((folder / "state_final.json").read_text())
        assert final["vars"] == reference["vars"]
        sent = Counter(requests_of(server, 0))
        # only a call in flight at a kill (sent, its answer not yet recorded) goes out again
        assert sum(count - 1 for count in sent.values()) <= resumes
        check_events(folder, resumes)
        check_op_records(folder)
        return True


def check_op_records(folder: Path) -> None:
    """Every line of ``ops.jsonl`` is whole (a torn one was cut by the resume) and every
    op the journal committed has its record: it is written before the op's journal line."""
    text = (folder / OPS_FILE).read_text(encoding="utf-8")
    assert text.endswith("\n")
    for line in text.splitlines():
        assert isinstance(json.loads(line)["record"], dict)
    records = {(e.label, e.name): e.record() for e in op_entries(folder)}
    committed = [
        line
        for line in map(json.loads, (folder / "journal.jsonl").read_text().splitlines())
        if line.get("kind") == "op" and "branch" not in line
    ]
    assert committed
    for line in committed:
        record = records[format(line["op_seq"], "04d"), safe_name(line["op_id"])]
        assert record is not None and record["op_id"] == line["op_id"]


def test_kill_9_of_run_and_of_resume_loses_nothing_recorded(
    lattice: Forker, workdir: Path, reference: dict[str, Any]
) -> None:
    with ThreadPoolExecutor(max_workers=3) as pool:
        outcomes = list(pool.map(lambda n: scenario(lattice, workdir, reference, n), range(KILLS)))
    killed = sum(outcomes)
    assert killed >= KILLS * 3 // 4, f"only {killed} of {KILLS} runs were killed mid-way"

"""The commands: ``lattice worker``, ``lattice run --engine temporal``, ``lattice resume RUN
--temporal``, ``lattice runs export RUN --temporal``, with their exit codes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.builders import approval
from tests.conftest import EXAMPLES
from tests.durable.helpers import example, run_locally

pytest.importorskip("temporalio")

LATTICE = [sys.executable, "-m", "lattice.cli"]


def lattice(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "LATTICE_CONFIG"}
    return subprocess.run(
        [*LATTICE, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )


@pytest.fixture
def worker(temporal_address: str, tmp_path: Path) -> Iterator[str]:
    """A ``lattice worker`` process on a task queue of its own; yields the queue."""
    queue = f"cli-{uuid.uuid4().hex[:10]}"
    env = {k: v for k, v in os.environ.items() if k != "LATTICE_CONFIG"}
    process = subprocess.Popen(
        [*LATTICE, "worker", "--temporal", temporal_address, "--task-queue", queue],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield queue
    finally:
        process.kill()
        process.wait()


@pytest.mark.parametrize(
    ("name", "summary"),
    [("support-triage", "19 ops, 5 model calls"), ("analyst-panel", "16 ops, 8 model calls")],
)
def test_lattice_run_on_temporal_prints_the_local_output(
    temporal_address: str, worker: str, tmp_path: Path, name: str, summary: str
) -> None:
    ir, script, inputs = example(name)
    done = lattice(
        "run",
        str(EXAMPLES / f"{name}.json"),
        "--mock",
        str(EXAMPLES / f"{name}.mock.json"),
        "--inputs",
        str(EXAMPLES / f"{name}.inputs.json"),
        "--engine",
        "temporal",
        "--temporal",
        temporal_address,
        "--task-queue",
        worker,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == run_locally(ir, script, inputs).output
    assert "completed in" in done.stderr and summary in done.stderr
    assert not (tmp_path / "runs").exists()  # the run is kept by Temporal


def test_a_question_halts_then_resume_answers_it_and_export_writes_the_folder(
    temporal_address: str, worker: str, tmp_path: Path
) -> None:
    (tmp_path / "approval.json").write_text(json.dumps(approval()), encoding="utf-8")
    script = {"responses": {"draft": ["A note."], "polish": ["A polished note."]}}
    (tmp_path / "mock.json").write_text(json.dumps(script), encoding="utf-8")
    common = ["--temporal", temporal_address]
    halted = lattice(
        "run",
        "approval.json",
        "--mock",
        "mock.json",
        "--input",
        "topic=tea",
        "--engine",
        "temporal",
        *common,
        "--task-queue",
        worker,
        cwd=tmp_path,
    )
    assert halted.returncode == 3, halted.stderr
    assert "halted in" in halted.stderr and "2 ops, 1 model call," in halted.stderr
    found = re.search(
        r"next: lattice resume (\S+) --temporal \S+ --answer approve=<answer>", halted.stderr
    )
    assert found, halted.stderr
    run_id = found.group(1)

    waiting = lattice("runs", "show", run_id, *common, cwd=tmp_path)
    assert waiting.returncode == 0, waiting.stderr
    assert waiting.stdout.startswith(f"run {run_id}: halted")
    assert "usage: 1 model call," in waiting.stdout  # what it used so far, as a local run shows
    assert "failure [waiting_for_answer] at approve:" in waiting.stdout
    answer_it = (
        f"next: lattice resume {run_id} --temporal {temporal_address} --answer approve=<answer>"
    )
    assert answer_it in waiting.stdout

    wrong = lattice("resume", run_id, *common, "--answer", "approve=Maybe", cwd=tmp_path)
    assert wrong.returncode == 2 and "Maybe" in wrong.stderr

    resumed = lattice("resume", run_id, *common, "--answer", "approve=Send", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == "A polished note."
    again = lattice("resume", run_id, *common, "--answer", "approve=Send", cwd=tmp_path)
    assert again.returncode == 2, again.stderr
    assert f"run {run_id} is completed; only a run waiting for an answer takes one" in (
        again.stderr
    )
    assert "Traceback" not in again.stderr

    exported = lattice("runs", "export", run_id, *common, "-o", "exported", cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    shown = lattice("runs", "show", "exported", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("run exported: completed")
    assert shown.stdout.splitlines()[0].endswith("(approval)")
    assert "ASK" in shown.stdout and 'output: "A polished note."' in shown.stdout
    # the run kept its document on Temporal: the folder holds it, as a local run's does
    kept = json.loads((tmp_path / "exported" / "workflow.json").read_text(encoding="utf-8"))
    assert kept == approval()
    by_id = lattice("runs", "show", run_id, *common, cwd=tmp_path)
    assert by_id.returncode == 0, by_id.stderr
    assert by_id.stdout.replace(run_id, "exported", 1) == shown.stdout


def test_what_the_temporal_engine_cannot_run_is_a_usage_error(tmp_path: Path) -> None:
    no_address = lattice(
        "run",
        str(EXAMPLES / "hello-world.json"),
        "--input",
        "name=Ada",
        "--engine",
        "temporal",
        "--mock",
        str(EXAMPLES / "hello-world.mock.json"),
        cwd=tmp_path,
    )
    assert no_address.returncode == 2
    assert "--temporal HOST:PORT" in no_address.stderr
    assert "Traceback" not in no_address.stderr


def test_resume_refuses_an_answer_holding_a_secret_before_sending_it(tmp_path: Path) -> None:
    secret = "tok-" + uuid.uuid4().hex
    (tmp_path / "lattice.toml").write_text(
        '[secrets]\nallow = ["CLI_TEST_TOKEN"]\n', encoding="utf-8"
    )
    env = {k: v for k, v in os.environ.items() if k != "LATTICE_CONFIG"}
    refused = subprocess.run(
        [
            *LATTICE,
            *("resume", "20261126T000000-abcdef12", "--temporal", "127.0.0.1:1"),
            *("--config", str(tmp_path / "lattice.toml"), "--answer", f"draft=use {secret}"),
        ],
        cwd=tmp_path,
        env={**env, "CLI_TEST_TOKEN": secret},
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    assert refused.returncode == 2, refused.stderr
    assert "an answer holds the value of a secret" in refused.stderr
    assert secret not in refused.stderr + refused.stdout
    assert "Traceback" not in refused.stderr


def test_a_config_given_to_a_run_that_calls_tools_on_temporal_names_the_workers(
    tmp_path: Path,
) -> None:
    config = str(EXAMPLES / "meeting-prep.lattice.toml")
    started = lattice(
        "run",
        str(EXAMPLES / "meeting-prep.json"),
        "--config",
        config,
        "--mock",
        str(EXAMPLES / "meeting-prep.mock.json"),
        "--inputs",
        str(EXAMPLES / "meeting-prep.inputs.json"),
        "--engine",
        "temporal",
        "--temporal",
        "127.0.0.1:1",  # nothing listens: the note comes before the connection
        cwd=tmp_path,
    )
    assert started.returncode == 2, started.stderr
    assert f"lattice worker --temporal 127.0.0.1:1 --config {config}" in started.stderr
    assert "cannot reach Temporal at 127.0.0.1:1 (Connection refused): is a server" in (
        started.stderr
    )
    assert "tonic::" not in started.stderr  # the SDK's transport internals stay out
    assert "Traceback" not in started.stderr
    plain = lattice(
        "run",
        str(EXAMPLES / "hello-world.json"),
        "--config",
        config,
        "--input",
        "name=Ada",
        "--mock",
        str(EXAMPLES / "hello-world.mock.json"),
        "--engine",
        "temporal",
        "--temporal",
        "127.0.0.1:1",
        cwd=tmp_path,
    )
    assert plain.returncode == 2 and "lattice worker" not in plain.stderr  # it calls no tool


@pytest.mark.parametrize("address", ["http://127.0.0.1:7233", "127.0.0.1", "localhost:port"])
def test_an_address_that_is_not_host_port_is_a_usage_error(tmp_path: Path, address: str) -> None:
    listed = lattice("runs", "list", "--temporal", address, cwd=tmp_path)
    assert listed.returncode == 2
    assert f"{address!r} is not HOST:PORT" in listed.stderr
    assert "Warning" not in listed.stderr and "Traceback" not in listed.stderr


def test_a_worker_that_cannot_connect_says_so_and_not_that_it_works(tmp_path: Path) -> None:
    worker = lattice("worker", "--temporal", "127.0.0.1:1", cwd=tmp_path)
    assert worker.returncode == 2
    assert "cannot reach Temporal at 127.0.0.1:1" in worker.stderr
    assert "worker on Temporal" not in worker.stderr  # said only once it is connected

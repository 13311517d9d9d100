"""A batch killed with ``kill -9`` at random moments, ten times, then run to its end:
every row is in the results exactly once, and no row that had finished ran again."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from lattice.runs.journal import read_lines
from tests.batch.helpers import dataset, row_id
from tests.conftest import REPO

ROWS = 1000
KILLS = 10


ENV = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONWARNINGS": "ignore"}


def batch_command(flow: Path, inputs: Path, out: Path, mock: Path, *extra: object) -> list[str]:
    """``lattice batch`` of ``flow`` over ``inputs`` into ``out``, 20 rows at a time, quiet."""
    return [
        sys.executable,
        "-m",
        "lattice.cli.main",
        "batch",
        *map(str, (flow, "--inputs", inputs, "-o", out, "--mock", mock)),
        *map(str, extra),
        *("--concurrency", "20", "--progress", "none"),
    ]


def _lines(path: Path) -> list[dict[str, object]]:
    lines, _ = read_lines(path)  # a torn last line is left out, as the batch does
    return lines


def test_kill_9_at_random_moments_loses_no_row_and_runs_none_twice(tmp_path: Path) -> None:
    flow, inputs, mock = dataset(tmp_path, ROWS)
    out = tmp_path / "results.jsonl"
    command = batch_command(flow, inputs, out, mock, "--no-record", "--mock-latency-ms", "15")
    rng = random.Random(20261123)
    killed_mid_batch = 0
    for _ in range(KILLS):
        before = out.stat().st_size if out.exists() else 0
        process = subprocess.Popen(
            command, env=ENV, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 30
        while process.poll() is None and time.monotonic() < deadline:  # until rows are landing
            if out.exists() and out.stat().st_size > before:
                break
            time.sleep(0.005)
        time.sleep(rng.uniform(0.0, 0.08))
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            killed_mid_batch += 1
        process.wait(timeout=30)
        counts = Counter(str(line["id"]) for line in _lines(out))
        twice = [rid for rid, n in counts.items() if n > 1]
        assert not twice, f"rows written twice (a finished row ran again): {twice[:5]}"
    assert killed_mid_batch >= KILLS - 1, "the batch should still have been running when killed"
    done_before_last = len(_lines(out))
    assert 0 < done_before_last <= ROWS, done_before_last

    final = subprocess.run(
        command, env=ENV, cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert final.returncode == 1, final.stderr  # the scripted failures
    assert f"ran {ROWS - done_before_last} rows this time" in final.stderr, final.stderr
    lines = _lines(out)
    assert len(lines) == ROWS
    assert out.read_bytes().endswith(b"\n")
    assert sorted(str(line["id"]) for line in lines) == sorted(row_id(i) for i in range(ROWS))
    statuses = Counter(str(line["status"]) for line in lines)
    assert statuses == {"completed": 800, "failed": 100, "halted": 100}


def test_kill_9_with_run_folders_resumes_the_rows_in_flight_in_their_folders(
    tmp_path: Path,
) -> None:
    """Each row's folder is named in the results before it starts: after a kill the next
    batch resumes the rows that were running in their folders (no folder left behind, no
    row started again from its first call)."""
    rows = 200
    flow, inputs, mock = dataset(tmp_path, rows, fail=False, halt=False)
    out, runs = tmp_path / "results.jsonl", tmp_path / "runs"
    command = batch_command(
        flow, inputs, out, mock, "--runs-dir", runs, "--durability", "os", "--mock-latency-ms", "30"
    )
    process = subprocess.Popen(
        command, env=ENV, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        done = (
            [line for line in _lines(out) if line.get("status") == "completed"]
            if out.exists()
            else []
        )
        if len(done) >= 40:
            break
        time.sleep(0.01)
    assert process.poll() is None, "the batch ended before it could be killed"
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    latest = {str(line["id"]): line for line in _lines(out)}
    in_flight = {rid: line for rid, line in latest.items() if line["status"] == "interrupted"}
    assert in_flight, "no row was running when the batch was killed"
    assert all(line["run_dir"] for line in in_flight.values())

    final = subprocess.run(
        command, env=ENV, cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert final.returncode == 0, final.stderr
    ended = {str(line["id"]): line for line in _lines(out)}
    assert len(ended) == rows and {line["status"] for line in ended.values()} == {"completed"}
    for rid, line in in_flight.items():
        if (Path(line["run_dir"]) / "checkpoint.json").is_file():
            assert ended[rid]["run_dir"] == line["run_dir"], rid  # resumed in its folder
    started = [p for p in runs.iterdir() if (p / "checkpoint.json").is_file()]
    assert len(started) == rows  # one folder per row: none was started a second time

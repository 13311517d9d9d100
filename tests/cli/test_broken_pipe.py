"""A reader that goes away early (``lattice check bad.json 2>&1 | head -1``) never turns
a failure into success: the command keeps its exit code, or exits 141 as if killed by
SIGPIPE when the pipe closed while it was still writing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, REPO


def _lattice_into_closed_pipe(*args: str, stderr_too: bool = True) -> tuple[int, str]:
    """Run ``lattice ARGS`` with stdout (and stderr) on a pipe whose reader has already
    gone; return the exit code and whatever reached stderr when it was not on the pipe."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # every write into the pipe fails with EPIPE
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "lattice.cli", *args],
            stdout=write_end,
            stderr=write_end if stderr_too else subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=REPO,
            timeout=120,
        )
    finally:
        os.close(write_end)
    return done.returncode, (done.stderr or b"").decode()


@pytest.fixture
def bad_document(tmp_path: Path) -> Path:
    path = tmp_path / "bad.json"
    path.write_text('{"nodes": 5, "connections": "x"}')
    return path


def test_an_invalid_document_is_never_reported_as_success(bad_document: Path) -> None:
    code, _ = _lattice_into_closed_pipe("check", str(bad_document))
    assert code == 141


def test_an_error_reported_into_a_closed_pipe_keeps_its_code(tmp_path: Path) -> None:
    code, _ = _lattice_into_closed_pipe("run", str(tmp_path / "missing.json"))
    assert code == 2


def test_output_cut_short_exits_141_without_a_complaint() -> None:
    code, err = _lattice_into_closed_pipe("schema", stderr_too=False)
    assert code == 141
    assert err == ""


def test_a_valid_document_whose_ok_line_was_not_read_exits_141() -> None:
    code, _ = _lattice_into_closed_pipe("check", str(EXAMPLES / "support-triage.json"))
    assert code == 141  # its "ok" line was not read: the reader saw no success either

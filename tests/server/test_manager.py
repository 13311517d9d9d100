"""The runs of a server read back from their folders: the run list and its cache."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

from lattice.server.manager import RunManager

BULKY = "x" * 10_000
"""What a checkpoint holds that the list does not show (answers, digests, the meta's
inline script)."""


def write_checkpoint(folder: Path, status: str, *, pid: int, stamp: int) -> None:
    checkpoint: dict[str, Any] = {
        "run_id": folder.name,
        "status": status,
        "owner": {"pid": pid, "host": socket.gethostname()},
        "started_at": "2026-01-01T00:00:00.000Z",
        "digests": {"document": BULKY},
        "answers": {"pick": BULKY},
        "meta": {"workflow": "flow", "workflow_name": "flow.json", "script": BULKY},
        "usage": {"calls": 2, "input_tokens": 3, "output_tokens": 4},
    }
    path = folder / "checkpoint.json"
    path.write_text(json.dumps(checkpoint))
    os.utime(path, ns=(stamp, stamp))  # a new mtime, however coarse the disk's clock


def test_the_run_list_caches_summaries_and_follows_status_changes(tmp_path: Path) -> None:
    manager = RunManager(tmp_path, max_active_runs=1)
    folder = tmp_path / "20260101T000000-aaaa"
    folder.mkdir()
    write_checkpoint(folder, "running", pid=os.getppid(), stamp=1_000_000_000)

    def listed() -> dict[str, Any]:
        runs = manager.list_runs(status=None, workflow=None, limit=10, before=None)["runs"]
        assert [run["run_id"] for run in runs] == [folder.name]
        return dict(runs[0])

    first = listed()
    assert (first["status"], first["workflow_name"], first["calls"], first["tokens"]) == (
        "running",
        "flow.json",
        2,
        7,
    )
    cached = json.dumps(manager._summaries)
    assert BULKY not in cached and len(cached) < 1_000
    write_checkpoint(folder, "halted", pid=os.getppid(), stamp=2_000_000_000)
    assert listed()["status"] == "halted"
    write_checkpoint(folder, "running", pid=os.getpid(), stamp=3_000_000_000)
    assert listed()["status"] == "interrupted"  # this process owned it and does not run it

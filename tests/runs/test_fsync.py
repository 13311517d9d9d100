"""What each durability setting forces to disk, and when (docs/runs.md, Durability).

``fsync`` (the default): a new run's folder and first files are forced to disk before
its first op, each op's journal line before the next op starts, the final checkpoint
before the run returns. ``os``: nothing waits for the disk. The system calls are
watched through ``os.fsync`` and ``os.fdatasync``; the file an fd is open on is read
from ``/proc``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

from lattice.errors import LatticeUserError
from lattice.lower import lower
from lattice.runs.store import FolderRecorder
from lattice.runtime import Runner, RunStore
from tests.builders import chain, node

pytestmark = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")


class SyncLog:
    """Every fsync / fdatasync (what it synced, on which thread) and every op start, in order."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.entries: list[tuple[str, str, bool]] = []
        self._lock = threading.Lock()
        for name in ("fsync", "fdatasync"):
            real = getattr(os, name)
            monkeypatch.setattr(os, name, self._spy(name, real))

    def _spy(self, name: str, real: Any) -> Any:
        def spy(fd: int) -> None:
            target = os.readlink(f"/proc/self/fd/{fd}")
            with self._lock:
                self.entries.append((name, target, threading.current_thread() is MAIN))
            real(fd)

        return spy

    def listener(self, event: dict[str, Any]) -> None:
        if event["type"] == "op_started":
            with self._lock:
                self.entries.append(("op", str(event["op_id"]), True))

    def synced(self, kind: str | None = None) -> list[str]:
        return [t for k, t, _ in self.entries if k != "op" and (kind is None or k == kind)]


MAIN = threading.main_thread()


def subject(tmp_path: Path, durability: str, log: SyncLog) -> Runner:
    runner = Runner(
        lower(
            chain(
                node("a", "variableStore", operation="set", name="x", value=1),
                node("b", "variableStore", operation="increment", name="x"),
            )
        ),
        store=RunStore(tmp_path / "runs", durability=durability),  # type: ignore[arg-type]
        workflow={"id": "doc"},
    )
    runner.subscribe(log.listener)
    return runner


def test_fsync_forces_the_folder_first_then_each_op_before_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = SyncLog(monkeypatch)
    result = subject(tmp_path, "fsync", log).run()
    assert result.status == "completed" and result.run_dir is not None
    folder = str(result.run_dir)
    ops = [t for k, t, _ in log.entries if k == "op"]
    assert ops == ["start", "a", "b", "end"]
    first = log.entries.index(("op", "start", True))
    before = {t for k, t, _ in log.entries[:first] if k != "op"}
    # the folder's entry, its own entries, and every file a resume reads
    assert before == {
        str(tmp_path / "runs"),
        folder,
        *(
            f"{folder}/{name}"
            for name in (
                "workflow.json",
                "execir.json",
                "input.json",
                "state_initial.json",
                "checkpoint.json",
            )
        ),
    }
    # between two op starts, exactly one sync: the journal line of the op before
    journal = f"{folder}/journal.jsonl"
    for op in ("a", "b", "end"):
        at = log.entries.index(("op", op, True))
        previous = max(i for i, e in enumerate(log.entries[:at]) if e[0] == "op")
        between = log.entries[previous + 1 : at]
        assert [(k, t) for k, t, _ in between] == [("fdatasync", journal)], op
    after = log.entries[log.entries.index(("op", "end", True)) + 1 :]
    assert ("fdatasync", journal) in [(k, t) for k, t, _ in after]  # END's line
    # the final checkpoint: its data before its rename, then the folder's entry
    synced = [t for k, t, _ in after if k == "fsync"]
    assert synced[0].startswith(f"{folder}/.checkpoint.json.") and synced[1:] == [folder]


def test_a_synchronous_run_syncs_its_journal_on_its_own_thread_an_async_one_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = SyncLog(monkeypatch)
    subject(tmp_path, "fsync", log).run()
    assert {main for k, t, main in log.entries if k == "fdatasync"} == {True}
    log.entries.clear()

    async def in_a_loop() -> None:
        await subject(tmp_path, "fsync", log).arun()

    asyncio.run(in_a_loop())
    assert {main for k, t, main in log.entries if k == "fdatasync"} == {False}


def test_os_durability_waits_for_no_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = SyncLog(monkeypatch)
    result = subject(tmp_path, "os", log).run()
    assert result.status == "completed"
    assert log.synced() == []


def test_a_run_stopped_before_its_first_sync_leaves_no_descriptor_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = FolderRecorder(tmp_path / "run", durability="fsync")
    recorder.write_json("checkpoint.json", {"status": "running"})
    (kept,) = recorder._starting or []
    closed: list[int] = []
    real_close = os.close
    monkeypatch.setattr(os, "close", lambda fd: (closed.append(fd), real_close(fd))[1])
    recorder.close()
    assert kept in closed


def test_a_folder_gone_before_its_first_sync_is_a_clear_error_and_closes_what_was_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = FolderRecorder(tmp_path / "run", durability="fsync")
    recorder.write_json("checkpoint.json", {"status": "running"})
    (kept,) = recorder._starting or []
    shutil.rmtree(tmp_path / "run")
    closed: list[int] = []
    real_close = os.close
    monkeypatch.setattr(os, "close", lambda fd: (closed.append(fd), real_close(fd))[1])
    with pytest.raises(LatticeUserError, match="cannot sync run folder"):
        asyncio.run(recorder.sync_started())
    assert kept in closed
    recorder.close()


def test_a_commit_waits_for_a_sync_that_another_branch_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two branches write their lines; the first commit syncs both, and the second
    returns only once that sync is done (before, it saw nothing unsynced and went on)."""
    import time

    synced: list[str] = []
    real = os.fdatasync

    def slow_fdatasync(fd: int) -> None:
        time.sleep(0.2)
        real(fd)
        synced.append("done")

    monkeypatch.setattr(os, "fdatasync", slow_fdatasync)
    recorder = FolderRecorder(tmp_path / "run", durability="fsync")

    async def two_branches() -> list[str]:
        recorder.journal({"kind": "op", "op_seq": 1, "branch": "1"})
        recorder.journal({"kind": "op", "op_seq": 1, "branch": "2"})
        first = asyncio.create_task(recorder.commit())
        await asyncio.sleep(0)  # the first commit's sync starts
        await recorder.commit()
        seen = list(synced)
        await first
        return seen

    try:
        assert asyncio.run(two_branches()) == ["done"]
    finally:
        recorder.close()

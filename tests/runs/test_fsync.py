"""What each durability setting forces to disk, and when (docs/runs.md, Durability).

``fsync`` (the default): the journal is the one file forced to disk. Its first line
holds the starting files; the line of each op that reaches outside the run (a model, a
tool, a person) reaches the disk before the next op starts, with the lines of the ops
that only compute before it (the first time with the run's folder and the runs folder's
entry for it), and the final checkpoint, the journal's last line, before the run
returns. ``os``: nothing waits for the disk. The system calls are
watched through ``os.fsync`` and ``os.fdatasync``; the file an fd is open on is read
from ``/proc``.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

from lattice.errors import LatticeUserError
from lattice.llm.mock import MockProvider
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
                node("m", "prompt", prompt="M {{ $vars.x }}"),
                node("b", "variableStore", operation="increment", name="x"),
                node("n", "prompt", prompt="N {{ $vars.x }}"),
            )
        ),
        provider=MockProvider(default="ok"),
        store=RunStore(tmp_path / "runs", durability=durability),  # type: ignore[arg-type]
        workflow={"id": "doc"},
    )
    runner.subscribe(log.listener)
    return runner


def test_fsync_forces_the_journal_and_the_folder_once_then_each_op_that_reaches_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = SyncLog(monkeypatch)
    result = subject(tmp_path, "fsync", log).run()
    assert result.status == "completed" and result.run_dir is not None
    folder = str(result.run_dir)
    journal = f"{folder}/journal.jsonl"
    ops = [t for k, t, _ in log.entries if k == "op"]
    assert ops == ["start", "a", "m", "b", "n", "end"]

    def between(first: str, then: str | None) -> list[tuple[str, str]]:
        at = log.entries.index(("op", first, True))
        end = log.entries.index(("op", then, True)) if then else len(log.entries)
        return [(k, t) for k, t, _ in log.entries[at + 1 : end]]

    # nothing before the first op, nor after the entry op or an op that only computes
    assert log.entries[0] == ("op", "start", True)
    assert between("start", "a") == []
    assert between("a", "m") == []
    # the first model call's commit: its line (and those before it), the folder, the
    # runs folder
    assert between("m", "b") == [
        ("fdatasync", journal),
        ("fsync", folder),
        ("fsync", str(tmp_path / "runs")),
    ]
    assert between("b", "n") == []
    assert between("n", "end") == [("fdatasync", journal)]
    # the end op's line and the final checkpoint: one sync, as the run stops
    assert between("end", None) == [("fdatasync", journal)]
    # what those syncs carry: the starting files first, the final checkpoint last
    lines = [json.loads(line) for line in Path(journal).read_text().splitlines()]
    assert lines[0]["kind"] == "files" and set(lines[0]["files"]) == {
        "workflow.json",
        "execir.json",
        "input.json",
        "state_initial.json",
        "checkpoint.json",
    }
    for name, text in lines[0]["files"].items():
        if name != "checkpoint.json":
            assert (result.run_dir / name).read_text() == text
    assert lines[-1]["kind"] == "files" and set(lines[-1]["files"]) == {"checkpoint.json"}
    assert lines[-1]["files"]["checkpoint.json"] == (result.run_dir / "checkpoint.json").read_text()
    assert json.loads(lines[-1]["files"]["checkpoint.json"])["status"] == "completed"


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


def test_a_run_stopped_before_its_first_commit_is_synced_when_it_closes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that stops at its first op (a failure, a question) never commits: closing
    its recorder forces its journal and its folder to disk."""
    log = SyncLog(monkeypatch)
    recorder = FolderRecorder(tmp_path / "run", durability="fsync")
    recorder.write_json("checkpoint.json", {"status": "running"})
    asyncio.run(recorder.sync_started())
    assert log.synced() == []
    recorder.close()
    assert log.synced() == [
        str(tmp_path / "run" / "journal.jsonl"),
        str(tmp_path / "run"),
        str(tmp_path),
    ]


def test_a_folder_gone_before_its_first_sync_is_a_clear_error(tmp_path: Path) -> None:
    recorder = FolderRecorder(tmp_path / "run", durability="fsync")
    recorder.write_json("checkpoint.json", {"status": "running"})
    asyncio.run(recorder.sync_started())
    shutil.rmtree(tmp_path / "run")
    with pytest.raises(LatticeUserError, match="cannot sync run folder"):
        asyncio.run(recorder.commit())
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


def test_a_power_cut_loses_only_ops_that_a_resume_redoes_and_resends_no_recorded_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The journal as the disk held it at the first model call's sync (the ops that only
    computed after it were never synced, and are lost with a power cut): the resume
    redoes them, sends the first model call again never, and ends as the run did."""
    synced_sizes: list[int] = []
    real = os.fdatasync

    def noting(fd: int) -> None:
        real(fd)
        if os.readlink(f"/proc/self/fd/{fd}").endswith("journal.jsonl"):
            synced_sizes.append(os.fstat(fd).st_size)

    monkeypatch.setattr(os, "fdatasync", noting)
    ir = lower(
        chain(
            node("a", "variableStore", operation="set", name="x", value=1),
            node("m", "prompt", prompt="M {{ $vars.x }}"),
            node("b", "variableStore", operation="increment", name="x"),
            node("c", "variableStore", operation="increment", name="x", value=10),
            node("n", "prompt", prompt="N {{ $vars.x }}"),
        )
    )
    first = MockProvider(default="ok")
    whole = Runner(ir, provider=first, store=RunStore(tmp_path / "runs")).run()
    assert whole.status == "completed" and whole.vars["x"] == 12
    assert [call.node_id for call in first.calls] == ["m", "n"]
    assert len(synced_sizes) == 3  # after m, after n, as the run stopped
    folder = whole.run_dir
    assert folder is not None
    journal = folder / "journal.jsonl"
    kept = journal.read_bytes()[: synced_sizes[0]]
    lines = [json.loads(line) for line in kept.decode().splitlines()]
    assert [line["op_id"] for line in lines if line["kind"] == "op"] == ["start", "a", "m"]
    journal.write_bytes(kept)  # what the disk held: the rest was never synced
    for name in ("checkpoint.json", "result.json", "state_final.json", "ops.jsonl"):
        (folder / name).unlink(missing_ok=True)
    second = MockProvider(default="ok")
    resumed = Runner.resume(folder, provider=second)
    assert resumed.status == "completed"
    assert resumed.vars["x"] == 12 and resumed.vars["m"] == whole.vars["m"]
    assert [call.node_id for call in second.calls] == ["n"]

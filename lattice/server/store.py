"""Run folders written from a shared event loop, without waiting on the disk there.

Under ``durability = "fsync"`` a run forces the files a resume reads (``checkpoint.json``,
``execir.json``, …) to disk when it writes them, and its journal at every op boundary.
The journal's ``fdatasync`` already runs in a worker thread; the other files are forced
in the calling thread, which in a CLI run costs nothing but in a server holds up every
other run and every event stream on the loop (about 40 ms per run start on an ext4
disk: a dozen fsyncs of files and folders).

``LoopStore`` writes the same files the same way, but hands each of those fsyncs to a
worker thread, and the run's next journal commit (the end of its first op, for the
files written at its start) waits for them before the run moves on: as with the CLI,
a power cut loses at most the op in flight. ``settle()`` waits for the fsyncs of the
files a run wrote when it stopped.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from lattice.runs.journal import JOURNAL
from lattice.runs.redaction import Redactor
from lattice.runs.store import DURABLE_FILES, Durability, FolderRecorder, RunRecorder, RunStore
from lattice.runs.store import safe_name as _safe_name


def _force(path: Path, *, folder: bool) -> None:
    """fsync ``path`` (a file, or a folder's entries)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    if folder:
        _force(path.parent, folder=False)


class LoopRecorder(FolderRecorder):
    """A FolderRecorder whose fsyncs outside the journal commit run in worker threads."""

    def __init__(
        self,
        run_dir: Path,
        *,
        redact: Redactor | None = None,
        resume: bool = False,
        durability: Durability = "fsync",
    ) -> None:
        # Opened as "os" so that creating the folder does not force it to disk here.
        super().__init__(run_dir, redact=redact, resume=resume, durability="os")
        self.durability = durability
        self.pending: list[asyncio.Future[None]] = []
        self._journal_written = False
        if durability == "fsync" and not resume:
            self._later(run_dir, folder=True)

    def _later(self, path: Path, *, folder: bool) -> None:
        loop = asyncio.get_running_loop()
        self.pending.append(loop.run_in_executor(None, lambda: _force(path, folder=folder)))

    def write_json(self, name: str, data: Any) -> None:
        if self.durability != "fsync" or name not in DURABLE_FILES:
            super().write_json(name, data)
            return
        self.durability = "os"
        try:
            super().write_json(name, data)
        finally:
            self.durability = "fsync"
        assert self.run_dir is not None
        self._later(self.run_dir / name, folder=True)

    def journal(self, line: dict[str, Any]) -> None:
        super().journal(line)
        self._journal_written = True

    async def commit(self) -> None:
        await self.settle()
        self._journal_written = False
        await super().commit()

    def close(self) -> None:
        durability, self.durability = self.durability, "os"
        try:
            super().close()
        finally:
            self.durability = durability
        if durability == "fsync" and self._journal_written and self.run_dir is not None:
            self._journal_written = False
            self._later(self.run_dir / JOURNAL, folder=False)

    async def settle(self) -> None:
        """Wait until every file written so far is on disk."""
        while self.pending:
            pending, self.pending = self.pending, []
            await asyncio.gather(*pending)


class LoopStore(RunStore):
    """A RunStore whose recorders are ``LoopRecorder``s (for runs on a shared loop)."""

    def __init__(
        self,
        root: Path | str | None,
        *,
        redact: Redactor | None = None,
        durability: Durability = "fsync",
    ) -> None:
        super().__init__(root, redact=redact, durability=durability)
        self.recorders: list[LoopRecorder] = []

    def open(self, run_id: str, *, redact: Redactor | None = None) -> RunRecorder:
        if self.root is None:
            return super().open(run_id, redact=redact)
        recorder = LoopRecorder(
            self.root / _safe_name(run_id),
            redact=redact or self.redact,
            durability=self.durability,
        )
        self.recorders.append(recorder)
        return recorder

    def reopen(self, run_dir: Path, *, redact: Redactor | None = None) -> FolderRecorder:
        recorder = LoopRecorder(
            run_dir, redact=redact or self.redact, resume=True, durability=self.durability
        )
        self.recorders.append(recorder)
        return recorder

    async def settle(self) -> None:
        """Wait for the fsyncs of every folder this store wrote."""
        for recorder in self.recorders:
            await recorder.settle()

"""Run folders written from a shared event loop, without waiting on the disk there.

Under ``durability = "fsync"`` a run forces one file to disk, its journal: at every op
boundary (the first time with the run's folder), and once more when it stops
(``lattice.runs.store``). A commit's sync already runs in a worker thread; the one a
run's stop makes (``close``) would run in the calling thread, which in a CLI run costs
nothing but in a server holds up every other run and every event stream on the loop.

``LoopStore`` writes the same files the same way, but hands that last sync to a worker
thread too. Op records are appended to ``ops.jsonl`` on the loop as the op ends, as
``FolderRecorder`` does (an append to an open file, about a microsecond: no thread is
worth it). Events are appended to ``events.jsonl`` once per step of the
run rather than once per event (a step emits three to five), or as soon as
``FLUSH_LINES`` wait, always before the journal line that commits their op; ``on_line``
is handed each event's line exactly as the file gets it. ``settle()`` waits for all of
it: the server reports a run stopped only once its folder says so.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from lattice.runs.journal import JOURNAL, open_append
from lattice.runs.oplog import safe_name
from lattice.runs.ownership import Ownership
from lattice.runs.redaction import Redactor
from lattice.runs.store import FolderRecorder, RunRecorder, RunStore, SyncMode
from lattice.server.events import KEEP

FLUSH_LINES = KEEP // 4
"""Event lines a recorder holds at most before it appends them to ``events.jsonl``: well
under what an ``EventChannel`` keeps, so that every event the channel no longer holds is
in the file already (a watcher reads what it missed from there)."""


EventLine = Callable[[int, str], None]
"""Called with an event's seq and its line in ``events.jsonl`` (masked, no newline)."""


class LoopRecorder(FolderRecorder):
    """A FolderRecorder for a shared loop: fsyncs and event lines are written off the
    loop's critical path (see the module docstring)."""

    def __init__(
        self,
        run_dir: Path,
        *,
        redact: Redactor | None = None,
        resume: bool = False,
        durability: SyncMode = "fsync",
        on_line: EventLine | None = None,
        ownership: Ownership | None = None,
    ) -> None:
        super().__init__(
            run_dir, redact=redact, resume=resume, durability=durability, ownership=ownership
        )
        self.pending: list[asyncio.Future[None]] = []
        """The stop's sync, while it runs."""
        self._mask = redact or (lambda text: text)
        self.on_line = on_line
        self._lines: list[str] = []
        self._event_file: IO[str] | None = None

    def append_event(self, event: dict[str, Any]) -> None:
        line = self._mask(json.dumps(event, ensure_ascii=False, separators=(",", ":"), default=str))
        if not self._lines:
            asyncio.get_running_loop().call_soon(self._write_events)
        self._lines.append(line)
        if self.on_line is not None:
            self.on_line(event["seq"], line)
        if len(self._lines) >= FLUSH_LINES:
            self._write_events()

    def _write_events(self) -> None:
        """Append the lines emitted since the last call to ``events.jsonl``."""
        if not self._lines:
            return
        if self._event_file is None:
            assert self.run_dir is not None
            self._event_file = open_append(self.run_dir / "events.jsonl")
        self._event_file.write("\n".join(self._lines) + "\n")
        self._event_file.flush()
        self._lines = []

    def journal(self, line: dict[str, Any]) -> None:
        self._write_events()  # an op's events are in the file before its commit
        super().journal(line)

    def close(self) -> None:
        self._write_events()
        if self._event_file is not None:
            self._event_file.close()
            self._event_file = None
        unsynced = self.durability == "fsync" and self._unsynced
        self._unsynced = False  # synced below, off the loop, once the journal is closed
        super().close()
        if unsynced and self.run_dir is not None:
            journal = self.run_dir / JOURNAL
            loop = asyncio.get_running_loop()
            self.pending.append(loop.run_in_executor(None, self._sync_closed, journal))

    def _sync_closed(self, journal: Path) -> None:
        fd = os.open(journal, os.O_RDONLY)
        try:
            self.sync_journal(fd)
        finally:
            os.close(fd)

    async def settle(self) -> None:
        """Wait until every file written so far is written (and forced to disk)."""
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
        durability: SyncMode = "fsync",
        on_line: EventLine | None = None,
    ) -> None:
        super().__init__(root, redact=redact, durability=durability)
        self.recorders: list[LoopRecorder] = []
        self.on_line = on_line
        """Handed to every recorder of this store (set it before the run starts)."""

    def open(self, run_id: str, *, redact: Redactor | None = None) -> RunRecorder:
        if self.root is None:
            return super().open(run_id, redact=redact)
        recorder = LoopRecorder(
            self.root / safe_name(run_id),
            redact=redact or self.redact,
            durability=self.durability,
            on_line=self.on_line,
        )
        self.recorders.append(recorder)
        return recorder

    def reopen(
        self,
        run_dir: Path,
        *,
        redact: Redactor | None = None,
        ownership: Ownership | None = None,
    ) -> FolderRecorder:
        recorder = LoopRecorder(
            run_dir,
            redact=redact or self.redact,
            resume=True,
            durability=self.durability,
            on_line=self.on_line,
            ownership=ownership,
        )
        self.recorders.append(recorder)
        return recorder

    async def settle(self) -> None:
        """Wait for the fsyncs of every folder this store wrote."""
        for recorder in self.recorders:
            await recorder.settle()

"""Where runs are recorded: a folder per run (``runs/<run_id>/``) or nowhere (in memory).

Folder layout (docs/runs.md)::

    workflow.json  execir.json  input.json  state_initial.json  checkpoint.json
    events.jsonl  journal.jsonl  ops/<seq>-<opId>.json
    state_final.json  result.json  failure_report.json

JSON files are written atomically; ``events.jsonl`` and ``journal.jsonl`` are
append-only and flushed per line, so a process killed at any moment leaves every line
it wrote on the OS. With ``durability="fsync"`` (the default) the files a resume needs
(``state_initial.json``, ``execir.json``, ``checkpoint.json``, the journal) also reach
the disk before the run moves on: a new run's folder and first files together, before
its first op (``sync_started``), then the journal at every op boundary. Every text
passes through ``redact`` before it is written, except the document and its ExecIR
(``UNMASKED_FILES``), which a resume runs as they are.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import time
from pathlib import Path
from typing import IO, Any, Literal, Protocol

from lattice.errors import LatticeUserError
from lattice.files import atomic_write_text, write_replacing
from lattice.runs.journal import JOURNAL, drop_torn_tail, open_append, read_lines
from lattice.runs.ownership import Ownership, claim
from lattice.runs.redaction import Redactor

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


class _RunIds:
    """Run ids: the UTC second (formatted once per second) and 32 random bits.

    The bits come from a private generator seeded by the OS, so that code reseeding
    the ``random`` module (tests, reproducible scripts) cannot make ids repeat; a
    forked child reseeds its own.
    """

    __slots__ = ("last", "rng")

    def __init__(self) -> None:
        self.last: tuple[int, str] = (-1, "")
        self.rng = random.Random()
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self.rng.seed)

    def new(self) -> str:
        second = int(time.time())
        last_second, prefix = self.last
        if second != last_second:
            prefix = time.strftime("%Y%m%dT%H%M%S-", time.gmtime(second))
            self.last = (second, prefix)  # one assignment: threads see a matching pair
        return f"{prefix}{self.rng.getrandbits(32):08x}"


new_run_id = _RunIds().new
"""A sortable id that is safe as a folder name: ``20261122T101500-3fa9c1d0``.

Not a secret; a generated id that meets an existing folder is drawn again (``RunFolderExists``)."""


def safe_name(text: str) -> str:
    """``text`` with characters unsafe in file names replaced by ``_``."""
    return _UNSAFE.sub("_", text).strip("._") or "_"


def file_text(data: Any) -> str:
    """The text of a JSON file in a run folder: indented, non-ASCII kept, a final newline."""
    return json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n"


class RunFolderExists(LatticeUserError):
    """A new run's folder is already there (runs never share a folder)."""


Durability = Literal["fsync", "os"]
"""``fsync``: a run's journal reaches the disk at every op boundary (a power cut loses at
most the op in flight); ``os``: lines reach the operating system at once (a killed
process loses nothing it wrote, a power cut may lose the last writes)."""

DURABLE_FILES = frozenset(
    {"workflow.json", "execir.json", "input.json", "state_initial.json", "checkpoint.json"}
)
"""Files a resume reads: forced to disk when written under ``durability="fsync"``."""

UNMASKED_FILES = frozenset({"workflow.json", "execir.json"})
"""Files written as they are, never masked: a resume runs what they say, so masking may
not change a word of them. A document holds references to secrets, never their values;
one that holds a value as text is refused before its folder is made
(``refuse_secrets_in``) rather than recorded."""


class SecretInDocument(LatticeUserError):
    """A document holds the value of a secret (a provider key, an allowed ``$secrets``
    variable) as text: its run folder would record it."""


def refuse_secrets_in(texts: dict[str, str], redact: Redactor) -> None:
    """Raise SecretInDocument when ``redact`` would change one of ``texts`` (the
    ``UNMASKED_FILES`` of a run about to start, by name)."""
    for name, text in texts.items():
        if redact(text) != text:
            raise SecretInDocument(
                "the workflow holds the value of a secret (a provider API key or a "
                f"[secrets] allow variable) as text, and {name} would record it: refer to "
                "it as {{ $secrets.NAME }} in an httpRequest's url, headers, query or body"
            )


class RunRecorder(Protocol):
    """What the runner writes a run to."""

    run_dir: Path | None
    takes_events: bool
    """Whether ``append_event`` keeps events (a run whose recorder takes none and that has
    no listener keeps its events compact until they are read)."""

    def write_json(self, name: str, data: Any) -> None: ...

    def write_text(self, name: str, text: str) -> None:
        """``write_json`` of data already in ``file_text`` form (``execir.json``, which is
        the same for every run of a Runner)."""
        ...

    def append_event(self, event: dict[str, Any]) -> None: ...

    def write_op(self, label: str, op_id: str, record: dict[str, Any]) -> None:
        """Write an op's record as ``ops/<label>-<opId>.json`` (``label``: its sequence
        number, ``0007``, or for an op of a branch ``0005.2.0003``)."""
        ...

    def journal(self, line: dict[str, Any]) -> None:
        """Append a line to the run's journal (``lattice.runs.journal``)."""
        ...

    async def sync_started(self) -> None:
        """Make a new run's folder and the files it has written so far durable."""
        ...

    async def commit(self, *, here: bool = False) -> None:
        """Make the journal durable before the next op starts; ``here``: on this thread,
        for a caller whose event loop has nothing else to do meanwhile (a synchronous run)."""
        ...

    def close(self) -> None: ...


class NullRecorder:
    """Records nothing (persistence off: tests, benchmarks, embedded use)."""

    run_dir: Path | None = None
    takes_events = False

    def write_json(self, name: str, data: Any) -> None:
        pass

    def write_text(self, name: str, text: str) -> None:
        pass

    def append_event(self, event: dict[str, Any]) -> None:
        pass

    def write_op(self, label: str, op_id: str, record: dict[str, Any]) -> None:
        pass

    def journal(self, line: dict[str, Any]) -> None:
        pass

    async def sync_started(self) -> None:
        pass

    async def commit(self, *, here: bool = False) -> None:
        pass

    def close(self) -> None:
        pass


def _line(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)


class FolderRecorder:
    """Writes one run's folder, owning it (``lattice.runs.ownership``) from its creation
    until ``close``. Reopening an existing run's folder (resume) takes it over (or uses
    the ``ownership`` already taken), cuts a line torn by a crash off its events and
    journal, then appends to them."""

    def __init__(
        self,
        run_dir: Path,
        *,
        redact: Redactor | None = None,
        resume: bool = False,
        durability: Durability = "fsync",
        ownership: Ownership | None = None,
    ) -> None:
        self.run_dir: Path | None = run_dir
        self.takes_events = True
        self.durability = durability
        self._dir = run_dir
        self._redact = redact or (lambda text: text)
        self.torn: list[str] = []
        """Files whose torn last line was dropped when the folder was reopened."""
        if not resume:
            try:
                run_dir.parent.mkdir(parents=True, exist_ok=True)
                run_dir.mkdir()  # a new run never writes into an existing run's folder
            except FileExistsError:
                raise RunFolderExists(
                    f"run folder {run_dir} already exists; choose another run id"
                ) from None
            except OSError as exc:
                raise LatticeUserError(
                    f"cannot create run folder {run_dir}: {exc.strerror}"
                ) from exc
        self.ownership = ownership if ownership is not None else claim(run_dir)
        try:
            if resume:
                self.torn = [
                    name for name in ("events.jsonl", JOURNAL) if drop_torn_tail(run_dir / name)
                ]
            (run_dir / "ops").mkdir(exist_ok=True)
            self._journal: IO[str] = open_append(run_dir / JOURNAL)
        except OSError as exc:
            self.ownership.release()
            raise LatticeUserError(f"cannot create run folder {run_dir}: {exc.strerror}") from exc
        self._events: IO[str] | None = None
        self._unsynced = False
        self._syncing: asyncio.Future[None] | None = None
        """The journal's last sync, while it runs."""
        self._ops = run_dir / "ops"
        self._starting: list[int] | None = [] if durability == "fsync" and not resume else None
        """A new folder's first durable files, still open: ``sync_started`` forces them to
        disk together with the folder (one round of parallel syncs, not two per file)."""

    def event_summary(self) -> tuple[int, int]:
        """The highest event sequence number in ``events.jsonl`` (0 when none) and the
        segment of the last attempt that wrote events: 1 for the first run, even when it
        was killed before its ``run_started`` line reached the file, and then the
        ``segment`` of the last ``run_resumed`` event."""
        events, _ = read_lines(self._dir / "events.jsonl")
        last = max((e["seq"] for e in events if isinstance(e.get("seq"), int)), default=0)
        resumed = (
            e["data"].get("segment")
            for e in events
            if e.get("type") == "run_resumed" and isinstance(e.get("data"), dict)
        )
        segment = max((n for n in resumed if isinstance(n, int)), default=1)
        return last, segment

    def write_json(self, name: str, data: Any) -> None:
        self.write_text(name, file_text(data))

    def write_text(self, name: str, text: str) -> None:
        if name not in UNMASKED_FILES:
            text = self._redact(text)
        if self.durability != "fsync" or name not in DURABLE_FILES:
            write_replacing(self._dir / name, text)
        elif self._starting is not None:  # new files: forced to disk by sync_started
            fd = write_replacing(self._dir / name, text, keep_open=True)
            assert fd is not None
            self._starting.append(fd)
        else:
            atomic_write_text(self._dir / name, text, durable=True)

    def append_event(self, event: dict[str, Any]) -> None:
        if self._events is None:
            self._events = open_append(self._dir / "events.jsonl")
        self._events.write(self._redact(_line(event)) + "\n")
        self._events.flush()

    def write_op(self, label: str, op_id: str, record: dict[str, Any]) -> None:
        text = _line(record) + "\n"
        write_replacing(self._ops / f"{label}-{safe_name(op_id)}.json", self._redact(text))

    def journal(self, line: dict[str, Any]) -> None:
        self._journal.write(self._redact(_line(line)) + "\n")
        self._journal.flush()
        self._unsynced = True

    async def sync_started(self) -> None:
        """Force the new folder (its entry in the runs directory, its own entries) and the
        durable files written so far to disk: in parallel, so that the file system commits
        them together."""
        fds, self._starting = self._starting, None
        if fds is None:
            return
        try:
            for folder in (self._dir, self._dir.parent):
                fds.append(os.open(folder, os.O_RDONLY))
        except OSError as exc:
            _close_all(fds)
            raise LatticeUserError(f"cannot sync run folder {self._dir}: {exc.strerror}") from exc
        loop = asyncio.get_running_loop()
        syncs = asyncio.gather(
            *(loop.run_in_executor(None, os.fsync, fd) for fd in fds), return_exceptions=True
        )
        # closed once every sync has returned, even if this run is cancelled meanwhile
        syncs.add_done_callback(lambda _: _close_all(fds))
        results = await asyncio.shield(syncs)
        for result in results:
            if isinstance(result, OSError):
                raise LatticeUserError(
                    f"cannot sync run folder {self._dir}: {result.strerror}"
                ) from result
            if isinstance(result, BaseException):
                raise result

    async def commit(self, *, here: bool = False) -> None:
        if self.durability != "fsync":
            return
        if not self._unsynced:
            # Another branch's commit may be syncing this op's line already: wait for it.
            if self._syncing is not None and not self._syncing.done():
                await asyncio.shield(self._syncing)
            return
        self._unsynced = False
        fd = self._journal.fileno()
        if here:
            os.fdatasync(fd)
            return
        self._syncing = asyncio.get_running_loop().run_in_executor(None, os.fdatasync, fd)
        await asyncio.shield(self._syncing)

    def close(self) -> None:
        if self._starting:  # the run stopped before sync_started
            _close_all(self._starting)
            self._starting = None
        if self._events is not None:
            self._events.close()
            self._events = None
        try:
            if not self._journal.closed:
                if self._unsynced and self.durability == "fsync":
                    os.fdatasync(self._journal.fileno())
                self._journal.close()
        finally:
            self.ownership.release()


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)


class RunStore:
    """Chooses where runs live: ``RunStore(Path("runs"))`` or ``RunStore(None)`` for memory only.

    ``durability`` chooses how hard run folders are forced to disk (``Durability``).
    """

    def __init__(
        self,
        root: Path | str | None = Path("runs"),
        *,
        redact: Redactor | None = None,
        durability: Durability = "fsync",
    ) -> None:
        self.root = Path(root) if root is not None else None
        self.redact = redact
        self.durability: Durability = durability

    def open(self, run_id: str, *, redact: Redactor | None = None) -> RunRecorder:
        """A recorder for a new run (its folder must not exist yet)."""
        if self.root is None:
            return NullRecorder()
        return FolderRecorder(
            self.root / safe_name(run_id),
            redact=redact or self.redact,
            durability=self.durability,
        )

    def reopen(
        self,
        run_dir: Path,
        *,
        redact: Redactor | None = None,
        ownership: Ownership | None = None,
    ) -> FolderRecorder:
        """A recorder that continues the run folder ``run_dir`` (resume), wherever it is,
        holding ``ownership`` of it (taken here when not given)."""
        return FolderRecorder(
            run_dir,
            redact=redact or self.redact,
            resume=True,
            durability=self.durability,
            ownership=ownership,
        )

"""Where runs are recorded: a folder per run (``runs/<run_id>/``) or nowhere (in memory).

Folder layout (docs/runs.md)::

    workflow.json  execir.json  input.json  state_initial.json  checkpoint.json
    events.jsonl  journal.jsonl  ops.jsonl
    state_final.json  result.json  failure_report.json

JSON files are written atomically; ``events.jsonl``, ``journal.jsonl`` and ``ops.jsonl``
(the op records, ``lattice.runs.oplog``) are append-only and written a line at a time,
so a process killed at any moment leaves every line it wrote on the OS. The journal also
holds a copy of every file a resume reads (``DURABLE_FILES``): the starting files in its
first line, ``checkpoint.json`` again in its last line when the run stops. So with
``durability="fsync"`` (the default) the journal is the one file a run forces to disk:
after every op that reaches outside the run, the first time with the run's folder and
its entry in the runs folder (``commit``), and once more when the run stops
(``close``). Every text passes
through ``redact`` before it is written, except the document and its ExecIR
(``UNMASKED_FILES``), which a resume runs as they are.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from pathlib import Path
from typing import IO, Any, Literal, Protocol

from lattice.errors import LatticeUserError
from lattice.files import sync_data, sync_directory, write_replacing
from lattice.runs.journal import FILES, JOURNAL, drop_torn_tail, open_append, read_lines
from lattice.runs.oplog import OPS_FILE, OpRecord, cut_torn_line, op_line, safe_name
from lattice.runs.ownership import Ownership, claim
from lattice.runs.redaction import Redactor


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


def file_text(data: Any) -> str:
    """The text of a JSON file in a run folder: indented, non-ASCII kept, a final newline."""
    return json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n"


class RunFolderExists(LatticeUserError):
    """A new run's folder is already there (runs never share a folder)."""


SyncMode = Literal["fsync", "os"]
"""What ``[runs] durability`` and ``RunStore(durability=…)`` take (the interface a run
journals through is ``lattice.runtime.durability.Durability``). ``fsync``: a run's
journal reaches the disk after every op that reaches outside the run (a power cut loses
at most the op in flight and the ops that only computed since, which a resume redoes);
``os``: lines reach the operating system at once (a killed process loses nothing it
wrote, a power cut may lose the last writes)."""

DURABLE_FILES = frozenset(
    {"workflow.json", "execir.json", "input.json", "state_initial.json", "checkpoint.json"}
)
"""Files a resume reads: each write is copied into the journal (a ``files`` line), which
is what reaches the disk under ``durability="fsync"``."""

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


def refuse_secret_answers(answers: dict[str, Any], redact: Redactor) -> None:
    """Raise SecretInDocument when an answer holds the value of a secret: sent to a run
    on Temporal, it would enter the workflow's history as it is (a run folder masks it)."""
    text = file_text(answers)
    if redact(text) != text:
        raise SecretInDocument(
            "an answer holds the value of a secret (a provider API key or a [secrets] "
            "allow variable), and the run's history would record it: answer without it"
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

    def write_op(self, label: str, op_id: str, record: OpRecord) -> None:
        """Keep an op's record: a line of ``ops.jsonl`` (``lattice.runs.oplog``;
        ``label``: its sequence number, ``0007``, or for an op of a branch ``0005.2.0003``)."""
        ...

    def journal(self, line: dict[str, Any]) -> None:
        """Append a line to the run's journal (``lattice.runs.journal``)."""
        ...

    async def sync_started(self) -> None:
        """Record the files a new run has written so far (its starting files) in its
        journal's first line; they reach the disk with the journal's first commit."""
        ...

    async def commit(self, *, here: bool = False) -> None:
        """Make the journal durable before the next op starts (the first commit makes the
        run's folder durable too); ``here``: on this thread, for a caller whose event loop
        has nothing else to do meanwhile (a synchronous run)."""
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

    def write_op(self, label: str, op_id: str, record: OpRecord) -> None:
        pass

    def journal(self, line: dict[str, Any]) -> None:
        pass

    async def sync_started(self) -> None:
        pass

    async def commit(self, *, here: bool = False) -> None:
        pass

    def close(self) -> None:
        pass


_APPEND = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)


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
        durability: SyncMode = "fsync",
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
        self._ops = -1
        """``ops.jsonl``, open for appending (``write_op``)."""
        try:
            if resume:
                self.torn = [
                    name for name in ("events.jsonl", JOURNAL) if drop_torn_tail(run_dir / name)
                ]
                if cut_torn_line(run_dir / OPS_FILE):
                    self.torn.append(OPS_FILE)
            self._ops = os.open(run_dir / OPS_FILE, _APPEND, 0o666)
            self._journal: IO[str] = open_append(run_dir / JOURNAL)
        except OSError as exc:
            if self._ops >= 0:
                os.close(self._ops)
            self.ownership.release()
            raise LatticeUserError(f"cannot create run folder {run_dir}: {exc.strerror}") from exc
        self._events: IO[str] | None = None
        self._unsynced = False
        self._syncing: asyncio.Future[None] | None = None
        """The journal's last sync, while it runs."""
        self._starting: dict[str, str] | None = None if resume else {}
        """A new run's durable files until ``sync_started`` copies them into the journal."""
        self.folder_synced = False
        """Whether the folder's entries (and its own entry in the runs folder) were forced
        to disk: by the first sync of the journal, new run or resumed one alike."""

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
        if name in DURABLE_FILES:
            if self._starting is not None:
                self._starting[name] = text  # the journal's first line (sync_started)
            else:
                self.journal({"kind": FILES, "files": {name: text}})  # before the file
        write_replacing(self._dir / name, text)

    def append_event(self, event: dict[str, Any]) -> None:
        if self._events is None:
            self._events = open_append(self._dir / "events.jsonl")
        self._events.write(self._redact(_line(event)) + "\n")
        self._events.flush()

    def write_op(self, label: str, op_id: str, record: OpRecord) -> None:
        data = self._redact(op_line(label, op_id, _line(record))).encode("utf-8")
        written = os.write(self._ops, data)  # O_APPEND: one write, one line
        while written < len(data):  # a short write (a signal): the rest follows it
            written += os.write(self._ops, data[written:])

    def journal(self, line: dict[str, Any]) -> None:
        self._journal.write(self._redact(_line(line)) + "\n")
        self._journal.flush()
        self._unsynced = True

    async def sync_started(self) -> None:
        """Copy the starting files written so far into the journal's first line. Nothing
        is forced to disk here: the journal's first commit makes the folder, those files
        and the first op durable together."""
        files, self._starting = self._starting, None
        if files:
            self.journal({"kind": FILES, "files": files})

    async def commit(self, *, here: bool = False) -> None:
        if self.durability != "fsync":
            return
        if not self._unsynced:
            # Another branch's commit may be syncing this op's line already: wait for it.
            if self._syncing is not None and not self._syncing.done():
                await asyncio.shield(self._syncing)
            return
        self._unsynced = False
        if here:
            self.sync_journal(self._journal.fileno())
            return
        fd = self._journal.fileno()
        self._syncing = asyncio.get_running_loop().run_in_executor(None, self.sync_journal, fd)
        await asyncio.shield(self._syncing)

    def sync_journal(self, fd: int) -> None:
        """Force the journal (open on ``fd``) to disk, and the first time the folder's
        entries and the runs folder's entry for it: the one sync of an op boundary."""
        sync_data(fd)
        if self.folder_synced:
            return
        try:
            sync_directory(self._dir)
            sync_directory(self._dir.parent)
        except OSError as exc:
            raise LatticeUserError(f"cannot sync run folder {self._dir}: {exc.strerror}") from exc
        self.folder_synced = True

    def close(self) -> None:
        self._starting = None
        if self._ops >= 0:
            os.close(self._ops)
            self._ops = -1
        if self._events is not None:
            self._events.close()
            self._events = None
        try:
            if not self._journal.closed:
                try:
                    if self._unsynced and self.durability == "fsync":
                        self._unsynced = False
                        self.sync_journal(self._journal.fileno())
                finally:
                    self._journal.close()
        finally:
            self.ownership.release()


class RunStore:
    """Chooses where runs live: ``RunStore(Path("runs"))`` or ``RunStore(None)`` for memory only.

    ``durability`` chooses how hard run folders are forced to disk (``SyncMode``).
    """

    def __init__(
        self,
        root: Path | str | None = Path("runs"),
        *,
        redact: Redactor | None = None,
        durability: SyncMode = "fsync",
    ) -> None:
        self.root = Path(root) if root is not None else None
        self.redact = redact
        self.durability: SyncMode = durability

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

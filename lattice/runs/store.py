"""Where runs are recorded: a folder per run (``runs/<run_id>/``) or nowhere (in memory).

Folder layout (docs/runtime.md, "The run folder")::

    workflow.json  execir.json  input.json  state_initial.json  events.jsonl
    ops/<seq>-<opId>.json  state_final.json  result.json  failure_report.json
    checkpoint.json   (where a halted or failed run resumes)

JSON files are written atomically; ``events.jsonl`` is append-only and flushed per
event. Every text passes through ``redact`` before it reaches the disk.
"""

from __future__ import annotations

import json
import os
import random
import re
import time
from pathlib import Path
from typing import IO, Any, Protocol

from lattice.errors import LatticeUserError
from lattice.files import atomic_write_text
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


def _dump(data: Any) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n"


class RunFolderExists(LatticeUserError):
    """A new run's folder is already there (runs never share a folder)."""


class RunRecorder(Protocol):
    """What the runner writes a run to."""

    run_dir: Path | None
    takes_events: bool
    """Whether ``append_event`` keeps events (a run whose recorder takes none and that has
    no listener keeps its events compact until they are read)."""

    def write_json(self, name: str, data: Any) -> None: ...

    def append_event(self, event: dict[str, Any]) -> None: ...

    def write_op(self, seq: int, op_id: str, record: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


class NullRecorder:
    """Records nothing (persistence off: tests, benchmarks, embedded use)."""

    run_dir: Path | None = None
    takes_events = False

    def write_json(self, name: str, data: Any) -> None:
        pass

    def append_event(self, event: dict[str, Any]) -> None:
        pass

    def write_op(self, seq: int, op_id: str, record: dict[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass


class FolderRecorder:
    """Writes one run's folder. Creating it for an existing run (resume) appends to its events."""

    def __init__(
        self, run_dir: Path, *, redact: Redactor | None = None, resume: bool = False
    ) -> None:
        self.run_dir: Path | None = run_dir
        self.takes_events = True
        self._dir = run_dir
        self._redact = redact or (lambda text: text)
        try:
            if not resume:
                run_dir.parent.mkdir(parents=True, exist_ok=True)
                try:
                    run_dir.mkdir()  # a new run never writes into an existing run's folder
                except FileExistsError:
                    raise RunFolderExists(
                        f"run folder {run_dir} already exists; choose another run id"
                    ) from None
            (run_dir / "ops").mkdir(exist_ok=True)
        except OSError as exc:
            raise LatticeUserError(f"cannot create run folder {run_dir}: {exc.strerror}") from exc
        self._events: IO[str] | None = None

    def write_json(self, name: str, data: Any) -> None:
        atomic_write_text(self._dir / name, self._redact(_dump(data)))

    def append_event(self, event: dict[str, Any]) -> None:
        if self._events is None:
            self._events = open(self._dir / "events.jsonl", "a", encoding="utf-8")  # noqa: SIM115
        line = json.dumps(event, ensure_ascii=False, separators=(",", ":"), default=str)
        self._events.write(self._redact(line) + "\n")
        self._events.flush()

    def write_op(self, seq: int, op_id: str, record: dict[str, Any]) -> None:
        text = json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=str) + "\n"
        atomic_write_text(self._dir / f"ops/{seq:04d}-{safe_name(op_id)}.json", self._redact(text))

    def close(self) -> None:
        if self._events is not None:
            self._events.close()
            self._events = None


class RunStore:
    """Chooses where runs live: ``RunStore(Path("runs"))`` or ``RunStore(None)`` for memory only."""

    def __init__(
        self, root: Path | str | None = Path("runs"), *, redact: Redactor | None = None
    ) -> None:
        self.root = Path(root) if root is not None else None
        self.redact = redact

    def open(self, run_id: str, *, redact: Redactor | None = None) -> RunRecorder:
        """A recorder for a new run (its folder must not exist yet)."""
        if self.root is None:
            return NullRecorder()
        return FolderRecorder(self.root / safe_name(run_id), redact=redact or self.redact)

    def reopen(self, run_dir: Path, *, redact: Redactor | None = None) -> RunRecorder:
        """A recorder that continues the run folder ``run_dir`` (resume), wherever it is."""
        return FolderRecorder(run_dir, redact=redact or self.redact, resume=True)

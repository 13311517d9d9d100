"""The results file of a batch: one JSON line per finished row.

A row's line is written (one ``write`` of the whole line, appended) as soon as its run
ends, so a batch killed at any moment, ``kill -9`` included, keeps every row it had
finished; a line cut short by the kill is dropped when the file is opened again. With
``durability="fsync"`` a thread forces the file to disk behind the writer, one
``fdatasync`` for every line written since the last one (a power cut loses at most the
lines of the last few milliseconds; their rows run again).

A row may have several lines (a failed row retried, a halted row answered): the last
one counts. A batch that ends (not killed) rewrites the file with one line per row.

Each line names the workflow that wrote it (``workflow``: its id, ``workflow_digest``:
the digest of its document as written). A batch of another workflow, or of an edited
version of it, refuses a file holding such lines: it would take their rows as done. Lines written before lines
named their workflow are taken as any workflow's.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lattice.batch.rows import row_key
from lattice.errors import LatticeUserError
from lattice.files import atomic_write_text, sync_data
from lattice.ir.models import ExecIR
from lattice.ir.serialize import execir_digest
from lattice.runs.journal import drop_torn_tail, read_lines

try:  # POSIX: one batch at a time writes a results file
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

OUTPUT_KEYS = ("id", "status", "result", "error_type", "error", "node_id", "usage", "run_dir")
"""The keys every results line starts with (then ``line``, ``latency_ms``, ``repairs``,
``escalations``, ``retries``, ``workflow``, ``workflow_digest``)."""


def workflow_digest(ir: ExecIR, document: Mapping[str, Any] | None) -> str:
    """``sha256:<hex>`` of the workflow as its author wrote it: the document's canonical
    JSON (another Lattice lowering it differently is the same workflow), or the ExecIR's
    when the batch was given no document."""
    if document is None:
        return execir_digest(ir)
    text = json.dumps(document, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class WorkflowStamp:
    """The workflow that writes a results file: its id and its digest (``workflow_digest``)."""

    id: str
    digest: str

    def fields(self) -> dict[str, str]:
        """The keys it adds to every line."""
        return {"workflow": self.id, "workflow_digest": self.digest}


def check_workflow(path: Path, lines: dict[str, dict[str, Any]], workflow: WorkflowStamp) -> None:
    """Refuse (a LatticeUserError) a results file whose rows another workflow, or another
    version of this one, wrote; lines that name no workflow (older files) pass."""
    for line in lines.values():
        digest = line.get("workflow_digest")
        if digest is None or digest == workflow.digest:
            continue
        other = str(line.get("workflow"))
        if other == workflow.id:
            wrote = f"another version of workflow {other!r} ({_short(digest)})"
        else:
            wrote = f"workflow {other!r} ({_short(digest)})"
        raise LatticeUserError(
            f"{path} holds results written by {wrote}; this batch runs workflow "
            f"{workflow.id!r} ({_short(workflow.digest)}) and would take those rows as "
            f"done: write to another -o FILE, or delete {path} to start over"
        )


def _short(digest: str) -> str:
    return digest[: len("sha256:") + 12]


def dumps_line(line: dict[str, Any]) -> str:
    return json.dumps(line, ensure_ascii=False, separators=(",", ":"), default=str) + "\n"


def latest_lines(lines: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Row key → the last line of each row (lines without an id are left out)."""
    latest: dict[str, dict[str, Any]] = {}
    for line in lines:
        if "id" in line:
            latest[row_key(line["id"])] = line
    return latest


def read_results(path: Path) -> dict[str, dict[str, Any]]:
    """The rows of a results file (the last line of each), without changing the file;
    a torn last line is left out. A missing file is a LatticeUserError."""
    if not path.is_file():
        raise LatticeUserError(f"no results file {path}")
    lines, _ = read_lines(path)
    return latest_lines(lines)


class _Syncer(threading.Thread):
    """Forces a file to disk behind its writer: one fdatasync covers every line written
    since the previous one."""

    def __init__(self, fd: int) -> None:
        super().__init__(name="lattice-batch-fsync", daemon=True)
        self.fd = fd
        self.cond = threading.Condition()
        self.dirty = False
        self.closing = False
        self.error: OSError | None = None

    def mark(self) -> None:
        with self.cond:
            self.dirty = True
            self.cond.notify()

    def run(self) -> None:
        while True:
            with self.cond:
                while not self.dirty and not self.closing:
                    self.cond.wait()
                if not self.dirty:
                    return
                self.dirty = False
            try:
                sync_data(self.fd)
            except OSError as exc:  # reported by close()
                self.error = exc
                return

    def close(self) -> None:
        with self.cond:
            self.closing = True
            self.cond.notify()
        self.join()


class ResultsFile:
    """The results file a batch appends to (``durability``: ``"fsync"`` or ``"os"``).
    With ``workflow``, a file another workflow wrote is refused and every line appended
    names this one."""

    def __init__(
        self, path: Path, *, durability: str = "fsync", workflow: WorkflowStamp | None = None
    ) -> None:
        self.path = path
        self.workflow = workflow
        if path.is_dir():
            raise LatticeUserError(f"the results file {path} is a directory")
        if not path.parent.is_dir():
            raise LatticeUserError(
                f"cannot write {path}: the directory {path.parent} does not exist"
            )
        try:
            self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        except OSError as exc:
            raise LatticeUserError(f"cannot write {path}: {exc.strerror}") from exc
        try:
            self._lock()
            self.dropped_torn_line = drop_torn_tail(path, what="a results line")
            lines, _ = read_lines(path)
            self.latest = latest_lines(lines)
            if workflow is not None:
                check_workflow(path, self.latest, workflow)
        except BaseException:
            os.close(self.fd)
            raise
        self.needs_compaction = len(self.latest) != len(lines)
        self.written = 0
        self._syncer: _Syncer | None = None
        if durability == "fsync":
            self._syncer = _Syncer(self.fd)
            self._syncer.start()

    def _lock(self) -> None:
        if fcntl is None:  # pragma: no cover - Windows
            return
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise LatticeUserError(
                f"another batch is writing {self.path}; wait for it or choose another -o FILE"
            ) from None

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.latest.values())

    def append(self, line: dict[str, Any]) -> None:
        """Write one row's line (whole, appended); the row counts as done from now on."""
        if self.workflow is not None:
            line = {**line, **self.workflow.fields()}
        data = dumps_line(line).encode("utf-8")
        view = memoryview(data)
        while view:
            written = os.write(self.fd, view)
            view = view[written:]
        key = row_key(line["id"])
        if key in self.latest:
            self.needs_compaction = True
        self.latest[key] = line
        self.written += 1
        if self._syncer is not None:
            self._syncer.mark()

    def close(self, *, compact: bool = True) -> None:
        """Force what was written to disk; with ``compact``, rewrite a file that holds
        more than one line for a row with the last line of each (atomically)."""
        if self.fd < 0:
            return
        try:
            if self._syncer is not None:
                self._syncer.close()
                if self._syncer.error is not None:
                    raise LatticeUserError(
                        f"cannot force {self.path} to disk: {self._syncer.error.strerror}"
                    )
                sync_data(self.fd)
            if compact and self.needs_compaction:
                text = "".join(dumps_line(line) for line in self.latest.values())
                atomic_write_text(self.path, text, durable=self._syncer is not None)
                self.needs_compaction = False
        finally:
            os.close(self.fd)  # releases the lock
            self.fd = -1

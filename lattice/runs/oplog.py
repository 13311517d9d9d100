"""A run's op records: written as lines of ``ops.jsonl``, read back by one function.

Each op that ends (completed or failed) leaves a record: the values it read, its model
attempts, its output and port, an agent's transcript and changes. A run folder keeps
them in ``ops.jsonl``, one line a record, appended as the op ends through a file kept
open for the run: an append to an open file costs about a microsecond where creating a
file per record (``ops/<label>-<op>.json``, the layout before) cost tens to hundreds.

A line is ``{"label": "0007", "op": "<op id, file-name safe>", "record": {...}}``;
``label`` is the op's sequence number (``0007``; ``0005.2.0003`` for op 3 of branch 2 of
the fork at op 5). The same label and op written again (an op in flight when a run was
killed, run again by its resume) replaces the earlier line, as rewriting its file did.

Lines reach the operating system as they are written (a killed process loses none), but
the file is never forced to disk: the journal is what a resume reads and what a run
syncs, so a power cut may lose the last records, never a committed op. A line cut short
by a crash is left out when reading and cut off when the run is resumed.

``op_entries`` is the one reader: it reads ``ops.jsonl`` and, for folders written
before it, the files of ``ops/`` (a resumed old folder has both; the newer line wins).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from lattice.errors import LatticeUserError

OPS_FILE = "ops.jsonl"
"""The op records of a run folder, one line each."""
OPS_DIR = "ops"
"""Where folders written by earlier versions keep one file per op record."""


class OpExtras(TypedDict, total=False):
    """What an op adds to its own record (``Outcome.record``): an LLM op's attempts, an
    agent's transcript and the files it changed, the report of a failure its ``failed``
    route took."""

    attempts: list[Any]
    transcript: dict[str, Any]
    changes: list[dict[str, Any]]
    error: dict[str, Any]


class OpRecord(OpExtras, total=False):
    """One op record (the ``record`` of a line of ``ops.jsonl``, an item of Temporal's
    ``record`` query's ``ops``): built by ``lattice.runtime.op_record.op_record`` for
    every engine. ``seq`` is the op's number (``7``) or, in a branch, its label
    (``"0005.2.0003"``); a finished op has ``port`` and ``output``, one that failed
    without a ``failed`` route ``error`` and ``attempts``."""

    seq: int | str
    op_id: str
    node_id: str
    kind: str
    duration_ms: float
    inputs: dict[str, Any]
    branch: str
    port: str
    output: Any


_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_HEADER = re.compile(rb'\{"label":"([0-9.]+)","op":"([A-Za-z0-9_.-]+)","record":')
"""The start of a line as ``op_line`` writes it: label and op read without parsing the
record (an index of a long run's records parses none of them)."""


def safe_name(text: str) -> str:
    """``text`` with characters unsafe in file names replaced by ``_``."""
    return _UNSAFE.sub("_", text).strip("._") or "_"


def op_line(label: str, op_id: str, record_json: str) -> str:
    """The line of ``ops.jsonl`` for the record of op ``op_id`` (``record_json``: the
    record as compact JSON), with its newline."""
    return f'{{"label":"{label}","op":"{safe_name(op_id)}","record":{record_json}}}\n'


def record_label(seq: Any, index: int) -> str:
    """The label of an op record from its ``seq``: a branch's op has its label there
    (``0005.2.0003``), a main-track op its number (``7`` is ``0007``); a record without
    one is labelled by ``index``, its place among the run's records (from 0)."""
    if isinstance(seq, str):
        return seq
    return f"{seq if isinstance(seq, int) else index + 1:04d}"


def label_key(label: str) -> tuple[int, ...]:
    """The order of op record labels (``0003`` < ``0003.1.0001`` < ``10000``)."""
    try:
        return tuple(int(part) for part in label.split("."))
    except ValueError:
        return (1 << 62,)


@dataclass(frozen=True, slots=True)
class OpEntry:
    """One op record of a run folder, read when asked (``record``)."""

    label: str
    name: str
    """The op's id as a file name (``safe_name``)."""
    source: bytes | Path | dict[str, Any]
    """The record's JSON (from a line of ``ops.jsonl``), its file in ``ops/``, or the
    record itself (a line that had to be parsed to be indexed)."""

    def record(self) -> dict[str, Any] | None:
        """The record, or None when it cannot be read (a file gone, text not JSON)."""
        source = self.source
        if isinstance(source, dict):
            return source
        try:
            value = json.loads(source.read_bytes() if isinstance(source, Path) else source)
        except (OSError, ValueError, RecursionError):
            return None
        return value if isinstance(value, dict) else None


def op_entries(folder: Path) -> list[OpEntry]:
    """The op records of run folder ``folder``, in op order (by label, then op), one per
    label and op: the last written. Reads ``ops.jsonl`` and an older folder's ``ops/``;
    a line cut short or not JSON is left out. A folder without records has none."""
    found: dict[tuple[str, str], OpEntry] = {}
    for entry in _files(folder / OPS_DIR):
        found[entry.label, entry.name] = entry
    for entry in _lines(folder / OPS_FILE):
        found[entry.label, entry.name] = entry
    return sorted(found.values(), key=lambda e: (label_key(e.label), e.name))


def read_op_records(folder: Path) -> list[dict[str, Any]]:
    """The records of ``op_entries``, parsed (those that cannot be read left out)."""
    return [record for entry in op_entries(folder) if (record := entry.record()) is not None]


def _files(directory: Path) -> list[OpEntry]:
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return []
    out = []
    for item in entries:
        name = item.name
        if not name.endswith(".json") or "-" not in name or name.startswith("."):
            continue
        label, _, op = name[: -len(".json")].partition("-")
        out.append(OpEntry(label, op, Path(item.path)))
    return out


def _lines(path: Path) -> list[OpEntry]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise LatticeUserError(f"cannot read {path}: {exc.strerror}") from exc
    out = []
    start = 0
    while (end := data.find(b"\n", start)) >= 0:
        line = data[start:end]
        start = end + 1
        header = _HEADER.match(line)
        if header is not None and line.endswith(b"}}"):
            label, name = header.group(1).decode(), header.group(2).decode()
            out.append(OpEntry(label, name, line[header.end() : -1]))
            continue
        entry = _parsed(line)  # not as op_line writes it (masked, or torn inside)
        if entry is not None:
            out.append(entry)
    return out  # what follows the last newline is torn: left out


def _parsed(line: bytes) -> OpEntry | None:
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict):
        return None
    label, op, record = value.get("label"), value.get("op"), value.get("record")
    if not isinstance(label, str) or not isinstance(op, str) or not isinstance(record, dict):
        return None
    return OpEntry(label, op, record)


def cut_torn_line(path: Path) -> bool:
    """Cut ``path`` back to just after its last newline (a crash tore the line after it);
    True when something was cut. A bad line with lines after it is left for the reader
    to pass over: op records describe a run, nothing resumes from them."""
    try:
        with open(path, "r+b") as handle:
            size = handle.seek(0, os.SEEK_END)
            if size == 0:
                return False
            window = 1 << 16
            while True:
                start = max(0, size - window)
                handle.seek(start)
                data = handle.read(size - start)
                newline = data.rfind(b"\n")
                if newline == len(data) - 1:
                    return False
                if newline >= 0 or start == 0:
                    handle.truncate(start + newline + 1)
                    return True
                window *= 8
    except FileNotFoundError:
        return False

"""A run's write-ahead journal (``journal.jsonl``) and reading JSON-lines files back.

The runner appends one line when an op completes, before the next op starts, one line
for every request to a model as it is sent, and one for every answer as soon as it
arrives. A resume rebuilds the run from
``state_initial.json`` and these lines alone, so a run killed at any moment loses at
most the op in flight, and never the model answers that op had already paid for.

Line kinds::

    {"kind": "files", "files": {name: text}}       the files a resume reads, as written:
                                                    at the start (the journal's first
                                                    line: workflow.json, execir.json,
                                                    input.json, state_initial.json,
                                                    checkpoint.json), then checkpoint.json
                                                    at every stop and resume (the last
                                                    line of a stopped run)
    {"kind": "op", "op_seq", "op_id", "port", "next", "steps", "changes": [...],
     "last_result", "usage"?, "answers"?, "output"?}
    {"kind": "op_failed", "op_seq", "op_id", "usage", "provider_state"?}   an op that
                                                    failed or halted
    {"kind": "request", "op_id", "prompt_hash"}     a request sent to a model (as it
                                                    goes out, once it holds its provider
                                                    slot: a request whose answer never
                                                    came counts toward the call budget)
    {"kind": "request_unsent", "op_id", "prompt_hash"}  the request before it was
                                                    refused without being sent: not
                                                    counted (written by earlier versions,
                                                    which journaled requests before their
                                                    slot)
    {"kind": "answer", "op_seq", "op_id", "prompt_hash", "model_class", "text", "model",
     "input_tokens", "output_tokens", "finish_reason", "latency_ms", "provider_state"?,
     "tool_calls"?}                                 an answer; ``tool_calls`` when the
                                                    model called tools (an agent's turn)
    {"kind": "tool_call", "op_id", "key", "tool", "file"?}   an agent's tool call, before
                                                    it runs (``file``: a write's target
                                                    as it was: path, digest, text)
    {"kind": "tool_result", "op_id", "key", "text", "is_error", "changes"?}  its result
    {"kind": "approval_request", "op_id", "key", "id", "node", "tool", "arguments",
     "why", "diff"? | "command"?, "cwd"? | "server"?}  a call waiting for a person
    {"kind": "tool_decision", "op_id", "key", "id", "tool", "decision", "by", "door",
     "reason", "at", "planned"?}                    a decision on a call (allow, allow_run,
                                                    deny; by a rule or a person), before
                                                    anything acts on it

Lines of an op that ran in a branch of a fork (or an item of a for-each) carry its
``branch`` (``0005.2``); their ``op_seq`` counts within the branch, and their changes
reach the main state through the fork's own line, written when its branches merged.

``changes`` are the op's changes of ``$vars`` (``StateStore.changes``); ``usage`` is
the run's usage after the op, present when the op called a model; ``answers`` the
answers still queued after an ASK; ``output`` the run's output when the op is END.
The files themselves are written beside the journal but never forced to disk: the journal
is the one file a run syncs, and its ``files`` lines are what survives a power cut
(``journaled_copy``; a resume puts back a starting file the cut left missing or torn).
A line cut short by a crash (no newline, or not JSON) is dropped when the folder is
reopened; a line of a kind this reader does not know is passed over. Journals written
before requests had lines of their own have answers without ``model_class``: each of
those stands for its request too.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lattice.errors import LatticeUserError

JOURNAL = "journal.jsonl"
FILES = "files"
"""The kind of a line holding copies of files a resume reads."""


def read_lines(path: Path, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """The JSON objects of a JSON-lines file from byte ``offset`` (the start of a line)
    on, and the offset just past its last complete line: from the start, the byte length
    of its complete lines (a torn last line, without its newline or not valid JSON, is
    left out)."""
    try:
        with path.open("rb") as file:
            file.seek(offset)
            data = file.read()
    except FileNotFoundError:
        return [], offset
    except OSError as exc:
        raise LatticeUserError(f"cannot read {path}: {exc.strerror}") from exc
    lines: list[dict[str, Any]] = []
    good = 0
    start = 0
    while start < len(data):
        end = data.find(b"\n", start)
        if end < 0:
            break  # torn: the writer was killed before the newline
        raw = data[start:end]
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError):
            break  # torn inside: nothing after it can be trusted
        if isinstance(value, dict):
            lines.append(value)
        good = start = end + 1
    return lines, offset + good


def drop_torn_tail(path: Path, *, what: str = "a JSON line") -> bool:
    """Cut ``path`` back to its last complete line; True when something was cut. A crash
    tears only the last line: a bad line with complete lines after it is refused (a
    LatticeUserError naming it), and nothing is cut."""
    if not path.exists():
        return False
    lines, good = read_lines(path)
    if good == path.stat().st_size:
        return False
    with open(path, "r+b") as handle:
        handle.seek(good)
        if b"\n" in handle.read().rstrip(b"\n"):
            raise LatticeUserError(
                f"{path}:{len(lines) + 1}: not {what} (not JSON), and lines follow it; "
                "fix or remove that line"
            )
        handle.truncate(good)
    return True


@dataclass
class JournalState:
    """What the journal of a run folder says: where the run stands."""

    ops: list[dict[str, Any]] = field(default_factory=list)
    """The committed op lines of the main walk, in order."""
    branches: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """Branch id → its committed op lines, in order."""
    last_op_seq: int = 0
    """The highest op sequence number the main walk used (committed or failed)."""
    pending: dict[str | None, list[dict[str, Any]]] = field(default_factory=dict)
    """Model answers and agent tool lines recorded after the last committed op of each
    branch (None: the main walk): what its op in flight had already paid for or done."""
    provider_state: Any = None
    """The provider's state after the last answer (or failed op) that recorded one."""
    committed_provider_state: Any = None
    """The provider's state as of the last committed op (of any walk): where it stood
    when an op that failed after it started (None: no state recorded by then)."""
    usage: Any = None
    """The run's usage after the last op that called a model (committed, failed or halted)."""
    answers: dict[str, Any] | None = None
    """The answers still queued after the last committed ASK, of any walk (in journal
    order: branches and the main walk interleave)."""
    requests: int = 0
    """The ``request`` lines less the ``request_unsent`` ones: requests sent, answered
    or not."""
    received: list[dict[str, Any]] = field(default_factory=list)
    """Every model answer, in order (those in ``pending`` included)."""

    @property
    def last(self) -> dict[str, Any] | None:
        return self.ops[-1] if self.ops else None


def read_journal(folder: Path) -> JournalState | None:
    """The journal of ``folder``, or None for a folder written before journals existed."""
    path = folder / JOURNAL
    if not path.exists():
        return None
    lines, _ = read_lines(path)
    state = JournalState()
    for line in lines:
        kind = line.get("kind")
        branch = line.get("branch")
        seq = line.get("op_seq")
        if isinstance(seq, int) and branch is None:
            state.last_op_seq = max(state.last_op_seq, seq)
        if kind == "op":
            if branch is None:
                state.ops.append(line)
            else:
                state.branches.setdefault(str(branch), []).append(line)
            state.pending[branch] = []
            state.committed_provider_state = state.provider_state
            state.usage = line.get("usage", state.usage)
            if "answers" in line:
                state.answers = line["answers"]
        elif kind == "request":
            state.requests += 1
        elif kind == "request_unsent":
            state.requests -= 1
        elif kind == "answer":
            state.pending.setdefault(branch, []).append(line)
            state.received.append(line)
            if "provider_state" in line:
                state.provider_state = line["provider_state"]
        elif kind in ("tool_call", "tool_result", "tool_decision", "approval_request"):
            state.pending.setdefault(branch, []).append(line)
        elif kind == "op_failed":
            state.pending[branch] = []
            state.usage = line.get("usage", state.usage)
            if "provider_state" in line:
                state.provider_state = line["provider_state"]
    return state


def journaled_copy(folder: Path, name: str) -> str | None:
    """The text of the run file ``name`` as the journal of ``folder`` last recorded it (its
    last whole ``files`` line naming it), or None: no journal, or one that recorded no
    copy of it (a folder written before copies were journaled). Read from the end: a
    stopped run's copy of ``checkpoint.json`` is its last line."""
    try:
        with (folder / JOURNAL).open("rb") as file:
            size = file.seek(0, os.SEEK_END)
            window = _TAIL
            while True:
                start = max(0, size - window)
                file.seek(start)
                data = file.read(size - start)
                # the window's first line is cut (unless it starts the file)
                first = 0 if start == 0 else (data.find(b"\n") + 1 or len(data))
                found = _last_copy(data, first, name)
                if found is not None or start == 0:
                    return found
                window *= 8
    except OSError:
        return None


_TAIL = 1 << 16
"""Bytes of a journal's end read first when looking for a copy."""


def _last_copy(data: bytes, first: int, name: str) -> str | None:
    """``journaled_copy`` within the complete lines of ``data`` from offset ``first``."""
    end = data.rfind(b"\n")  # what follows the last newline is torn
    while end >= first:
        start = data.rfind(b"\n", first, end) + 1 or first
        raw = data[start:end]
        end = start - 1
        if b'"files"' not in raw:  # most lines: not parsed
            continue
        try:
            line = json.loads(raw)
        except (ValueError, RecursionError):
            continue
        if not isinstance(line, dict) or line.get("kind") != FILES:
            continue
        files = line.get("files")
        if isinstance(files, dict):
            text = files.get(name)
            if isinstance(text, str):
                return text
    return None


def open_append(path: Path) -> Any:
    """A text handle appending to ``path`` (created with the umask's permissions)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    return os.fdopen(fd, "a", encoding="utf-8")

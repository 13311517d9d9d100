"""``checkpoint.json``: what a run folder is, whose it is, and whether it can go on.

Written when a run starts (status ``running``) and again when it stops (``completed``,
``failed``, ``halted`` or ``interrupted``), each time copied into the journal first; the
journal's copy is what reaches the disk, so readers take it (``load_checkpoint``). It names the process that runs it, so that a
folder whose process died without a word (``kill -9``, a power cut) reads as
``interrupted``, and it records the digests of ``workflow.json`` and ``execir.json``, so
that a resume refuses a folder whose document was changed since.

Its shape is ``Checkpoint``, a ``TypedDict``: the record is JSON on disk and is read back
from folders of earlier versions whatever keys they hold, so it stays a plain dict (no
conversion when written or read, twice per run), typed for whoever builds or reads it.
It is built here only: ``started_checkpoint`` when a run starts, ``resumed_checkpoint``
when it goes on, ``stopped_checkpoint`` when it stops, ``rebuilt_checkpoint`` when a
folder lost it.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from pathlib import Path
from typing import Any, TypedDict, cast

from lattice.errors import LatticeUserError
from lattice.runs.folder import read_run_json
from lattice.runs.journal import journaled_copy

CHECKPOINT = "checkpoint.json"
DIGESTED = ("workflow.json", "execir.json")
STOPPED = frozenset({"completed", "failed", "halted", "interrupted"})
STARTING_FILES = ("execir.json", "input.json", "state_initial.json")
KEPT = ("run_id", "started_at", "initial_answers", "meta", "limits", "start_op", "parent")
"""What a run's checkpoint keeps from its start through every resume."""


class Owner(TypedDict):
    """The process writing a run."""

    pid: int
    host: str


class Checkpoint(TypedDict, total=False):
    """``checkpoint.json`` (docs/runs.md). Every run's has ``run_id`` and ``status``; a
    folder of an earlier version may lack any other key, so readers use ``get``."""

    run_id: str
    status: str
    """``running``, then ``completed``, ``failed``, ``halted`` or ``interrupted``."""
    owner: Owner
    started_at: str | None
    digests: dict[str, str]
    """``sha256:<hex>`` of each of ``DIGESTED`` when the run started or resumed."""
    initial_answers: dict[str, Any]
    meta: dict[str, Any]
    limits: dict[str, int]
    start_op: str
    """A re-run's first op (``lattice runs rerun --from``), with its ``parent`` run."""
    parent: dict[str, Any] | None
    # when it stopped: where the walk was and what it had
    next_op: str | None
    steps: int
    visits: dict[str, int]
    op_seq: int
    seq: int
    last_result: str | None
    usage: dict[str, Any]
    answers: dict[str, Any]
    provider_state: Any


"""What a run writes before ``checkpoint.json``, and what a resume rebuilds the run from
(with ``journal.jsonl``, which the folder holds from its start)."""


def started_checkpoint(
    run_id: str,
    folder: Path,
    *,
    started_at: str | None,
    answers: dict[str, Any],
    meta: dict[str, Any],
    limits: dict[str, int],
    start_op: str | None = None,
    parent: dict[str, Any] | None = None,
) -> Checkpoint:
    """The checkpoint of a run that has just started (``start_op``: a re-run's first op)."""
    checkpoint = Checkpoint(
        run_id=run_id,
        status="running",
        owner=owner(),
        started_at=started_at,
        digests=file_digests(folder),
        initial_answers=answers,
        meta=meta,
        limits=limits,
    )
    if start_op is not None:
        checkpoint["start_op"] = start_op
        checkpoint["parent"] = parent
    return checkpoint


def resumed_checkpoint(previous: Checkpoint, folder: Path) -> Checkpoint:
    """The checkpoint of a run that goes on: what ``previous`` kept from its start
    (``KEPT``), running in this process, with the digests of its files now."""
    kept: Checkpoint = {k: v for k, v in previous.items() if k in KEPT}  # type: ignore[assignment]
    return Checkpoint(**kept, status="running", owner=owner(), digests=file_digests(folder))


def stopped_checkpoint(
    running: Checkpoint,
    *,
    status: str,
    next_op: str | None,
    steps: int,
    visits: dict[str, int],
    op_seq: int,
    seq: int,
    last_result: str | None,
    usage: dict[str, Any],
    answers: dict[str, Any],
    provider_state: Any,
) -> Checkpoint:
    """The checkpoint of a run that stopped: the one it ran under, with where its walk
    was (``next_op``, the counters) and what it had, for a resume."""
    stopped: Checkpoint = {
        **running,
        "status": status,
        "next_op": next_op,
        "steps": steps,
        "visits": visits,
        "op_seq": op_seq,
        "seq": seq,
        "last_result": last_result,
        "usage": usage,
        "answers": answers,
        "provider_state": provider_state,
    }
    return stopped


def load_checkpoint(folder: Path) -> Checkpoint | None:
    """The checkpoint of the run folder ``folder`` as its journal last recorded it, else
    (a folder written before the journal held copies) its ``checkpoint.json``; None when
    neither can be read. The journal's copy comes first: a process killed between the
    two writes leaves the file behind the journal, never ahead of it, and a power cut
    may lose the file's latest version but not a synced journal line."""
    text = journaled_copy(folder, CHECKPOINT)
    if text is None:
        try:
            text = (folder / CHECKPOINT).read_text(encoding="utf-8")
        except OSError:
            return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return cast(Checkpoint, data) if isinstance(data, dict) else None


def read_checkpoint(folder: Path) -> Checkpoint:
    """The checkpoint of the run folder ``folder``, for a resume.

    A run killed before its first sync (a power cut) may leave ``checkpoint.json``
    missing, empty or torn, and its journal without a copy. When the files a resume
    needs are whole, the checkpoint is rebuilt from them (``rebuilt_checkpoint``);
    otherwise the error says the run never started."""
    copy = journaled_copy(folder, CHECKPOINT)
    if copy is not None:
        try:
            data = json.loads(copy)
        except ValueError:
            data = None
        if isinstance(data, dict):
            return cast(Checkpoint, data)
    path = folder / CHECKPOINT
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        if not any((folder / name).exists() for name in STARTING_FILES):
            raise LatticeUserError(
                f"{folder} is not a resumable run folder (no {CHECKPOINT})"
            ) from None
        return rebuilt_checkpoint(folder)
    except (OSError, ValueError):
        return rebuilt_checkpoint(folder)
    if not isinstance(data, dict):
        return rebuilt_checkpoint(folder)
    return cast(Checkpoint, data)


def rebuilt_checkpoint(folder: Path) -> Checkpoint:
    """The checkpoint of a run whose ``checkpoint.json`` was lost before its first sync,
    from its starting files: status ``interrupted``, no owner, no digests. What only the
    checkpoint kept (the options the run was started with, its limits, the answers
    given up front) is gone: a resume takes those from its own arguments."""
    if not (folder / "journal.jsonl").is_file() or not all(
        _whole_json(folder / name) for name in STARTING_FILES
    ):
        raise LatticeUserError(
            f"run {folder.name} never started: its {CHECKPOINT} is missing, empty or torn "
            f"and so is one of {', '.join(STARTING_FILES)} or journal.jsonl (the process "
            "stopped before the run's first files reached the disk); nothing was recorded, "
            "so there is nothing to resume: run the workflow again"
        )
    context = read_run_json(folder, "state_initial.json").get("ctx") or {}
    return Checkpoint(
        run_id=context.get("run_id") or folder.name,
        status="interrupted",
        started_at=context.get("started_at"),
        initial_answers={},
        meta={},
    )


def _whole_json(path: Path) -> bool:
    """Whether ``path`` holds a JSON object (not missing, empty or torn)."""
    try:
        return isinstance(json.loads(path.read_text(encoding="utf-8")), dict)
    except (OSError, ValueError):
        return False


def file_digests(folder: Path) -> dict[str, str]:
    """``sha256:<hex>`` of each of ``DIGESTED`` that the folder holds."""
    digests = {}
    for name in DIGESTED:
        path = folder / name
        if path.is_file():
            digests[name] = "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    return digests


def changed_files(folder: Path, checkpoint: Checkpoint) -> list[str]:
    """The digested files whose content no longer matches the checkpoint."""
    recorded = checkpoint.get("digests")
    if not isinstance(recorded, dict):
        return []  # written before digests existed
    now = file_digests(folder)
    return [name for name in DIGESTED if recorded.get(name) != now.get(name)]


def owner() -> Owner:
    """The process writing a run: ``{"pid", "host"}``."""
    return {"pid": os.getpid(), "host": socket.gethostname()}


def owner_alive(checkpoint: Checkpoint) -> bool:
    """Whether the process named in a ``running`` checkpoint still runs (on this host; a
    run owned by another host counts as alive, since it cannot be checked)."""
    who = checkpoint.get("owner")
    if not isinstance(who, dict) or not isinstance(who.get("pid"), int):
        return False
    if who.get("host") != socket.gethostname():
        return True
    try:
        os.kill(who["pid"], 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def status_of(checkpoint: Checkpoint | None) -> str:
    """``completed`` / ``failed`` / ``halted`` / ``interrupted`` / ``running``."""
    if not checkpoint:
        return "interrupted"
    status = checkpoint.get("status")
    if status in STOPPED:
        return str(status)
    return "running" if owner_alive(checkpoint) else "interrupted"

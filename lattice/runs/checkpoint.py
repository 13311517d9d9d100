"""``checkpoint.json``: what a run folder is, whose it is, and whether it can go on.

Written when a run starts (status ``running``) and again when it stops (``completed``,
``failed``, ``halted`` or ``interrupted``), each time copied into the journal first; the
journal's copy is what reaches the disk, so readers take it (``load_checkpoint``). It names the process that runs it, so that a
folder whose process died without a word (``kill -9``, a power cut) reads as
``interrupted``, and it records the digests of ``workflow.json`` and ``execir.json``, so
that a resume refuses a folder whose document was changed since.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from pathlib import Path
from typing import Any

from lattice.errors import LatticeUserError
from lattice.runs.folder import read_run_json
from lattice.runs.journal import journaled_copy

CHECKPOINT = "checkpoint.json"
DIGESTED = ("workflow.json", "execir.json")
STOPPED = frozenset({"completed", "failed", "halted", "interrupted"})
STARTING_FILES = ("execir.json", "input.json", "state_initial.json")
"""What a run writes before ``checkpoint.json``, and what a resume rebuilds the run from
(with ``journal.jsonl``, which the folder holds from its start)."""


def load_checkpoint(folder: Path) -> dict[str, Any] | None:
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
    return data if isinstance(data, dict) else None


def read_checkpoint(folder: Path) -> dict[str, Any]:
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
            return data
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
    return data


def rebuilt_checkpoint(folder: Path) -> dict[str, Any]:
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
    return {
        "run_id": context.get("run_id") or folder.name,
        "status": "interrupted",
        "started_at": context.get("started_at"),
        "initial_answers": {},
        "meta": {},
    }


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


def changed_files(folder: Path, checkpoint: dict[str, Any]) -> list[str]:
    """The digested files whose content no longer matches the checkpoint."""
    recorded = checkpoint.get("digests")
    if not isinstance(recorded, dict):
        return []  # written before digests existed
    now = file_digests(folder)
    return [name for name in DIGESTED if recorded.get(name) != now.get(name)]


def owner() -> dict[str, Any]:
    """The process writing a run: ``{"pid", "host"}``."""
    return {"pid": os.getpid(), "host": socket.gethostname()}


def owner_alive(checkpoint: dict[str, Any]) -> bool:
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


def status_of(checkpoint: dict[str, Any] | None) -> str:
    """``completed`` / ``failed`` / ``halted`` / ``interrupted`` / ``running``."""
    if not checkpoint:
        return "interrupted"
    status = checkpoint.get("status")
    if status in STOPPED:
        return str(status)
    return "running" if owner_alive(checkpoint) else "interrupted"

"""Reading a run folder back: its JSON files, for resume, views and export."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lattice.errors import LatticeUserError
from lattice.files import atomic_write_text
from lattice.runs.journal import journaled_copy
from lattice.runs.store import DURABLE_FILES


def read_run_json(folder: Path, name: str) -> Any:
    """A JSON file of a run folder; one that a power cut left missing or torn is read
    from the journal's copy (``journaled_copy``) when there is one; otherwise a missing
    or broken file is a LatticeUserError."""
    path = folder / name
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        copy = _copy(folder, name)
        if copy is None:
            raise LatticeUserError(f"{folder} is not a resumable run folder (no {name})") from None
        return copy
    except (OSError, json.JSONDecodeError) as exc:
        copy = _copy(folder, name)
        if copy is None:
            raise LatticeUserError(f"cannot read {path}: {exc}") from exc
        return copy


def load_run_json(folder: Path, name: str) -> Any:
    """``read_run_json`` for views: None instead of an error when neither the file nor a
    journal copy of it can be read."""
    try:
        return read_run_json(folder, name)
    except LatticeUserError:
        return None


def _copy(folder: Path, name: str) -> Any:
    text = journaled_copy(folder, name)
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def restore_journaled_files(folder: Path) -> list[str]:
    """Write back, from the journal's copies, the starting files of ``folder`` that a
    power cut left missing or torn (they are never forced to disk themselves: the journal
    is); the names written. Called by the folder's owner before a resume reads it."""
    restored = []
    for name in sorted(DURABLE_FILES - {"checkpoint.json"}):
        path = folder / name
        try:
            json.loads(path.read_text(encoding="utf-8"))
            continue
        except (OSError, ValueError):
            pass
        text = journaled_copy(folder, name)
        if text is not None:
            atomic_write_text(path, text, durable=True)
            restored.append(name)
    return restored

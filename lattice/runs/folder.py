"""Reading a run folder back: its JSON files, for resume, views and export."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lattice.errors import LatticeUserError


def read_run_json(folder: Path, name: str) -> Any:
    """A JSON file of a run folder; a missing or broken one is a LatticeUserError."""
    path = folder / name
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise LatticeUserError(f"{folder} is not a resumable run folder (no {name})") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise LatticeUserError(f"cannot read {path}: {exc}") from exc

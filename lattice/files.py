"""File writes for run folders and command outputs: atomic (temp file + rename), with the
permissions the user's umask gives, optionally forced to disk."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from lattice.errors import LatticeUserError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


UMASK = _umask()
"""The process's umask, read once at import (reading it means setting it)."""


def atomic_write_text(path: Path, text: str, *, durable: bool = False) -> None:
    """Write ``text`` to ``path`` so readers see the old file or the new one, never half.

    The file gets the mode a plain ``open`` would give (0666 less the umask);
    ``durable`` forces it and its directory entry to disk before returning.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~UMASK)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if durable:
        sync_directory(path.parent)


def sync_directory(path: Path) -> None:
    """Force a directory's entries (files created, renamed) to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_output_file(path: Path, text: str) -> None:
    """Write a command's output file (``-o FILE``); a path that cannot be written is a
    LatticeUserError with one clear line, and a missing parent directory is not created."""
    if not path.parent.is_dir():
        raise LatticeUserError(f"cannot write {path}: the directory {path.parent} does not exist")
    if path.is_dir():
        raise LatticeUserError(f"cannot write {path}: it is a directory")
    try:
        atomic_write_text(path, text)
    except OSError as exc:
        raise LatticeUserError(f"cannot write {path}: {exc.strerror or exc}") from None

"""File writes for run folders and command outputs: atomic (temp file + rename), with the
permissions the user's umask gives, optionally forced to disk.

This module is the one place Lattice forces anything to disk (``sync_file``,
``sync_data``, ``sync_directory``); ``tests/runs/test_sync_count.py`` counts the syncs a
run makes through it, and ``tests/test_architecture.py`` holds that no other module
calls ``os.fsync`` or ``os.fdatasync``."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

from lattice.errors import LatticeUserError


def atomic_write_text(path: Path, text: str, *, durable: bool = False) -> None:
    """Write ``text`` to ``path`` so readers see the old file or the new one, never half.

    The file gets the mode a plain ``open`` would give (0666 less the umask);
    ``durable`` forces it and its directory entry to disk before returning.
    """
    write_replacing(path, text, sync=durable)
    if durable:
        sync_directory(path.parent)


_temporary = itertools.count()
"""Numbers the temporary files of this process (with its pid and a random part, unique)."""
_TEMPORARY_ATTEMPTS = 100


def write_replacing(path: Path, text: str, *, sync: bool = False) -> None:
    """Write ``text`` to a new file beside ``path`` and rename it over ``path``.

    ``sync`` forces the data to disk before the rename (the name never points at data
    that is not there), not the directory entry: see ``sync_directory``.

    The temporary file is created with ``O_EXCL`` and mode 0666, so the umask applies as
    for a plain ``open``; a missing parent directory is made.
    """
    data = text.encode("utf-8")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    made_parent = False
    for _ in range(_TEMPORARY_ATTEMPTS):
        tmp = (
            f"{path.parent}/.{path.name}.{os.getpid()}-{next(_temporary)}-{os.urandom(3).hex()}.tmp"
        )
        try:
            fd = os.open(tmp, flags, 0o666)
            break
        except FileExistsError:
            continue
        except FileNotFoundError:
            if made_parent:
                raise
            path.parent.mkdir(parents=True, exist_ok=True)
            made_parent = True
    else:
        raise FileExistsError(f"no free temporary name beside {path}")
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if sync:
            sync_file(fd)
    except BaseException:
        os.close(fd)
        Path(tmp).unlink(missing_ok=True)
        raise
    os.close(fd)
    try:
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def sync_file(fd: int) -> None:
    """Force an open file's data and metadata to disk (``fsync``)."""
    os.fsync(fd)


def sync_data(fd: int) -> None:
    """Force an open file's data to disk, with the metadata needed to read it back (its
    size), not its times (``fdatasync``: what an append-only file needs)."""
    os.fdatasync(fd)


def sync_directory(path: Path) -> None:
    """Force a directory's entries (files created, renamed) to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        sync_file(fd)
    finally:
        os.close(fd)


def write_output_file(path: Path, text: str) -> None:
    """Write a command's output file (``-o FILE``); a path that cannot be written is a
    LatticeUserError with one clear line, and a missing parent directory is not created."""
    if path.parent.exists() and not path.parent.is_dir():
        raise LatticeUserError(f"cannot write {path}: {path.parent} is not a directory")
    if not path.parent.is_dir():
        raise LatticeUserError(f"cannot write {path}: the directory {path.parent} does not exist")
    if path.is_dir():
        raise LatticeUserError(f"cannot write {path}: it is a directory")
    try:
        atomic_write_text(path, text)
    except OSError as exc:
        raise LatticeUserError(f"cannot write {path}: {exc.strerror or exc}") from None

"""Owning a run folder: one process at a time writes it.

A process that runs or resumes a run first takes an exclusive ``flock`` on the folder's
``owner.lock`` and holds it, through an open file, until the run stops. The claim is
atomic, so of two resumes started together exactly one goes on; the other is refused
before it has read or written anything. The kernel drops the lock when its process dies
(``kill -9`` included), so a killed run's folder is free at once. ``flock`` locks belong
to an open file, not to a process: a server that runs many runs holds one lock per run,
and cannot resume a run it is running already.

The lock file holds the owner, ``{"pid", "host", "since"}``, written by each new owner,
for the message that refuses the others. It stays in the folder after the run: removing
it would let two processes lock two different files of the same name.
"""

from __future__ import annotations

import json
import os
import socket
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lattice.errors import LatticeUserError

try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover - Windows: no lock, folders are not shared
    fcntl = None  # type: ignore[assignment]

LOCK = "owner.lock"
"""The file of a run folder whose ``flock`` its owner holds."""


class RunOwned(LatticeUserError):
    """The run folder is owned by another process (or another run of this one): it is
    running there. ``owner`` is what that process wrote of itself, when it is known."""

    def __init__(self, folder: Path, owner: dict[str, Any] | None) -> None:
        self.folder = folder
        self.owner = owner
        if owner:
            who = f"process {owner.get('pid')} on {owner.get('host')}"
            if owner.get("since"):
                who += f", since {owner['since']}"
        else:
            who = "another process"
        super().__init__(
            f"run {folder.name} is running ({who}); nothing was done: wait for it to stop "
            "(or stop it), then resume"
        )


class Ownership:
    """This process's hold on one run folder, from ``claim`` until ``release``."""

    def __init__(self, folder: Path, fd: int) -> None:
        self.folder = folder
        self._fd: int | None = fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Let the folder go (closing the lock file drops the lock); idempotent."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def claim(folder: Path) -> Ownership:
    """Take the run folder ``folder`` for this process, or raise ``RunOwned`` naming the
    process that holds it."""
    path = folder / LOCK
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
    except FileNotFoundError:
        raise LatticeUserError(f"{folder} is not a run folder") from None
    except OSError as exc:
        raise LatticeUserError(f"cannot open {path}: {exc.strerror}") from None
    if fcntl is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _written_owner(fd) or _checkpoint_owner(folder)
            os.close(fd)
            raise RunOwned(folder, holder) from None
        except OSError as exc:
            os.close(fd)
            raise LatticeUserError(f"cannot lock {path}: {exc.strerror}") from None
    since = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    me = {"pid": os.getpid(), "host": socket.gethostname(), "since": since}
    data = json.dumps(me).encode("utf-8")
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
    except OSError:
        pass  # the lock is what counts; the name is only for messages
    return Ownership(folder, fd)


def _written_owner(fd: int) -> dict[str, Any] | None:
    """The owner the lock file names (None while its owner has not written it yet)."""
    try:
        data = json.loads(os.pread(fd, 4096, 0).decode("utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("pid"), int) else None


def _checkpoint_owner(folder: Path) -> dict[str, Any] | None:
    """The owner ``checkpoint.json`` names, if it can be read."""
    try:
        who = json.loads((folder / "checkpoint.json").read_text(encoding="utf-8"))["owner"]
    except (OSError, ValueError, TypeError, KeyError):
        return None
    return who if isinstance(who, dict) else None

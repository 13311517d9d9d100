"""What a workspace holds, measured around a sandboxed command: how many entries, how
many bytes on disk, and where its ``.git`` entries are.

The shell compares a measure taken before a command with measures taken while it runs
and after it ends: a command that writes more than its limit into the workspace is
stopped, and a ``.git`` it made (a nested repository, or a ``.git`` file pointing at one)
is removed, since git would run its hooks and ``core.fsmonitor`` on the host, outside the
sandbox, the next time the user runs git there; so is the ``HEAD`` of a folder it made
into a bare repository (git takes such a folder for a repository when run inside it).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path

GIT = ".git"
HEAD = "HEAD"
BARE_RUNS = ("config", "hooks")
"""What git runs commands from in a repository."""


@dataclass(frozen=True, slots=True)
class Usage:
    """One measure of a workspace: entries (files, folders, links), bytes of disk its
    files take (blocks, so a sparse file counts what it really uses), the ``.git``
    entries (relative paths) and how long measuring took."""

    entries: int
    bytes: int
    gits: frozenset[str]
    seconds: float = 0.0
    bare: frozenset[str] = frozenset()
    """Folders git takes for a repository of their own (``is_bare_repository``), by
    relative path (``.``: the root)."""

    def grown_past(self, before: Usage, max_bytes: int, max_entries: int) -> str | None:
        """Why this measure is over the limits of growth since ``before`` (None: it is not)."""
        added_bytes = self.bytes - before.bytes
        added_entries = self.entries - before.entries
        if added_bytes > max_bytes:
            return f"{_mb(added_bytes)} written into the workspace, over the {_mb(max_bytes)} limit"
        if added_entries > max_entries:
            return f"{added_entries} files made in the workspace, over the limit of {max_entries}"
        return None


def measure(root: Path, known_gits: frozenset[str] | None = None) -> Usage:
    """Walk ``root`` without following links or entering a ``.git`` of ``known_gits``
    (without it: any ``.git``). A ``.git`` a command made is entered: what it writes
    there counts toward its limits until the ``.git`` is removed after it."""
    started = time.perf_counter()
    entries = 0
    used = 0
    gits: set[str] = set()
    bare: set[str] = set()
    pending = [root]
    while pending:
        folder = pending.pop()
        names: set[str] = set()
        with contextlib.suppress(OSError), os.scandir(folder) as listing:
            for entry in listing:
                entries += 1
                names.add(entry.name)
                if entry.name == GIT:
                    relative = Path(entry.path).relative_to(root).as_posix()
                    gits.add(relative)
                    if known_gits is None or relative in known_gits:
                        continue
                with contextlib.suppress(OSError):
                    info = entry.stat(follow_symlinks=False)
                    used += info.st_blocks * 512
                    if stat.S_ISDIR(info.st_mode):
                        pending.append(Path(entry.path))
        if is_bare_repository(names):
            bare.add(folder.relative_to(root).as_posix())
    seconds = time.perf_counter() - started
    return Usage(entries, used, frozenset(gits), seconds, frozenset(bare))


def is_bare_repository(names: set[str]) -> bool:
    """Whether a folder holding ``names`` is one git takes for a repository when run in
    it (its config, hooks and pager then apply): a ``HEAD`` with ``objects`` and ``refs``,
    or with a ``commondir`` naming where they are (a worktree's)."""
    return HEAD in names and ({"objects", "refs"} <= names or "commondir" in names)


def remove_new_gits(root: Path, before: Usage, after: Usage) -> list[str]:
    """Remove each ``.git`` in ``after`` that ``before`` did not have, and the ``HEAD`` of
    each folder that became a bare repository (the rest of it stays); their paths."""
    made = after.gits - before.gits
    made |= {(Path(folder) / HEAD).as_posix() for folder in after.bare - before.bare}
    return [relative for relative in sorted(made) if _remove_git(root / relative)]


def protected(usage: Usage) -> frozenset[str]:
    """What a command may not change, by relative path: each ``.git``, and the config and
    hooks of each bare repository."""
    bare = ((Path(folder) / name).as_posix() for folder in usage.bare for name in BARE_RUNS)
    return usage.gits | frozenset(bare)


def _remove_git(path: Path) -> bool:
    """Remove ``path`` (a ``.git`` folder, file or link) from inside its own folder, opened
    and checked to be the folder it was found in: a command running alongside that swapped
    a folder on the way for a link cannot lead the removal elsewhere."""
    try:
        folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        if os.readlink(f"/proc/self/fd/{folder}") != str(path.parent):
            return False
        info = os.lstat(path.name, dir_fd=folder)
        if stat.S_ISDIR(info.st_mode):
            shutil.rmtree(path.name, dir_fd=folder)
        else:
            os.unlink(path.name, dir_fd=folder)
    except FileNotFoundError:
        return False
    finally:
        os.close(folder)
    return True


def _mb(n: int) -> str:
    return f"{n / 1_000_000:.1f} MB"

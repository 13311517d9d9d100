"""Confining a path a model gives to the granted workspace root.

A path may be relative to the root or absolute inside it. It is refused when it names a
parent (``..``), leads outside the root once symbolic links are followed, or reaches into
``.git/`` (a repository's own database is not the agent's to read or change). Files are
opened without following a final symbolic link, and what was opened is checked again
(by its descriptor) to be inside the root, so a folder swapped for a link between the
check and the open (by a command running at the same time) cannot lead out either.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path, PurePosixPath

from lattice.workspace.usage import is_bare_repository


class ToolRefused(Exception):
    """A tool call the model can correct: the message says what was wrong."""


PROTECTED_DIRS = frozenset({".git"})


class Workspace:
    """The granted root, and the checks every file tool makes against it."""

    def __init__(self, root: Path) -> None:
        self.root = Path(os.path.realpath(root))
        if not self.root.is_dir():
            raise ValueError(f"the workspace {root} is not a directory")
        self.pending: dict[str, str] = {}
        """Patch-only: the text of each file the agent changed and that was not written
        (path as ``show`` gives it); the file tools read these instead of the disk."""

    def pending_text(self, path: Path) -> str | None:
        """The agent's own unwritten text of ``path`` (patch-only), or None."""
        return self.pending.get(self.show(path)) if self.pending else None

    def resolve(self, given: str, *, must_exist: bool = True) -> Path:
        """The real path ``given`` names inside the root; ToolRefused when it is not one."""
        if not isinstance(given, str) or not given.strip():
            raise ToolRefused("give a path: relative to the workspace root, or absolute inside it")
        if "\x00" in given:
            raise ToolRefused("a path cannot contain a NUL character")
        text = given.strip()
        if ".." in PurePosixPath(text).parts:
            raise ToolRefused(
                f"{text!r}: paths may not name a parent ('..'); stay inside the workspace"
            )
        candidate = Path(text) if os.path.isabs(text) else self.root / text
        real = Path(os.path.realpath(candidate))
        if not self.contains(real):
            raise ToolRefused(
                f"{text!r} is outside the workspace ({self.root}); use a path inside it"
            )
        relative = real.relative_to(self.root)
        if PROTECTED_DIRS.intersection(relative.parts):
            raise ToolRefused(f"{text!r} is inside .git/, which agents may not read or change")
        if must_exist and not real.exists() and self.pending_text(real) is None:
            raise ToolRefused(f"{self.show(real)} does not exist")
        return real

    def check_opened(self, fd: int, path: Path) -> None:
        """Close ``fd`` and refuse when what it opened is not inside the root (a folder on
        the way to ``path`` became a link after ``resolve`` checked it)."""
        real = Path(os.readlink(f"/proc/self/fd/{fd}"))
        if not self.contains(real) or PROTECTED_DIRS.intersection(
            real.relative_to(self.root).parts
        ):
            os.close(fd)
            raise ToolRefused(f"{self.show(path)} changed while it was opened; try again")

    def open_folder(self, path: Path) -> int:
        """A descriptor on the folder ``path`` (a real path ``resolve`` gave), checked
        to be inside the root once opened."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError as exc:
            raise ToolRefused(f"cannot open {self.show(path)}: {exc.strerror}") from None
        self.check_opened(fd, path)
        return fd

    def make_folder(self, path: Path) -> int:
        """A descriptor on the folder ``path`` (a real path ``resolve`` gave), made with
        its missing parents where needed.

        Each folder on the way is made and opened relative to its parent's descriptor,
        never following a link, starting from the root: a folder a command swaps for a
        link meanwhile ends the walk (ToolRefused) instead of leading it out."""
        parts = path.relative_to(self.root).parts
        if PROTECTED_DIRS.intersection(parts):
            raise ToolRefused(f"{self.show(path)} is inside .git/, which agents may not change")
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
        fd = os.open(self.root, flags)
        try:
            for name in parts:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o755, dir_fd=fd)
                try:
                    child = os.open(name, flags, dir_fd=fd)
                except OSError as exc:
                    raise ToolRefused(
                        f"cannot open {self.show(path)}: {exc.strerror} (a folder on its way "
                        "changed while it was made); try again"
                    ) from None
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        self.check_opened(fd, path)
        return fd

    def contains(self, path: Path) -> bool:
        return path == self.root or self.root in path.parents

    def show(self, path: Path) -> str:
        """``path`` as the model sees it: relative to the root ('.' for the root)."""
        relative = path.relative_to(self.root).as_posix()
        return relative or "."

    def walk(self, start: Path) -> list[Path]:
        """Every file under ``start``, sorted, not following links, skipping ``.git``."""
        found: list[Path] = []
        for folder, dirs, files in os.walk(start, followlinks=False):
            dirs[:] = sorted(d for d in dirs if d not in PROTECTED_DIRS)
            found.extend(Path(folder) / name for name in sorted(files))
        return found + [path for path in self.pending_files(start) if not path.exists()]

    def refuse_repository(self, path: Path) -> None:
        """Refuse writing ``path`` when a folder on its way from the root is, or would
        become with it, one git takes for a bare repository (``usage.is_bare_repository``):
        git runs that folder's config and hooks on the host when the user runs it there."""
        folder, child = path.parent, path.name
        while self.contains(folder):
            names = {child}
            with contextlib.suppress(OSError):
                names.update(os.listdir(folder))
            names.update(p.relative_to(folder).parts[0] for p in self.pending_files(folder))
            if is_bare_repository(names):
                raise ToolRefused(
                    f"{self.show(path)}: {self.show(folder)} is, or would become, a git "
                    "repository (HEAD with objects/ and refs/), which agents may not make "
                    "or change"
                )
            if folder == self.root:
                return
            folder, child = folder.parent, folder.name

    def pending_files(self, start: Path) -> list[Path]:
        """The pending files under ``start`` (patch-only), sorted."""
        paths = (self.root / name for name in sorted(self.pending))
        return [path for path in paths if start == path or start in path.parents]


def open_for_reading(workspace: Workspace, path: Path, *, dir_fd: int | None = None) -> int:
    """A descriptor on ``path`` inside the workspace (a name in ``dir_fd`` when given),
    refusing a final symbolic link, anything not a file, and a file that turned out to
    be outside the root once opened."""
    try:
        fd = os.open(
            path.name if dir_fd is not None else path,
            os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK,
            dir_fd=dir_fd,
        )
    except OSError as exc:
        raise ToolRefused(f"cannot open {path.name}: {exc.strerror}") from None
    workspace.check_opened(fd, path)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ToolRefused(f"{path.name} is not a regular file")
    return fd

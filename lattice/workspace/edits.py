"""The tools that change files: Edit, MultiEdit and Write.

Each works in two steps, so that a change survives a crash exactly once: ``plan`` reads
the file and returns the change (a unified diff, digests of the file before and after,
and the new text) without touching anything; ``apply_change`` writes it. Applying is
idempotent: a file that already has the ``after`` digest is left alone, one that has the
``before`` digest is replaced atomically, and any other content is a conflict. In
patch-only mode nothing is applied and the diff is the whole result.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import os
import stat
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

from lattice.files import sync_file
from lattice.tools.toolset import FileChange
from lattice.workspace.files import read_text
from lattice.workspace.grants import WorkspaceGrant
from lattice.workspace.paths import ToolRefused, Workspace


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_digest(path: Path, *, folder_fd: int | None = None) -> str | None:
    """sha256 of the file's bytes (``path.name`` in ``folder_fd`` when given); None when
    it does not exist. A symbolic link or anything not a regular file is refused."""
    try:
        fd = os.open(
            path.name if folder_fd is not None else path,
            os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK,
            dir_fd=folder_fd,
        )
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ToolRefused(f"cannot open {path.name}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise ToolRefused(f"{path.name} is not a regular file")
        return digest(handle.read())


def plan_edit(workspace: Workspace, grant: WorkspaceGrant, args: dict[str, Any]) -> FileChange:
    """Edit: replace ``old_string`` by ``new_string`` (once, or everywhere with ``replace_all``)."""
    edit = {k: args.get(k) for k in ("old_string", "new_string", "replace_all")}
    return _plan_edits(workspace, grant, _path_arg(args), [edit])


def plan_multi_edit(
    workspace: Workspace, grant: WorkspaceGrant, args: dict[str, Any]
) -> FileChange:
    """MultiEdit: several edits of one file, in order, all or none."""
    edits = args.get("edits")
    if not isinstance(edits, list) or not edits or not all(isinstance(e, dict) for e in edits):
        raise ToolRefused("'edits' must be a non-empty list of {old_string, new_string} objects")
    return _plan_edits(workspace, grant, _path_arg(args), edits)


def plan_write(workspace: Workspace, grant: WorkspaceGrant, args: dict[str, Any]) -> FileChange:
    """Write: the whole file (created, or replaced)."""
    content = args.get("content")
    if not isinstance(content, str):
        raise ToolRefused("'content' must be a string: the file's whole new text")
    if len(content.encode("utf-8")) > grant.max_file_bytes:
        raise ToolRefused(f"the content is over the {grant.max_file_bytes}-byte file limit")
    path = workspace.resolve(_path_arg(args), must_exist=False)
    if path.is_dir():
        raise ToolRefused(f"{workspace.show(path)} is a directory")
    workspace.refuse_repository(path)
    exists = path.exists() or workspace.pending_text(path) is not None
    old = read_text(workspace, grant, path) if exists else None
    return _change(workspace, path, old, content)


def _plan_edits(
    workspace: Workspace, grant: WorkspaceGrant, given: str, edits: list[dict[str, Any]]
) -> FileChange:
    path = workspace.resolve(given)
    if path.is_dir():
        raise ToolRefused(f"{workspace.show(path)} is a directory")
    workspace.refuse_repository(path)
    old = read_text(workspace, grant, path)
    text = old
    for number, edit in enumerate(edits, 1):
        where = f"edit {number}: " if len(edits) > 1 else ""
        before, after = edit.get("old_string"), edit.get("new_string")
        if not isinstance(before, str) or not isinstance(after, str):
            raise ToolRefused(f"{where}old_string and new_string must be strings")
        if not before:
            raise ToolRefused(f"{where}old_string is empty: use Write to create a file")
        if before == after:
            raise ToolRefused(f"{where}old_string and new_string are the same: nothing to change")
        found = text.count(before)
        if found == 0:
            raise ToolRefused(
                f"{where}old_string was not found in {workspace.show(path)}; Read the file and "
                "copy the text exactly, whitespace included"
            )
        if found > 1 and not edit.get("replace_all"):
            raise ToolRefused(
                f"{where}old_string occurs {found} times in {workspace.show(path)}; give more "
                "context to make it unique, or set replace_all"
            )
        text = (
            text.replace(before, after)
            if edit.get("replace_all")
            else text.replace(before, after, 1)
        )
    return _change(workspace, path, old, text)


def _change(workspace: Workspace, path: Path, old: str | None, new: str) -> FileChange:
    shown = workspace.show(path)
    diff = "".join(
        difflib.unified_diff(
            (old or "").splitlines(keepends=True),
            new.splitlines(keepends=True),
            fromfile="/dev/null" if old is None else f"a/{shown}",
            tofile=f"b/{shown}",
        )
    )
    before = None
    if old is not None and workspace.pending_text(path) is not None:
        before = digest(old.encode("utf-8"))  # patch-only: after the agent's earlier change
    elif old is not None:
        folder = workspace.open_folder(path.parent)
        try:
            before = file_digest(path, folder_fd=folder)
        finally:
            os.close(folder)
    return FileChange(
        path=shown,
        diff=diff,
        before=before,
        after=digest(new.encode("utf-8")),
        applied=False,
        content=new,
    )


def apply_change(workspace: Workspace, change: FileChange) -> FileChange:
    """Write ``change`` into the workspace, once: a no-op when the file already holds it.

    Raises ToolRefused when the file changed since the change was planned (a conflict).
    """
    path = workspace.resolve(change.path, must_exist=False)
    # Everything below works in the folder's descriptor, made and opened one folder at a
    # time from the root: a folder swapped for a link meanwhile cannot lead the write out.
    folder = workspace.make_folder(path.parent)
    try:
        current = file_digest(path, folder_fd=folder)
        if current == change.after:
            return replace(change, applied=True)
        if current != change.before:
            raise ToolRefused(
                f"{change.path} changed since this edit was planned; Read it again and redo "
                "the edit"
            )
        assert change.content is not None
        _write_atomically(folder, path.name, change.content.encode("utf-8"), current is not None)
    finally:
        os.close(folder)
    return replace(change, applied=True)


def _write_atomically(folder: int, name: str, data: bytes, exists: bool) -> None:
    """Replace ``name`` in the folder ``folder`` by ``data`` (keeping its mode), atomically."""
    mode = os.stat(name, dir_fd=folder).st_mode & 0o7777 if exists else 0o644
    temporary = f".{name}.{uuid.uuid4().hex[:12]}.lattice"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    fd = os.open(temporary, flags, 0o600, dir_fd=folder)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fchmod(handle.fileno(), mode)
            sync_file(handle.fileno())
        os.replace(temporary, name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary, dir_fd=folder)
        raise


def _path_arg(args: dict[str, Any]) -> str:
    value = args.get("file_path")
    if not isinstance(value, str) or not value:
        raise ToolRefused("'file_path' must be a non-empty string")
    return value

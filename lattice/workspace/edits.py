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
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from lattice.tools.toolset import FileChange
from lattice.workspace.files import read_text
from lattice.workspace.grants import WorkspaceGrant
from lattice.workspace.paths import ToolRefused, Workspace


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_digest(path: Path) -> str | None:
    """sha256 of the file's bytes; None when it does not exist."""
    try:
        return digest(path.read_bytes())
    except FileNotFoundError:
        return None


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
    old = read_text(workspace, grant, path) if path.exists() else None
    return _change(workspace, path, old, content)


def _plan_edits(
    workspace: Workspace, grant: WorkspaceGrant, given: str, edits: list[dict[str, Any]]
) -> FileChange:
    path = workspace.resolve(given)
    if path.is_dir():
        raise ToolRefused(f"{workspace.show(path)} is a directory")
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
    before = file_digest(path) if old is not None else None
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
    current = file_digest(path)
    if current == change.after:
        return replace(change, applied=True)
    if current != change.before:
        raise ToolRefused(
            f"{change.path} changed since this edit was planned; Read it again and redo the edit"
        )
    assert change.content is not None
    path.parent.mkdir(parents=True, exist_ok=True)
    workspace.resolve(change.path, must_exist=False)  # the made folders are still inside
    mode = path.stat().st_mode & 0o7777 if current is not None else 0o644
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".lattice")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(change.content.encode("utf-8"))
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    return replace(change, applied=True)


def _path_arg(args: dict[str, Any]) -> str:
    value = args.get("file_path")
    if not isinstance(value, str) or not value:
        raise ToolRefused("'file_path' must be a non-empty string")
    return value

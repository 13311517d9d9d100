"""The read-only tools: Read, LS, Glob and Grep, each confined to the workspace.

Answers are capped (bytes, entries, matches) and say so when cut; binary files and
files over the size limit are refused; a Grep pattern runs with a time limit per file,
so a pattern with catastrophic backtracking cannot stall a run.
"""

from __future__ import annotations

import bisect
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import regex

from lattice.patterns import PatternError, compile_pattern, glob_source
from lattice.workspace.grants import WorkspaceGrant
from lattice.workspace.paths import ToolRefused, Workspace, open_for_reading

BINARY_SNIFF_BYTES = 8192
MAX_LINE_CHARS = 2000
DEFAULT_READ_LINES = 2000
GREP_TIMEOUT_PER_FILE = 1.0
"""Seconds one Grep pattern may spend on one file."""


class Glob:
    """A glob compiled to a regular expression, matched against a shared deadline.

    Several ``*`` or ``**`` in one glob backtrack polynomially (``**a**a**a**b`` over a
    long path runs for hours), so every match runs with the time left before
    ``deadline`` (a ``time.monotonic()`` value); past it, the call is refused.
    """

    def __init__(self, glob: str, deadline: float) -> None:
        self.glob = glob
        self.compiled = regex.compile(glob_regex(glob).pattern)
        self.deadline = deadline

    def fullmatch(self, text: str) -> bool:
        left = self.deadline - time.monotonic()
        try:
            if left <= 0:
                raise TimeoutError
            return self.compiled.fullmatch(text, timeout=left) is not None
        except TimeoutError:
            raise ToolRefused(
                f"the glob {self.glob!r} ran out of time; simplify it (several '*' or '**' "
                "in one glob backtrack)"
            ) from None


def read_text(workspace: Workspace, grant: WorkspaceGrant, path: Path) -> str:
    """The text of a workspace file, refusing large and binary files; in patch-only mode,
    the agent's own pending text of it when it changed it."""
    pending = workspace.pending_text(path)
    if pending is not None:
        return pending
    fd = open_for_reading(workspace, path)
    with os.fdopen(fd, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > grant.max_file_bytes:
            raise ToolRefused(
                f"{workspace.show(path)} is {_size(size)}, over the {_size(grant.max_file_bytes)} "
                "limit for files agents read or change"
            )
        data = handle.read(grant.max_file_bytes + 1)
    if b"\x00" in data[:BINARY_SNIFF_BYTES]:
        raise ToolRefused(f"{workspace.show(path)} is a binary file; only text files can be read")
    return data.decode("utf-8", errors="replace")


def read(workspace: Workspace, grant: WorkspaceGrant, args: dict[str, Any]) -> str:
    """Read: numbered lines of one file, from ``offset`` (1-based), ``limit`` lines."""
    path = workspace.resolve(_text(args, "file_path"))
    if path.is_dir():
        raise ToolRefused(f"{workspace.show(path)} is a directory: list it with LS")
    offset = _count(args, "offset", 1)
    limit = _count(args, "limit", DEFAULT_READ_LINES)
    lines = read_text(workspace, grant, path).splitlines()
    if not lines:
        return f"{workspace.show(path)} is empty"
    if offset > len(lines):
        return f"{workspace.show(path)} has {len(lines)} lines; offset {offset} is past its end"
    out: list[str] = []
    used = 0
    end = min(len(lines), offset - 1 + limit)
    for number in range(offset, end + 1):
        line = lines[number - 1]
        if len(line) > MAX_LINE_CHARS:
            line = line[:MAX_LINE_CHARS] + " [line cut]"
        entry = f"{number:>6}\t{line}"
        used += len(entry.encode("utf-8")) + 1
        if used > grant.max_read_bytes:
            out.append(f"[cut at {grant.max_read_bytes} bytes: read on with offset={number}]")
            break
        out.append(entry)
    else:
        if end < len(lines):
            out.append(f"[{len(lines) - end} more lines: read on with offset={end + 1}]")
    return "\n".join(out)


def list_dir(workspace: Workspace, grant: WorkspaceGrant, args: dict[str, Any]) -> str:
    """LS: the entries of one directory (folders end in ``/``), minus ``ignore`` globs."""
    path = workspace.resolve(args.get("path") or ".")
    if not path.is_dir():
        raise ToolRefused(f"{workspace.show(path)} is not a directory")
    deadline = time.monotonic() + grant.tool_timeout / 2
    ignore = [Glob(p, deadline) for p in _strings(args, "ignore")]
    entries = []
    names = {
        entry.name + ("/" if entry.is_dir(follow_symlinks=False) else "")
        for entry in os.scandir(path)
    }
    for pending in workspace.pending_files(path):  # files only the agent's patches create
        first = pending.relative_to(path).parts[0]
        names.add(first if pending.parent == path else first + "/")
    for name in sorted(names, key=lambda n: n.rstrip("/")):
        bare = name.rstrip("/")
        if bare == ".git" or any(p.fullmatch(bare) for p in ignore):
            continue
        entries.append(name)
    return _listing(entries, grant.max_entries, f"{workspace.show(path)} is empty")


def glob(workspace: Workspace, grant: WorkspaceGrant, args: dict[str, Any]) -> str:
    """Glob: workspace files whose path (relative to ``path``) matches ``pattern``."""
    pattern = Glob(_text(args, "pattern"), time.monotonic() + grant.tool_timeout / 2)
    start = workspace.resolve(args.get("path") or ".")
    found = []
    for file in workspace.walk(start):
        if pattern.fullmatch(file.relative_to(start).as_posix()):
            found.append(workspace.show(file))
    return _listing(found, grant.max_entries, "no files match")


def grep(workspace: Workspace, grant: WorkspaceGrant, args: dict[str, Any]) -> str:
    """Grep: a regular expression over workspace files (``output_mode``: files_with_matches,
    content or count), each file searched with a time limit."""
    flags = regex.IGNORECASE if args.get("-i") or args.get("case_insensitive") else 0
    try:
        compiled = compile_pattern(_text(args, "pattern"), flags | regex.MULTILINE)
    except (regex.error, PatternError) as exc:
        raise ToolRefused(f"the pattern is not a valid regular expression: {exc}") from None
    mode = args.get("output_mode") or "files_with_matches"
    if mode not in ("files_with_matches", "content", "count"):
        raise ToolRefused("output_mode must be files_with_matches, content or count")
    start = workspace.resolve(args.get("path") or ".")
    head_limit = _count(args, "head_limit", grant.max_entries)
    deadline = time.monotonic() + grant.tool_timeout / 2
    only = Glob(args["glob"], deadline) if isinstance(args.get("glob"), str) else None
    out: list[str] = []
    skipped: list[str] = []
    single = start.is_file() or workspace.pending_text(start) is not None
    for file in [start] if single else workspace.walk(start):
        if only is not None and not (
            only.fullmatch(file.name) or only.fullmatch(workspace.show(file))
        ):
            continue
        try:
            text = read_text(workspace, grant, file)
        except ToolRefused:
            continue  # binary, too large, or not a regular file: not searched
        left = deadline - time.monotonic()
        if left <= 0:
            skipped.append(workspace.show(file))
            continue
        try:
            hits = list(_matching_lines(compiled, text, min(GREP_TIMEOUT_PER_FILE, left)))
        except TimeoutError:
            skipped.append(workspace.show(file))
            continue
        if not hits:
            continue
        shown = workspace.show(file)
        if mode == "files_with_matches":
            out.append(shown)
        elif mode == "count":
            out.append(f"{shown}:{len(hits)}")
        else:
            out.extend(f"{shown}:{n}:{line[:MAX_LINE_CHARS]}" for n, line in hits)
        if len(out) >= head_limit:
            out = out[:head_limit]
            out.append(f"[stopped at {head_limit} results]")
            break
    answer = _cap("\n".join(out) if out else "no matches", grant.max_read_bytes)
    if skipped:
        answer += (
            f"\n[the pattern ran out of time on {len(skipped)} file(s), which were not searched: "
            f"{', '.join(skipped[:5])}; simplify it (nested quantifiers backtrack)]"
        )
    return answer


def _matching_lines(
    compiled: regex.Pattern[str], text: str, timeout: float
) -> Iterator[tuple[int, str]]:
    """(line number, line) of each line a match starts on; TimeoutError past ``timeout``."""
    matches = list(compiled.finditer(text, timeout=timeout))
    if not matches:
        return
    starts = [0] + [m.end() for m in re.finditer("\n", text)]
    lines = text.split("\n")
    seen: set[int] = set()
    for match in matches:
        number = bisect.bisect_right(starts, match.start())
        if number not in seen:
            seen.add(number)
            yield number, lines[number - 1]


def glob_regex(pattern: str) -> re.Pattern[str]:
    """A glob (``*``, ``?``, ``**/``, ``[...]``, ``{a,b}``) as a regular expression over
    ``/``-separated paths (``patterns.glob_source``)."""
    try:
        return re.compile(glob_source(pattern, braces=True))
    except re.error as exc:
        raise ToolRefused(f"the glob {pattern!r} is not valid: {exc}") from None


def _listing(entries: list[str], limit: int, empty: str) -> str:
    if not entries:
        return empty
    if len(entries) > limit:
        return "\n".join([*entries[:limit], f"[{len(entries) - limit} more not shown]"])
    return "\n".join(entries)


def _cap(text: str, limit: int) -> str:
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    return data[:limit].decode("utf-8", errors="ignore") + f"\n[cut at {limit} bytes]"


def _size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def _text(args: dict[str, Any], key: str) -> str:
    value = args.get(key)
    if not isinstance(value, str) or not value:
        raise ToolRefused(f"{key!r} must be a non-empty string")
    return value


def _count(args: dict[str, Any], key: str, default: int) -> int:
    value = args.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ToolRefused(f"{key!r} must be a whole number of at least 1")
    return value


def _strings(args: dict[str, Any], key: str) -> list[str]:
    value = args.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ToolRefused(f"{key!r} must be a list of strings")
    return value

"""Unified diffs checked against a repository, in memory: does every hunk apply?

``check_patch(text, root)`` parses a unified diff and applies it to copies of the files
under ``root`` (nothing on disk changes) and returns one problem per file or hunk that
does not apply, each naming the file and the hunk. It backs the ``patch_applies``
invariant (``lattice.contracts.invariants``).

Rules, close to ``git apply``:

- headers ``--- a/path`` / ``+++ b/path`` (``a/`` and ``b/`` prefixes are dropped, a tab and
  timestamp after the path are ignored); ``--- /dev/null`` creates a file that must not
  exist yet, ``+++ /dev/null`` deletes one (every line must be removed);
- a hunk applies when its context and removed lines equal the file's lines at the
  hunk's position (after the earlier hunks of the same file) or, like ``git apply``, at
  another position further down (the nearest one wins); lines are compared exactly
  (only a trailing ``\\r`` is ignored), a blank line in a hunk counts as an empty context line;
- anchors, as ``git apply`` has them: a hunk without trailing context lines must match
  at the end of the file, and one that starts at line 0 or 1 at its beginning;
- a path must stay inside ``root``: absolute paths, ``..`` and symlinks that lead out are
  problems, and the file is never read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$")
_PREFIXES = ("a/", "b/")
MAX_FILE_BYTES = 2 * 1024 * 1024
"""Files larger than this are not read (a problem is reported instead)."""


class PatchParseError(ValueError):
    """The text is not a unified diff this module can apply."""


@dataclass
class Hunk:
    number: int
    """1-based position of the hunk within its file's patch."""
    header: str
    """The ``@@ -a,b +c,d @@`` line (without any trailing section text)."""
    old_start: int
    old_count: int
    lines: list[tuple[str, str]] = field(default_factory=list)
    """(tag, text): tag is ``" "`` (context), ``"-"`` (removed) or ``"+"`` (added)."""

    @property
    def old_lines(self) -> list[str]:
        return [text for tag, text in self.lines if tag != "+"]

    @property
    def new_lines(self) -> list[str]:
        return [text for tag, text in self.lines if tag != "-"]

    @property
    def trailing_context(self) -> int:
        count = 0
        for tag, _ in reversed(self.lines):
            if tag != " ":
                break
            count += 1
        return count


@dataclass
class FilePatch:
    old_path: str | None
    """None for ``/dev/null`` (the patch creates the file)."""
    new_path: str | None
    """None for ``/dev/null`` (the patch deletes the file)."""
    hunks: list[Hunk] = field(default_factory=list)

    @property
    def path(self) -> str:
        return self.new_path or self.old_path or "/dev/null"


def _header_path(line: str) -> str | None:
    raw = line[4:].split("\t", 1)[0].strip()
    if raw.startswith('"') and raw.endswith('"') and len(raw) > 1:
        raw = raw[1:-1]
    if raw == "/dev/null":
        return None
    for prefix in _PREFIXES:
        if raw.startswith(prefix):
            return raw[len(prefix) :]
    return raw


def parse_unified_diff(text: str) -> list[FilePatch]:
    """The file patches of ``text``; PatchParseError says what is malformed."""
    lines = text.splitlines()
    patches: list[FilePatch] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            patches.append(FilePatch(_header_path(line), _header_path(lines[i + 1])))
            i += 2
            continue
        match = _HUNK.match(line)
        if not match:
            i += 1
            continue
        if not patches:
            raise PatchParseError(f"hunk {line!r} comes before any '--- a/file' / '+++ b/file'")
        current = patches[-1]
        old_count = int(match.group(2) if match.group(2) is not None else 1)
        new_count = int(match.group(4) if match.group(4) is not None else 1)
        hunk = Hunk(
            number=len(current.hunks) + 1,
            header=line[: len(line) - len(match.group(5))].strip(),
            old_start=int(match.group(1)),
            old_count=old_count,
        )
        i += 1
        seen_old = seen_new = 0
        while i < len(lines) and (seen_old < old_count or seen_new < new_count):
            body = lines[i]
            if body.startswith("\\"):  # "\ No newline at end of file"
                i += 1
                continue
            tag = body[:1] if body else " "
            if tag not in (" ", "-", "+"):
                break
            hunk.lines.append((tag, body[1:].rstrip("\r")))
            seen_old += tag != "+"
            seen_new += tag != "-"
            i += 1
        if (seen_old, seen_new) != (old_count, new_count):
            raise PatchParseError(
                f"{current.path}: hunk {hunk.number} ({hunk.header}) declares "
                f"-{old_count} +{new_count} lines but has -{seen_old} +{seen_new}"
            )
        current.hunks.append(hunk)
    if not patches:
        raise PatchParseError("no '--- a/file' / '+++ b/file' headers")
    return patches


class _Files:
    """Copies of the repository's files, read on first use, changed only in memory."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.cache: dict[str, list[str] | None] = {}

    def locate(self, relative: str) -> tuple[Path | None, str | None]:
        """(real path, problem): a path is refused when it is absolute or leads out of the root."""
        if not relative or relative.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", relative):
            return (
                None,
                f"{relative or '(empty path)'}: the path must be relative to the repository root",
            )
        if ".." in re.split(r"[\\/]", relative):
            return None, f"{relative}: the path leaves the repository root ('..')"
        candidate = self.root / relative
        try:
            real = candidate.resolve()
        except (OSError, RuntimeError):
            return None, f"{relative}: the path cannot be resolved"
        if real != self.root and self.root not in real.parents:
            return None, f"{relative}: the path leads out of the repository root (symlink)"
        return real, None

    def read(self, relative: str) -> tuple[list[str] | None, str | None]:
        """(lines or None when the file does not exist, problem)."""
        if relative in self.cache:
            return self.cache[relative], None
        real, problem = self.locate(relative)
        if problem is not None or real is None:
            return None, problem
        if not real.exists():
            self.cache[relative] = None
            return None, None
        if not real.is_file():
            return None, f"{relative}: not a regular file"
        try:
            if real.stat().st_size > MAX_FILE_BYTES:
                return (
                    None,
                    f"{relative}: the file is too large to check ({MAX_FILE_BYTES} bytes at most)",
                )
            data = real.read_bytes()
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return None, f"{relative}: not a UTF-8 text file; it cannot be patched as text"
        except OSError as exc:
            return None, f"{relative}: cannot be read ({exc.strerror})"
        lines = [line.rstrip("\r") for line in text.split("\n")]
        if lines and lines[-1] == "":
            lines.pop()
        self.cache[relative] = lines
        return lines, None


def _short(text: str, limit: int = 80) -> str:
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


def _mismatch(buffer: list[str], position: int, expected: list[str]) -> str:
    """Why ``expected`` is not at ``position`` of ``buffer`` (the first differing line)."""
    for offset, want in enumerate(expected):
        index = position + offset
        if index >= len(buffer):
            return f"the file has {len(buffer)} lines, the hunk expects {_short(want)} at line {index + 1}"
        if buffer[index] != want:
            return f"line {index + 1} is {_short(buffer[index])}, the hunk expects {_short(want)}"
    return "its lines do not match"


def _occurrences(buffer: list[str], block: list[str], floor: int) -> list[int]:
    """Every index at or after ``floor`` where ``block`` occurs in ``buffer``."""
    size = len(block)
    return [
        start
        for start in range(floor, len(buffer) - size + 1)
        if buffer[start : start + size] == block
    ]


def _apply(patch: FilePatch, buffer: list[str], path: str) -> tuple[list[str], list[str]]:
    """The patched copy of ``buffer`` and the problems of the hunks that do not apply."""
    problems: list[str] = []
    result = list(buffer)
    delta = 0
    floor = 0
    for hunk in patch.hunks:
        old = hunk.old_lines
        # -N,0 means "after line N"; otherwise the hunk starts at line N.
        position = hunk.old_start + delta if hunk.old_count == 0 else hunk.old_start - 1 + delta
        position = max(position, 0)
        where = f"{path}: hunk {hunk.number} ({hunk.header}) does not apply: "
        must_begin = hunk.old_start <= 1
        must_end = hunk.trailing_context == 0
        if not old:
            candidates = [position] if position <= len(result) else []
        else:
            candidates = _occurrences(result, old, floor)
        anchored = [
            start
            for start in candidates
            if (not must_begin or start == 0) and (not must_end or start + len(old) == len(result))
        ]
        if not anchored and candidates:
            if must_end:
                problems.append(
                    where + "it has no trailing context lines, so (as with git apply) it must "
                    "match at the end of the file, and it does not; add the unchanged lines that "
                    "follow the change as context"
                )
            else:
                problems.append(
                    where + f"it starts at line {hunk.old_start}, so (as with git apply) it must "
                    "match at the beginning of the file, and it does not; give its real line number"
                )
            continue
        if not anchored:
            if not old:
                problems.append(
                    where
                    + f"it inserts after line {position}, but the file has {len(result)} lines"
                )
            else:
                problems.append(
                    where + f"{_mismatch(result, position, old)}, and its context and removed "
                    "lines occur nowhere else in the file"
                )
            continue
        found = min(anchored, key=lambda start: (abs(start - position), start))
        new = hunk.new_lines
        result[found : found + len(old)] = new
        delta += len(new) - len(old)
        floor = found + len(new)
    return result, problems


def check_patch(text: str, root: Path) -> list[str]:
    """Problems applying the unified diff ``text`` to the files under ``root`` (empty: it applies)."""
    try:
        patches = parse_unified_diff(text)
    except PatchParseError as exc:
        return [f"not a unified diff: {exc}"]
    files = _Files(root)
    problems: list[str] = []
    for patch in patches:
        if patch.old_path is None and patch.new_path is None:
            problems.append("a file patch has /dev/null on both sides")
            continue
        if patch.old_path is None:
            assert patch.new_path is not None
            existing, problem = files.read(patch.new_path)
            if problem:
                problems.append(problem)
                continue
            if existing is not None:
                problems.append(
                    f"{patch.new_path}: the patch creates this file ('--- /dev/null') "
                    "but it already exists; patch the existing file instead"
                )
                continue
            created, hunk_problems = _apply(patch, [], patch.new_path)
            problems += hunk_problems
            files.cache[patch.new_path] = created
            continue
        current, problem = files.read(patch.old_path)
        if problem:
            problems.append(problem)
            continue
        if current is None:
            problems.append(
                f"{patch.old_path}: the file does not exist in the repository "
                "(a new file is written with '--- /dev/null')"
            )
            continue
        if patch.new_path is not None and patch.new_path != patch.old_path:
            _, problem = files.locate(patch.new_path)
            if problem:
                problems.append(problem)
                continue
        patched, hunk_problems = _apply(patch, current, patch.old_path)
        problems += hunk_problems
        if patch.new_path is None:
            if not hunk_problems and patched:
                problems.append(
                    f"{patch.old_path}: the patch deletes the file ('+++ /dev/null') "
                    f"but leaves {len(patched)} of its lines"
                )
            files.cache[patch.old_path] = None
            continue
        if patch.new_path != patch.old_path:
            files.cache[patch.old_path] = None
        files.cache[patch.new_path] = patched
    return problems

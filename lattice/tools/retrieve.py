"""``retrieve_context``: lexical search over the text files of the repository a user handed to a run.

Served as a built-in tool (server id ``lattice``, see ``lattice.tools.builtin``). It reads
files under ``root`` and nothing else:

- paths are resolved; a file (or symlink) whose real path is outside the root is skipped,
  symlinked directories are not followed, globs that are absolute or contain ``..`` are
  refused (``tool_error``);
- ``.git``, ``.lattice`` and other tool folders (``SKIP_DIRS``) are skipped, and so are
  binary files (a NUL byte, or not UTF-8), files above ``MAX_FILE_BYTES`` and files that
  commonly hold credentials (``SECRET_FILES``: ``.env``, ``*.pem``, ``id_rsa``, …);
- the scan stops after ``MAX_FILES`` files / ``MAX_SCAN_BYTES`` bytes, and the output is
  capped (``MAX_SNIPPET_CHARS`` per snippet, ``MAX_OUTPUT_CHARS`` in all); ``truncated``
  says when a cap cut something off.

Ranking: every file is cut into windows of ``WINDOW_LINES`` lines; each window is scored
with BM25 (k1 = 1.2, b = 0.75) over identifier-aware tokens (``parse_config`` and
``parseConfig`` also count as ``parse`` and ``config``), the file's path counting as part of
each of its windows. Windows with a positive score are returned best first; ties are
ordered by path, then line. Same repository and arguments, same result.
"""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lattice.errors import ErrorType, LatticeRunError
from lattice.patterns import glob_source

WINDOW_LINES = 40
"""Lines per scored window (a snippet is one window, possibly shortened by the caps)."""
MAX_FILE_BYTES = 256 * 1024
"""Files larger than this are skipped."""
MAX_FILES = 20_000
MAX_SCAN_BYTES = 64 * 1024 * 1024
"""The scan stops after this many files or bytes (``truncated`` is then true)."""
MAX_SNIPPET_CHARS = 4_000
MAX_OUTPUT_CHARS = 24_000
"""Caps on one snippet's text and on the text of all snippets together."""
DEFAULT_MAX_RESULTS = 8
SKIP_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        ".lattice",
        "__pycache__",
        "node_modules",
        ".venv",
        ".tox",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
    }
)
"""Folder names never searched (at any depth)."""
SECRET_FILES = (
    ".env",
    ".env.*",
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "id_rsa*",
    "id_ed25519*",
    "id_ecdsa*",
    ".netrc",
    ".npmrc",
    ".pypirc",
)
"""File names never read: they commonly hold credentials, which must not reach a prompt."""

_K1, _B = 1.2, 0.75
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9]+")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
_STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "for",
        "from",
        "has",
        "have",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "that",
        "the",
        "this",
        "to",
        "was",
        "were",
        "will",
        "with",
    ]
)

RETRIEVE_CONTEXT_TOOL: dict[str, Any] = {
    "name": "retrieve_context",
    "description": (
        "Search the text files of the repository the user handed to this run (lexical, "
        "BM25 over identifier-aware tokens) and return the best-matching line ranges: "
        "path (relative to the repository root), start and end (1-based line numbers), "
        "text and score, best first. Read-only; never reads outside the repository."
    ),
    "inputSchema": {
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "minLength": 1,
                "description": "Words, identifiers or file names to look for.",
            },
            "max_results": {
                "type": "integer",
                "minimum": 1,
                "maximum": 50,
                "default": DEFAULT_MAX_RESULTS,
                "description": "How many snippets to return at most.",
            },
            "globs": {
                "type": ["array", "null"],
                "items": {"type": "string"},
                "description": (
                    "Only search files matching one of these patterns, relative to the "
                    "repository root ('src/**/*.py', 'README.md'); a pattern without '/' "
                    "matches the file name at any depth ('*.py'). Omitted or empty: every file."
                ),
            },
        },
        "required": ["query"],
        "additionalProperties": False,
    },
}


def _error(message: str, **details: Any) -> LatticeRunError:
    return LatticeRunError(
        f"retrieve_context: {message}",
        error_type=ErrorType.TOOL_ERROR,
        details={"tool": "retrieve_context", **details},
    )


def tokenize(text: str) -> list[str]:
    """Lower-case search tokens: each identifier, plus its snake_case and camelCase parts."""
    tokens: list[str] = []
    for match in _IDENTIFIER.finditer(text):
        word = match.group()
        parts = [p for piece in word.split("_") for p in _CAMEL.findall(piece)]
        lowered = word.lower().strip("_")
        if len(lowered) > 1 and lowered not in _STOPWORDS:
            tokens.append(lowered)
        if len(parts) > 1:
            tokens.extend(p.lower() for p in parts if len(p) > 1 and p.lower() not in _STOPWORDS)
    return tokens


def _glob_regex(pattern: str) -> re.Pattern[str]:
    """``**`` spans folders, ``*`` and ``?`` stay inside one path segment, ``[...]`` is a class."""
    return re.compile(glob_source(pattern) + r"\Z")


@dataclass(frozen=True)
class _Glob:
    pattern: str
    regex: re.Pattern[str]
    basename_only: bool

    def matches(self, relative: str) -> bool:
        target = relative.rsplit("/", 1)[-1] if self.basename_only else relative
        # A pattern also matches the path it spells literally ('app/[id]/page.tsx').
        return target == self.pattern or self.regex.match(target) is not None


def _parse_globs(raw: Any) -> list[_Glob]:
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(isinstance(g, str) for g in raw):
        raise _error("globs must be a list of strings", argument="globs")
    globs = []
    for pattern in raw:
        text = pattern.strip().replace("\\", "/")
        if not text:
            raise _error("a glob pattern is empty", argument="globs")
        if text.startswith("/") or re.match(r"^[A-Za-z]:", text):
            raise _error(
                f"glob {pattern!r} is absolute; patterns are relative to the repository root",
                argument="globs",
            )
        if ".." in text.split("/"):
            raise _error(
                f"glob {pattern!r} leaves the repository root ('..'); it is not allowed",
                argument="globs",
            )
        text = text.removeprefix("./")
        globs.append(_Glob(text, _glob_regex(text), basename_only="/" not in text))
    return globs


def _arguments(arguments: Any) -> tuple[str, int, list[_Glob]]:
    if not isinstance(arguments, dict):
        raise _error("arguments must be an object")
    known = set(RETRIEVE_CONTEXT_TOOL["inputSchema"]["properties"])
    unknown = sorted(set(arguments) - known)
    if unknown:
        raise _error(
            f"unknown argument(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}",
            argument=unknown[0],
        )
    query = arguments.get("query")
    if not isinstance(query, str) or not query.strip():
        raise _error("query must be a non-empty string", argument="query")
    max_results = arguments.get("max_results", DEFAULT_MAX_RESULTS)
    if max_results is None:
        max_results = DEFAULT_MAX_RESULTS
    if (
        not isinstance(max_results, int)
        or isinstance(max_results, bool)
        or not 1 <= max_results <= 50
    ):
        raise _error(
            f"max_results must be an integer from 1 to 50, not {max_results!r}",
            argument="max_results",
        )
    return query, max_results, _parse_globs(arguments.get("globs"))


_SECRET_NAMES = tuple(_glob_regex(pattern) for pattern in SECRET_FILES)


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


@dataclass
class _Scan:
    files: list[tuple[str, list[str]]]
    """(relative POSIX path, lines) of every searchable text file, in path order."""
    stopped: bool
    """True when a scan cap stopped the walk early."""


def _read_text(path: Path) -> str | None:
    """The file's text, or None when it is binary or not UTF-8."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _scan(root: Path, globs: list[_Glob]) -> _Scan:
    files: list[tuple[str, list[str]]] = []
    seen_files, seen_bytes = 0, 0
    for current, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(current)
        dirnames[:] = sorted(
            d for d in dirnames if d not in SKIP_DIRS and not (here / d).is_symlink()
        )
        for name in sorted(filenames):
            if any(secret.match(name) for secret in _SECRET_NAMES):
                continue
            path = here / name
            relative = path.relative_to(root).as_posix()
            if globs and not any(g.matches(relative) for g in globs):
                continue
            try:
                real = path.resolve(strict=True)
                if not _inside(real, root) or not real.is_file():
                    continue  # a symlink leaving the root, or not a regular file
                size = real.stat().st_size
            except (OSError, RuntimeError):
                continue  # broken or looping symlink, vanished file
            if size > MAX_FILE_BYTES:
                continue
            if seen_files >= MAX_FILES or seen_bytes + size > MAX_SCAN_BYTES:
                return _Scan(files, stopped=True)
            seen_files += 1
            seen_bytes += size
            text = _read_text(real)
            if text is not None:
                files.append((relative, text.splitlines()))
    return _Scan(files, stopped=False)


@dataclass(frozen=True)
class _Window:
    path: str
    start: int
    """0-based index of the first line."""
    lines: list[str]
    terms: Counter[str]


def _windows(files: list[tuple[str, list[str]]]) -> list[_Window]:
    windows = []
    for relative, lines in files:
        path_terms = Counter(tokenize(relative))
        for start in range(0, len(lines), WINDOW_LINES):
            chunk = lines[start : start + WINDOW_LINES]
            terms = Counter(tokenize("\n".join(chunk)))
            terms.update(path_terms)
            windows.append(_Window(relative, start, chunk, terms))
    return windows


def _bm25(windows: list[_Window], query_terms: list[str]) -> list[float]:
    count = len(windows)
    if not count:
        return []
    lengths = [sum(w.terms.values()) for w in windows]
    average = (sum(lengths) / count) or 1.0
    unique = sorted(set(query_terms))
    idf = {}
    for term in unique:
        df = sum(1 for w in windows if term in w.terms)
        idf[term] = math.log(1 + (count - df + 0.5) / (df + 0.5))
    scores = []
    for window, length in zip(windows, lengths, strict=True):
        score = 0.0
        for term in unique:
            tf = window.terms.get(term, 0)
            if tf:
                score += idf[term] * tf * (_K1 + 1) / (tf + _K1 * (1 - _B + _B * length / average))
        scores.append(score)
    return scores


def _clip(lines: list[str], limit: int) -> tuple[list[str], bool]:
    """Leading lines whose joined text fits ``limit`` (at least part of the first line)."""
    kept: list[str] = []
    size = 0
    for line in lines:
        extra = len(line) + (1 if kept else 0)
        if size + extra > limit:
            if not kept:
                kept.append(line[: max(limit - 1, 0)] + "…")
            return kept, True
        kept.append(line)
        size += extra
    return kept, False


def retrieve_context(root: Path, arguments: dict[str, Any]) -> dict[str, Any]:
    """Search the text files under ``root`` for ``arguments["query"]`` (see the module docstring).

    Returns ``{"snippets": [{path, start, end, text, score}], "truncated": bool}``; bad
    arguments or a root that is not a directory raise ``LatticeRunError`` (``tool_error``).
    """
    query, max_results, globs = _arguments(arguments)
    try:
        base = Path(root).resolve(strict=True)
    except (OSError, RuntimeError) as exc:
        raise _error(f"repository root {root} does not exist") from exc
    if not base.is_dir():
        raise _error(f"repository root {root} is not a directory")
    query_terms = tokenize(query)
    scan = _scan(base, globs)
    truncated = scan.stopped
    if not query_terms:
        return {"snippets": [], "truncated": truncated}
    windows = _windows(scan.files)
    scores = _bm25(windows, query_terms)
    ranked = sorted(
        (
            (round(score, 4), window)
            for score, window in zip(scores, windows, strict=True)
            if score > 0
        ),
        key=lambda item: (-item[0], item[1].path, item[1].start),
    )
    snippets: list[dict[str, Any]] = []
    used = 0
    for score, window in ranked[:max_results]:
        room = min(MAX_SNIPPET_CHARS, MAX_OUTPUT_CHARS - used)
        if room <= 0:
            truncated = True
            break
        lines, clipped = _clip(window.lines, room)
        truncated = truncated or clipped
        text = "\n".join(lines)
        used += len(text)
        snippets.append(
            {
                "path": window.path,
                "start": window.start + 1,
                "end": window.start + max(len(lines), 1),
                "text": text,
                "score": score,
            }
        )
    return {"snippets": snippets, "truncated": truncated}

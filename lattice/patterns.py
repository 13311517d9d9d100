"""The one way Lattice runs a regular expression it did not write: with a time limit.

A document's patterns (a JSON Schema's ``pattern`` and ``patternProperties``, an
``ifElse``/``switch`` ``matches`` condition) are untrusted. Python's ``re`` backtracks
without limit and holds the GIL while it does: ``^(a+)+$`` against 26 characters takes
seconds and stalls every thread of the process. Here patterns run on the ``regex``
package, which accepts what ``re`` accepts (its ``V0`` mode), matches with the GIL
released and stops a match at a time limit:

- ``compile_pattern(text)`` compiles (cached), refusing a pattern whose counted
  repetitions would make compiling itself slow or huge (``PatternError``);
- ``search(pattern, text)`` searches for at most ``MATCH_SECONDS``, else raises
  ``PatternTimeout``;
- ``time_budget(seconds)`` caps the matching time of everything inside the block
  (one validation may try a pattern on many values).

A caller with its own limit (a tool that greps many files) passes ``seconds=``.

``glob_source(glob)`` spells a glob (``*``, ``?``, ``**``, ``[...]``, and ``{a,b}`` when
asked for) as a regular expression's text: the one translation the agents' file tools,
the permission rules and ``retrieve_context`` share.
"""

from __future__ import annotations

import contextlib
import functools
import re
import time
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import regex

__all__ = [
    "MATCH_SECONDS",
    "PatternError",
    "PatternTimeout",
    "compile_pattern",
    "glob_source",
    "pattern_problem",
    "search",
    "time_budget",
]

MATCH_SECONDS = 0.1
"""The most CPU time one search may take (the ``regex`` package counts the searching
thread's CPU time: on a busy machine the wall-clock time is longer). Ordinary patterns
take microseconds."""

REPETITION_LIMIT = 100_000
"""The most characters a pattern's counted repetitions may spell out (``(a{100}){1000}``
is 100,000): the ``regex`` package expands them when it compiles, ``(a{1000}){1000}``
takes 1.6 s to compile and ``(a{65535}){65535}`` exhausts memory."""


class PatternError(ValueError):
    """A pattern that does not compile, or that is too large to compile safely."""


class PatternTimeout(Exception):
    """A search that did not finish within its time limit."""

    def __init__(self, pattern: str, seconds: float) -> None:
        shown = pattern if len(pattern) <= 80 else pattern[:79] + "…"
        super().__init__(
            f"the regular expression {shown!r} did not finish within {seconds:.2g} s of CPU "
            "time (it backtracks catastrophically on this text)"
            if seconds > 0
            else f"no time left to match the regular expression {shown!r}: the patterns of "
            "this check used up their time"
        )
        self.pattern = pattern
        self.seconds = seconds


@dataclass
class _Budget:
    remaining: float


_budget: ContextVar[_Budget | None] = ContextVar("lattice_pattern_budget", default=None)


@contextlib.contextmanager
def time_budget(seconds: float) -> Iterator[None]:
    """Searches inside the block share ``seconds`` of matching time between them; once
    it is spent, each search raises ``PatternTimeout`` at once. Blocks nest: the inner
    one is capped by what is left of the outer one."""
    outer = _budget.get()
    cap = seconds if outer is None else min(seconds, outer.remaining)
    budget = _Budget(cap)
    token = _budget.set(budget)
    try:
        yield
    finally:
        _budget.reset(token)
        if outer is not None:
            outer.remaining -= cap - budget.remaining


@functools.lru_cache(maxsize=1024)
def _compiled(pattern: str, flags: int) -> regex.Pattern[str]:
    import regex

    problem = _repetition_problem(pattern)
    if problem is not None:
        raise PatternError(problem)
    try:
        return regex.compile(pattern, flags | regex.V0)
    except (regex.error, OverflowError, RecursionError, MemoryError) as exc:
        raise PatternError(str(exc) or type(exc).__name__) from None


def compile_pattern(pattern: str, flags: int = 0) -> regex.Pattern[str]:
    """``pattern`` compiled with the ``regex`` package (``re``'s syntax; ``flags`` are
    ``regex`` flags), cached; raises ``PatternError`` when it does not compile or its
    counted repetitions are too large."""
    return _compiled(pattern, flags)


def pattern_problem(pattern: str) -> str | None:
    """Why ``pattern`` cannot be used, or None when it compiles."""
    try:
        compile_pattern(pattern)
    except PatternError as exc:
        return str(exc)
    return None


def search(
    pattern: str | regex.Pattern[str], text: str, *, seconds: float = MATCH_SECONDS
) -> regex.Match[str] | None:
    """The first match of ``pattern`` in ``text``, or None; raises ``PatternTimeout`` when
    the search takes longer than ``seconds`` (or than the block's ``time_budget`` has
    left) and ``PatternError`` when a pattern given as text does not compile."""
    compiled = compile_pattern(pattern) if isinstance(pattern, str) else pattern
    budget = _budget.get()
    limit = seconds if budget is None else min(seconds, budget.remaining)
    if limit <= 0:
        raise PatternTimeout(compiled.pattern, 0)
    started = time.thread_time()  # regex's limit counts this thread's CPU time
    try:
        return compiled.search(text, timeout=limit, concurrent=True)
    except TimeoutError:
        if budget is not None and limit < seconds:
            budget.remaining = 0.0  # stopped by what the budget had left: it is spent
        raise PatternTimeout(compiled.pattern, limit) from None
    finally:
        if budget is not None:
            budget.remaining = max(budget.remaining - (time.thread_time() - started), 0.0)


# -- how much a pattern's counted repetitions spell out -------------------------------------


def _repetition_problem(pattern: str) -> str | None:
    try:
        size = _spelled_size(pattern)
    except _Unbalanced:
        return None  # the compiler names the real syntax error
    if size > REPETITION_LIMIT:
        return (
            f"its counted repetitions spell out about {size:,} characters "
            f"(at most {REPETITION_LIMIT:,}): write them with * or + or smaller counts"
        )
    return None


class _Unbalanced(Exception):
    pass


def _spelled_size(pattern: str) -> int:
    """An upper estimate of what ``pattern``'s counted repetitions expand to: each atom
    counts 1, a group the most of its alternatives, ``{n}`` / ``{n,m}`` multiply what
    they repeat by n (the least count: the rest compiles to a loop, as ``*``, ``+`` and
    ``?`` do). Character classes and escapes are one atom."""
    stack: list[tuple[int, int]] = []  # (best alternative so far, current sequence)
    best, current, last, i = 0, 0, 0, 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            last, i = 1, i + 2
            current += 1
            continue
        if char == "[":
            i = _class_end(pattern, i)
            last = 1
            current += 1
            continue
        if char == "(":
            stack.append((best, current))
            best, current, last = 0, 0, 0
            i += 1
            continue
        if char == "|":
            best, current, last = max(best, current), 0, 0
            i += 1
            continue
        if char == ")":
            if not stack:
                raise _Unbalanced
            group = max(best, current)
            best, current = stack.pop()
            current += group
            last = group
            i += 1
            continue
        if char == "{":
            count, end = _count(pattern, i)
            if count is not None:
                current += last * (count - 1)
                last *= count
                i = end
                continue
        last = 1
        current += 1
        i += 1
    if stack:
        raise _Unbalanced
    return max(best, current)


def _class_end(pattern: str, start: int) -> int:
    """The index after the character class opening at ``start``."""
    i = start + 1
    if i < len(pattern) and pattern[i] == "^":
        i += 1
    if i < len(pattern) and pattern[i] == "]":
        i += 1
    while i < len(pattern):
        if pattern[i] == "\\":
            i += 2
            continue
        if pattern[i] == "]":
            return i + 1
        i += 1
    raise _Unbalanced


def _count(pattern: str, start: int) -> tuple[int | None, int]:
    """The least repeat count of a ``{n}``, ``{n,}`` or ``{n,m}`` at ``start`` (what the
    compiler spells out; None for a brace that is no quantifier) and the index after it."""
    end = pattern.find("}", start)
    if end < 0:
        return None, start + 1
    low, _, high = pattern[start + 1 : end].partition(",")
    low, high = low.strip(), high.strip()
    if not low.isdigit() or (high and not high.isdigit()) or len(low) > 12:
        return None, start + 1
    return max(int(low), 1), end + 1


def glob_source(glob: str, *, braces: bool = False) -> str:
    """``glob`` as the text of a regular expression over ``/``-separated paths: ``**/``
    any folders (none included), ``**`` anything, ``*`` and ``?`` within one name,
    ``[...]`` a class (``[!...]`` its complement; a ``[`` with no ``]`` is itself), and
    with ``braces`` ``{a,b}`` either one (gitignore-style paths have no braces). Every
    other character stands for itself."""
    out: list[str] = []
    depth = 0
    i = 0
    while i < len(glob):
        char = glob[i]
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if glob.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[" and (close := glob.find("]", i + 2)) != -1:
            body = glob[i + 1 : close]
            negate = body.startswith("!")
            body = re.escape(body[1:] if negate else body).replace("\\-", "-")
            out.append(f"[{'^' if negate else ''}{body}]")
            i = close
        elif braces and char == "{":
            out.append("(?:")
            depth += 1
        elif braces and char == "}" and depth:
            out.append(")")
            depth -= 1
        elif braces and char == "," and depth:
            out.append("|")
        else:
            out.append(re.escape(char))
        i += 1
    return "".join(out) + ")" * depth

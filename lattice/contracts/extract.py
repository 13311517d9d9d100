"""Extract the one JSON artifact from a model's text, classifying what is wrong with it.

Accepted as it is: a bare JSON value, or one fenced block (```json ... ```) and nothing else.
Otherwise the text is scanned for its *outermost* JSON candidates: spans that open with
``{`` or ``[`` the way JSON does (``{"``, ``{}``, ``[1``, ``["`` …) and run to their
matching bracket, string-aware, or to the end of the text when they never close. Brackets
nested inside a candidate are never candidates of their own, so a fragment of a broken
document is never taken for the artifact.

- ``json_error``: no candidate at all, or a candidate that does not parse; the error names
  the decoder's message, line and column in the output and quotes the text around it (and
  says so when the JSON is cut off: a candidate still open at the end of the text).
- ``multiple_artifacts``: two or more candidates that parse.
- one candidate that parses, with prose or fence markers around it: ``extract`` returns it
  with what was around it (``Extracted.stripped``); ``extract_json`` (strict) raises
  ``explanatory_text`` with the value in ``details["extracted"]``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Any

from lattice.errors import ErrorType, LatticeRunError
from lattice.text import unicode_value

_DECODER = json.JSONDecoder()
_STRUCTURE = re.compile(r'["\\{}\[\]]')
_IN_STRING = re.compile(r'["\\]')
_VALUE_START = frozenset('{["-0123456789tfn]')
_FENCE_LINE = re.compile(r"^[ \t]*```[A-Za-z0-9_-]*[ \t]*$", re.MULTILINE)
EXCERPT_BEFORE = 40
EXCERPT_AFTER = 20


class ExtractionError(LatticeRunError):
    """The text does not hold exactly one JSON artifact."""


@dataclass(frozen=True)
class Extracted:
    """The one JSON value of a text, and what surrounded it."""

    value: Any
    stripped: tuple[str, ...] = ()
    """What was taken away around the value: ``"prose"`` and/or ``"fence"`` (empty: nothing
    but whitespace, or one fenced block that is the whole text)."""
    before: str = ""
    """The text before the value (fence markers included)."""
    after: str = ""
    """The text after it."""
    json_text: str = ""
    """The value's own text, as the model wrote it."""

    @property
    def prose(self) -> bool:
        return "prose" in self.stripped


@dataclass(frozen=True)
class _Candidate:
    start: int
    end: int
    closed: bool
    open_at: tuple[int, ...] = ()
    """Where the brackets still open at the end of the text were opened (outermost first)."""
    mismatched: bool = False
    """A closing bracket did not match the one it closed (``[1, 2}``)."""

    @property
    def cut_off(self) -> bool:
        return not self.closed and not self.mismatched


def _plausible(text: str, start: int) -> bool:
    """Whether the bracket at ``start`` opens JSON the way JSON does (not ``{curly}`` prose)."""
    i = start + 1
    n = len(text)
    while i < n and text[i] in " \t\n":
        i += 1
    if i == n:
        return True  # cut off right after the bracket
    if text[start] == "{":
        return text[i] in '"}'
    char = text[i]
    if char in "tfn":  # a literal, not a word: [true …, not [the docs]
        word = {"t": "true", "f": "false", "n": "null"}[char]
        return text.startswith(word, i) or word.startswith(text[i : i + len(word)].rstrip())
    return char in _VALUE_START


def _candidate_at(text: str, start: int) -> _Candidate:
    """The span of the candidate opening at ``start``: to its matching bracket, or to the end."""
    stack = [start]
    pos = start + 1
    n = len(text)
    mismatched = False
    while pos < n:
        match = _STRUCTURE.search(text, pos)
        if match is None:
            break
        char = match.group()
        pos = match.end()
        if char == '"':
            while True:  # to the closing quote, skipping escapes
                inner = _IN_STRING.search(text, pos)
                if inner is None:
                    return _Candidate(start, n, False, tuple(stack), mismatched)
                pos = inner.end()
                if inner.group() == '"':
                    break
                pos += 1  # the escaped character
            continue
        if char in "{[":
            stack.append(match.start())
        else:
            opened = stack.pop()
            mismatched = mismatched or (text[opened] == "{") != (char == "}")
            if not stack:
                return _Candidate(start, pos, True, (), mismatched)
    return _Candidate(start, n, False, tuple(stack), mismatched)


def _candidates(text: str) -> list[_Candidate]:
    """The outermost JSON candidates of ``text``, in order."""
    found: list[_Candidate] = []
    pos = 0
    n = len(text)
    while pos < n:
        brace, bracket = text.find("{", pos), text.find("[", pos)
        starts = [i for i in (brace, bracket) if i >= 0]
        if not starts:
            break
        start = min(starts)
        if not _plausible(text, start):
            pos = start + 1
            continue
        candidate = _candidate_at(text, start)
        found.append(candidate)
        pos = candidate.end
    return found


def _parses(text: str, span: _Candidate) -> bool:
    if not span.closed:
        return False
    try:
        json.loads(text[span.start : span.end])
    except json.JSONDecodeError:
        return False
    return True


def _line_col(text: str, pos: int) -> tuple[int, int]:
    line = text.count("\n", 0, pos) + 1
    return line, pos - (text.rfind("\n", 0, pos) + 1) + 1


def excerpt(text: str, pos: int) -> str:
    """The text around ``pos`` on one line, the position marked ``<<HERE>>``."""
    lo, hi = max(0, pos - EXCERPT_BEFORE), min(len(text), pos + EXCERPT_AFTER)
    before = ("…" if lo > 0 else "") + text[lo:pos]
    after = text[pos:hi] + ("…" if hi < len(text) else "")
    return (before + "<<HERE>>" + after).replace("\n", "\\n")


def _bracket_names(text: str, positions: tuple[int, ...]) -> str:
    names = ["an object" if text[p] == "{" else "a list" for p in reversed(positions)]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _decode_error(text: str, span: _Candidate, where: str) -> ExtractionError:
    """The json_error of the candidate ``span`` of ``text``."""
    try:
        _DECODER.raw_decode(text[: span.end], span.start)
    except json.JSONDecodeError as exc:
        pos, msg = exc.pos, exc.msg
    else:  # it parses but is followed by junk inside the span: never for a bracket span
        pos, msg = span.end, "Extra data"
    line, col = _line_col(text, pos)
    details: dict[str, Any] = {
        "parser_message": msg,
        "line": line,
        "column": col,
        "excerpt": excerpt(text, pos),
        "cut_off": span.cut_off,
    }
    if span.cut_off:
        oline, ocol = _line_col(text, span.open_at[0])
        message = (
            f"{where} is cut off: the text ends inside {_bracket_names(text, span.open_at)} "
            f"(the outermost opened at line {oline}, column {ocol}); the parser stopped with "
            f"'{msg}' at line {line}, column {col}, near: {details['excerpt']}"
        )
    else:
        message = f"{where} is not valid JSON: {msg} at line {line}, column {col}, near: {details['excerpt']}"
    return ExtractionError(message, error_type=ErrorType.JSON_ERROR, details=details)


def _not_json(text: str) -> ExtractionError:
    """The json_error of a text with no JSON candidate at all."""
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        line, col, pos, msg = exc.lineno, exc.colno, exc.pos, exc.msg
    else:  # pragma: no cover - callers only get here after loads failed
        line, col, pos, msg = 1, 1, 0, "?"
    shown = text if len(text) <= 80 else text[:77] + "…"
    return ExtractionError(
        f"the output holds no JSON object or array: {msg} at line {line}, column {col} "
        + (f"(the output begins {shown!r})" if text else "(the output is empty)"),
        error_type=ErrorType.JSON_ERROR,
        details={
            "parser_message": msg,
            "line": line,
            "column": col,
            "excerpt": excerpt(text, pos),
            "cut_off": False,
        },
    )


def _whole_fence(text: str) -> tuple[int, int] | None:
    """(start, end) of the body of a reply that is one fenced block from start to end (its
    JSON's strings may hold fences of their own: markdown inside an artifact)."""
    if not (text.startswith("```") and text.endswith("```")) or "\n" not in text:
        return None
    first = text.index("\n")
    if not _FENCE_LINE.fullmatch(text[:first]):
        return None
    return first + 1, len(text) - 3


def _around(before: str, after: str) -> tuple[str, ...]:
    """What surrounds a value: fence markers, prose, or both."""
    outside = before + "\n" + after
    kinds = []
    if _FENCE_LINE.search(outside) or "```" in outside:
        kinds.append("fence")
    if _FENCE_LINE.sub("", outside).replace("```", "").strip():
        kinds.append("prose")
    return tuple(kinds)


def extract(text: str) -> Extracted:
    """The one JSON value of ``text`` and what surrounded it; ExtractionError (``json_error``,
    ``multiple_artifacts``) when there is not exactly one. A lone surrogate the JSON spells
    (``"\\ud800"``), which no file can hold, is U+FFFD in the value."""
    found = _extract(text)
    value = unicode_value(found.value)
    return found if value is found.value else replace(found, value=value)


def _extract(text: str) -> Extracted:
    norm = text.replace("\r\n", "\n").replace("\r", "\n")
    stripped = norm.strip()
    try:
        return Extracted(json.loads(stripped), json_text=stripped)
    except json.JSONDecodeError:
        pass
    offset = len(norm) - len(norm.lstrip())
    fence = _whole_fence(stripped)
    if fence is not None:
        body_start, body_end = fence[0] + offset, fence[1] + offset
        body = norm[body_start:body_end].rstrip()
        try:
            return Extracted(json.loads(body), json_text=body.strip())
        except json.JSONDecodeError:
            spans = _candidates(body)
            if (
                len(spans) == 1
                and not body[: spans[0].start].strip()
                and not _parses(body, spans[0])
            ):
                # the block's JSON is broken: say where, in the whole output's lines
                span = spans[0]
                shifted = _Candidate(
                    body_start + span.start,
                    body_start + span.end,
                    span.closed,
                    tuple(p + body_start for p in span.open_at),
                    span.mismatched,
                )
                raise _decode_error(norm, shifted, "the fenced block") from None
    spans = _candidates(norm)
    if not spans:
        fenced = _whole_fence(stripped)
        if fenced is not None:
            body = stripped[fenced[0] : fenced[1]].strip()
            error = _not_json(body)
            raise ExtractionError(
                "the fenced block is not valid JSON: " + error.message.partition(": ")[2],
                error_type=ErrorType.JSON_ERROR,
                details=error.details,
            )
        raise _not_json(stripped)
    values = []
    for span in spans:
        try:
            if not span.closed:
                raise ValueError("cut off")
            values.append(json.loads(norm[span.start : span.end]))
        except ValueError:  # JSONDecodeError included
            raise _decode_error(norm, span, "the output") from None
    if len(values) > 1:
        raise ExtractionError(
            f"the output holds {len(values)} JSON values; exactly one artifact is allowed",
            error_type=ErrorType.MULTIPLE_ARTIFACTS,
            details={"count": len(values)},
        )
    span = spans[0]
    before, after = norm[: span.start].strip(), norm[span.end :].strip()
    return Extracted(
        values[0],
        stripped=_around(before, after),
        before=before,
        after=after,
        json_text=norm[span.start : span.end],
    )


def extract_json(text: str) -> Any:
    """The JSON value in ``text`` (strict: nothing but the value, or one fenced block);
    raise ExtractionError with an error_type otherwise."""
    found = extract(text)
    if found.prose:
        raise ExtractionError(
            explanatory_message(found),
            error_type=ErrorType.EXPLANATORY_TEXT,
            details={"extracted": found.value},
        )
    return found.value


def explanatory_message(found: Extracted) -> str:
    if "fence" in found.stripped:
        return "the output has text outside its JSON block; reply with the JSON only"
    return "the output wraps its JSON in explanatory text; reply with the JSON only"

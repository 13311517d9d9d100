"""Extract the one JSON artifact from a model's text, classifying what is wrong with it.

Accepted: a bare JSON value, or one fenced block (```json ... ```) and nothing else.
Errors: ``json_error`` (no JSON at all), ``multiple_artifacts`` (two or more values
or fences), ``explanatory_text`` (one value with prose around it).
"""

from __future__ import annotations

import json
import re
from typing import Any

from lattice.errors import LatticeRunError

_FENCE = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\n(.*?)\n?```", re.DOTALL)
_DECODER = json.JSONDecoder()


class ExtractionError(LatticeRunError):
    """The text does not hold exactly one JSON artifact."""


def _scan_values(text: str) -> list[tuple[int, int, Any]]:
    """Top-level JSON objects/arrays embedded in ``text`` as (start, end, value)."""
    found: list[tuple[int, int, Any]] = []
    pos = 0
    while True:
        starts = [i for i in (text.find("{", pos), text.find("[", pos)) if i >= 0]
        if not starts:
            return found
        start = min(starts)
        try:
            value, end = _DECODER.raw_decode(text, start)
        except json.JSONDecodeError:
            pos = start + 1
            continue
        found.append((start, end, value))
        pos = end


_NOTHING: Any = object()


def _whole_fence(text: str) -> Any:
    """The JSON of a reply that is one fenced block from start to end, even when the JSON's
    strings hold fences of their own (markdown inside an artifact); ``_NOTHING`` otherwise."""
    if not (text.startswith("```") and text.endswith("```")) or "\n" not in text:
        return _NOTHING
    body = text[text.index("\n") + 1 : -3]
    try:
        return json.loads(body)
    except json.JSONDecodeError:
        return _NOTHING


def extract_json(text: str) -> Any:
    """The JSON value in ``text``; raise ExtractionError with an error_type otherwise."""
    stripped = text.replace("\r\n", "\n").replace("\r", "\n").strip()
    try:
        return json.loads(stripped)
    except json.JSONDecodeError:
        pass
    whole = _whole_fence(stripped)
    if whole is not _NOTHING:
        return whole
    fences = _FENCE.findall(stripped)
    if len(fences) > 1:
        raise ExtractionError(
            f"the output holds {len(fences)} fenced blocks; exactly one JSON artifact is allowed",
            error_type="multiple_artifacts",
        )
    if len(fences) == 1:
        outside = _FENCE.sub("", stripped).strip()
        try:
            value = json.loads(fences[0])
        except json.JSONDecodeError as exc:
            raise ExtractionError(
                f"the fenced block is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})",
                error_type="json_error",
            ) from None
        if outside:
            raise ExtractionError(
                "the output has text outside its JSON block; reply with the JSON only",
                error_type="explanatory_text",
                details={"extracted": value},
            )
        return value
    values = _scan_values(stripped)
    if not values:
        try:
            json.loads(stripped)
        except json.JSONDecodeError as exc:
            message = f"the output is not JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        raise ExtractionError(message, error_type="json_error")
    if len(values) > 1:
        raise ExtractionError(
            f"the output holds {len(values)} JSON values; exactly one artifact is allowed",
            error_type="multiple_artifacts",
        )
    raise ExtractionError(
        "the output wraps its JSON in explanatory text; reply with the JSON only",
        error_type="explanatory_text",
        details={"extracted": values[0][2]},
    )

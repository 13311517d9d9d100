"""A user's scorer functions, for the tests of ``python`` scorers."""

from __future__ import annotations

from typing import Any


def long_enough(output: Any, expected: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    """1 for a text of at least 5 characters, else 0 and its length."""
    text = str(output)
    return {"score": len(text) >= 5, "detail": "" if len(text) >= 5 else f"{len(text)} characters"}

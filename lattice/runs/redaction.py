"""Masking secrets: every text bound for a run folder, a log or the terminal passes here."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

Redactor = Callable[[str], str]

PROVIDER_KEY_VARIABLES = (
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    # the keys of backends commonly reached through LiteLLM
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AZURE_API_KEY",
    "MISTRAL_API_KEY",
    "GROQ_API_KEY",
    "COHERE_API_KEY",
    "OPENROUTER_API_KEY",
    "DEEPSEEK_API_KEY",
    "TOGETHERAI_API_KEY",
    "XAI_API_KEY",
)
"""Environment variables whose values are always masked."""


def make_redactor(secret_names: tuple[str, ...] = ()) -> Redactor:
    """A function replacing the values of ``secret_names`` and of the provider API keys
    (read from the environment now) with ``***``; values shorter than 4 characters are
    left alone (masking them would garble ordinary text)."""
    pattern = _pattern(secret_values(secret_names))
    if pattern is None:
        return lambda text: text
    return lambda text: pattern.sub("***", text)


def secret_values(secret_names: tuple[str, ...] = ()) -> list[str]:
    """The values (read from the environment now) of ``secret_names`` and of the provider
    API keys that are masked, the longest first."""
    names = (*secret_names, *PROVIDER_KEY_VARIABLES)
    return sorted(
        {v for n in names if (v := os.environ.get(n)) and len(v) >= 4}, key=len, reverse=True
    )


def _pattern(values: list[str]) -> re.Pattern[str] | None:
    if not values:
        return None
    return re.compile("|".join(re.escape(v) for v in values))


class PieceMasker:
    """Masks secrets in texts that arrive piece by piece (a streamed model answer), where
    a secret may be cut between two pieces: what might be the start of a secret is held
    back until the next piece says whether it is one.

    ``mask(lane, stream, piece)`` answers what of ``stream`` can be passed on now, masked
    (at most the longest secret's length less one character is held back). A new
    ``stream`` in a ``lane`` drops what the previous one held back: the complete answer
    is recorded (and masked) whole anyway."""

    def __init__(self, secret_names: tuple[str, ...] = ()) -> None:
        values = secret_values(secret_names)
        self._pattern = _pattern(values)
        self._hold = max(len(values[0]) - 1, 0) if values else 0
        self._held: dict[Any, tuple[Any, str]] = {}
        """Per lane (a branch of the run): the stream it holds text of, and that text."""

    def forget(self, lane: Any) -> None:
        """Drop what ``lane`` holds back: its answer is over (the next one begins)."""
        self._held.pop(lane, None)

    def mask(self, lane: Any, stream: Any, piece: str) -> str:
        """What can be passed on of ``stream`` (one attempt of one op in ``lane``) once
        ``piece`` is added to it."""
        pattern = self._pattern
        if pattern is None:
            return piece
        held_stream, held = self._held.get(lane, (None, ""))
        text = held + piece if held_stream == stream else piece
        cut = len(text) - self._hold
        for found in pattern.finditer(text):
            if found.start() < cut < found.end():
                cut = found.end()  # a whole secret across the cut goes out masked
        self._held[lane] = (stream, text[max(cut, 0) :])
        return pattern.sub("***", text[: max(cut, 0)])


def redact_value(value: Any, redact: Redactor) -> Any:
    """``value`` (JSON-like) with ``redact`` applied to every string in it, keys included."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact_value(k, redact): redact_value(v, redact) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_value(v, redact) for v in value]
    return value

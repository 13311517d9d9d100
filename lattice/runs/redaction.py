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
    names = (*secret_names, *PROVIDER_KEY_VARIABLES)
    values = sorted(
        {v for n in names if (v := os.environ.get(n)) and len(v) >= 4}, key=len, reverse=True
    )
    if not values:
        return lambda text: text
    pattern = re.compile("|".join(re.escape(v) for v in values))
    return lambda text: pattern.sub("***", text)


def redact_value(value: Any, redact: Redactor) -> Any:
    """``value`` (JSON-like) with ``redact`` applied to every string in it, keys included."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact_value(k, redact): redact_value(v, redact) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_value(v, redact) for v in value]
    return value

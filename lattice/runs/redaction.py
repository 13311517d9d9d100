"""Masking secrets: every text bound for a run folder, a log or the terminal passes here."""

from __future__ import annotations

import os
import re
from collections.abc import Callable

Redactor = Callable[[str], str]

PROVIDER_KEY_VARIABLES = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")
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

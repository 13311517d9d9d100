"""Masking secrets: every text bound for a run folder, a log or the terminal passes here."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from lattice.masking import (
    LATTICE_KEY_VARIABLES,
    PROVIDER_KEY_VARIABLES,
    SecretFinder,
    maskable,
    replace,
)

Redactor = Callable[[str], str]


def make_redactor(secret_names: tuple[str, ...] = ()) -> Redactor:
    """A function replacing the values of ``secret_names`` and of the provider API keys
    (read from the environment now) with ``***``, in each form a value takes on its way
    (``lattice.masking``: case, percent-encoding, canonical or not, JSON escapes, IDNA,
    base64). Only values that cannot be ordinary text are masked
    (``lattice.masking.maskable``): masking ``test`` would rewrite every such word, the
    keys of a SWITCH included; such a key is kept out of run data where it could enter
    instead."""
    finder = SecretFinder(secret_values(secret_names))
    return finder.sub if finder else unmasked


def unmasked(text: str) -> str:
    """The redactor of a run without secrets to mask: ``text`` as it is."""
    return text


def secret_values(secret_names: tuple[str, ...] = ()) -> list[str]:
    """The values (read from the environment now) of ``secret_names``, of the provider API
    keys and of Lattice's own keys that are masked (the maskable ones), the longest first."""
    names = (*secret_names, *PROVIDER_KEY_VARIABLES, *LATTICE_KEY_VARIABLES)
    found: set[str] = set()
    for name in names:
        value = os.environ.get(name) or ""
        # a list of keys (the codec's, comma-separated) is masked whole and key by key
        found.update(v for v in (value, *(k.strip() for k in value.split(","))) if maskable(v))
    return sorted(found, key=len, reverse=True)


class PieceMasker:
    """Masks secrets in texts that arrive piece by piece (a streamed model answer), where
    a secret may be cut between two pieces: what might be the start of a secret is held
    back until the next piece says whether it is one.

    ``mask(lane, stream, piece)`` answers what of ``stream`` can be passed on now, masked
    (at most the longest form of a secret less one character is held back). A new
    ``stream`` in a ``lane`` drops what the previous one held back: the complete answer
    is recorded (and masked) whole anyway."""

    def __init__(self, secret_names: tuple[str, ...] = ()) -> None:
        self._finder = SecretFinder(secret_values(secret_names))
        self._hold = max(self._finder.longest - 1, 0)
        self._held: dict[Any, tuple[Any, str]] = {}
        """Per lane (a branch of the run): the stream it holds text of, and that text."""

    def forget(self, lane: Any) -> None:
        """Drop what ``lane`` holds back: its answer is over (the next one begins)."""
        self._held.pop(lane, None)

    def mask(self, lane: Any, stream: Any, piece: str) -> str:
        """What can be passed on of ``stream`` (one attempt of one op in ``lane``) once
        ``piece`` is added to it."""
        finder = self._finder
        if not finder:
            return piece
        held_stream, held = self._held.get(lane, (None, ""))
        text = held + piece if held_stream == stream else piece
        cut = len(text) - self._hold
        spans = finder.spans(text)
        for start, end in spans:
            if start < cut < end:
                cut = end  # a whole secret across the cut goes out masked
        cut = max(cut, 0)
        self._held[lane] = (stream, text[cut:])
        return replace(text[:cut], [(s, e) for s, e in spans if e <= cut], "***")


def redact_value(value: Any, redact: Redactor) -> Any:
    """``value`` (JSON-like) with ``redact`` applied to every string in it, keys included."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact_value(k, redact): redact_value(v, redact) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_value(v, redact) for v in value]
    return value


def redact_result(value: Any, redact: Redactor) -> Any:
    """``value`` (what a tool answered: JSON-like) with ``redact`` applied to every string
    in it, keys included, as it enters a run's state; ``value`` itself when its JSON text
    holds nothing ``redact`` masks (one quick test over the whole answer, the usual case).

    Masked where it enters, a value a server echoed is never seen by a later op either
    (a transform could reverse it, or base64 it, past any masking of what is written)."""
    if redact is unmasked:
        return value
    if isinstance(value, str):
        return redact(value)
    text = json.dumps(value, ensure_ascii=False, default=str)
    if redact(text) == text:
        return value
    return redact_value(value, redact)

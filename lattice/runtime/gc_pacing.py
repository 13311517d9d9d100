"""Fewer full garbage collections while runs are in flight.

With many concurrent runs alive, every young-generation collection promotes their
in-flight objects (coroutines, events, state) to the oldest generation, and CPython
soon starts a full collection that walks the whole heap, imported modules included:
one such pass takes longer than a burst of a thousand mocked runs (bench/README.md).

While at least one run is active in the process, ``gc_pacing`` raises only the
oldest generation's threshold (full collections become ten times rarer); young
collections keep their default pace, so short-lived cycles are still freed. The
previous thresholds come back when the last active run ends. Turn it off with
``RuntimeSettings(gc_pacing=False)`` or ``[runtime] gc_pacing = false``.
"""

from __future__ import annotations

import gc
from typing import Any

OLDEST_GENERATION_THRESHOLD = 100
"""Young-generation collections between full collections while runs are active (CPython default: 10)."""


class _Pacer:
    """Counts active runs; the first one in raises the threshold, the last one out restores it.

    A plain context manager (not ``@contextmanager``): it wraps every run, and the
    generator machinery cost more than the bookkeeping itself.
    """

    __slots__ = ("active", "saved")

    def __init__(self) -> None:
        self.active = 0
        self.saved: tuple[int, int, int] | None = None

    def __enter__(self) -> None:
        if self.active == 0:
            first, second, third = gc.get_threshold()
            if third < OLDEST_GENERATION_THRESHOLD:
                self.saved = (first, second, third)
                gc.set_threshold(first, second, OLDEST_GENERATION_THRESHOLD)
        self.active += 1

    def __exit__(self, *exc: Any) -> None:
        self.active -= 1
        if self.active == 0 and self.saved is not None:
            if gc.get_threshold()[2] == OLDEST_GENERATION_THRESHOLD:  # nobody else changed it
                gc.set_threshold(*self.saved)
            self.saved = None


class _Unpaced:
    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


_PACER = _Pacer()
_UNPACED = _Unpaced()


def gc_pacing(enabled: bool = True) -> _Pacer | _Unpaced:
    """A context manager holding the paced thresholds for one run (nesting and overlap are fine)."""
    return _PACER if enabled else _UNPACED


def active_runs() -> int:
    """How many runs hold the pacing now (for tests)."""
    return _PACER.active

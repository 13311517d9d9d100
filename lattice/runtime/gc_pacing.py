"""Rarer garbage collections while runs are in flight.

CPython's cycle collector starts a young collection every 700 net container
allocations and a full one every 10th young one after that. With many concurrent
runs alive, each collection walks all of their in-flight objects (coroutines,
state, events) and finds nothing to free: a finished run leaves no reference cycles
(``tests/test_runtime_concurrency.py`` checks this), so its objects go by reference
counting. For 1,000 concurrent mocked runs the collections were a fifth of the
wall time, and a single full collection, which walks the whole heap with every
imported module, took longer than the burst itself (bench/README.md).

While at least one run is active in the process, ``gc_pacing`` raises the youngest
generation's threshold to 20,000 allocations and the oldest one's to 100 young
collections (Python 3.14's incremental collector ignores the third threshold). Cycles made by other code in the meantime still get collected, a
little later; at most about 20,000 container objects wait for it (a few MB). The
previous thresholds come back when the last active run ends. Turn it off with
``RuntimeSettings(gc_pacing=False)`` or ``[runtime] gc_pacing = false``.
"""

from __future__ import annotations

import gc
import threading
from contextlib import AbstractContextManager, nullcontext
from typing import Any

YOUNG_GENERATION_THRESHOLD = 20_000
"""Net container allocations between young collections while runs are active (CPython default: 700)."""
OLDEST_GENERATION_THRESHOLD = 100
"""Young-generation collections between full collections while runs are active (CPython default: 10)."""


class _Pacer:
    """Counts active runs; the first one in raises the thresholds, the last one out restores them.

    A plain context manager (not ``@contextmanager``): it wraps every run, and the
    generator machinery cost more than the bookkeeping itself.
    """

    __slots__ = ("active", "lock", "saved")

    def __init__(self) -> None:
        self.active = 0
        self.lock = threading.Lock()  # runs may start and end on several threads
        self.saved: tuple[tuple[int, int, int], tuple[int, int, int]] | None = None
        """(thresholds before, paced thresholds) while runs are active and pacing changed them."""

    def __enter__(self) -> None:
        with self.lock:
            if self.active == 0:
                before = gc.get_threshold()
                first, second, third = before
                paced = (
                    max(first, YOUNG_GENERATION_THRESHOLD) if first else 0,  # 0: collection is off
                    second,
                    max(third, OLDEST_GENERATION_THRESHOLD),
                )
                if paced != before:
                    self.saved = (before, paced)
                    gc.set_threshold(*paced)
            self.active += 1

    def __exit__(self, *exc: Any) -> None:
        with self.lock:
            self.active -= 1
            if self.active == 0 and self.saved is not None:
                before, paced = self.saved
                if gc.get_threshold() == paced:  # nobody else changed them meanwhile
                    gc.set_threshold(*before)
                self.saved = None


_PACER = _Pacer()
_UNPACED = nullcontext()


def gc_pacing(enabled: bool = True) -> AbstractContextManager[None]:
    """A context manager holding the paced thresholds for one run (nesting and overlap are fine)."""
    return _PACER if enabled else _UNPACED


def active_runs() -> int:
    """How many runs hold the pacing now (for tests)."""
    return _PACER.active

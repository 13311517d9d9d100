"""A scorer's mean over the rows and its 95% confidence interval.

Scores that are all 0 or 1 (a pass rate) get the Wilson score interval, which stays
inside [0, 1] and is not empty at 0% or 100%; other scores get the normal
approximation (mean ± 1.96 standard errors, with the sample's standard deviation),
clipped to [0, 1].
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

Z95 = 1.959963984540054


@dataclass(frozen=True)
class Interval:
    """The mean of ``n`` scores and its 95% confidence interval."""

    mean: float
    low: float
    high: float
    n: int

    def to_json(self) -> dict[str, float | int]:
        return {"mean": self.mean, "low": self.low, "high": self.high, "n": self.n}


def interval(scores: Sequence[float]) -> Interval | None:
    """The mean and 95% interval of ``scores``; None when there are none."""
    n = len(scores)
    if n == 0:
        return None
    mean = sum(scores) / n
    if all(score in (0.0, 1.0) for score in scores):
        low, high = _wilson(mean, n)
    elif n == 1:
        low, high = mean, mean
    else:
        variance = sum((s - mean) ** 2 for s in scores) / (n - 1)
        half = Z95 * math.sqrt(variance / n)
        low, high = mean - half, mean + half
    return Interval(mean, max(0.0, low), min(1.0, high), n)


def _wilson(p: float, n: int) -> tuple[float, float]:
    z2 = Z95 * Z95
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = Z95 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return centre - half, centre + half

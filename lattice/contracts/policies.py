"""Recovery policies: for each error type, an ordered stack of actions.

Actions: ``repair`` (next attempt is a fix-only repair packet, while the class has
attempts left), ``retry`` (same request after a backoff that honours Retry-After,
up to ``max_retries``), ``escalate`` (move one model class up the ladder),
``halt`` (stop for a human), ``fail`` (end the op with a FailureReport).
When an action cannot apply (no attempts, retries or classes left) the next one is
tried; an exhausted stack fails.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from lattice.errors import ErrorType

ACTIONS = ("repair", "retry", "escalate", "halt", "fail")

OUTPUT_ERRORS = (
    ErrorType.SCHEMA_ERROR,
    ErrorType.JSON_ERROR,
    ErrorType.EXPLANATORY_TEXT,
    ErrorType.MULTIPLE_ARTIFACTS,
    ErrorType.CODE_IN_OUTPUT,
    ErrorType.INVALID_DIFF,
    ErrorType.PATCH_DOES_NOT_APPLY,
    ErrorType.INVARIANT_ERROR,
)
"""Errors in what the model wrote: a repair packet can fix them."""

DEFAULT_POLICIES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        **{error: ("repair", "escalate", "fail") for error in OUTPUT_ERRORS},
        ErrorType.RATE_LIMIT_ERROR: ("retry", "fail"),
        ErrorType.TIMEOUT_ERROR: ("retry", "fail"),
        ErrorType.PROVIDER_ERROR: ("retry", "fail"),
        ErrorType.API_KEY_ERROR: ("fail",),
        ErrorType.CONTEXT_LENGTH_ERROR: ("escalate", "fail"),
        ErrorType.MISSING_INFORMATION: ("halt",),
        ErrorType.INVALID_REQUEST: ("fail",),
        ErrorType.BUDGET_EXCEEDED: ("fail",),
    }
)
"""Documented defaults; override per run (config) or per node (``data.policies``)."""

MODEL_LADDER = ("small", "medium", "large")


def policy_stack(
    error_type: str,
    overrides: Mapping[str, tuple[str, ...] | list[str]] | None = None,
    base: Mapping[str, tuple[str, ...]] = DEFAULT_POLICIES,
) -> tuple[str, ...]:
    """The ordered actions for ``error_type`` (unknown types: ``("fail",)``)."""
    if overrides and error_type in overrides:
        return tuple(overrides[error_type])
    return tuple(base.get(error_type, ("fail",)))


def ladder_from(
    model_class: str, *, max_class: str | None = None, enabled: bool = True
) -> tuple[str, ...]:
    """Classes to try in order: the op's own, then the stronger ones (up to ``max_class``).

    ``default`` escalates straight to ``large``.
    """
    if not enabled:
        return (model_class,)
    top = MODEL_LADDER.index(max_class) if max_class in MODEL_LADDER else len(MODEL_LADDER) - 1
    if model_class in MODEL_LADDER:
        start = MODEL_LADDER.index(model_class)
        return MODEL_LADDER[start : max(top, start) + 1]
    return (model_class, *(("large",) if top == len(MODEL_LADDER) - 1 else ()))


_JITTER = random.SystemRandom()
"""The default source of retry jitter (``os.urandom``: nothing to seed, nothing shared)."""


@dataclass(frozen=True)
class RetrySettings:
    """``max_retries``: retries of one call in all, whatever errors caused them.
    Backoff for ``retry``: ``base * 2**n`` capped at ``cap`` plus up to ``jitter`` (a fraction);
    a Retry-After from the server is a floor, itself capped at ``max_retry_after`` so that a
    server cannot park a run for as long as it likes.

    ``rng`` draws the jitter: by default the operating system's randomness, so that no two
    processes (nor two runs, nor the copies of these settings a batch sends to its
    workers) retry on one schedule and a burst of failures does not come back as a burst
    of retries; a seeded ``random.Random`` gives a schedule that repeats (tests)."""

    max_retries: int = 3
    base: float = 1.0
    cap: float = 30.0
    jitter: float = 0.25
    max_retry_after: float = 300.0
    rng: random.Random | None = field(default=None, compare=False)

    def delay(self, retry_number: int, retry_after: float | None) -> float:
        backoff = min(self.cap, self.base * 2.0**retry_number)
        backoff *= 1 + (self.rng or _JITTER).uniform(0, self.jitter)
        if retry_after is None:
            return backoff
        return max(backoff, min(float(retry_after), self.max_retry_after))

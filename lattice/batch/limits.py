"""What a whole batch may spend, and how fast it may call: one limiter for every run in
flight, in this process or (as a Ray actor) for every worker of a cluster.

- ``max_calls_total``: model requests of the whole batch (retries and repairs included);
  a request beyond it is refused.
- ``max_cost_usd``: the estimated cost of the answers so far (``[prices]`` of
  lattice.toml); once it is reached, further requests are refused (the requests in
  flight then may overshoot it by their own cost).
- ``requests_per_minute`` / ``tokens_per_minute``: requests are spaced so that the batch
  never starts more than that (tokens are counted before a request from its size,
  corrected by the answer's usage afterwards).

A refused request fails its run's call with ``batch_budget_exceeded``; the batch then
stops taking new rows, and the rows it refused are written as ``interrupted`` (run again
by the next ``lattice batch``). A budget holds one invocation: the next run of the same
command starts with the whole budget again, for the rows left).

The limiter answers each request with a delay (seconds to wait before calling) or None
(refused): it never sleeps itself, so a Ray actor holding it serves any number of
workers at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

BUDGET_ERROR = "batch_budget_exceeded"
"""The error type of a model request the batch's budget refused."""

LIMITER_LOST = "batch_limiter_lost"
"""The error type of a model request whose limiter could not be asked (on Ray: its actor
died); the row stops as ``interrupted`` and the batch stops."""


class LimiterLost(Exception):
    """The batch's limiter cannot be asked any more (its Ray actor died)."""


@dataclass(frozen=True)
class BatchLimits:
    """Limits of a whole batch (None: no limit)."""

    max_calls_total: int | None = None
    max_cost_usd: float | None = None
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None

    def __bool__(self) -> bool:
        return any(
            v is not None
            for v in (
                self.max_calls_total,
                self.max_cost_usd,
                self.requests_per_minute,
                self.tokens_per_minute,
            )
        )


class Pace:
    """Starts spaced evenly: ``per_minute`` units a minute (a request is one unit; for
    tokens, its tokens). ``reserve`` books the next slot and says how long to wait."""

    def __init__(self, per_minute: float) -> None:
        self.interval = 60.0 / per_minute
        self.next_free = 0.0

    def reserve(self, units: float, now: float) -> float:
        start = max(now, self.next_free)
        self.next_free = start + units * self.interval
        return start - now

    def adjust(self, units: float) -> None:
        """Correct the booking by ``units`` (more or fewer than reserved)."""
        self.next_free += units * self.interval


class Limiter:
    """The batch's counts and paces (engine-neutral; see ``LimiterActor`` for Ray)."""

    def __init__(
        self,
        limits: BatchLimits,
        prices: Mapping[str, tuple[float, float]] | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limits = limits
        self.prices = dict(prices or {})
        self.clock = clock
        self.requests = 0
        self.answers = 0
        self.input_tokens = 0
        self.output_tokens = 0
        self.cost_usd = 0.0
        self.unpriced = 0
        self.refused = 0
        self.spent: str | None = None
        """Why the batch may spend no more (None while it may)."""
        self._rpm = Pace(limits.requests_per_minute) if limits.requests_per_minute else None
        self._tpm = Pace(limits.tokens_per_minute) if limits.tokens_per_minute else None

    @property
    def exhausted(self) -> bool:
        """True when the next request would be refused."""
        if self.spent is not None:
            return True
        limits = self.limits
        if limits.max_calls_total is not None and self.requests >= limits.max_calls_total:
            self.spent = (
                f"the batch's call budget of {limits.max_calls_total} model requests is spent "
                "(--max-calls-total)"
            )
        elif limits.max_cost_usd is not None and self.cost_usd >= limits.max_cost_usd:
            self.spent = (
                f"the batch's cost budget of ${limits.max_cost_usd:g} is spent "
                f"(${self.cost_usd:.4f} estimated; --max-cost)"
            )
        return self.spent is not None

    def acquire(self, estimated_tokens: int) -> float | None:
        """A request of about ``estimated_tokens`` input tokens: the seconds to wait before
        sending it, or None when the budget refuses it."""
        if self.exhausted:
            self.refused += 1
            return None
        self.requests += 1
        delay = 0.0
        if self._rpm is not None or self._tpm is not None:
            now = self.clock()
            if self._rpm is not None:
                delay = self._rpm.reserve(1, now)
            if self._tpm is not None:
                delay = max(delay, self._tpm.reserve(max(1, estimated_tokens), now))
        return delay

    def record(
        self, model: str, input_tokens: int, output_tokens: int, estimated_tokens: int
    ) -> None:
        """An answer arrived: count its tokens and cost, correct the token pace."""
        self.answers += 1
        self.input_tokens += input_tokens
        self.output_tokens += output_tokens
        price = self.prices.get(model)
        if price is None:
            self.unpriced += 1
        else:
            self.cost_usd += (input_tokens * price[0] + output_tokens * price[1]) / 1_000_000
        if self._tpm is not None:
            self._tpm.adjust(input_tokens + output_tokens - max(1, estimated_tokens))

    def snapshot(self) -> dict[str, Any]:
        """The counts so far (for the summary)."""
        self.exhausted  # noqa: B018 - sets ``spent`` when a budget was just reached
        return {
            "requests": self.requests,
            "answers": self.answers,
            "refused": self.refused,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "estimated_cost_usd": round(self.cost_usd, 6) if self.prices else None,
            "unpriced_answers": self.unpriced if self.prices else None,
            "spent": self.spent,
        }


class Gate(Protocol):
    """How a worker asks the batch's limiter (in this process, or a Ray actor);
    ``acquire`` raises ``LimiterLost`` when the limiter is gone."""

    async def acquire(self, estimated_tokens: int) -> float | None: ...

    def record(
        self, model: str, input_tokens: int, output_tokens: int, estimated_tokens: int
    ) -> None: ...


class LocalGate:
    """The limiter of a batch that runs in this process."""

    def __init__(self, limiter: Limiter) -> None:
        self.limiter = limiter

    async def acquire(self, estimated_tokens: int) -> float | None:
        return self.limiter.acquire(estimated_tokens)

    def record(
        self, model: str, input_tokens: int, output_tokens: int, estimated_tokens: int
    ) -> None:
        self.limiter.record(model, input_tokens, output_tokens, estimated_tokens)

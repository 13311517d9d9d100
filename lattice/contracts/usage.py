"""Usage accounting and the per-run budget that model calls are held to."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lattice.errors import LatticeRunError
from lattice.llm.base import TokenUsage


def _count(table: dict[str, dict[str, int]], key: str, tokens_in: int, tokens_out: int) -> None:
    row = table.get(key)
    if row is None:
        table[key] = {"calls": 1, "input_tokens": tokens_in, "output_tokens": tokens_out}
    else:
        row["calls"] += 1
        row["input_tokens"] += tokens_in
        row["output_tokens"] += tokens_out


@dataclass
class Usage:
    """Tokens and calls, in total, per concrete model and per model class.

    ``calls`` counts answered calls; ``requests`` every request sent, failed ones
    included (what the call budget counts)."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    by_model: dict[str, dict[str, int]] = field(default_factory=dict)
    by_class: dict[str, dict[str, int]] = field(default_factory=dict)
    estimated_cost_usd: float | None = None
    """From the config's price table (USD per million tokens), when every model has a price."""
    requests: int = 0

    def estimate_cost(self, prices: Mapping[str, tuple[float, float]]) -> None:
        """Set ``estimated_cost_usd`` when ``prices`` covers every model used."""
        if not prices or not self.by_model or any(m not in prices for m in self.by_model):
            return
        total = sum(
            row["input_tokens"] * prices[m][0] + row["output_tokens"] * prices[m][1]
            for m, row in self.by_model.items()
        )
        self.estimated_cost_usd = round(total / 1_000_000, 6)

    def add(self, model: str, model_class: str, usage: TokenUsage) -> None:
        tokens_in, tokens_out = usage.input_tokens, usage.output_tokens
        self.calls += 1
        self.input_tokens += tokens_in
        self.output_tokens += tokens_out
        _count(self.by_model, model, tokens_in, tokens_out)
        _count(self.by_class, model_class, tokens_in, tokens_out)

    def take_back(self, model: str, model_class: str, usage: TokenUsage) -> None:
        """Undo one ``add`` of these arguments: an answer the run counted that is counted
        again when it is replayed."""
        tokens_in, tokens_out = usage.input_tokens, usage.output_tokens
        self.calls -= 1
        self.input_tokens -= tokens_in
        self.output_tokens -= tokens_out
        for table, key in ((self.by_model, model), (self.by_class, model_class)):
            row = table.setdefault(key, {"calls": 0, "input_tokens": 0, "output_tokens": 0})
            row["calls"] -= 1
            row["input_tokens"] -= tokens_in
            row["output_tokens"] -= tokens_out
            if row["calls"] == 0:
                del table[key]

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def to_json(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "by_model": {k: dict(v) for k, v in self.by_model.items()},
            "by_class": {k: dict(v) for k, v in self.by_class.items()},
            "estimated_cost_usd": self.estimated_cost_usd,
            "requests": self.requests,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Usage:
        return cls(**data) if data else cls()


@dataclass
class Budget:
    """Per-run caps on model calls and tokens (repairs included)."""

    max_calls: int | None = None
    max_tokens: int | None = None

    def check(self, usage: Usage) -> None:
        if self.max_calls is not None and usage.requests >= self.max_calls:
            raise LatticeRunError(
                f"the run's call budget of {self.max_calls} model requests is spent "
                "(raise it with --max-calls or [runtime] max_calls)",
                error_type="budget_exceeded",
                details={"requests": usage.requests, "max_calls": self.max_calls},
            )
        if self.max_tokens is not None and usage.total_tokens >= self.max_tokens:
            raise LatticeRunError(
                f"the run's token budget of {self.max_tokens} tokens is spent "
                f"({usage.total_tokens} used; raise it with --max-tokens-total or "
                "[runtime] max_tokens_total)",
                error_type="budget_exceeded",
                details={"tokens": usage.total_tokens, "max_tokens": self.max_tokens},
            )

"""What a run returns: RunResult, FailureReport and usage accounting."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from lattice.llm.base import TokenUsage
from lattice.runtime.events import EventsField

RunStatus = Literal["completed", "failed", "halted"]


@dataclass
class FailureReport:
    """Why a run failed or halted, in a form a person and a program can act on (DESIGN.md §8)."""

    phase: str
    run_id: str
    op_id: str | None
    node_id: str | None
    category: str
    summary: str
    details: dict[str, Any] = field(default_factory=dict)
    attempts: list[dict[str, Any]] = field(default_factory=list)
    blocking: bool = True
    recovery_action: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


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
    """Tokens and calls, in total, per concrete model and per model class."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    by_model: dict[str, dict[str, int]] = field(default_factory=dict)
    by_class: dict[str, dict[str, int]] = field(default_factory=dict)
    estimated_cost_usd: float | None = None
    """From the config's price table (USD per million tokens), when every model has a price."""

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
        }

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Usage:
        return cls(**data) if data else cls()


@dataclass
class RunResult:
    """The outcome of ``Runner.run``/``arun``/``resume``."""

    status: RunStatus
    output: Any
    state: dict[str, Any]
    run_id: str
    run_dir: Path | None
    usage: Usage
    failure: FailureReport | None = None
    events: EventsField = field(default=EventsField(), repr=False)
    """The run's events (DESIGN.md §7), in order."""

    @property
    def vars(self) -> dict[str, Any]:
        return dict(self.state.get("vars", {}))

    def to_json(self) -> dict[str, Any]:
        """The ``lattice run --json`` shape."""
        return {
            "status": self.status,
            "run_id": self.run_id,
            "run_dir": str(self.run_dir) if self.run_dir else None,
            "output": self.output,
            "vars": self.vars,
            "usage": self.usage.to_json(),
            "failure": self.failure.to_json() if self.failure else None,
        }

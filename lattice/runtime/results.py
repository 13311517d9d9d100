"""What a run returns: RunResult (its FailureReport and Usage come from ``lattice.contracts``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from lattice.contracts.report import FailureReport
from lattice.contracts.usage import Usage
from lattice.runtime.events import EventsField

RunStatus = Literal["completed", "failed", "halted", "interrupted"]


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
    """The run's events (docs/runs.md), in order."""
    changes: list[dict[str, Any]] = field(default_factory=list)
    """The files agent ops changed (or, patch-only, would have changed), in order: each
    with its op, path, digests, whether it was applied and its diff's file in the run
    folder (``changes/<op>-<n>.diff``)."""
    without_tools: list[dict[str, Any]] = field(default_factory=list)
    """The nodes Claude Code would run with tools that this run ran without them (each
    ``{node, kind, grant}``, a prompt step's ``words`` too): ``lattice.lower.acting``."""
    dead_end: str | None = None
    """The node a completed run stopped at because it had no way on (no end reached)."""

    def count_events(self, *types: str) -> dict[str, int]:
        """How many of the run's events are of each of ``types`` (``{type: count}``),
        without building the events' dicts when ``events`` has not been read."""
        return RunResult.events.count(self, frozenset(types))

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
            **({"changes": self.changes} if self.changes else {}),
            **({"without_tools": self.without_tools} if self.without_tools else {}),
            **({"dead_end": self.dead_end} if self.dead_end else {}),
        }

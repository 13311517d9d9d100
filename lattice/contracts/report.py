"""FailureReport: why a run or a call failed or halted, and its one builder."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from lattice.errors import LatticeRunError


@dataclass
class FailureReport:
    """Why a run failed or halted, in a form a person and a program can act on
    (docs/runtime.md, "The failure report")."""

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

    @property
    def best_effort(self) -> Any:
        """The parsed value of the attempt with the fewest violations, when the call ended
        without a valid one (``details["best_effort"]`` holds it with its attempt number,
        error type and violations); None otherwise."""
        best = self.details.get("best_effort")
        return best.get("value") if isinstance(best, dict) else None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def failure_report(
    exc: LatticeRunError,
    *,
    phase: str,
    run_id: str,
    op_id: str | None,
    node_id: str | None,
    recovery_action: str,
    blocking: bool = True,
) -> FailureReport:
    """The report of ``exc``: its attempts (``details["attempts"]``) as a list of their own,
    the other details as they are; the error's own op and node win over the given ones."""
    details = dict(exc.details)
    attempts = list(details.pop("attempts", None) or [])
    return FailureReport(
        phase=phase,
        run_id=run_id,
        op_id=exc.op_id or op_id,
        node_id=exc.node_id or node_id,
        category=exc.error_type,
        summary=exc.message,
        details=details,
        attempts=attempts,
        blocking=blocking,
        recovery_action=recovery_action,
    )

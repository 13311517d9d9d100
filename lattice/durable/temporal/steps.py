"""The steps of a run on Temporal a re-run can start from, and the state before each.

A local run's journal lists the state changes of every op of its main walk, which is how
``lattice.service.rerun`` finds the state before a step. The workflow keeps the same list
itself (``SteppedRecords``: the changes each main-walk op made to the run's state, taken
as its record is written), so that ``rerun_point`` answers the ``rerun_point`` query with
the state before any visit of any op of the main walk; the new run starts at that op with
that state (``spec["start"]``), as a local re-run does. Ops inside parallel branches and
forEach items are not starting points, as in a local run.

This module does not import ``temporalio``.
"""

from __future__ import annotations

import copy
from typing import Any

from lattice.durable.temporal.history import HistoryRecords
from lattice.errors import InputError
from lattice.runs.oplog import OpRecord
from lattice.runtime.state import StateStore

EDITABLE = ("in", "vars")
"""The parts of the state a re-run starts with (``tmp`` starts empty, ``ctx`` is its own)."""


class SteppedRecords(HistoryRecords):
    """``HistoryRecords`` that also keep, per op of the main walk, the changes it made
    to the run's ``state`` (whose ``changes`` this starts collecting)."""

    def __init__(
        self,
        records: list[OpRecord],
        state: StateStore,
        steps: list[dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(records)
        self.state = state
        state.changes = []
        self.steps: list[dict[str, Any]] = list(steps or [])
        """``{"op_id", "changes"}`` per op of the main walk, in order (``steps``: those a
        resumed run's earlier executions took)."""

    def write_op(self, label: str, op_id: str, record: OpRecord) -> None:
        super().write_op(label, op_id, record)
        if "." in label:  # a branch's op: its changes reach the run's state at the join
            return
        changes, self.state.changes = self.state.changes, []
        if "port" not in record:  # it failed: it is where a resume goes on, not a step
            return
        # copied: a later op may grow a value in place (an append)
        self.steps.append({"op_id": op_id, "changes": copy.deepcopy(changes or [])})


def steps_before(steps: list[dict[str, Any]], op: str, visit: int) -> list[dict[str, Any]]:
    """The steps taken before visit ``visit`` of ``op`` (all of them for a visit in flight)."""
    started = [index for index, step in enumerate(steps) if step["op_id"] == op]
    return steps[: started[visit - 1] if visit <= len(started) else len(steps)]


def rerun_point(
    initial: dict[str, Any],
    steps: list[dict[str, Any]],
    op: str,
    visit: int | None,
    *,
    ops: dict[str, Any],
    in_flight: str | None,
    run_id: str,
) -> dict[str, Any]:
    """The state (``in`` and ``vars``) before visit ``visit`` (1-based; default: the last)
    of ``op``, from the run's initial state and its ``steps``; ``in_flight`` is the op the
    run stopped, failed or halted at (a visit that has no step yet). An InputError says
    why a step is not one to start from."""
    if op not in ops:
        known = ", ".join(list(ops)[:12])
        raise InputError(f"run {run_id} has no op {op!r} (its ops: {known}…)")
    started = [index for index, step in enumerate(steps) if step["op_id"] == op]
    visits = len(started) + (1 if in_flight == op else 0)
    if visits == 0:
        raise InputError(
            f"op {op!r} never ran on the main walk of run {run_id} (ops inside parallel "
            "branches and forEach items are not starting points)"
        )
    visit = visits if visit is None else visit
    if not 1 <= visit <= visits:
        raise InputError(
            f"op {op!r} ran {visits} time(s) in run {run_id}; visit {visit} is not one of them"
        )
    state = StateStore.from_snapshot(copy.deepcopy(initial))
    for step in steps_before(steps, op, visit):
        for change in step["changes"]:
            state.apply(change)
    snapshot = state.snapshot()
    return {
        "op": op,
        "visit": visit,
        "visits": visits,
        "state": {part: snapshot[part] for part in EDITABLE},
    }

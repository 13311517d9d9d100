"""How a run's walk ends, for every engine: its status, failure report and last event.

Where a run's main track (``Walker.run_track``) stops, ``walk_end`` turns how it stopped
into a ``WalkEnd``: ``completed`` (with the output), ``halted`` on a question nobody
answered yet, ``interrupted`` (stopped at an op boundary, or cancelled), ``failed``. It
emits the run's last event (``run_finished``, ``run_halted``, ``run_interrupted``,
``run_failed``) and builds the failure report, so a local run (``Runner``) and a run on a
durable engine (Temporal's workflow) end the same way; what each then keeps of the end
(a run folder's ``result.json`` and checkpoint, a workflow's result) is the engine's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lattice.contracts.report import FailureReport, failure_report
from lattice.errors import LatticeRunError
from lattice.runtime.context import HaltRun, Interrupted, RunContext
from lattice.runtime.results import RunResult
from lattice.runtime.walk import run_failure, stopped_line

if TYPE_CHECKING:
    from lattice.runtime.results import RunStatus
    from lattice.runtime.walk import Track


@dataclass
class WalkEnd:
    """How the walk of a run ended (the module docstring lists the statuses)."""

    status: RunStatus
    output: Any
    failure: FailureReport | None
    next_op: str | None
    """The op a resume starts at (None: the run completed)."""
    op_seq: int
    """The number of the run's last recorded op."""
    undo_visit: str | None = None
    """The op whose visit does not count: it runs again when the run goes on."""
    error: LatticeRunError | None = None
    """What stopped a run that did not complete."""
    cancelled: bool = False
    """The walk was cancelled (its task): the engine ends the run ``interrupted``, and a
    local run is cancelled on."""

    def result(
        self,
        ctx: RunContext,
        *,
        state: dict[str, Any],
        run_dir: Path | None,
        changes: list[dict[str, Any]],
        without_tools: Callable[[Mapping[str, int]], list[dict[str, Any]]],
    ) -> RunResult:
        """The run's result (``RunResult``; its JSON is what every engine answers with):
        ``state`` as the engine keeps it, the files its agents ``changed``, and the
        visited nodes that ran ``without_tools`` (given the visits of each op)."""
        status = self.status
        return RunResult(
            status=status,
            output=self.output,
            state=state,
            run_id=ctx.run_id,
            run_dir=run_dir,
            usage=ctx.usage,
            failure=self.failure,
            events=ctx.events,
            changes=changes,
            without_tools=without_tools(ctx.walk.counters.visits) if status != "failed" else [],
            dead_end=ctx.walk.dead_end if status == "completed" else None,
        )


def walk_end(
    track: Track,
    output: Any = None,
    stopped: LatticeRunError | None = None,
    *,
    cancelled: bool = False,
) -> WalkEnd:
    """How the run whose main walk is ``track`` ended: with ``output``, or ``stopped``
    (``cancelled``: its task was cancelled, ``stopped`` says why). A function the engine
    calls where its walk stops (``run_track`` returned or raised), not a coroutine around
    the walk: a run waiting on a model holds no frame of its own for it."""
    ctx = track.ctx
    end = _end(track, output, stopped, cancelled)
    if end.undo_visit is not None:  # the op runs again when the run goes on
        counters = ctx.walk.counters
        counters.steps -= 1
        if counters.visits.get(end.undo_visit):
            counters.visits[end.undo_visit] -= 1
    return end


def _end(track: Track, output: Any, stopped: LatticeRunError | None, cancelled: bool) -> WalkEnd:
    ctx = track.ctx
    if stopped is None:
        ctx.current_op = None
        ctx.emit("run_finished", {"status": "completed", "usage": ctx.usage.to_json()}, op=False)
        return WalkEnd("completed", output, None, None, track.op_seq)
    if isinstance(stopped, HaltRun):
        durability = ctx.walk.durability
        if durability.journals and not stopped.keeps_journal:
            # a halted op leaves no record: its number is used again
            durability.journal(stopped_line(ctx, track.op_seq - 1, track.current))
        folder = ctx.recorder.run_dir
        report = failure_report(
            stopped,
            phase="run",
            run_id=ctx.run_id,
            op_id=ctx.current_op,
            node_id=ctx.current_node,
            recovery_action=stopped.action.replace("RUN_DIR", str(folder or "RUN_DIR")),
        )
        ctx.emit("run_halted", {"reason": stopped.reason, "summary": stopped.summary})
        return WalkEnd(
            "halted", None, report, track.current, track.op_seq - 1, track.current, stopped
        )
    if cancelled:
        reason = stopped.message
        ctx.emit("run_interrupted", {"reason": reason, "next_op": track.current}, op=False)
        report = run_failure(ctx, stopped, phase="run")
        return WalkEnd(
            "interrupted", None, report, track.current, track.op_seq, error=stopped, cancelled=True
        )
    if isinstance(stopped, Interrupted):
        ctx.current_op = ctx.current_node = None
        report = run_failure(ctx, stopped, phase="run")
        ctx.emit("run_interrupted", {"reason": stopped.message, "next_op": track.current}, op=False)
        return WalkEnd("interrupted", None, report, track.current, track.op_seq, error=stopped)
    report = run_failure(ctx, stopped, phase="run")
    ctx.emit("run_failed", {"error_type": stopped.error_type, "message": stopped.message})
    return WalkEnd("failed", None, report, track.current, track.op_seq, track.current, stopped)

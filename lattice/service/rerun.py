"""Re-running a run from one of its steps: the state before that step, edited, as a new
run that starts at that op and names its parent.

A step is a visit of an op of the main walk (a loop visits an op more than once; ops
inside parallel branches and forEach items are not starting points: their branch's
siblings would be missing). The state before it is the parent's starting state with the
changes of every op the journal committed before that visit. The new run is recorded
like any run, resumable like any run, and carries ``parent`` (run id, op, visit) in its
checkpoint and its ``run_started`` event.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lattice.config import LatticeConfig, load_config
from lattice.errors import InputError, LatticeUserError
from lattice.ir.serialize import ir_from_json
from lattice.runs.checkpoint import read_checkpoint
from lattice.runs.folder import read_run_json
from lattice.runs.journal import read_journal
from lattice.runs.store import RunStore
from lattice.runtime.resume import StartFrom
from lattice.runtime.state import StateStore
from lattice.service.runs import PreparedRun, ProviderSpec, RunOptions, prepare_run

RERUNS = "reruns.jsonl"
"""In a run folder: the re-runs started from it, one a line (``run_id``, ``op``, ``visit``)."""

EDITABLE = ("in", "vars")
"""The parts of the state a re-run may change."""


@dataclass(frozen=True)
class RerunPoint:
    """A step a run can be re-run from: the op, which visit of it, how many visits the
    parent made, and the state before that visit (``in`` and ``vars``)."""

    op: str
    visit: int
    visits: int
    state: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "visit": self.visit, "visits": self.visits, "state": self.state}


def rerun_point(folder: Path, op: str, visit: int | None = None) -> RerunPoint:
    """The state before visit ``visit`` (1-based; default: the last) of ``op`` in the run
    at ``folder``. A LatticeUserError says why when the step cannot be re-run from."""
    journal = read_journal(folder)
    if journal is None:
        raise LatticeUserError(
            f"{folder.name} was recorded before journals: it cannot be re-run from a step"
        )
    ir = ir_from_json(read_run_json(folder, "execir.json"))
    if op not in ir.ops:
        known = ", ".join(list(ir.ops)[:12])
        raise InputError(f"run {folder.name} has no op {op!r} (its ops: {known}…)")
    started = [index for index, line in enumerate(journal.ops) if line.get("op_id") == op]
    last = journal.ops[-1] if journal.ops else None
    entry = read_checkpoint(folder).get("start_op") or ir.entry
    in_flight = (last.get("next") if last is not None else entry) == op
    visits = len(started) + (1 if in_flight else 0)
    if visits == 0:
        raise InputError(
            f"op {op!r} never ran on the main walk of run {folder.name} (ops inside "
            "parallel branches and forEach items are not starting points)"
        )
    visit = visits if visit is None else visit
    if not 1 <= visit <= visits:
        raise InputError(
            f"op {op!r} ran {visits} time(s) in run {folder.name}; visit {visit} is not one of them"
        )
    before = started[visit - 1] if visit <= len(started) else len(journal.ops)
    state = StateStore.from_snapshot(read_run_json(folder, "state_initial.json"))
    for line in journal.ops[:before]:
        for change in line.get("changes") or ():
            state.apply(change)
    snapshot = state.snapshot()
    return RerunPoint(op, visit, visits, {part: snapshot[part] for part in EDITABLE})


def prepare_rerun(
    folder: Path,
    *,
    op: str,
    visit: int | None = None,
    state: dict[str, Any] | None = None,
    provider: ProviderSpec | None = None,
    config: LatticeConfig | None = None,
    runs_dir: Path,
    store_type: type[RunStore] = RunStore,
    meta: dict[str, Any] | None = None,
) -> PreparedRun:
    """A new run of the workflow of the run at ``folder``, starting at ``op`` (visit
    ``visit``) with the state the parent had there, its ``in`` and ``vars`` replaced by
    those of ``state`` where given. The provider and budgets are the parent's unless
    others are given; the inputs are checked against the workflow's inputs schema."""
    point = rerun_point(folder, op, visit)
    start_state = copy.deepcopy(point.state)
    for part, value in (state or {}).items():
        if part not in EDITABLE:
            raise InputError(
                f"state.{part}: only {' and '.join(EDITABLE)} can be edited for a re-run"
            )
        if not isinstance(value, dict):
            raise InputError(f"state.{part} must be an object")
        start_state[part] = value
    checkpoint = read_checkpoint(folder)
    parent_meta = checkpoint.get("meta") or {}
    if config is None:
        config = load_config(parent_meta.get("config"))
    spec = (
        provider if provider is not None and provider.given else ProviderSpec.from_meta(parent_meta)
    )
    ir = ir_from_json(read_run_json(folder, "execir.json"))
    workflow = (
        read_run_json(folder, "workflow.json") if (folder / "workflow.json").exists() else None
    )
    parent = {"run_id": checkpoint.get("run_id", folder.name), "op": op, "visit": point.visit}
    prepared = prepare_run(
        ir,
        config=config,
        options=RunOptions(
            provider=spec,
            config_path=parent_meta.get("config"),
            max_calls=parent_meta.get("max_calls"),
            max_tokens_total=parent_meta.get("max_tokens_total"),
            meta={
                **(meta or {}),
                **(
                    {"workflow_name": parent_meta["workflow_name"]}
                    if "workflow_name" in parent_meta
                    else {}
                ),
            },
        ),
        inputs=start_state["in"],
        workflow=workflow,
        runs_dir=runs_dir,
        store_type=store_type,
    )
    prepared.start = StartFrom(op=op, state=start_state, parent=parent)
    return prepared


def note_rerun(parent_folder: Path, start: StartFrom, run_id: str) -> None:
    """Add the re-run ``run_id`` to its parent's folder (``reruns.jsonl``), so that the
    parent lists it."""
    line = json.dumps({"run_id": run_id, "op": start.op, "visit": start.parent.get("visit")})
    with open(parent_folder / RERUNS, "a", encoding="utf-8") as handle:
        handle.write(line + "\n")


def reruns_of(folder: Path) -> list[dict[str, Any]]:
    """The re-runs started from the run at ``folder``, oldest first."""
    try:
        text = (folder / RERUNS).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        try:
            item = json.loads(line)
        except json.JSONDecodeError:
            continue  # a torn last line
        if isinstance(item, dict) and isinstance(item.get("run_id"), str):
            out.append(item)
    return out

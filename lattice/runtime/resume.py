"""Where a run stands, read back from its folder: the position a resumed walk starts at.

The compiler is imported only when a changed document is lowered again
(``accept_changed``), and the IR's models when the folder's IR is read: importing the
runtime imports neither ``lattice.lower`` nor pydantic."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lattice.contracts.usage import Usage
from lattice.errors import DocumentError, ErrorType, LatticeUserError
from lattice.files import atomic_write_text
from lattice.llm.base import TokenUsage
from lattice.runs.checkpoint import Checkpoint, changed_files
from lattice.runs.folder import load_run_json, read_run_json
from lattice.runs.journal import JournalState
from lattice.runtime.walk_state import BranchResume

if TYPE_CHECKING:
    from lattice.ir.models import ExecIR


@dataclass(frozen=True)
class StartFrom:
    """Where a re-run starts: an op of the IR (not the entry), the state it starts with
    (``in`` and ``vars``; ``tmp`` starts empty and ``ctx`` is the new run's), and the
    run and visit it was taken from, recorded as the new run's ``parent``."""

    op: str
    state: dict[str, Any]
    parent: dict[str, Any]


@dataclass
class Position:
    """Where a walk starts (or goes on)."""

    current: str | None
    """The next op to run; None when the run had already reached its end."""
    steps: int = 0
    visits: dict[str, int] = field(default_factory=dict)
    op_seq: int = 0
    usage: Usage = field(default_factory=Usage)
    last_result: str | None = None
    output: Any = None
    """The run's output, when the journal ends with the END op."""
    branches: dict[str, BranchResume] = field(default_factory=dict)
    """The progress of the branches of a fork the run was in when it stopped."""


def journal_position(
    ir: ExecIR, journal: JournalState, checkpoint: Checkpoint
) -> tuple[Position, dict[str, Any]]:
    """The position after the journal's last committed op, and the answers still queued."""
    queued = journal.answers
    if queued is None:
        queued = checkpoint.get("initial_answers") or checkpoint.get("answers") or {}
    answers: dict[str, Any] = dict(queued)
    position = Position(checkpoint.get("start_op") or ir.entry, op_seq=journal.last_op_seq)
    position.usage = journal_usage(ir, journal)
    for line in [*journal.ops, *(line for lines in journal.branches.values() for line in lines)]:
        op_id = str(line.get("op_id"))
        position.visits[op_id] = position.visits.get(op_id, 0) + 1
    position.branches = {
        branch: BranchResume(lines, journal.pending.get(branch, []))
        for branch, lines in journal.branches.items()
    }
    for branch, received in journal.pending.items():
        if branch is not None and branch not in position.branches and received:
            position.branches[branch] = BranchResume([], received)
    position.steps = sum(position.visits.values())
    last = journal.last
    if last is not None:
        position.current = last.get("next")
        position.last_result = last.get("last_result")
        position.output = last.get("output")
    return position, answers


def journal_usage(ir: ExecIR, journal: JournalState) -> Usage:
    """What the run had spent when its journal ends, less the answers its resumed ops get
    back from the journal (``pending``): those count again when they are replayed.

    Counted from the ``request`` and ``answer`` lines, not from the usage an op line
    recorded: a branch's op line counts what its siblings' ops in flight had received,
    and no line counts the requests of an op in flight that got no answer. A journal
    without ``request`` lines (written before they existed) resumes with the usage its
    last op recorded."""
    if not journal.requests:
        return Usage.from_json(journal.usage)
    replayed = {id(line) for lines in journal.pending.values() for line in lines}
    usage = Usage(requests=journal.requests)
    for line in journal.received:
        has_request_line = "model_class" in line
        if id(line) in replayed:
            if has_request_line:
                usage.requests -= 1
            continue
        if not has_request_line:
            usage.requests += 1
        op = ir.ops.get(str(line.get("op_id")))
        model_class = line.get("model_class") or getattr(op, "model_class", "default")
        tokens = TokenUsage(int(line.get("input_tokens") or 0), int(line.get("output_tokens") or 0))
        usage.add(str(line.get("model", "unknown")), str(model_class), tokens)
    return usage


class NotResumable(LatticeUserError):
    """The run failed in a way a resume would repeat (its failure's
    ``details["resumable"]`` is false: a resumed run keeps what it was started with,
    its grants among them); its recovery action says what to do instead."""

    error_type = ErrorType.NOT_RESUMABLE


def refuse_unresumable(folder: Path, checkpoint: Checkpoint) -> None:
    """Raise NotResumable when the failed run in ``folder`` says a resume cannot help."""
    if checkpoint.get("status") != "failed":
        return
    failure = load_run_json(folder, "failure_report.json")
    if not isinstance(failure, dict):
        result = load_run_json(folder, "result.json")
        failure = result.get("failure") if isinstance(result, dict) else None
    if not isinstance(failure, dict):
        return
    details = failure.get("details")
    if not isinstance(details, dict) or details.get("resumable") is not False:
        return
    where = f" at {failure['node_id']}" if failure.get("node_id") else ""
    action = details.get("recovery_action") or failure.get("recovery_action")
    raise NotResumable(
        f"run {folder.name} failed [{failure.get('category', 'error')}]{where} in a way a "
        f"resume would repeat; nothing was done; next: {action or 'start a new run'}"
    )


def legacy_position(
    folder: Path, checkpoint: Checkpoint
) -> tuple[Position, dict[str, Any], dict[str, Any]]:
    """Position, answers and state of a folder written before journals existed: its
    checkpoint and ``state_final.json``, both written when the run stopped."""
    if "next_op" not in checkpoint:
        raise LatticeUserError(f"{folder} is not a resumable run folder (no position recorded)")
    position = Position(
        checkpoint["next_op"],
        steps=int(checkpoint.get("steps", 0)),
        visits={k: int(v) for k, v in checkpoint.get("visits", {}).items()},
        op_seq=int(checkpoint.get("op_seq", 0)),
        usage=Usage.from_json(checkpoint.get("usage")),
        last_result=checkpoint.get("last_result"),
    )
    state = read_run_json(folder, "state_final.json")
    return position, dict(checkpoint.get("answers") or {}), state


def resumable_ir(
    folder: Path,
    checkpoint: Checkpoint,
    journal: JournalState | None,
    *,
    accept_changed: bool,
) -> ExecIR:
    """The folder's ExecIR. A changed ``workflow.json`` or ``execir.json`` is refused, or
    with ``accept_changed`` the document is lowered again (``execir.json`` as it now
    stands when the folder has no document) and must keep the ids of the completed ops."""
    from lattice.ir.serialize import ir_from_json, ir_to_dict

    changed = changed_files(folder, checkpoint)
    if not changed:
        return ir_from_json(read_run_json(folder, "execir.json"))
    if not accept_changed:
        raise LatticeUserError(
            f"run {folder.name}: {' and '.join(changed)} changed since the run started; "
            "resume continues only the document it started with (to continue with the "
            "changed document, pass --accept-changed: it is lowered again and must keep "
            "the ids of the ops the run completed)"
        )
    if (folder / "workflow.json").is_file():
        from lattice.document.loader import read_json_file
        from lattice.lower import lower

        try:
            ir = lower(read_json_file(folder / "workflow.json"), base_dir=folder)
        except DocumentError as exc:
            lines = "\n  ".join(d.format() for d in exc.diagnostics[:10])
            raise LatticeUserError(
                f"run {folder.name}: the changed workflow.json does not lower:\n  {lines}"
            ) from None
    else:
        ir = ir_from_json(read_run_json(folder, "execir.json"))
    committed = (
        [*journal.ops, *(x for b in journal.branches.values() for x in b)] if journal else []
    )
    needed = {str(line["op_id"]) for line in committed if line.get("op_id")} | {
        str(line["next"]) for line in committed if line.get("next")
    }  # the ops the run completed, and those it goes on at
    missing = sorted(needed - set(ir.ops))
    if missing:
        raise LatticeUserError(
            f"run {folder.name}: the changed document has no op(s) {', '.join(missing)}, "
            "which the run completed or goes on at; it cannot continue with it"
        )
    atomic_write_text(  # on disk before the checkpoint that records its digest
        folder / "execir.json",
        json.dumps(ir_to_dict(ir), indent=2, ensure_ascii=False) + "\n",
        durable=True,
    )
    return ir

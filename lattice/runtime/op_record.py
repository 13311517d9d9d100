"""An op's record and an op's failure as data: built here, once, for every engine.

The walk (``lattice.runtime.walk``) builds each op's record with ``op_record`` as the op
ends, wherever the op ran: a local run writes it to its folder's ``ops.jsonl``, a run on
Temporal keeps it for its ``record`` query; an op executed on a worker sends back only
what it adds (``OpExtras``), never a record of its own. ``error_data`` and
``error_from_data`` carry an op's failure from where it ran to the walk, which routes it
(its ``failed`` port, or the run's end) as it routes a local op's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypedDict, cast

from lattice.errors import LatticeRunError
from lattice.runs.oplog import OpExtras, OpRecord
from lattice.runtime.context import Interrupted

if TYPE_CHECKING:
    from lattice.ir.models import Op
    from lattice.ir.templates import StatePath
    from lattice.runtime.state import StateStore


class ErrorData(TypedDict):
    """A ``LatticeRunError`` as data (an op's failure, sent from a worker to the walk)."""

    error_type: str
    message: str
    op_id: str | None
    node_id: str | None
    details: dict[str, Any]


def op_record(
    op: Op,
    label: str,
    branch: str | None,
    duration_ms: float,
    inputs: dict[str, Any],
    port: str | None,
    output: Any,
    extras: OpExtras | None,
    error: LatticeRunError | None = None,
) -> OpRecord:
    """The record of ``op`` (``label``: ``0007``, or ``0005.2.0003`` in ``branch``): the
    values it read, then how it ended: ``port``, ``output`` and what the op added
    (``extras``), or for an op that failed without a ``failed`` route, ``error`` and its
    attempts."""
    record: OpRecord = {
        "seq": label if branch else int(label),
        "op_id": op.id,
        "node_id": op.source_node,
        "kind": op.kind,
        "duration_ms": duration_ms,
        "inputs": inputs,
    }
    if branch is not None:
        record["branch"] = branch
    if port is not None:
        record["port"] = port
        record["output"] = output
        if extras:
            record.update(cast("OpRecord", extras))  # OpRecord holds every OpExtras field
    if error is not None:
        details = error.details
        record["error"] = {
            "error_type": error.error_type,
            "message": error.message,
            **{k: v for k, v in details.items() if k != "attempts"},
        }
        record["attempts"] = details.get("attempts", [])
    return record


def read_inputs(state: StateStore, reads: list[StatePath]) -> dict[str, Any]:
    """The values of ``reads`` in ``state`` (None for one that cannot be read)."""
    values: dict[str, Any] = {}
    for path in reads:
        try:
            values[path.text] = state.read(path)
        except LatticeRunError:
            values[path.text] = None
    return values


def record_changes(records: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The files a run's agent ops changed, in order, from its op records: each change
    with the op that made it (a run's result's ``changes``)."""
    return [{"op": r.get("op_id"), **c} for r in records for c in r.get("changes") or ()]


def error_data(error: LatticeRunError) -> ErrorData:
    """``error`` as data (``error_from_data`` makes it an error again)."""
    return {
        "error_type": error.error_type,
        "message": error.message,
        "op_id": error.op_id,
        "node_id": error.node_id,
        "details": error.details,
    }


def error_from_data(data: ErrorData) -> LatticeRunError:
    """The error ``data`` describes (its type, message, place and details, attempts
    included), to be routed as the op's own (an interruption stays one: it takes no
    ``failed`` route)."""
    kind = Interrupted if data["error_type"] == Interrupted.error_type else LatticeRunError
    return kind(
        data["message"],
        error_type=data["error_type"],
        op_id=data.get("op_id"),
        node_id=data.get("node_id"),
        details=dict(data.get("details") or {}),
    )

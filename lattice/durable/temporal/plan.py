"""What the workflow needs of a run, worked out before it starts (no Temporal import)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lattice.durable.temporal.ops import execir_digest
from lattice.errors import LatticeUserError
from lattice.ir.models import ExecIR, ForEachOp, ForkOp, LLMWriteOp
from lattice.ir.serialize import ir_to_dict
from lattice.runtime.settings import RuntimeSettings
from lattice.runtime.walk import edge_table
from lattice.workspace.grants import refused_tools

UNSUPPORTED = (ForkOp, ForEachOp)
"""Op kinds the Temporal engine does not run yet (parallel branches)."""


@dataclass(frozen=True)
class ActivityOptions:
    """How long an op may take on a worker, how soon a lost worker is noticed (its
    heartbeat), and how many times an op whose worker was lost is started again."""

    start_to_close_seconds: float = 3600.0
    heartbeat_seconds: float = 30.0
    maximum_attempts: int = 5

    def to_json(self) -> dict[str, Any]:
        return {
            "start_to_close_seconds": self.start_to_close_seconds,
            "heartbeat_seconds": self.heartbeat_seconds,
            "maximum_attempts": self.maximum_attempts,
        }


def check_supported(ir: ExecIR) -> None:
    """Refuse a document the Temporal engine cannot run yet, naming its nodes."""
    nodes = sorted({op.source_node for op in ir.ops.values() if isinstance(op, UNSUPPORTED)})
    if nodes:
        raise LatticeUserError(
            "the Temporal engine does not run parallel branches (FORK, FOR_EACH) yet: "
            f"{', '.join(nodes)}; run this workflow with --engine local",
            error_type="unsupported",
        )


def run_spec(
    ir: ExecIR,
    *,
    run_id: str,
    inputs: dict[str, Any],
    answers: dict[str, Any],
    provider: dict[str, Any],
    budgets: dict[str, Any],
    limits: dict[str, int],
    activity: ActivityOptions,
    settings: RuntimeSettings,
) -> dict[str, Any]:
    """The workflow's input: the ExecIR, its plan (kind, node and edges of every op) and
    the run's inputs, answers, provider (a mock script inline), budgets and limits, and
    the events a run starts with besides ``run_started`` (an agent's tools the grant of
    ``settings`` refuses, as a local run reports them)."""
    check_supported(ir)
    execir = ir_to_dict(ir)
    return {
        "notices": [
            {
                "type": "agent_tool_refused",
                "data": {
                    "node": refused.node,
                    "tools": list(refused.tools),
                    "grant": refused.setting,
                },
            }
            for refused in refused_tools(ir, settings.agents.grant)
        ],
        "run_id": run_id,
        "execir": execir,
        "execir_digest": execir_digest(execir),
        "entry": ir.entry,
        "plan": {
            op_id: {"kind": op.kind, "node": op.source_node, "edges": edge_table(op.next)}
            for op_id, op in ir.ops.items()
        },
        "workflow": {"id": ir.workflow.id, "name": ir.workflow.name},
        "model_classes": sorted(
            {op.model_class for op in ir.ops.values() if isinstance(op, LLMWriteOp)}
        ),
        "inputs": inputs,
        "answers": answers,
        "provider": provider,
        "budgets": budgets,
        "limits": limits,
        "activity": activity.to_json(),
    }

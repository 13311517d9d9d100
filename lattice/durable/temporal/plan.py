"""What the workflow is given to start a run, worked out before it starts (no Temporal import)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from lattice.durable.temporal.ops import execir_digest
from lattice.events import EventKind
from lattice.ir.models import ContractOpBase, ExecIR
from lattice.ir.serialize import ir_to_dict
from lattice.lower.acting import toolless_nodes
from lattice.lower.main_agent import under_grant
from lattice.runtime.settings import RuntimeSettings
from lattice.workspace.grants import refused_tools


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
    document: dict[str, Any] | None = None,
    fixtures: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The workflow's input: the ExecIR (the workflow walks it as a local run does) and
    the run's inputs, answers, provider (a mock script inline), budgets and limits (with
    ``settings``' bound on ops running at once, ``max_parallel``, unless ``limits`` gives
    one; and its bounds on the state, which the workflow holds whole: an op's worker sees
    only the part it reads), the nodes that run without the tools Claude Code would give
    them (``toolless``: the result's ``without_tools`` names those the run visits), and
    the events a run starts with besides ``run_started`` (an agent's tools the
    grant of ``settings`` refuses, as a local run reports them). ``document``, the
    workflow document the ExecIR was lowered from (a run folder's ``workflow.json``), is
    kept for the panel, which draws the run on its canvas; the walk never reads it.
    Under a grant that gives the main agent tools, prompt steps are its turns (AGENT
    ops that act and ask, as in a local run): the IR the workflow walks says so.
    ``fixtures`` is the table of a run that replays fixtures (its provider names it by
    digest: ``fixtures.py``)."""
    grant = settings.agents.grant
    ir = under_grant(ir, grant)
    execir = ir_to_dict(ir)
    return {
        "notices": [
            {
                "type": EventKind.AGENT_TOOL_REFUSED,
                "data": {
                    "node": refused.node,
                    "tools": list(refused.tools),
                    "grant": refused.setting,
                },
            }
            for refused in refused_tools(ir, grant)
        ],
        "toolless": [{"op": t.op, **t.to_json()} for t in toolless_nodes(ir, grant)],
        "run_id": run_id,
        "execir": execir,
        "execir_digest": execir_digest(execir),
        "workflow": {"id": ir.workflow.id, "name": ir.workflow.name},
        "document": document,
        "model_classes": sorted(
            {op.model_class for op in ir.ops.values() if isinstance(op, ContractOpBase)}
        ),
        "inputs": inputs,
        "answers": answers,
        "provider": provider,
        "budgets": budgets,
        "limits": {"max_parallel": settings.max_parallel, **limits},
        "state_limits": (None if settings.state_limits is None else asdict(settings.state_limits)),
        "activity": activity.to_json(),
        **({"fixtures": fixtures} if fixtures is not None else {}),
    }

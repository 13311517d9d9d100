"""Loops a run cannot leave, or can leave only when a model says so.

A pass over the lowered ops (after forks are in place). Each strongly connected
component of the op graph with more than one op (or an op that leads to itself) is a
loop. A loop with no edge out of it and no END inside runs until a limit stops it: an
error (``loop-no-exit``). A loop whose every way out is a branch on a model's answer
(a SWITCH on an LLM op's result, a natural-language ifElse) is left only when the model
says so: a warning (``loop-exit-by-model``) naming the limits that stop it otherwise.
"""

from __future__ import annotations

from lattice.ir.models import ContractOpBase, ForEachOp, ForkOp, Op, SwitchOp
from lattice.lower.graph import cyclic_components
from lattice.lower.registry import LoweringContext

MAX_VISITS = 1_000
MAX_CALLS = 200


def loop_diagnostics(ops: dict[str, Op], ctx: LoweringContext) -> None:
    """Report loops without a way out (errors) and loops only a model can end (warnings)."""
    succ = _successors(ops)
    model_results: set[str] | None = None
    order: dict[str, int] | None = None
    for component in cyclic_components(succ):
        if order is None or model_results is None:
            order = {op_id: i for i, op_id in enumerate(ops)}
            model_results = {op.writes for op in ops.values() if isinstance(op, ContractOpBase)}
        members = sorted(component, key=order.__getitem__)
        exits = [
            (source, target)
            for source in members
            for target in succ[source]
            if target not in component
        ]
        nodes = list(dict.fromkeys(ops[m].source_node for m in members))
        first = ctx.nodes.get(nodes[0])
        shown = ", ".join(repr(n) for n in nodes[:8]) + (" …" if len(nodes) > 8 else "")
        if not exits and not any(ops[m].kind == "END" for m in members):
            ctx.error(
                first,
                "loop-no-exit",
                f"the loop through {shown} has no way out: every run that reaches it goes "
                f"round until a limit stops it (max_visits {MAX_VISITS:,} per op, "
                "--max-visits; the call budget for model calls, --max-calls); add a branch "
                "that leaves it",
            )
            continue
        deciders = {source for source, _ in exits}
        if exits and all(_decided_by_model(ops[s], model_results) for s in deciders):
            ctx.warn(
                first,
                "loop-exit-by-model",
                f"the loop through {shown} ends only when a model's answer takes the way out "
                f"(at {', '.join(repr(ops[s].source_node) for s in sorted(deciders, key=order.__getitem__))}); "
                f"otherwise it stops at the visit limit ({MAX_VISITS:,} per op, --max-visits) "
                f"or the call budget ({MAX_CALLS} model calls per run by default, --max-calls)",
            )


def _successors(ops: dict[str, Op]) -> dict[str, list[str]]:
    """Each op's distinct successors among ``ops``; ops in the order a graph built edge by
    edge would hold them (an op first named as a target comes before the ops after it),
    which is the order loops are found and reported in."""
    succ: dict[str, list[str]] = {}
    for op_id, op in ops.items():
        targets = succ[op_id] = [t for t in dict.fromkeys(_targets(op)) if t in ops]
        for target in targets:
            if target not in succ:
                succ[target] = []  # its place in the order; its successors come with it
    return succ


def _targets(op: Op) -> list[str]:
    targets = [edge.to for edge in op.next]
    if isinstance(op, ForkOp):
        targets += op.branches
    if isinstance(op, ForEachOp):
        targets.append(op.body)
    return targets


def _decided_by_model(op: Op, model_results: set[str]) -> bool:
    """Whether the way ``op`` leaves by depends on a model's answer (reads what an LLM
    or AGENT op wrote: a branch session's SWITCH on the person's message does not)."""
    if not isinstance(op, SwitchOp) or op.input is None:
        return False
    return any(
        op.input == path or op.input.startswith((f"{path}.", f"{path}[")) for path in model_results
    )

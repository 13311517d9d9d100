"""``forEach``: a sub-flow run once per item of a list, its results in item order.

Lattice's own node type (like ``httpRequest``)::

    {"type": "forEach", "data": {
        "items": "$vars.fetch.result.body.tickets",   // a value template giving a list
        "subAgentFlowId": "triage-one",              // the flow run per item
        "maxConcurrency": 8,                         // items in flight at once (default 8)
        "onItemError": "fail"                        // or "collect": its FailureReport in its slot
    }}

The flow's nodes are added to the document under the forEach node's namespace
(``<forEach>__<inner>``, as sub-flows are inlined), with an END node of their own
(``<forEach>__end``, the flow's end node's ``output``) that ends each item. Inside the
flow, ``$vars.<forEach>.item`` and ``$vars.<forEach>.index`` are the item and its
position; the node writes the list of the items' outputs to ``$vars.<forEach>.result``.

Only the workflow's own forEach nodes are expanded: a forEach node inside a flow (run
by a forEach or a subAgentFlow node) is the error ``for-each-nested`` at its place in
``subAgentFlows``.
"""

from __future__ import annotations

from typing import ClassVar

from lattice.document.loader import pointer_join
from lattice.document.models import SEQUENTIAL_PORT, Connection, Node, Workflow
from lattice.errors import Diagnostic, did_you_mean
from lattice.ir.models import FAILED_PORT, ForEachOp
from lattice.ir.templates import path_text
from lattice.lower.fields import get_number, get_str
from lattice.lower.registry import LoweringContext, NodeLowering
from lattice.lower.subflows import (
    MAX_INLINED_DATA,
    MAX_INLINED_ITEMS,
    NAMESPACE_SEPARATOR,
    copy_flow,
)

MAX_CONCURRENCY = 1000


def expand_for_each(
    workflow: Workflow, pointers: dict[str, str], bodies: dict[str, str]
) -> tuple[Workflow, list[Diagnostic]]:
    """Add each forEach node's flow, namespaced under it, to the document; ``bodies``
    gets each expanded forEach node's first inner node (kept apart from the nodes'
    data, which the document gives: no key there can name a body)."""
    users = [n for n in workflow.nodes if n.type == "forEach"]
    if not users:
        return workflow, []
    flows = {
        f.id: (f, pointer_join(workflow.pointer_base, "subAgentFlows", i))
        for i, f in enumerate(workflow.sub_agent_flows)
    }
    diagnostics: list[Diagnostic] = []
    nodes: list[Node] = []
    connections = list(workflow.connections)
    copied_items = copied_data = 0
    for node in workflow.nodes:
        if node.type != "forEach":
            nodes.append(node)
            continue
        flow_id = node.data.get("subAgentFlowId")
        if not isinstance(flow_id, str) or flow_id not in flows:
            nodes.append(node)  # the lowerer reports it
            continue
        flow, flow_pointer = flows[flow_id]
        copy = copy_flow(node, flow, flow_pointer, pointers)
        copied_items += copy.size[0]
        copied_data += copy.size[1]
        entries = [e for e in copy.entries if e]
        problem = None
        if copied_items > MAX_INLINED_ITEMS or copied_data > MAX_INLINED_DATA:
            problem = (
                "subflow-expansion-too-large",
                f"the flows that forEach nodes run add more than {MAX_INLINED_ITEMS:,} nodes "
                f"and connections or {MAX_INLINED_DATA:,} characters of data",
            )
        elif len(entries) != 1:
            problem = (
                "for-each-flow-start",
                f"the flow {flow_id!r} that forEach node {node.id!r} runs must start with "
                "exactly one node after its start node",
            )
        if problem is not None:
            diagnostics.append(
                Diagnostic(problem[0], problem[1], node_id=node.id, pointer=flow_pointer)
            )
            nodes.append(node)
            continue
        end_id = f"{node.id}{NAMESPACE_SEPARATOR}end"
        body_end = Node(id=end_id, type="end", name=f"{node.title} (item done)", data=copy.end_data)
        pointers[end_id] = pointers.get(node.id, "")
        bodies[node.id] = entries[0]
        nodes.append(node)
        nodes += [*copy.nodes, body_end]
        connections += copy.connections
        connections += [
            Connection.model_validate(
                {"id": f"{end_id}:{source}", "from": source, "to": end_id, "fromPort": port}
            )
            for source, port in copy.exits
        ]
    return workflow.model_copy(update={"nodes": nodes, "connections": connections}), diagnostics


class ForEachLowerer:
    """``forEach``: FOR_EACH, running its flow once per item."""

    node_type: ClassVar[str] = "forEach"

    def ports(self, node: Node) -> list[str]:
        return [SEQUENTIAL_PORT, FAILED_PORT]

    def lower(self, node: Node, ctx: LoweringContext) -> NodeLowering:
        items = get_str(ctx, node, "items", required=True) or ""
        flow_id = get_str(ctx, node, "subAgentFlowId", required=True)
        body = ctx.for_each_bodies.get(node.id)
        known = [f.id for f in ctx.workflow.sub_agent_flows]
        if (
            flow_id
            and body is None
            and not any(
                d.node_id == node.id
                and d.code in ("for-each-flow-start", "subflow-expansion-too-large")
                for d in ctx.diagnostics
            )
        ):
            if flow_id in known:
                # Only the document's own forEach nodes are expanded: this one is a
                # copy, made with the flow of a forEach or subAgentFlow node around it.
                ctx.error(
                    node,
                    "for-each-nested",
                    f"forEach node {node.id!r} is inside a sub-flow; only the workflow's "
                    "own forEach nodes run: move it into the workflow's nodes",
                )
            else:
                ctx.error(
                    node,
                    "subflow-unknown",
                    f"no subAgentFlow with id {flow_id!r}{did_you_mean(flow_id, known)}",
                    "data",
                    "subAgentFlowId",
                )
        concurrency = get_number(ctx, node, "maxConcurrency", integer=True, minimum=1)
        if isinstance(concurrency, int) and concurrency > MAX_CONCURRENCY:
            ctx.error(
                node,
                "invalid-field",
                f"data.maxConcurrency must be at most {MAX_CONCURRENCY}",
                "data",
                "maxConcurrency",
            )
            concurrency = MAX_CONCURRENCY
        on_error = get_str(ctx, node, "onItemError") or "fail"
        if on_error not in ("fail", "collect"):
            ctx.error(
                node,
                "invalid-field",
                'data.onItemError is "fail" or "collect"',
                "data",
                "onItemError",
            )
            on_error = "fail"
        reads = ctx.use_template(node, items, "data", "items")
        op = ForEachOp(
            id=node.id,
            source_node=node.id,
            name=node.title,
            items=items,
            body=str(body or ""),
            max_concurrency=concurrency or 8,
            on_item_error=on_error,  # type: ignore[arg-type]
            writes=path_text("$vars", node.id, "result"),
            reads=sorted(set(reads)),
        )
        return NodeLowering.single(
            op,
            ports=self.ports(node),
            result_schema={"type": "array"},
            produces=("result", "item", "index"),
        )

"""Inline ``subAgentFlow`` nodes: a pure pass from one Workflow to another.

Each inner node ``x`` of a flow used by node ``call`` becomes ``call__x`` (its
``$vars.x`` references are rewritten to ``$vars.call__x``). Edges into ``call``
go to what follows the flow's start; what led to the flow's end goes to what
follows ``call``. Nested flows are expanded up to ``MAX_DEPTH``; a flow that
uses itself is reported, not expanded forever.
"""

from __future__ import annotations

import re
from typing import Any

from lattice.document.loader import pointer_join
from lattice.document.models import SEQUENTIAL_PORT, Connection, Node, SubAgentFlow, Workflow
from lattice.errors import Diagnostic

NAMESPACE_SEPARATOR = "__"
MAX_DEPTH = 8


def _flow_id(node: Node) -> str | None:
    value = node.data.get("subAgentFlowId")
    return value if isinstance(value, str) else None


def _rewrite(value: Any, pattern: re.Pattern[str], prefix: str) -> Any:
    """Namespace references to inner nodes: ``$vars.x`` in templates and ``vars.x`` /
    ``vars."x"`` in JMESPath expressions."""
    if isinstance(value, str):
        return pattern.sub(lambda m: f"{m.group(1)}{m.group(2) or ''}{prefix}{m.group(3)}", value)
    if isinstance(value, list):
        return [_rewrite(v, pattern, prefix) for v in value]
    if isinstance(value, dict):
        return {k: _rewrite(v, pattern, prefix) for k, v in value.items()}
    return value


def _expand_one(
    call: Node, flow: SubAgentFlow, flow_pointer: str, pointers: dict[str, str]
) -> tuple[list[Node], list[Connection], list[str], list[tuple[str, str]]]:
    """Inner nodes and edges of ``flow`` namespaced under ``call``, plus entry targets and exit sources."""
    prefix = call.id + NAMESPACE_SEPARATOR
    inner_ids = sorted((n.id for n in flow.nodes), key=len, reverse=True)
    names = "|".join(re.escape(i) for i in inner_ids)
    pattern = (
        re.compile(r'((?<![\w$])vars\.|\$vars\.)(")?(' + names + r")(?![\w-])")
        if inner_ids
        else None
    )
    starts = {n.id for n in flow.nodes if n.type == "start"}
    ends = {n.id for n in flow.nodes if n.type == "end"}
    nodes: list[Node] = []
    for index, inner in enumerate(flow.nodes):
        if inner.id in starts or inner.id in ends:
            continue
        data = _rewrite(inner.data, pattern, prefix) if pattern else inner.data
        nodes.append(inner.model_copy(update={"id": prefix + inner.id, "data": data}))
        pointers[prefix + inner.id] = pointer_join(flow_pointer, "nodes", index)
    edges: list[Connection] = []
    entries: list[str] = []
    exits: list[tuple[str, str]] = []
    for conn in flow.connections:
        if conn.source in starts and conn.target in ends:
            entries.append("")  # an empty flow passes straight through
        elif conn.source in starts:
            entries.append(prefix + conn.target)
        elif conn.target in ends:
            exits.append((prefix + conn.source, conn.from_port or SEQUENTIAL_PORT))
        else:
            edges.append(
                conn.model_copy(
                    update={"source": prefix + conn.source, "target": prefix + conn.target}
                )
            )
    return nodes, edges, entries, exits


def inline_subflows(
    workflow: Workflow, pointers: dict[str, str]
) -> tuple[Workflow, list[Diagnostic]]:
    """Return a workflow with every resolvable ``subAgentFlow`` node replaced by its flow.

    ``pointers`` (node id → JSON pointer) is extended with the inlined nodes.
    Unresolvable references are left in place for the subAgentFlow lowerer to report.
    """
    if not any(n.type == "subAgentFlow" for n in workflow.nodes):
        return workflow, []
    flows = {
        f.id: (f, pointer_join(workflow.pointer_base, "subAgentFlows", i))
        for i, f in enumerate(workflow.sub_agent_flows)
    }
    diagnostics: list[Diagnostic] = []
    nodes, connections = list(workflow.nodes), list(workflow.connections)
    for _depth in range(MAX_DEPTH):
        calls = [n for n in nodes if n.type == "subAgentFlow" and _flow_id(n) in flows]
        if not calls:
            break
        for call in calls:
            flow, flow_pointer = flows[str(_flow_id(call))]
            inner, inner_edges, entries, exits = _expand_one(call, flow, flow_pointer, pointers)
            nodes = [n for n in nodes if n.id != call.id] + inner
            rewired: list[Connection] = []
            for conn in connections:
                if conn.target == call.id:
                    rewired += [conn.model_copy(update={"target": t}) for t in entries if t]
                    if "" in entries:  # pass-through: connect straight to what follows the call
                        rewired += [
                            conn.model_copy(update={"target": out.target})
                            for out in connections
                            if out.source == call.id
                        ]
                elif conn.source == call.id:
                    rewired += [
                        conn.model_copy(update={"source": src, "from_port": port})
                        for src, port in exits
                    ]
                else:
                    rewired.append(conn)
            connections = rewired + inner_edges
    else:
        leftover = [n for n in nodes if n.type == "subAgentFlow"]
        for node in leftover:
            diagnostics.append(
                Diagnostic(
                    "subflow-recursive",
                    "subAgentFlow nesting is too deep or recursive",
                    node_id=node.id,
                    pointer=pointers.get(node.id, ""),
                )
            )
        dropped = {n.id for n in leftover}
        nodes = [n for n in nodes if n.id not in dropped]
        connections = [
            c for c in connections if c.source not in dropped and c.target not in dropped
        ]
    return workflow.model_copy(update={"nodes": nodes, "connections": connections}), diagnostics


def namespace_refs(value: Any, inner_ids: list[str], prefix: str) -> Any:
    """``value`` with its references to the nodes ``inner_ids`` namespaced under
    ``prefix`` (``$vars.x`` → ``$vars.<prefix>x``), as inlining does to inner nodes."""
    if not inner_ids:
        return value
    names = "|".join(re.escape(i) for i in sorted(inner_ids, key=len, reverse=True))
    pattern = re.compile(r'((?<![\w$])vars\.|\$vars\.)(")?(' + names + r")(?![\w-])")
    return _rewrite(value, pattern, prefix)


"""Inline ``subAgentFlow`` nodes: a pure pass from one Workflow to another.

Each inner node ``x`` of a flow used by node ``call`` becomes ``call__x`` (its
``$vars.x`` references are rewritten to ``$vars.call__x``). Edges into ``call``
go to what follows the flow's start; what led to the flow's end goes to what
follows ``call``.

Expansion is bounded, so a short document cannot make lowering do exponential work:

- a call to a flow that is already being expanded around it (a flow that uses itself,
  directly or through others) is ``subflow-recursive``;
- flows nest at most ``MAX_DEPTH`` deep (``subflow-too-deep``);
- inlining creates at most ``MAX_INLINED_ITEMS`` nodes and connections and copies at
  most ``MAX_INLINED_DATA`` characters of node data (``subflow-expansion-too-large``).

A call that is not expanded is dropped with its connections (its diagnostic says why),
and each diagnostic is reported once per place in the document. The work is linear in
the size of what is inlined.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from lattice.document.loader import pointer_join
from lattice.document.models import SEQUENTIAL_PORT, Connection, Node, SubAgentFlow, Workflow
from lattice.errors import Diagnostic

NAMESPACE_SEPARATOR = "__"
MAX_DEPTH = 8
"""Deepest nesting of sub-flows (a flow that calls a flow ... eight levels)."""
MAX_INLINED_ITEMS = 50_000
"""Most nodes plus connections that inlining may create in one document."""
MAX_INLINED_DATA = 16 * 1024 * 1024
"""Most characters of node data that inlining may copy in one document."""


FLOW_MODELS = frozenset({"haiku", "sonnet", "opus"})
"""A subAgentFlow node's ``model`` values that its flow's nodes take (``inherit``: none)."""
MODEL_TAKERS = frozenset({"prompt", "subAgent", "skill", "subAgentFlow"})
"""Node types inside a flow that take the calling node's ``model`` when they name none."""


def _flow_id(node: Node) -> str | None:
    value = node.data.get("subAgentFlowId")
    return value if isinstance(value, str) else None


def _rewrite(value: Any, pattern: re.Pattern[str], prefix: str) -> Any:
    """Namespace references to inner nodes: ``$vars.x`` in templates and ``vars.x`` /
    ``vars."x"`` in JMESPath expressions. (Values are at most MAX_JSON_DEPTH deep.)"""
    if isinstance(value, str):
        return pattern.sub(lambda m: f"{m.group(1)}{m.group(2) or ''}{prefix}{m.group(3)}", value)
    if isinstance(value, list):
        return [_rewrite(v, pattern, prefix) for v in value]
    if isinstance(value, dict):
        return {k: _rewrite(v, pattern, prefix) for k, v in value.items()}
    return value


def data_size(value: Any) -> int:
    """About how many characters ``value`` takes as JSON (iterative)."""
    size, stack = 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            size += len(item) + 2
        elif isinstance(item, dict):
            size += 2 + sum(len(k) + 3 for k in item)
            stack.extend(item.values())
        elif isinstance(item, list):
            size += 2 + len(item)
            stack.extend(item)
        else:
            size += 4
    return size


@dataclass
class _Flow:
    """A flow with what expanding it needs, computed once."""

    flow: SubAgentFlow
    pointer: str
    pattern: re.Pattern[str] | None
    nodes: int
    data: int
    tool_takers: int
    """Inner ``subAgent`` nodes that take the calling node's ``tools`` (each a copy)."""


def _prepare(flow: SubAgentFlow, pointer: str) -> _Flow:
    inner_ids = sorted((n.id for n in flow.nodes), key=len, reverse=True)
    names = "|".join(re.escape(i) for i in inner_ids)
    pattern = (
        re.compile(r'((?<![\w$])vars\.|\$vars\.)(")?(' + names + r")(?![\w-])")
        if inner_ids
        else None
    )
    data = sum(data_size(n.data) for n in flow.nodes)
    takers = sum(1 for n in flow.nodes if _takes_call_tools(n, n.data))
    return _Flow(flow, pointer, pattern, len(flow.nodes) + len(flow.connections), data, takers)


def _takes_call_tools(inner: Node, data: dict[str, Any]) -> bool:
    """Whether ``inner`` is a ``subAgent`` that names no tools of its own."""
    if inner.type != "subAgent":
        return False
    return data.get("tools") in (None, "", []) and data.get("builtInType") is None


def _with_call_tools(call: Node, inner: Node, data: dict[str, Any]) -> dict[str, Any]:
    """An inner ``subAgent`` that names no tools of its own (no ``tools``, no
    ``builtInType``) gets the calling node's ``tools``: the flow runs as an agent with
    them (docs/agents.md); the user's grant still decides what it gets."""
    tools = call.data.get("tools")
    if tools in (None, "", []) or not _takes_call_tools(inner, data):
        return data
    return {**data, "tools": tools}


def _expand_one(
    call: Node, prepared: _Flow, pointers: dict[str, str]
) -> tuple[list[Node], list[Connection], list[str], list[tuple[str, str]]]:
    """Inner nodes and edges of the flow namespaced under ``call``, plus entry targets and exit sources."""
    flow, pattern = prepared.flow, prepared.pattern
    prefix = call.id + NAMESPACE_SEPARATOR
    starts = {n.id for n in flow.nodes if n.type == "start"}
    ends = {n.id for n in flow.nodes if n.type == "end"}
    nodes: list[Node] = []
    model = call.data.get("model")
    for index, inner in enumerate(flow.nodes):
        if inner.id in starts or inner.id in ends:
            continue
        data = _rewrite(inner.data, pattern, prefix) if pattern else inner.data
        named = "model" in data or "modelClass" in data
        if (
            isinstance(model, str)
            and model in FLOW_MODELS
            and inner.type in MODEL_TAKERS
            and not named
        ):
            data = {**data, "model": model}
        data = _with_call_tools(call, inner, data)
        nodes.append(inner.model_copy(update={"id": prefix + inner.id, "data": data}))
        pointers[prefix + inner.id] = pointer_join(prepared.pointer, "nodes", index)
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


Key = tuple[int, ...]


@dataclass
class _Edges:
    """The connections in document order, indexed by source and target.

    A connection replaced by others keeps its place: the replacements get its key plus
    one more number, so sorting keys gives the order of rebuilding the whole list after
    each call, without rebuilding it.
    """

    items: dict[int, tuple[Key, Connection]] = field(default_factory=dict)
    by_source: dict[str, set[int]] = field(default_factory=dict)
    by_target: dict[str, set[int]] = field(default_factory=dict)
    counter: int = 0
    tail: int = 0

    @classmethod
    def of(cls, connections: list[Connection]) -> _Edges:
        edges = cls()
        for conn in connections:
            edges.append(conn)
        return edges

    def add(self, key: Key, conn: Connection) -> None:
        link = self.counter
        self.counter += 1
        self.items[link] = (key, conn)
        self.by_source.setdefault(conn.source, set()).add(link)
        self.by_target.setdefault(conn.target, set()).add(link)

    def append(self, conn: Connection) -> None:
        self.add((self.tail,), conn)
        self.tail += 1

    def remove(self, link: int) -> None:
        _, conn = self.items.pop(link)
        self.by_source[conn.source].discard(link)
        self.by_target[conn.target].discard(link)

    def _sorted(self, links: set[int]) -> list[tuple[Key, int, Connection]]:
        return sorted((self.items[i][0], i, self.items[i][1]) for i in links)

    def with_source(self, node_id: str) -> list[tuple[Key, int, Connection]]:
        return self._sorted(self.by_source.get(node_id, set()))

    def with_target(self, node_id: str) -> list[tuple[Key, int, Connection]]:
        return self._sorted(self.by_target.get(node_id, set()))

    def ordered(self) -> list[Connection]:
        return [conn for _, conn in sorted(self.items.values(), key=lambda item: item[0])]


class _Inliner:
    def __init__(self, workflow: Workflow, pointers: dict[str, str]) -> None:
        self.pointers = pointers
        self.flows = {
            f.id: (f, pointer_join(workflow.pointer_base, "subAgentFlows", i))
            for i, f in enumerate(workflow.sub_agent_flows)
        }
        self.prepared: dict[str, _Flow] = {}
        self.diagnostics: list[Diagnostic] = []
        self._reported: set[tuple[str, str]] = set()
        self.items = 0
        self.data = 0
        self.over_budget = False

    def report(self, code: str, message: str, node: Node) -> None:
        pointer = self.pointers.get(node.id, "")
        if (code, pointer) in self._reported:
            return
        self._reported.add((code, pointer))
        self.diagnostics.append(Diagnostic(code, message, node_id=node.id, pointer=pointer))

    def flow(self, flow_id: str) -> _Flow:
        prepared = self.prepared.get(flow_id)
        if prepared is None:
            flow, pointer = self.flows[flow_id]
            prepared = self.prepared[flow_id] = _prepare(flow, pointer)
        return prepared

    def take(self, items: int, data: int, call: Node) -> bool:
        """Charge ``items`` and ``data`` to the budget; False (reported once) past it."""
        if self.over_budget:
            return False
        if self.items + items > MAX_INLINED_ITEMS or self.data + data > MAX_INLINED_DATA:
            self.over_budget = True
            self.report(
                "subflow-expansion-too-large",
                f"inlining sub-flows would create more than {MAX_INLINED_ITEMS:,} nodes and "
                f"connections or copy more than {MAX_INLINED_DATA:,} characters of node data; "
                "this call and the calls after it are not expanded",
                call,
            )
            return False
        self.items += items
        self.data += data
        return True

    def run(self, workflow: Workflow) -> Workflow:
        nodes = list(workflow.nodes)
        edges = _Edges.of(list(workflow.connections))
        chains: dict[str, tuple[str, ...]] = {}
        """Node id → the flows being expanded around it (outermost first)."""
        dropped: set[str] = set()
        while True:
            calls = [n for n in nodes if n.type == "subAgentFlow" and _flow_id(n) in self.flows]
            if not calls:
                break
            expansions: list[tuple[Node, list[Node]]] = []
            for call in calls:
                flow_id = str(_flow_id(call))
                chain = chains.get(call.id, ())
                inner = self._expand(call, flow_id, chain, edges, chains)
                if inner is None:
                    dropped.add(call.id)
                else:
                    expansions.append((call, inner))
            nodes = self._replace(nodes, calls, expansions)
        if dropped:
            nodes = [n for n in nodes if n.id not in dropped]
            keep = [
                c for c in edges.ordered() if c.source not in dropped and c.target not in dropped
            ]
            edges = _Edges.of(keep)
        return workflow.model_copy(update={"nodes": nodes, "connections": edges.ordered()})

    def _expand(
        self,
        call: Node,
        flow_id: str,
        chain: tuple[str, ...],
        edges: _Edges,
        chains: dict[str, tuple[str, ...]],
    ) -> list[Node] | None:
        """Expand one call in place in ``edges``; its inner nodes, or None when it is dropped."""
        if flow_id in chain:
            path = " → ".join((*chain[chain.index(flow_id) :], flow_id))
            self.report(
                "subflow-recursive",
                f"subAgentFlow {flow_id!r} uses itself ({path}); a flow cannot be inlined into itself",
                call,
            )
            return None
        if len(chain) >= MAX_DEPTH:
            self.report(
                "subflow-too-deep",
                f"sub-flows nest more than {MAX_DEPTH} levels deep ({' → '.join((*chain, flow_id))})",
                call,
            )
            return None
        prepared = self.flow(flow_id)
        targets = edges.with_target(call.id)
        sources = [e for e in edges.with_source(call.id) if e[2].target != call.id]
        outs = edges.with_source(call.id)
        copied = prepared.data + prepared.tool_takers * data_size(call.data.get("tools"))
        if not self.take(prepared.nodes, copied, call):
            return None
        inner, inner_edges, entries, exits = _expand_one(call, prepared, self.pointers)
        through = "" in entries
        rewired = len(targets) * (sum(1 for t in entries if t) + (len(outs) if through else 0))
        if not self.take(rewired + len(sources) * len(exits), 0, call):
            return None
        for key, link, conn in targets:
            edges.remove(link)
            new = [conn.model_copy(update={"target": t}) for t in entries if t]
            if through:  # pass-through: connect straight to what follows the call
                new += [conn.model_copy(update={"target": out.target}) for _, _, out in outs]
            for k, replacement in enumerate(new):
                edges.add((*key, k), replacement)
        for key, link, conn in sources:
            edges.remove(link)
            for k, (src, port) in enumerate(exits):
                edges.add((*key, k), conn.model_copy(update={"source": src, "from_port": port}))
        for edge in inner_edges:
            edges.append(edge)
        inner_chain = (*chain, flow_id)
        for node in inner:
            chains[node.id] = inner_chain
        return inner

    @staticmethod
    def _replace(
        nodes: list[Node], calls: list[Node], expansions: list[tuple[Node, list[Node]]]
    ) -> list[Node]:
        """The node list after one round: each call's id removed, its inner nodes appended
        (as removing and appending one call after the other would leave it)."""
        last_call = {call.id: i for i, call in enumerate(calls)}
        call_ids = set(last_call)
        out = [n for n in nodes if n.id not in call_ids]
        position = {id(call): i for i, call in enumerate(calls)}
        for call, inner in expansions:
            here = position[id(call)]
            out += [n for n in inner if last_call.get(n.id, -1) <= here]
        return out


def inline_subflows(
    workflow: Workflow, pointers: dict[str, str]
) -> tuple[Workflow, list[Diagnostic]]:
    """Return a workflow with every resolvable ``subAgentFlow`` node replaced by its flow.

    ``pointers`` (node id → JSON pointer) is extended with the inlined nodes.
    Unresolvable references are left in place for the subAgentFlow lowerer to report.
    """
    if not any(n.type == "subAgentFlow" for n in workflow.nodes):
        return workflow, []
    inliner = _Inliner(workflow, pointers)
    return inliner.run(workflow), inliner.diagnostics


@dataclass
class FlowCopy:
    """A flow copied under a node's namespace (``lattice.lower.foreach``)."""

    nodes: list[Node]
    connections: list[Connection]
    entries: list[str]
    """The first inner nodes (what the flow's start leads to)."""
    exits: list[tuple[str, str]]
    """(inner node, port) of each connection that led to the flow's end."""
    end_data: dict[str, Any]
    """The flow's end node data, its references namespaced too."""
    size: tuple[int, int]
    """(nodes and connections, characters of data) copied: what it costs."""


def copy_flow(
    call: Node, flow: SubAgentFlow, flow_pointer: str, pointers: dict[str, str]
) -> FlowCopy:
    """``flow``'s nodes and connections namespaced under ``call`` (``<call>__<inner>``), as
    inlining does, with its end node's data; ``pointers`` gets the copies' locations."""
    prepared = _prepare(flow, flow_pointer)
    nodes, edges, entries, exits = _expand_one(call, prepared, pointers)
    end = next((n for n in flow.nodes if n.type == "end"), None)
    end_data: dict[str, Any] = {}
    if end is not None:
        prefix = call.id + NAMESPACE_SEPARATOR
        end_data = (
            _rewrite(dict(end.data), prepared.pattern, prefix)
            if prepared.pattern
            else dict(end.data)
        )
    return FlowCopy(nodes, edges, entries, exits, end_data, (prepared.nodes, prepared.data))

"""The linear algorithms give exactly what the simple ones gave.

Sub-flow inlining, "what flows into this node" (an LLM op's context) and reachability
were rewritten to cost time in proportion to the document; node and connection order,
context order and every answer feed the IR, so each is compared here with the simple
algorithm it replaced, on random graphs.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lattice.document.loader import parse_workflow
from lattice.document.models import SEQUENTIAL_PORT, Connection, Node, Workflow
from lattice.lower.checks import Reachability
from lattice.lower.graph import DiGraph
from lattice.lower.registry import PRODUCER_TYPES, ROUTING_TYPES, LoweringContext
from lattice.lower.subflows import NAMESPACE_SEPARATOR, inline_subflows
from tests.builders import node

# --- the simple algorithms (as they were) -----------------------------------------------------


def _reference_inline(workflow: Workflow) -> tuple[list[str], list[tuple[str, str, str | None]]]:
    """Round by round, call by call, rebuilding the node and connection lists each time."""
    flows = {f.id: f for f in workflow.sub_agent_flows}
    nodes, connections = list(workflow.nodes), list(workflow.connections)
    for _ in range(8):
        calls = [
            n for n in nodes if n.type == "subAgentFlow" and n.data.get("subAgentFlowId") in flows
        ]
        if not calls:
            break
        for call in calls:
            flow = flows[call.data["subAgentFlowId"]]
            prefix = call.id + NAMESPACE_SEPARATOR
            starts = {n.id for n in flow.nodes if n.type == "start"}
            ends = {n.id for n in flow.nodes if n.type == "end"}
            inner = [
                n.model_copy(update={"id": prefix + n.id})
                for n in flow.nodes
                if n.id not in starts and n.id not in ends
            ]
            inner_edges: list[Connection] = []
            entries: list[str] = []
            exits: list[tuple[str, str]] = []
            for conn in flow.connections:
                if conn.source in starts and conn.target in ends:
                    entries.append("")
                elif conn.source in starts:
                    entries.append(prefix + conn.target)
                elif conn.target in ends:
                    exits.append((prefix + conn.source, conn.from_port or SEQUENTIAL_PORT))
                else:
                    inner_edges.append(
                        conn.model_copy(
                            update={"source": prefix + conn.source, "target": prefix + conn.target}
                        )
                    )
            nodes = [n for n in nodes if n.id != call.id] + inner
            rewired: list[Connection] = []
            for conn in connections:
                if conn.target == call.id:
                    rewired += [conn.model_copy(update={"target": t}) for t in entries if t]
                    if "" in entries:
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
    return [n.id for n in nodes], [(c.source, c.target, c.from_port) for c in connections]


def _reference_upstream(ctx: LoweringContext, node_id: str) -> list[str]:
    out: list[str] = []
    seen = {node_id}
    queue = list(ctx.incoming.get(node_id, []))
    while queue:
        source = queue.pop(0)
        if source in seen or source not in ctx.nodes:
            continue
        seen.add(source)
        found = ctx.nodes[source]
        if found.type == "start":
            out.append("$in")
        elif found.type in PRODUCER_TYPES or (
            found.type == "variableStore" and found.data.get("operation") == "get"
        ):
            out.append(f"$vars.{source}.result")
        if found.type in ROUTING_TYPES:
            queue.extend(ctx.incoming.get(source, []))
    return out


# --- random documents -------------------------------------------------------------------------

TYPES = ["prompt", "ifElse", "switch", "askUserQuestion", "variableStore", "start", "codex"]


def _random_flow_doc(rng: random.Random) -> dict[str, Any]:
    """Flows f0..fk where fi may call fj (j > i), wired at random, pass-throughs included."""
    count = rng.randint(1, 4)
    flows = []
    for i in range(count):
        inner = []
        for j in range(rng.randint(0, 4)):
            if i + 1 < count and rng.random() < 0.5:
                inner.append(
                    node(
                        f"n{j}", "subAgentFlow", subAgentFlowId=f"f{rng.randint(i + 1, count - 1)}"
                    )
                )
            else:
                inner.append(node(f"n{j}", rng.choice(["prompt", "codex"]), prompt="x"))
        ids = [n["id"] for n in inner]
        ends = ["s", *ids, "e"]
        conns = [
            {
                "from": rng.choice(ends[:-1]),
                "to": rng.choice(ends[1:]),
                "fromPort": rng.choice([None, "failed"]),
            }
            for _ in range(rng.randint(0, 6))
        ]
        flows.append(
            {
                "id": f"f{i}",
                "nodes": [node("s", "start"), *inner, node("e", "end")],
                "connections": conns,
            }
        )
    top = [node("start", "start"), node("end", "end")]
    top += [
        node(f"c{k}", "subAgentFlow", subAgentFlowId=f"f{rng.randrange(count)}")
        for k in range(rng.randint(1, 4))
    ]
    top += [node(f"p{k}", "prompt", prompt="x") for k in range(rng.randint(0, 3))]
    ids = [n["id"] for n in top]
    conns = [{"from": rng.choice(ids), "to": rng.choice(ids)} for _ in range(rng.randint(0, 12))]
    return {"nodes": top, "connections": conns, "subAgentFlows": flows}


@settings(max_examples=300, deadline=None)
@given(rnd=st.randoms(use_true_random=False))
def test_inlining_keeps_the_order_of_the_simple_algorithm(rnd: random.Random) -> None:
    workflow, diagnostics = parse_workflow(_random_flow_doc(rnd))
    assert workflow is not None and diagnostics == []
    inlined, found = inline_subflows(workflow, {})
    assert found == []
    nodes, connections = _reference_inline(workflow)
    assert [n.id for n in inlined.nodes] == nodes
    assert [(c.source, c.target, c.from_port) for c in inlined.connections] == connections


def _random_graph(rng: random.Random, size: int) -> Workflow:
    nodes: list[dict[str, Any]] = []
    for i in range(size):
        kind = rng.choice(TYPES)
        data = {"operation": rng.choice(["get", "set"])} if kind == "variableStore" else {}
        nodes.append(node(f"n{i}", kind, **data))
    ids = [n["id"] for n in nodes] + ["ghost"]
    conns = []
    for i in range(size):  # mostly chains (single sources), some fan-in, loops and self-loops
        if i and rng.random() < 0.8:
            conns.append({"from": f"n{i - 1}", "to": f"n{i}"})
        if rng.random() < 0.25:
            conns.append({"from": rng.choice(ids), "to": f"n{i}"})
    workflow, _ = parse_workflow({"nodes": nodes, "connections": conns})
    assert workflow is not None
    return workflow


@settings(max_examples=200, deadline=None)
@given(rnd=st.randoms(use_true_random=False), size=st.integers(min_value=1, max_value=40))
def test_upstream_results_match_the_plain_walk(rnd: random.Random, size: int) -> None:
    workflow = _random_graph(rnd, size)
    ctx = LoweringContext(workflow)
    order = [n.id for n in workflow.nodes]
    rnd.shuffle(order)  # memoised answers must not depend on the order of the questions
    for node_id in order:
        assert ctx.upstream_results(node_id) == _reference_upstream(ctx, node_id), node_id


def test_long_routing_chains_reuse_answers() -> None:
    nodes = [Node(id="start", type="start")] + [
        Node(id=f"v{i}", type="variableStore", data={"operation": "set"}) for i in range(3_000)
    ]
    ids = [n.id for n in nodes]
    conns = [Connection.model_validate({"from": a, "to": b}) for a, b in itertools.pairwise(ids)]
    ctx = LoweringContext(Workflow(nodes=nodes, connections=conns))
    walks = 0
    walk = ctx._walk

    def counting(node_id: str) -> list[tuple[str, str]]:
        nonlocal walks
        walks += 1
        return walk(node_id)

    ctx._walk = counting  # type: ignore[method-assign]
    for node_id in reversed(ids):  # the worst order for reuse
        assert ctx.upstream_results(node_id) == ([] if node_id == "start" else ["$in"])
    assert walks <= 2


@settings(max_examples=150, deadline=None)
@given(rnd=st.randoms(use_true_random=False), size=st.integers(min_value=2, max_value=400))
def test_reachability_matches_networkx(rnd: random.Random, size: int) -> None:
    graph: nx.DiGraph = nx.DiGraph()
    graph.add_nodes_from(range(size))
    for i in range(1, size):
        if rnd.random() < 0.9:
            graph.add_edge(i - 1, i)
        if rnd.random() < 0.2:
            graph.add_edge(rnd.randrange(size), rnd.randrange(size))
    for _ in range(rnd.randint(0, 5)):  # wide fan-in, to push searches past their budget
        target = rnd.randrange(size)
        for source in rnd.sample(range(size), min(size, 80)):
            graph.add_edge(source, target)
    named = nx.relabel_nodes(graph, {i: f"n{i}" for i in range(size)})
    ours: DiGraph[str] = DiGraph()
    for name in named:
        ours.add_node(name)
    for a, b in named.edges:
        ours.add_edge(a, b)
    reach = Reachability(ours)
    queries = [(f"n{rnd.randrange(size)}", f"n{rnd.randrange(size)}") for _ in range(300)]
    shape = rnd.random()
    if shape < 0.25:  # many setters of one variable, read by a few nodes: a backward pass
        readers = [f"n{rnd.randrange(size)}" for _ in range(3)]
        queries = [(f"n{rnd.randrange(size)}", rnd.choice(readers)) for _ in range(300)]
    elif shape < 0.5:  # one producer read by many nodes: a forward pass
        producers = [f"n{rnd.randrange(size)}" for _ in range(3)]
        queries = [(rnd.choice(producers), f"n{rnd.randrange(size)}") for _ in range(300)]
    if rnd.random() < 0.5:  # answered together ahead (some of them), or one by one
        reach.prepare(queries[: rnd.randrange(len(queries))])
    for a, b in queries:
        # "a can run before b": a path of one or more edges from a to b.
        expected = any(nx.has_path(named, s, b) for s in named.successors(a))
        assert reach.reaches(a, b) == expected, (a, b)


@settings(max_examples=100, deadline=None)
@given(rnd=st.randoms(use_true_random=False), size=st.integers(min_value=2, max_value=300))
def test_a_group_reaches_what_any_of_its_members_reaches(rnd: random.Random, size: int) -> None:
    """The setters of a variable are asked about as one stand-in: it must answer what
    asking each setter would (networkx), cycles and self-loops included."""
    graph: nx.DiGraph = nx.DiGraph()
    graph.add_nodes_from(f"n{i}" for i in range(size))
    for i in range(1, size):
        if rnd.random() < 0.8:
            graph.add_edge(f"n{i - 1}", f"n{i}")
        if rnd.random() < 0.3:
            graph.add_edge(f"n{rnd.randrange(size)}", f"n{rnd.randrange(size)}")
    ours: DiGraph[str] = DiGraph()
    for name in graph:
        ours.add_node(name)
    for a, b in graph.edges:
        ours.add_edge(a, b)
    ours.add_node("\0any of x")  # a node named like the stand-in does not confuse it
    groups = {
        f"g{k}": [f"n{rnd.randrange(size)}" for _ in range(rnd.randint(1, 12))] for k in range(4)
    }
    groups["gone"] = ["not-a-node"]
    groups["x"] = [f"n{rnd.randrange(size)}" for _ in range(5)]
    reach = Reachability(ours, groups=groups)
    assert reach.any_of("gone") is None
    queries = [(g, f"n{rnd.randrange(size)}") for g in groups if g != "gone" for _ in range(40)]
    if rnd.random() < 0.5:
        reach.prepare((reach.any_of(g) or "", b) for g, b in queries)
    for group, b in queries:
        source = reach.any_of(group)
        assert source is not None
        expected = any(
            nx.has_path(graph, s, b) for member in groups[group] for s in graph.successors(member)
        )
        assert reach.reaches(source, b) == expected, (group, b)


def test_far_queries_are_answered_together_in_both_directions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Many far sources of one target take one backward pass, one source of many far
    targets one forward pass; every answer is networkx's."""
    rnd = random.Random(7)
    graph: nx.DiGraph = nx.DiGraph()
    width, depth = 10, 40  # layers joined all-to-all: a short backward search gives up
    for layer in range(depth - 1):
        for i in range(width):
            for j in range(width):
                if rnd.random() < 0.8:
                    graph.add_edge(f"n{layer}.{i}", f"n{layer + 1}.{j}")
    graph.add_edge("n20.3", "n20.3")  # and a loop
    graph.add_node("alone")
    ours: DiGraph[str] = DiGraph()
    for name in graph:
        ours.add_node(name)
    for a, b in graph.edges:
        ours.add_edge(a, b)
    passes: list[bool] = []
    real = Reachability._passes

    def spy(queries: Any, neighbours: Any, *, forward: bool) -> Any:
        if queries:
            passes.append(forward)
        return real(queries, neighbours, forward=forward)

    monkeypatch.setattr(Reachability, "_passes", staticmethod(spy))
    early = [f"n{layer}.{i}" for layer in range(3) for i in range(width)]
    late = [f"n{layer}.{i}" for layer in range(depth - 3, depth) for i in range(width)]
    queries = [(source, "n39.5") for source in early]  # many setters, one reader
    queries += [("n1.1", target) for target in late]  # one producer, many readers
    queries += [(source, "alone") for source in late] + [("alone", t) for t in early]
    reach = Reachability(ours)
    reach.prepare(queries)
    assert sorted(passes) == [False, True]
    for a, b in queries:
        expected = any(nx.has_path(graph, s, b) for s in graph.successors(a))
        assert reach.reaches(a, b) == expected, (a, b)

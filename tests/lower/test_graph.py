"""``lattice.lower.graph`` answers as networkx does, on random directed graphs."""

from __future__ import annotations

import random

import networkx as nx
from hypothesis import given, settings
from hypothesis import strategies as st

from lattice.lower.graph import (
    Condensation,
    DiGraph,
    immediate_dominators,
    reached,
    strongly_connected_components,
)


def _graphs(rnd: random.Random, size: int) -> tuple[DiGraph[int], nx.DiGraph]:
    """The same random graph twice: chains, back edges, self-loops and fan-in."""
    ours: DiGraph[int] = DiGraph()
    theirs: nx.DiGraph = nx.DiGraph()
    order = list(range(size))
    rnd.shuffle(order)  # node order is not numeric order
    for n in order:
        ours.add_node(n)
        theirs.add_node(n)
    for _ in range(rnd.randint(0, 3 * size)):
        a, b = rnd.randrange(size), rnd.randrange(size)
        if rnd.random() < 0.7 and a > b:
            a, b = b, a  # mostly forward, some back edges make cycles
        ours.add_edge(a, b)
        theirs.add_edge(a, b)
    return ours, theirs


SIZES = st.integers(min_value=1, max_value=60)


@settings(max_examples=200, deadline=None)
@given(rnd=st.randoms(use_true_random=False), size=SIZES)
def test_components_match_networkx_in_order(rnd: random.Random, size: int) -> None:
    ours, theirs = _graphs(rnd, size)
    assert list(strongly_connected_components(ours.succ)) == list(
        nx.strongly_connected_components(theirs)
    )


@settings(max_examples=200, deadline=None)
@given(rnd=st.randoms(use_true_random=False), size=SIZES)
def test_condensation_is_numbered_in_topological_order(rnd: random.Random, size: int) -> None:
    ours, theirs = _graphs(rnd, size)
    condensed = Condensation(ours)
    for a, b in theirs.edges:
        assert condensed.component[a] <= condensed.component[b]
        if condensed.component[a] != condensed.component[b]:
            assert condensed.component[b] in condensed.succ[condensed.component[a]]
            assert condensed.component[a] in condensed.pred[condensed.component[b]]
    edges = {(a, b) for a, out in enumerate(condensed.succ) for b in out}
    assert edges == {(a, b) for b, into in enumerate(condensed.pred) for a in into}
    assert sum(map(len, condensed.succ)) == len(edges) == sum(map(len, condensed.pred))
    theirs_condensed = nx.condensation(theirs)
    members: dict[int, set[int]] = {}
    for n, c in condensed.component.items():
        members.setdefault(c, set()).add(n)
    theirs_members = dict(theirs_condensed.nodes(data="members"))
    assert {(frozenset(members[a]), frozenset(members[b])) for a, b in edges} == {
        (frozenset(theirs_members[a]), frozenset(theirs_members[b]))
        for a, b in theirs_condensed.edges
    }
    assert len(condensed.size) == theirs_condensed.number_of_nodes()
    assert sorted(condensed.size) == sorted(
        len(m) for _, m in theirs_condensed.nodes(data="members")
    )
    for members in nx.strongly_connected_components(theirs):
        assert len({condensed.component[n] for n in members}) == 1


@settings(max_examples=200, deadline=None)
@given(rnd=st.randoms(use_true_random=False), size=SIZES)
def test_reached_matches_networkx_descendants_and_ancestors(rnd: random.Random, size: int) -> None:
    ours, theirs = _graphs(rnd, size)
    for n in theirs:
        assert reached(ours.succ, n) - {n} == nx.descendants(theirs, n)
        assert reached(ours.pred, n) - {n} == nx.ancestors(theirs, n)


@settings(max_examples=200, deadline=None)
@given(rnd=st.randoms(use_true_random=False), size=SIZES)
def test_immediate_dominators_match_networkx(rnd: random.Random, size: int) -> None:
    ours, theirs = _graphs(rnd, size)
    start = rnd.randrange(size)
    expected = nx.immediate_dominators(theirs, start)
    expected.pop(start, None)  # older networkx maps the start to itself
    assert immediate_dominators(ours.succ, ours.pred, start) == expected
    # on the reversed graph (post-dominators), as lowering asks
    expected = nx.immediate_dominators(theirs.reverse(copy=False), start)
    expected.pop(start, None)
    assert immediate_dominators(ours.pred, ours.succ, start) == expected


def test_deep_graphs_need_no_recursion() -> None:
    ours: DiGraph[int] = DiGraph()
    size = 50_000
    for i in range(size - 1):
        ours.add_edge(i, i + 1)
    ours.add_edge(size - 1, 0)
    assert [len(c) for c in strongly_connected_components(ours.succ)] == [size]
    assert len(reached(ours.succ, 0)) == size  # 0 lies on the cycle
    chain: DiGraph[int] = DiGraph()
    for i in range(size - 1):
        chain.add_edge(i, i + 1)
    idom = immediate_dominators(chain.succ, chain.pred, 0)
    assert idom[size - 1] == size - 2 and len(idom) == size - 1

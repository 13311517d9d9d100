"""The few directed-graph algorithms lowering needs, on a small adjacency structure.

Lowering asks five questions of its node and op graphs: strongly connected components
(loops), the condensation of a graph into its components in topological order
(reachability of template references), the nodes a node reaches or is reached from
(dead ends), and immediate dominators (where the branches of a fork meet). These
iterative versions answer them without recursion, in linear time, except dominators:
the Cooper–Harvey–Kennedy iteration (as networkx does) is near-linear in practice but
not linear in the worst case. None of them imports networkx.
``tests/lower/test_graph.py`` holds them to networkx on random graphs.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator, Mapping
from typing import Generic, Protocol, TypeVar

N = TypeVar("N", bound=Hashable)


class Adjacency(Protocol[N]):
    """Node → its neighbours: a dict of nodes, or a list indexed by component number."""

    def __getitem__(self, node: N, /) -> Iterable[N]: ...


class DiGraph(Generic[N]):
    """Nodes in insertion order; each node's successors and predecessors in the order
    their edges were added (dicts used as ordered sets, so an edge added twice is one)."""

    __slots__ = ("pred", "succ")

    def __init__(self) -> None:
        self.succ: dict[N, dict[N, None]] = {}
        self.pred: dict[N, dict[N, None]] = {}

    def add_node(self, node: N) -> None:
        if node not in self.succ:
            self.succ[node] = {}
            self.pred[node] = {}

    def add_edge(self, source: N, target: N) -> None:
        self.add_node(source)
        self.add_node(target)
        self.succ[source][target] = None
        self.pred[target][source] = None

    def has_edge(self, source: N, target: N) -> bool:
        successors = self.succ.get(source)
        return successors is not None and target in successors

    def successors(self, node: N) -> Iterable[N]:
        return self.succ[node].keys()

    def __contains__(self, node: object) -> bool:
        return node in self.succ


def strongly_connected_components(succ: Mapping[N, Iterable[N]]) -> Iterator[set[N]]:
    """The strongly connected components of the graph ``succ`` (node → successors), each
    after every component it reaches (reverse topological order).

    Tarjan's algorithm with Nuutila's refinement, without recursion; nodes and successors
    are visited in their mapping order, as networkx visits them.
    """
    preorder: dict[N, int] = {}
    lowlink: dict[N, int] = {}
    found: set[N] = set()
    waiting: list[N] = []
    pending = {node: iter(targets) for node, targets in succ.items()}
    counter = 0
    for source in succ:
        if source in found:
            continue
        stack = [source]
        while stack:
            node = stack[-1]
            if node not in preorder:
                counter += 1
                preorder[node] = counter
            descended = False
            for target in pending[node]:
                if target not in preorder:
                    stack.append(target)
                    descended = True
                    break
            if descended:
                continue
            low = preorder[node]
            for target in succ[node]:
                if target not in found:
                    other = (
                        lowlink[target] if preorder[target] > preorder[node] else preorder[target]
                    )
                    low = min(low, other)
            lowlink[node] = low
            stack.pop()
            if low == preorder[node]:
                component = {node}
                while waiting and preorder[waiting[-1]] > preorder[node]:
                    component.add(waiting.pop())
                found.update(component)
                yield component
            else:
                waiting.append(node)


class Condensation(Generic[N]):
    """A graph with each strongly connected component contracted to one node.

    Components are numbered in a topological order (every edge goes from a lower number
    to a higher one): ``component[node]`` is a node's number, ``size[c]`` how many nodes
    component ``c`` holds, ``succ[c]`` / ``pred[c]`` its neighbouring components.
    """

    __slots__ = ("component", "pred", "size", "succ")

    def __init__(self, graph: DiGraph[N] | Mapping[N, Iterable[N]]) -> None:
        """``graph``: a DiGraph, or a mapping of every node to its successors."""
        succ = graph.succ if isinstance(graph, DiGraph) else graph
        components = list(strongly_connected_components(succ))
        count = len(components)
        self.component: dict[N, int] = {}
        self.size: list[int] = []
        for index, members in enumerate(reversed(components)):  # Tarjan's order, reversed
            self.size.append(len(members))
            for node in members:
                self.component[node] = index
        self.succ: list[set[int]] = [set() for _ in range(count)]
        self.pred: list[set[int]] = [set() for _ in range(count)]
        component = self.component
        for source, targets in succ.items():
            a = component[source]
            for target in targets:
                b = component[target]
                if a != b:
                    self.succ[a].add(b)
                    self.pred[b].add(a)


def reached(neighbours: Adjacency[N], start: N) -> set[N]:
    """The nodes a path of one or more steps through ``neighbours`` leads to from
    ``start`` (``start`` itself only when it lies on a cycle)."""
    seen: set[N] = set()
    stack = [start]
    while stack:
        for nxt in neighbours[stack.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return seen


def descendants(graph: DiGraph[N], node: N) -> set[N]:
    """The nodes ``node`` reaches, itself excluded (networkx's ``descendants``)."""
    return reached(graph.succ, node) - {node}


def ancestors(graph: DiGraph[N], node: N) -> set[N]:
    """The nodes that reach ``node``, itself excluded (networkx's ``ancestors``)."""
    return reached(graph.pred, node) - {node}


def immediate_dominators(
    succ: Mapping[N, Iterable[N]], pred: Mapping[N, Iterable[N]], start: N
) -> dict[N, N]:
    """The immediate dominator of every node reachable from ``start`` through ``succ``
    (``start`` itself left out); ``pred`` is the same graph's node → predecessors.

    Cooper, Harvey and Kennedy, "A simple, fast dominance algorithm" (2006): number the
    nodes in depth-first postorder, then intersect the dominators of each node's
    processed predecessors, in reverse postorder, until nothing changes.
    """
    postorder: list[N] = []
    seen = {start}
    stack: list[tuple[N, Iterator[N]]] = [(start, iter(succ[start]))]
    while stack:
        node, targets = stack[-1]
        for target in targets:
            if target not in seen:
                seen.add(target)
                stack.append((target, iter(succ[target])))
                break
        else:
            stack.pop()
            postorder.append(node)
    number = {node: i for i, node in enumerate(postorder)}
    idom: dict[N, N] = {start: start}

    def intersect(a: N, b: N) -> N:
        while a != b:
            while number[a] < number[b]:
                a = idom[a]
            while number[a] > number[b]:
                b = idom[b]
        return a

    changed = True
    while changed:
        changed = False
        for node in reversed(postorder[:-1]):  # the last in postorder is start
            new: N | None = None
            for p in pred[node]:
                if p in idom:
                    new = p if new is None else intersect(new, p)
            if new is not None and idom.get(node) != new:
                idom[node] = new
                changed = True
    del idom[start]
    return idom

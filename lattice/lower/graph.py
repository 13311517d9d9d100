"""The few directed-graph algorithms lowering needs, on a small adjacency structure.

Lowering asks four questions of its node and op graphs: strongly connected components
(loops), the condensation of a graph into its components in topological order
(reachability of template references), the nodes a path leads to (dead ends), and
immediate dominators (where the branches of a fork meet). These iterative versions
answer them without recursion, in linear time, except dominators: the
Cooper–Harvey–Kennedy iteration (as networkx does) is near-linear in practice but not
linear in the worst case. None of them imports networkx.
``tests/lower/test_graph.py`` holds them to networkx on random graphs.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Iterable, Iterator, Mapping
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
        succ, pred = self.succ, self.pred
        if source not in succ:
            succ[source] = {}
            pred[source] = {}
        if target not in succ:
            succ[target] = {}
            pred[target] = {}
        succ[source][target] = None
        pred[target][source] = None

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
    nodes, adjacency = _indexed(succ)
    for members in _components(adjacency):
        yield {nodes[i] for i in members}


def _indexed(succ: Mapping[N, Iterable[N]]) -> tuple[list[N], list[list[int]]]:
    """The nodes of ``succ`` in order and each one's successors by position in that order.

    The graph algorithms run on these lists: on a large graph, lists of small integers
    stay in the CPU's caches where dicts keyed by node (and the nodes themselves, spread
    over the heap) do not (measured: Tarjan's algorithm cost 2.9 µs a node at 50,000
    nodes on dicts, against 0.6 at 1,000)."""
    nodes, _, adjacency = _positions(succ)
    return nodes, adjacency


def _positions(succ: Mapping[N, Iterable[N]]) -> tuple[list[N], dict[N, int], list[list[int]]]:
    """``_indexed`` with each node's position."""
    nodes = list(succ)
    position = {node: i for i, node in enumerate(nodes)}
    return nodes, position, [[position[t] for t in targets] for targets in succ.values()]


def _components(adjacency: list[list[int]]) -> Iterator[list[int]]:
    """``strongly_connected_components`` on node positions; each component's members in
    the order they were found (its root first)."""
    count = len(adjacency)
    preorder = [0] * count  # 0: not visited yet
    lowlink = [0] * count
    found = [False] * count
    visited = [0] * count  # how many of a node's successors the search has looked at
    waiting: list[int] = []
    counter = 0
    for source in range(count):
        if found[source]:
            continue
        stack = [source]
        while stack:
            node = stack[-1]
            if not preorder[node]:
                counter += 1
                preorder[node] = counter
            targets = adjacency[node]
            i = visited[node]
            descended = False
            while i < len(targets):
                target = targets[i]
                i += 1
                if not preorder[target]:
                    stack.append(target)
                    descended = True
                    break
            visited[node] = i
            if descended:
                continue
            order = low = preorder[node]
            for target in targets:
                if not found[target]:
                    other = lowlink[target] if preorder[target] > order else preorder[target]
                    if other < low:
                        low = other
            lowlink[node] = low
            stack.pop()
            if low == order:
                component = [node]
                while waiting and preorder[waiting[-1]] > order:
                    component.append(waiting.pop())
                for member in component:
                    found[member] = True
                yield component
            else:
                waiting.append(node)


def cyclic_components(succ: Mapping[N, Iterable[N]]) -> Iterator[set[N]]:
    """The strongly connected components of ``succ`` that hold a cycle (more than one
    node, or one node with an edge to itself), in ``strongly_connected_components``'
    order; a graph without loops costs no set per node."""
    nodes, adjacency = _indexed(succ)
    for members in _components(adjacency):
        if len(members) > 1 or members[0] in adjacency[members[0]]:
            yield {nodes[i] for i in members}


SMALL_NEIGHBOURHOOD = 8
"""Neighbouring components a Condensation keeps in a list; more go in a set (membership)."""


class Condensation(Generic[N]):
    """A graph with each strongly connected component contracted to one node.

    Components are numbered in a topological order (every edge goes from a lower number
    to a higher one): ``component[node]`` is a node's number, ``size[c]`` how many nodes
    component ``c`` holds, ``succ[c]`` / ``pred[c]`` its neighbouring components, each
    once (``succ[c]`` a list, or a set when more than SMALL_NEIGHBOURHOOD; ``pred[c]`` a
    list, in increasing order).
    """

    __slots__ = ("component", "pred", "size", "succ")

    def __init__(self, graph: DiGraph[N] | Mapping[N, Iterable[N]]) -> None:
        """``graph``: a DiGraph, or a mapping of every node to its successors."""
        succ = graph.succ if isinstance(graph, DiGraph) else graph
        nodes, adjacency = _indexed(succ)
        components = list(_components(adjacency))
        components.reverse()  # Tarjan's order, reversed: topological
        number = [0] * len(nodes)
        self.size: list[int] = []
        for index, members in enumerate(components):
            self.size.append(len(members))
            for member in members:
                number[member] = index
        self.component: dict[N, int] = dict(zip(nodes, number, strict=True))
        self.succ: list[Collection[int]] = []
        self.pred: list[list[int]] = [[] for _ in components]
        for a, members in enumerate(components):
            targets = adjacency[members[0]] if len(members) == 1 else None
            if targets is not None and len(targets) == 1:  # the common case: a chain
                b = number[targets[0]]
                out = [b] if b != a else []
            else:
                found = [number[t] for m in members for t in adjacency[m]]
                out = [b for b in dict.fromkeys(found) if b != a]
            for b in out:
                self.pred[b].append(a)
            self.succ.append(set(out) if len(out) > SMALL_NEIGHBOURHOOD else out)


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


def immediate_dominators(
    succ: Mapping[N, Iterable[N]], pred: Mapping[N, Iterable[N]], start: N
) -> dict[N, N]:
    """The immediate dominator of every node reachable from ``start`` through ``succ``
    (``start`` itself left out); ``pred`` is the same graph's node → predecessors, and
    every node ``succ`` leads to is one of its keys.

    Cooper, Harvey and Kennedy, "A simple, fast dominance algorithm" (2006): number the
    nodes in depth-first postorder, then intersect the dominators of each node's
    processed predecessors, in reverse postorder, until nothing changes. Runs on node
    positions (``_indexed``).
    """
    nodes, position, adjacency = _positions(succ)
    root = position[start]
    seen = [False] * len(nodes)
    seen[root] = True
    visited = [0] * len(nodes)  # how many of a node's successors the search has looked at
    postorder: list[int] = []
    stack = [root]
    while stack:
        node = stack[-1]
        targets = adjacency[node]
        i = visited[node]
        while i < len(targets):
            target = targets[i]
            i += 1
            if not seen[target]:
                seen[target] = True
                stack.append(target)
                break
        else:
            stack.pop()
            postorder.append(node)
        visited[node] = i
    number = [0] * len(nodes)
    for i, node in enumerate(postorder):
        number[node] = i
    idom = [-1] * len(nodes)  # -1: not processed yet
    idom[root] = root

    def intersect(a: int, b: int) -> int:
        while a != b:
            while number[a] < number[b]:
                a = idom[a]
            while number[a] > number[b]:
                b = idom[b]
        return a

    order = postorder[-2::-1]  # reverse postorder without start (the last in postorder)
    preds = [[position[p] for p in pred[nodes[node]] if p in position] for node in order]
    changed = True
    while changed:
        changed = False
        for node, sources in zip(order, preds, strict=True):
            new = -1
            for p in sources:
                if idom[p] != -1:
                    new = p if new == -1 else intersect(new, p)
            if new != -1 and idom[node] != new:
                idom[node] = new
                changed = True
    return {nodes[node]: nodes[idom[node]] for node in order if idom[node] != -1}

"""Fan-out: where several connections leave one port, the branches run in parallel.

A pure pass over the wired ops. For every port of an op with more than one edge it
puts a FORK op between the op and the branches, then a JOIN op where the branches
meet: the fork's immediate post-dominator (every way from the fork to the end of the
run goes through it; computed on the reversed graph (``lattice.lower.graph``), rooted at a
virtual exit after every END op and every op with no way on). When a branch may also
stop the run at an END op of its own (a switch that ends early), the fork has no
post-dominator short of the exit; the join is then the op nearest the fork that two
or more branches reach: the branches that go on meet there, and a branch that ends
is finished for the join. Edges that reach that point from
inside the fork's region go to the JOIN instead; the JOIN leads on to it. A fork whose
branches never meet has no JOIN: the run ends when they have all ended.

Forks are joined innermost first, so a fork nested in another's branch, meeting at the
same point, hands over to the outer JOIN.

Two branches of one fork must not write the same thing: a node that two branches can
both reach before the join, or a variable that two branches can both set, is an error
with both locations.
A branch that reaches, before the join, a node the join also leads to (the meeting
point chosen for a fork whose branch may end early, when another branch goes past it)
would run that node twice: ``parallel-branches-overlap``, at the fork's node.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable

from lattice.ir.models import DEFAULT_PORT, Edge, ForkOp, JoinOp, Op, StateOp
from lattice.lower.graph import Condensation, DiGraph, immediate_dominators
from lattice.lower.registry import LoweringContext

_EXIT = "\x00exit"


def insert_forks(ops: dict[str, Op], ctx: LoweringContext) -> dict[str, Op]:
    """``ops`` with a FORK (and, where the branches meet, a JOIN) at every fan-out."""
    forks: list[ForkOp] = []
    result: dict[str, Op] = {}
    for op_id, op in ops.items():
        result[op_id] = op
        if len(op.next) < 2:  # one way on at most: nothing fans out
            continue
        targets_by_port: dict[str, list[str]] = {}
        for edge in op.next:
            targets = targets_by_port.setdefault(edge.port, [])
            if edge.to not in targets:
                targets.append(edge.to)
        fanned = {port: targets for port, targets in targets_by_port.items() if len(targets) > 1}
        if not fanned:
            continue
        node = ctx.nodes.get(op.source_node)
        fail_fast = not (node is not None and node.data.get("failFast") is False)
        edges: list[Edge] = []
        added: list[ForkOp] = []
        for edge in op.next:
            if edge.port not in fanned:
                edges.append(edge)
                continue
            fork_id = f"{op_id}#fork" if edge.port == DEFAULT_PORT else f"{op_id}#fork.{edge.port}"
            if any(e.to == fork_id for e in edges):
                continue
            edges.append(Edge(port=edge.port, to=fork_id))
            fork = ForkOp(
                id=fork_id,
                source_node=op.source_node,
                name=f"after {op.name or op.source_node}",
                branches=fanned[edge.port],
                fail_fast=fail_fast,
            )
            added.append(fork)
        forks.extend(added)
        result[op_id] = op.model_copy(update={"next": edges})
        for fork in added:
            result[fork.id] = fork
    if not forks:
        return ops
    _join(result, forks, ctx)
    _check_branches(result, forks, ctx)
    return result


def _graph(ops: dict[str, Op]) -> DiGraph[str]:
    """The op graph with a virtual exit after every END op and every op with no way on."""
    graph: DiGraph[str] = DiGraph()
    graph.add_node(_EXIT)
    for op_id, op in ops.items():
        graph.add_node(op_id)
        targets = [t for t in _targets(op) if t in ops]
        for target in targets:
            graph.add_edge(op_id, target)
        if op.kind == "END" or not targets:
            graph.add_edge(op_id, _EXIT)
    return graph


def _meeting_points(
    ops: dict[str, Op], forks: list[ForkOp], graph: DiGraph[str]
) -> dict[str, str | None]:
    """Where each fork's branches meet: its immediate post-dominator; when a branch may
    end the run on its own (no post-dominator short of the exit), the op nearest the
    fork that two or more branches reach, which the branches that go on meet at."""
    post = immediate_dominators(graph.pred, graph.succ, _EXIT)  # dominators of the reversed graph
    meets: dict[str, str | None] = {}
    search: _Search | None = None
    for fork in forks:
        meet = post.get(fork.id)
        if meet in (None, _EXIT):
            search = search or _Search(ops, graph)
            meet = _first_shared(search, fork)
        meets[fork.id] = meet
    return meets


def _first_shared(search: _Search, fork: ForkOp) -> str | None:
    """The op two or more branches reach that is nearest to the fork (the farthest
    branch's distance decides; ties go to the op lowered first)."""
    distances = search.branches(fork.branches, stop=None, exclude=fork.id)
    order = search.order
    counts: dict[str, int] = {}
    for seen in distances:
        for op_id in seen:
            counts[op_id] = counts.get(op_id, 0) + 1
    shared = [
        (max(d[op_id] for d in distances if op_id in d), order[op_id], op_id)
        for op_id, count in counts.items()
        if count >= 2
    ]
    return min(shared)[2] if shared else None


class _Search:
    """Reachability from the branches of a fork, in time near the size of all branches
    but the largest: the branches are searched side by side until one is left; what that
    one reaches among the ops the others reached (or the variables they set) is found by
    searching back from those ops as far as ops the fork can reach, side by side with
    searching on from the branch, whichever ends first.

    A chain of forks, each one's branches its own END op and the next fork, is then
    linear to lower rather than quadratic: the largest branch, the rest of the chain, is
    never searched.
    """

    def __init__(self, ops: dict[str, Op], graph: DiGraph[str]) -> None:
        self.ops = ops
        self.pred = graph.pred
        self.component = Condensation(graph).component
        self.order = {op_id: index for index, op_id in enumerate(ops)}

    def _steps(self, op_id: str, stop: str | None, exclude: str | None) -> Iterable[str]:
        op = self.ops.get(op_id)
        if op is None:
            return ()
        ops = self.ops
        return [t for t in _targets(op) if t in ops and t != stop and t != exclude]

    def branches(
        self,
        starts: list[str],
        stop: str | None,
        exclude: str | None,
        extra: Callable[[dict[str, int]], Iterable[str]] = lambda seen: (),
    ) -> list[dict[str, int]]:
        """For each branch, the ops it reaches without passing ``stop`` or ``exclude``
        (each with its distance from the branch), except that the largest branch's holds
        only the ops among the others' (and among ``extra`` of them) that it reaches."""
        ops = self.ops
        seen = [{b: 0} if b in ops and b not in (stop, exclude) else {} for b in starts]
        queues = [deque(d) for d in seen]
        active = [i for i, queue in enumerate(queues) if queue]
        while len(active) > 1:
            still: list[int] = []
            for i in active:
                queue, dist = queues[i], seen[i]
                op_id = queue.popleft()
                for target in self._steps(op_id, stop, exclude):
                    if target not in dist:
                        dist[target] = dist[op_id] + 1
                        queue.append(target)
                if queue:
                    still.append(i)
            active = still
        if not active:
            return seen
        big = active[0]
        targets: set[str] = set()
        for i, dist in enumerate(seen):
            if i != big:
                targets.update(dist)
                targets.update(extra(dist))
        targets.discard(stop)
        targets.discard(exclude)
        seen[big] = self._reach(starts[big], seen[big], queues[big], targets, stop, exclude)
        return seen

    def _reach(
        self,
        start: str,
        dist: dict[str, int],
        queue: deque[str],
        targets: set[str],
        stop: str | None,
        exclude: str | None,
    ) -> dict[str, int]:
        """The ops of ``targets`` that ``start`` reaches, with their distances: the search
        from ``start`` (``dist``, ``queue``) goes on side by side with one back from
        ``targets``; if that one ends first, a search from ``start`` among the ops it
        found gives the distances."""
        ops, pred, component = self.ops, self.pred, self.component
        floor = component[start]
        back = {t for t in targets if t in ops}
        waiting = deque(back)
        while queue and waiting:
            op_id = queue.popleft()
            for target in self._steps(op_id, stop, exclude):
                if target not in dist:
                    dist[target] = dist[op_id] + 1
                    queue.append(target)
            for source in pred.get(waiting.popleft(), ()):
                if (
                    source not in back
                    and source in ops
                    and source not in (stop, exclude)
                    and component[source] >= floor
                ):
                    back.add(source)
                    waiting.append(source)
        if not queue:
            return {t: d for t, d in dist.items() if t in targets}
        found: dict[str, int] = {}
        if start in back:
            found[start] = 0
            queue = deque([start])
            while queue:
                op_id = queue.popleft()
                for target in self._steps(op_id, stop, exclude):
                    if target in back and target not in found:
                        found[target] = found[op_id] + 1
                        queue.append(target)
        return {t: d for t, d in found.items() if t in targets}


def _targets(op: Op) -> list[str]:
    if isinstance(op, ForkOp):
        return list(op.branches)
    return [edge.to for edge in op.next]


def _region(ops: dict[str, Op], starts: Iterable[str], stop: str | None) -> set[str]:
    """The ops reachable from ``starts`` without passing ``stop``."""
    seen: set[str] = set()
    queue = deque(s for s in starts if s != stop)
    while queue:
        op_id = queue.popleft()
        if op_id in seen or op_id not in ops:
            continue
        seen.add(op_id)
        queue.extend(t for t in _targets(ops[op_id]) if t != stop and t not in seen)
    return seen


def _join(ops: dict[str, Op], forks: list[ForkOp], ctx: LoweringContext) -> None:
    """Give each fork its JOIN (innermost first), redirecting the edges that meet there."""
    graph = _graph(ops)
    meets = _meeting_points(ops, forks, graph)
    component: dict[str, int] | None = None
    # A fork whose branches never meet gets no JOIN, so needs no place in the order.
    order = sorted(
        (f for f in forks if meets[f.id] is not None),
        key=lambda f: len(_region(ops, f.branches, meets[f.id])),
    )
    for fork in order:
        meet = meets[fork.id]
        if meet is None:
            continue
        join_id = f"{fork.id}#join"
        region = _region(ops, fork.branches, meet)
        component = component or Condensation(graph).component
        again = _after(graph, component, region, meet)
        if again is not None:
            ctx.error(
                ctx.nodes.get(fork.source_node),
                "parallel-branches-overlap",
                f"the branches of the fork after {fork.source_node!r} meet at node "
                f"{ops[meet].source_node!r}, but node {ops[again].source_node!r} is reached "
                "both by a branch before they meet and after they meet: it would run "
                "twice; connect that branch to the node where they meet, or give it a "
                "node of its own",
            )
        for op_id in region:
            op = ops[op_id]
            if isinstance(op, ForkOp) or not any(e.to == meet for e in op.next):
                continue
            ops[op_id] = op.model_copy(
                update={
                    "next": [Edge(port=e.port, to=join_id) if e.to == meet else e for e in op.next]
                }
            )
        ops[join_id] = JoinOp(
            id=join_id,
            source_node=ops[meet].source_node,
            name=f"before {ops[meet].name or ops[meet].source_node}",
            fork=fork.id,
            next=[Edge(to=meet)],
        )
        ops[fork.id] = ops[fork.id].model_copy(update={"join": join_id, "next": [Edge(to=join_id)]})


def _after(
    graph: DiGraph[str], component: dict[str, int], region: set[str], meet: str
) -> str | None:
    """An op of ``region`` (the ops a fork's branches reach before ``meet``) that ``meet``
    also leads to (not through a loop back: an op on a cycle with ``meet`` is a loop's
    next round, not a second run), or None. Only ops after ``meet`` in the graph's
    topological order can be one, and the search back from them goes no further back
    than ``meet``."""
    floor = component[meet]
    late = {op_id for op_id in region if component.get(op_id, floor) > floor}
    if not late:
        return None
    back = set(late)
    waiting = list(late)
    while waiting:
        for source in graph.pred[waiting.pop()]:
            if source not in back and component.get(source, -1) >= floor:
                back.add(source)
                waiting.append(source)
    if meet not in back:
        return None
    seen = {meet}
    queue = deque([meet])
    while queue:
        for target in graph.succ[queue.popleft()]:
            if target in back and target not in seen:
                if target in late:
                    return target
                seen.add(target)
                queue.append(target)
    return None


def _check_branches(ops: dict[str, Op], forks: list[ForkOp], ctx: LoweringContext) -> None:  # noqa: C901
    search = _Search(ops, _graph(ops))
    writers: dict[str, list[str]] = {}  # variable → the ops that set it
    for op_id, op in ops.items():
        if isinstance(op, StateOp) and op.operation != "get":
            writers.setdefault(op.variable, []).append(op_id)

    def setting(region: dict[str, int]) -> Iterable[str]:
        """The ops that set a variable an op of ``region`` sets."""
        for op_id in region:
            op = ops[op_id]
            if isinstance(op, StateOp) and op.operation != "get":
                yield from writers[op.variable]

    order = search.order
    shared: dict[str, tuple[ForkOp, list[str]]] = {}  # node → the first fork, its branches
    for original in forks:
        fork = ops[original.id]
        assert isinstance(fork, ForkOp)
        regions = search.branches(fork.branches, stop=fork.join, exclude=None, extra=setting)
        reaching: dict[str, list[str]] = {}  # node → the branches that reach it, in order
        variables: dict[str, tuple[str, str]] = {}  # variable → (branch, node)
        for branch, region in zip(fork.branches, regions, strict=True):
            for op_id in sorted(region, key=order.__getitem__):
                op = ops[op_id]
                if not isinstance(op, JoinOp | ForkOp):
                    branches = reaching.setdefault(op.source_node, [])
                    if branch not in branches:
                        branches.append(branch)
                if isinstance(op, StateOp) and op.operation != "get":
                    owner = variables.setdefault(op.variable, (branch, op.source_node))
                    if owner[0] != branch:
                        ctx.error(
                            ctx.nodes.get(op.source_node),
                            "parallel-variable-conflict",
                            f"variable {op.variable!r} is written by node {owner[1]!r} and "
                            f"by node {op.source_node!r}, on two branches of the fork after "
                            f"{fork.source_node!r} that run at once; give each branch its "
                            "own variable",
                            "data",
                            "name",
                        )
        for node_id, branches in reaching.items():
            if len(branches) > 1:
                shared.setdefault(node_id, (fork, branches))
    # one error per node, however many branches (and forks) reach it, in document order
    position = {node_id: index for index, node_id in enumerate(ctx.nodes)}
    for node_id in sorted(shared, key=lambda n: position.get(n, len(position))):
        fork, branches = shared[node_id]
        ctx.error(
            ctx.nodes.get(node_id),
            "parallel-shared-node",
            f"node {node_id!r} is reached by {len(branches)} parallel branches (from "
            f"{_names(_node(ops, b) for b in branches)}) before they meet: "
            f"{_fan_out(ops, fork)}; it would run once per branch: remove a connection "
            "added by mistake, connect the branches to it after they meet, or give each "
            "branch its own node",
        )


def _names(names: Iterable[str]) -> str:
    """``'a'``, ``'a' and 'b'``, ``'a', 'b' and 'c'``."""
    quoted = [repr(name) for name in names]
    return ", ".join(quoted[:-1]) + " and " + quoted[-1] if len(quoted) > 1 else "".join(quoted)


def _node(ops: dict[str, Op], op_id: str) -> str:
    return ops[op_id].source_node if op_id in ops else op_id


def _fan_out(ops: dict[str, Op], fork: ForkOp) -> str:
    """Where ``fork`` comes from, for a message: the port with several connections."""
    port = fork.id.partition("#fork")[2].removeprefix(".")
    where = f"port {port!r} of node" if port else "node"
    targets = ", ".join(repr(_node(ops, branch)) for branch in fork.branches)
    return (
        f"{where} {fork.source_node!r} has {len(fork.branches)} connections (to {targets}), "
        "so their branches run at once"
    )

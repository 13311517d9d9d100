"""Static checks over the lowered graph: reachability, dead ends and template references.

References are checked against the node graph (``lattice.lower.graph.DiGraph``):
``$vars.X`` read by node R is valid only when X can run before R (X reaches R).
Reachability queries use the condensation's topological order to prune, so the common
case (a reference to a nearby upstream node) costs a few steps, not a graph walk. A
variable set by many nodes is asked about as one source (``Reachability.any_of``), so
its readers cost one query each, not one per setter.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any

from lattice.document.models import Node
from lattice.errors import Diagnostic, Severity, Suggester, did_you_mean
from lattice.ir.models import FAILED_PORT
from lattice.ir.templates import NameRef, StatePath
from lattice.lower.graph import Condensation, DiGraph, reached
from lattice.lower.registry import LoweringContext, NodeLowering, RefUse

CTX_KEYS = (
    "run_id",
    "started_at",
    "workflow_id",
    "workflow_name",
    "model_classes",
    "op_id",
    "node_id",
)
"""Keys of ``$ctx`` that templates may read."""


SEARCH_BUDGET = 64
"""Edges a backward search may look at before reachability falls back to a cached set."""
BATCH_SOURCES = 8
"""Far-away sources above which ``prepare`` answers their queries in one pass."""
BATCH_CHUNK = 256
"""Sources answered per pass of ``prepare`` (one bit each in an integer per node)."""


class Reachability:
    """Answers "can node a run before node b" on a graph that may have cycles.

    Most references read a nearby node, which a short backward search finds. For the rest
    (far away), ``prepare`` answers all of a document's queries at once, 256 sources per
    pass over the graph in topological order with one bit per source; queries it was not
    asked about fall back to caching one endpoint's descendants or ancestors.

    ``groups`` names sets of nodes (the setters of a variable) to be asked about as one:
    ``any_of(name)`` is a stand-in that reaches what any of them reaches.
    """

    def __init__(
        self, graph: DiGraph[str], groups: Mapping[str, Iterable[str]] | None = None
    ) -> None:
        self.graph = graph
        self._any_of: dict[str, str] = {}
        stand_ins: dict[str, dict[str, None]] = {}
        for name, members in (groups or {}).items():
            present = [m for m in members if m in graph]
            if len(present) == 1:
                self._any_of[name] = present[0]
            elif present:
                # a source that leads where the members lead: "can any member run before
                # b" is one question, and its edges number at most the members' edges
                stand_in = "\0any of " + name
                while stand_in in graph or stand_in in stand_ins:
                    stand_in += "'"
                stand_ins[stand_in] = {t: None for m in present for t in graph.succ[m]}
                self._any_of[name] = stand_in
        succ = {**graph.succ, **stand_ins} if stand_ins else graph.succ
        self._condensed: Condensation[str] = Condensation(succ)
        self._scc: dict[str, int] = self._condensed.component
        """Node → its component; components are numbered in topological order."""
        self._descendants: dict[int, set[int]] = {}
        self._ancestors: dict[int, set[int]] = {}
        self._far_sources: dict[int, int] = {}
        self._far_targets: dict[int, int] = {}
        self._answers: dict[tuple[int, int], bool] = {}

    def any_of(self, group: str) -> str | None:
        """The node to ask ``reaches`` about for "can any node of ``group`` run before",
        or None when none of its nodes is in the graph."""
        return self._any_of.get(group)

    def reaches(self, source: str, target: str) -> bool:
        """True when a path of one or more edges leads from ``source`` to ``target``."""
        if source not in self._scc or target not in self._scc:
            return False
        a, b = self._scc[source], self._scc[target]
        if a == b:
            return self._condensed.size[a] > 1 or self.graph.has_edge(source, source)
        answer = self._answers.get((a, b))
        if answer is None:
            answer = self._near(a, b)
        if answer is None:
            answer = self._far(a, b)
        return answer

    def _near(self, a: int, b: int) -> bool | None:
        """The answer for components ``a`` != ``b`` from their order, a direct edge, the
        caches or a backward search of at most SEARCH_BUDGET edges; None past that."""
        if a > b:  # numbered in topological order: a later component reaches no earlier one
            return False
        condensed = self._condensed
        if b in condensed.succ[a]:
            return True
        descendants = self._descendants.get(a)
        if descendants is not None:
            return b in descendants
        ancestors = self._ancestors.get(b)
        if ancestors is not None:
            return a in ancestors
        seen = {b}
        queue = deque([b])
        looked = 0
        while queue:
            current = queue.popleft()
            for pred in condensed.pred[current]:
                if pred == a:
                    return True
                looked += 1
                if looked > SEARCH_BUDGET:
                    return None
                if pred not in seen and pred >= a:
                    seen.add(pred)
                    queue.append(pred)
        return False

    def _far(self, a: int, b: int) -> bool:
        """Cache the source's descendants (many readers of one far-away producer) or, when a
        target has already needed that, the target's ancestors (one reader of many)."""
        sources = self._far_sources[a] = self._far_sources.get(a, 0) + 1
        targets = self._far_targets[b] = self._far_targets.get(b, 0) + 1
        condensed = self._condensed
        if targets > sources:
            self._ancestors[b] = reached(condensed.pred, b)
            return a in self._ancestors[b]
        self._descendants[a] = reached(condensed.succ, a)
        return b in self._descendants[a]

    def prepare(self, pairs: Iterable[tuple[str, str]]) -> None:
        """Answer ahead the ``(source, target)`` queries a short search cannot, together.

        Answering each far query by walking the graph costs O(nodes) per distinct
        endpoint, so n readers of n different far-away producers would cost n². Here the
        far sources get one bit each, and one pass over the graph in topological order
        (ORing each component's bits into its successors) answers 256 sources at once.
        A query goes with its source when the source has at least as many far targets as
        the target has far sources; otherwise the target gets the bit, in a pass backwards
        through predecessors: the many setters of a variable that one node reads, and one
        producer that many nodes read, each take one bit, not thousands.
        """
        far: dict[int, set[int]] = {}
        for source, target in pairs:
            if source not in self._scc or target not in self._scc:
                continue
            a, b = self._scc[source], self._scc[target]
            if a != b and b not in far.get(a, ()) and self._near(a, b) is None:
                far.setdefault(a, set()).add(b)
        if len(far) <= BATCH_SOURCES:
            return
        sources_of: dict[int, int] = {}
        for targets in far.values():
            for b in targets:
                sources_of[b] = sources_of.get(b, 0) + 1
        forward: dict[int, set[int]] = {}
        backward: dict[int, set[int]] = {}
        for a, targets in far.items():
            for b in targets:
                if len(targets) >= sources_of[b]:
                    forward.setdefault(a, set()).add(b)
                else:
                    backward.setdefault(b, set()).add(a)
        for a, b, answer in self._passes(forward, self._condensed.succ, forward=True):
            self._answers[(a, b)] = answer
        for b, a, answer in self._passes(backward, self._condensed.pred, forward=False):
            self._answers[(a, b)] = answer

    @staticmethod
    def _passes(
        queries: dict[int, set[int]], neighbours: Sequence[Collection[int]], *, forward: bool
    ) -> Iterator[tuple[int, int, bool]]:
        """For each start component of ``queries`` and each of its ends: whether a path
        through ``neighbours`` leads from the start to the end. Starts get one bit each,
        ``BATCH_CHUNK`` per pass over the components in topological order (``forward``,
        following successors) or its reverse (following predecessors)."""
        starts = sorted(queries, reverse=not forward)  # in the order of the pass
        for first in range(0, len(starts), BATCH_CHUNK):
            chunk = starts[first : first + BATCH_CHUNK]
            bits = {a: 1 << i for i, a in enumerate(chunk)}
            got: dict[int, int] = {}
            order = range(chunk[0], len(neighbours)) if forward else range(chunk[0], -1, -1)
            for component in order:
                out = got.get(component, 0) | bits.get(component, 0)
                if out:
                    for nxt in neighbours[component]:
                        got[nxt] = got.get(nxt, 0) | out
            for a in chunk:
                for b in queries[a]:
                    yield a, b, bool(got.get(b, 0) & bits[a])


def reachability_warnings(
    ctx: LoweringContext,
    graph: DiGraph[str],
    start: str | None,
    ends: list[str],
    nodes: Iterable[Node],
    *,
    unjudged: Collection[str] = (),
) -> None:
    """Warn about nodes start cannot reach and nodes from which no end is reachable.

    A node in ``unjudged`` (its type unknown, its id duplicated: already reported) may
    be an end, and is not warned about itself."""
    reachable: set[str] = set()
    if start is not None and start in graph:
        reachable = reached(graph.succ, start)
        reachable.add(start)
    # Every node some end is reached from: one search back from all the ends at once (a
    # search per end is quadratic in a document of many ends).
    can_finish = {end for end in [*ends, *unjudged] if end in graph}
    waiting = list(can_finish)
    while waiting:
        for source in graph.pred[waiting.pop()]:
            if source not in can_finish:
                can_finish.add(source)
                waiting.append(source)
    for node in nodes:
        node_id = node.id
        if node_id not in graph or node_id in unjudged:
            continue
        if start is not None and node_id not in reachable:
            ctx.warn(node, "node-unreachable", "no path from the start node reaches this node")
        elif ends and node_id not in can_finish:
            ctx.warn(node, "node-dead-end", "no end node can be reached from this node")


def missing_property(
    schema: dict[str, Any] | None, keys: tuple[str | int, ...]
) -> str | int | None:
    """The first key of ``keys`` that ``schema`` says cannot exist, or None.

    Only declared ``properties`` are trusted; schemas using combinators, ``$ref``,
    ``patternProperties`` or an ``additionalProperties`` schema stop the check.
    """
    current = schema
    for key in keys:
        if not isinstance(current, dict) or any(
            k in current for k in ("$ref", "anyOf", "oneOf", "allOf", "patternProperties")
        ):
            return None
        if isinstance(key, int):
            items = current.get("items")
            if not isinstance(items, dict):
                return None
            current = items
            continue
        properties = current.get("properties")
        if not isinstance(properties, dict):
            return None
        if key in properties:
            current = properties[key]
            continue
        extra = current.get("additionalProperties")
        if isinstance(extra, dict) or extra is True:
            return None
        return key
    return None


class ReferenceChecker:
    """Checks every recorded template reference; records inferred ``$in`` keys."""

    def __init__(
        self,
        ctx: LoweringContext,
        graph: DiGraph[str],
        lowerings: dict[str, NodeLowering],
        variables: dict[str, list[str]],
        inputs_schema: dict[str, Any] | None,
        unjudged: Collection[str] = (),
    ) -> None:
        """``graph``: which node can run before which; ``variables``: each variable's
        setters; ``unjudged``: names whose node is not known for sure (its type unknown,
        its id duplicated), already reported: references to them are not judged."""
        self.ctx = ctx
        self.reach = Reachability(graph, groups=variables)
        self.lowerings = lowerings
        self.variables = variables
        self.inputs_schema = inputs_schema
        self.unjudged = unjudged
        self.input_keys: set[str] = set()
        self.reads_all_inputs = False
        """True when something reads ``$in`` as a whole, so no key list can be inferred."""
        self._names: Suggester | None = None
        self._inputs: Suggester | None = None

    def suggest_name(self, name: str) -> str:
        """The hint for an unknown ``$vars`` name (nodes and variables), bounded in work."""
        if self._names is None:
            self._names = Suggester([*self.lowerings, *self.variables])
        return self._names.hint(name)

    def suggest_input(self, key: str) -> str:
        """The hint for a key the inputs schema does not declare, bounded in work."""
        if self._inputs is None:
            properties = (self.inputs_schema or {}).get("properties")
            self._inputs = Suggester(properties if isinstance(properties, dict) else ())
        return self._inputs.hint(key)

    def _error(self, use: RefUse, code: str, message: str) -> None:
        self.ctx.diagnostics.append(
            Diagnostic(
                code, message, severity=Severity.ERROR, node_id=use.node_id, pointer=use.pointer
            )
        )

    def check_all(self, uses: Iterable[RefUse]) -> None:
        """Check every use, answering their reachability questions together first."""
        uses = list(uses)
        self.reach.prepare(self._reach_queries(uses))
        for use in uses:
            self.check(use)

    def _reach_queries(self, uses: list[RefUse]) -> Iterator[tuple[str, str]]:
        """The ``(producer, reader)`` pairs ``check`` will ask ``reaches`` about."""
        for use in uses:
            ref = use.ref
            if isinstance(ref, NameRef) or ref.root != "$vars" or not ref.keys:
                continue
            name = str(ref.keys[0])
            if name in self.unjudged:
                continue
            if name in self.lowerings:
                if self.lowerings[name].produces:
                    yield name, use.node_id
            else:
                setters = self.reach.any_of(name)
                if setters is not None:
                    yield setters, use.node_id

    def check(self, use: RefUse) -> None:
        ref = use.ref
        if isinstance(ref, NameRef):
            node = self.ctx.nodes.get(use.node_id)
            variables = node.data.get("variables") if node is not None else None
            if isinstance(variables, dict) and ref.name in variables:
                return
            self._check_bare_name(use, ref)
            ref = ref.as_input_path()
        if ref.root == "$in":
            self._check_input(use, ref)
        elif ref.root == "$vars":
            self._check_vars(use, ref)
        elif ref.root == "$ctx" and ref.keys and ref.keys[0] not in CTX_KEYS:
            self._error(
                use,
                "template-unknown-ref",
                f"$ctx has no key {ref.keys[0]!r}{did_you_mean(str(ref.keys[0]), CTX_KEYS)}",
            )

    def _check_bare_name(self, use: RefUse, ref: NameRef) -> None:
        """A bare ``{{ name }}`` is an input; when a node has that id and the inputs schema
        does not declare it, the node's answer was most likely meant."""
        if ref.name not in self.lowerings or not self.lowerings[ref.name].produces:
            return
        declared = missing_property(self.inputs_schema, (ref.name,)) is None
        if self.inputs_schema is not None and declared:
            return
        self.ctx.diagnostics.append(
            Diagnostic(
                "template-name-is-node",
                f"{{{{ {ref.name} }}}} reads the input {ref.name!r} ($in.{ref.name}), which "
                f"the run must be given; the answer of the node {ref.name!r} is "
                f"{{{{ $vars.{ref.name}.result }}}}",
                severity=Severity.WARNING,
                node_id=use.node_id,
                pointer=use.pointer,
            )
        )

    def _check_input(self, use: RefUse, ref: StatePath) -> None:
        if not ref.keys or not isinstance(ref.keys[0], str):
            self.reads_all_inputs = True
            return
        self.input_keys.add(ref.keys[0])
        missing = missing_property(self.inputs_schema, ref.keys)
        if self.inputs_schema is not None and missing is not None:
            self._error(
                use,
                "template-unknown-property",
                f"{ref.text}: the start node's inputs schema has no {missing!r}"
                f"{self.suggest_input(str(missing))}",
            )

    def _check_vars(self, use: RefUse, ref: StatePath) -> None:
        if not ref.keys:
            return
        name = str(ref.keys[0])
        if name in self.unjudged:
            return
        if name in self.lowerings:
            self._check_node_ref(use, ref, name)
        elif name in self.variables:
            setters = self.reach.any_of(name)
            if setters is None or not self.reach.reaches(setters, use.node_id):
                self._error(
                    use,
                    "template-ref-not-before",
                    f"{ref.text}: no variableStore node that sets {name!r} can run before this node",
                )
        else:
            self._error(
                use,
                "template-unknown-ref",
                f"{ref.text}: no node or variable named {name!r}{self.suggest_name(name)}",
            )

    def _check_node_ref(self, use: RefUse, ref: StatePath, name: str) -> None:
        lowering = self.lowerings[name]
        if not lowering.produces:
            self._error(
                use, "template-ref-no-result", f"{ref.text}: node {name!r} produces no value"
            )
            return
        if not self.reach.reaches(name, use.node_id):
            self._error(
                use,
                "template-ref-not-before",
                f"{ref.text}: node {name!r} cannot have run before this node",
            )
            return
        if len(ref.keys) < 2:
            return
        part = ref.keys[1]
        produces = lowering.produces + (("error",) if FAILED_PORT in lowering.exits else ())
        if part not in produces:
            self._error(
                use,
                "template-unknown-property",
                f"{ref.text}: node {name!r} writes {', '.join(produces)}, not {part!r}",
            )
            return
        if part == "result":
            missing = missing_property(lowering.result_schema, ref.keys[2:])
            if missing is not None:
                self._error(
                    use,
                    "template-unknown-property",
                    f"{ref.text}: the output schema of {name!r} has no property {missing!r}",
                )

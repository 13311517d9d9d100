"""The lowering compiler: document → ExecIR, with every diagnostic collected.

Order: load → inline sub-flows → lower each node through the registry → wire
edges (checking ports) → reachability warnings → reference checks → inputs
schema → forks and joins where connections fan out → assemble. Errors anywhere mean no IR; warnings travel with the IR.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from lattice.document.limits import check_json_value
from lattice.document.loader import parse_workflow, pointer_join, read_json_file
from lattice.document.models import Connection, Workflow
from lattice.errors import Diagnostic, DocumentError, Severity, Suggester
from lattice.ir.models import Edge, ExecIR, ForEachOp, IRDiagnostic, Op, WorkflowInfo
from lattice.lower.branch_nodes import (
    AskUserQuestionLowerer,
    IfElseLowerer,
    LegacyBranchLowerer,
    SwitchLowerer,
)
from lattice.lower.checks import ReferenceChecker, reachability_warnings
from lattice.lower.flow_nodes import (
    DataTransformLowerer,
    EndLowerer,
    GroupLowerer,
    HttpRequestLowerer,
    McpLowerer,
    StartLowerer,
    SubAgentFlowLowerer,
    VariableStoreLowerer,
)
from lattice.lower.foreach import ForEachLowerer, expand_for_each
from lattice.lower.format_notes import document_model_class, format_notes, tools_asked
from lattice.lower.graph import DiGraph
from lattice.lower.llm_nodes import CodexLowerer, PromptLowerer, SkillLowerer, SubAgentLowerer
from lattice.lower.loops import loop_diagnostics
from lattice.lower.mcp_servers import unknown_mcp_servers
from lattice.lower.parallel import insert_forks
from lattice.lower.registry import LowererRegistry, LoweringContext, NodeLowering
from lattice.lower.session_nodes import BranchSessionLowerer
from lattice.lower.subflows import inline_subflows


def default_registry() -> LowererRegistry:
    """A registry with a lowerer for every node type Lattice knows."""
    registry = LowererRegistry()
    for lowerer in (
        StartLowerer(),
        EndLowerer(),
        PromptLowerer(),
        SubAgentLowerer(),
        IfElseLowerer(),
        SwitchLowerer(),
        LegacyBranchLowerer(),
        AskUserQuestionLowerer(),
        McpLowerer(),
        HttpRequestLowerer(),
        VariableStoreLowerer(),
        DataTransformLowerer(),
        SubAgentFlowLowerer(),
        SkillLowerer(),
        CodexLowerer(),
        GroupLowerer(),
        ForEachLowerer(),
        BranchSessionLowerer(),
    ):
        registry.register(lowerer)
    return registry


DEFAULT_REGISTRY = default_registry()


def _free_name(name: str, taken: set[str]) -> str:
    """``name`` marked as no document's (a NUL first), made unlike every id in ``taken``."""
    name = "\0" + name
    while name in taken:
        name += "'"
    return name


@dataclass
class LoweringResult:
    """What lowering produced: the IR (None when there are errors) and every diagnostic."""

    ir: ExecIR | None
    diagnostics: list[Diagnostic] = field(default_factory=list)

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.is_error]

    @property
    def warnings(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if not d.is_error]


class _Compiler:
    def __init__(
        self, workflow: Workflow, registry: LowererRegistry, base_dir: Path | None
    ) -> None:
        pointers = {
            n.id: pointer_join(workflow.pointer_base, "nodes", i)
            for i, n in enumerate(workflow.nodes)
        }
        bodies: dict[str, str] = {}
        expanded, foreach_diags = expand_for_each(workflow, pointers, bodies)
        self.workflow, inline_diags = inline_subflows(expanded, pointers)
        self.registry = registry
        self.ctx = LoweringContext(self.workflow, base_dir=base_dir, node_pointers=pointers)
        self.ctx.for_each_bodies = bodies
        self.ctx.document_model_class = document_model_class(self.workflow)
        self.ctx.diagnostics.extend(foreach_diags + inline_diags)
        self.lowerings: dict[str, NodeLowering] = {}
        self.ports: dict[str, list[str] | None] = {}
        self.graph: DiGraph[str] = DiGraph()
        self._stand_ins: tuple[str, str] | None = None
        """The checks' graph's stand-ins for any source and any target (``_stand_in_for``)."""
        self._types: Suggester | None = None
        self.unjudged: set[str] = set()
        """Names whose node is not known for sure (an unknown type, an id two nodes have, an
        id a duplicate most likely had): what reads them or connects to them is not judged
        again, so that one mistake gets one diagnostic."""
        self._renamed: set[str] = set()
        """Names connections use that no node has, put down to a duplicated id."""

    def run(self) -> LoweringResult:
        start, ends = self._check_shape()
        self.notes = format_notes(self.ctx)
        self._lower_nodes()
        self._wire()
        self._wire_bodies()
        reachability_warnings(
            self.ctx, self.graph, start, ends, self.workflow.nodes, unjudged=self.unjudged
        )
        inputs_schema = self._check_references(start)
        if any(d.is_error for d in self.ctx.diagnostics) or start is None:
            return LoweringResult(None, self.ctx.diagnostics)
        ops: dict[str, Op] = {}
        for node in self.workflow.nodes:
            for op in self.lowerings[node.id].ops:
                if op.id in ops:
                    self.ctx.error(
                        node,
                        "op-id-clash",
                        f"op id {op.id!r} is also generated for node {ops[op.id].source_node!r}; rename the node",
                        "id",
                    )
                ops[op.id] = op
        ops = insert_forks(self._resolve_bodies(ops), self.ctx)
        loop_diagnostics(ops, self.ctx)
        if any(d.is_error for d in self.ctx.diagnostics):
            return LoweringResult(None, self.ctx.diagnostics)
        ir = ExecIR(
            workflow=WorkflowInfo(
                id=self.workflow.id or self.workflow.name or "workflow",
                name=self.workflow.name or self.workflow.id or "workflow",
                description=self.workflow.description,
                notes=self.notes or None,
                tools_asked=tools_asked(self.workflow) or None,
            ),
            entry=start,
            inputs_schema=inputs_schema,
            ops=ops,
            diagnostics=[
                IRDiagnostic(
                    code=d.code,
                    severity=d.severity.value,
                    message=d.message,
                    pointer=d.pointer,
                    node_id=d.node_id,
                )
                for d in self.ctx.diagnostics
            ],
        )
        return LoweringResult(ir, self.ctx.diagnostics)

    def _resolve_bodies(self, ops: dict[str, Op]) -> dict[str, Op]:
        """A FOR_EACH names its flow's first node; point it at that node's entry op."""
        for op_id, op in ops.items():
            if isinstance(op, ForEachOp) and op.body in self.lowerings:
                entry = self.lowerings[op.body].entry or op.body
                ops[op_id] = op.model_copy(update={"body": entry})
        return ops

    def _check_shape(self) -> tuple[str | None, list[str]]:
        ctx, seen = self.ctx, set()
        duplicates, starts, ends, unknown = [], [], [], []
        for node in self.workflow.nodes:  # one pass: on a large document each costs
            node_id, node_type = node.id, node.type
            if node_id in seen:
                duplicates.append(node)
            seen.add(node_id)
            if node_type == "start":
                starts.append(node)
            elif node_type == "end":
                ends.append(node_id)
            if self.registry.get(node_type) is None:
                unknown.append(node_type)
        if duplicates:
            hint = self._renamed_ids(len(duplicates), seen)
            for node in duplicates:
                ctx.error(
                    node,
                    "node-duplicate-id",
                    f"another node already has id {node.id!r}{hint}",
                    "id",
                )
                self.unjudged.add(node.id)
        # a misspelt start or end is reported as an unknown type that suggests it
        meant = {self._meant_type(node_type) for node_type in unknown}
        if not starts and "start" not in meant:
            ctx.error(None, "start-missing", "the workflow has no start node", "nodes")
        for extra in starts[1:]:
            ctx.error(
                extra,
                "start-multiple",
                f"a workflow has exactly one start node; {starts[0].id!r} is the first",
            )
        if not ends and "end" not in meant:
            ctx.error(None, "end-missing", "the workflow has no end node", "nodes")
        return (starts[0].id if starts else None), ends

    def _meant_type(self, node_type: str) -> str | None:
        """The known node type ``node_type`` is most likely a misspelling of, if any."""
        if self._types is None:
            self._types = Suggester(self.registry.types())
        return self._types.closest(node_type)

    def _renamed_ids(self, duplicates: int, ids: set[str]) -> str:
        """A node given the id of another most likely had its own before: connections
        (and references) still name it. When no more names are missing than ids are
        duplicated, they are put down to that one mistake (``_renamed``) and named in
        its message rather than reported again. Returns the message's addition."""
        missing: dict[str, None] = {}
        for conn in self.workflow.connections:
            for end in (conn.source, conn.target):
                if end not in ids:
                    missing[end] = None
        if not missing or len(missing) > duplicates:
            return ""
        self._renamed = set(missing)
        self.unjudged.update(missing)
        names = [repr(name) for name in missing]
        if len(names) == 1:
            return f"; connections name {names[0]}, which no node has: was that this node's id?"
        listed = ", ".join(names[:-1]) + " and " + names[-1]
        return f"; connections name {listed}, which no node has: was one of them this node's id?"

    def _lower_nodes(self) -> None:
        for node in self.workflow.nodes:
            lowerer = self.registry.get(node.type)
            if lowerer is None:
                meant = self._meant_type(node.type)
                hint = f" (did you mean {meant!r}?)" if meant else ""
                self.ctx.error(
                    node,
                    "unknown-node-type",
                    f"unknown node type {node.type!r}"
                    + (hint or f"; known types: {', '.join(self.registry.types())}"),
                    "type",
                )
                self.lowerings[node.id] = NodeLowering(produces=())
                self.ports[node.id] = None  # unknown: its connections are not judged again
                self.unjudged.add(node.id)  # nor what reads its result
                self.graph.add_node(node.id)
                continue
            before = len(self.ctx.diagnostics)
            self.lowerings[node.id] = lowerer.lower(node, self.ctx)
            ports = lowerer.ports(node)
            # a node whose data is in error and that has no ports then (a switch without
            # branches) cannot judge its connections: they stay edges of the graph, their
            # ports unjudged, as an unknown type's
            self.ports[node.id] = ports if ports or not self._errors_since(before) else None
            if node.id in self.unjudged:  # an id two nodes have: whose ports?
                self.ports[node.id] = None
            if node.type != "group":
                self.graph.add_node(node.id)

    def _errors_since(self, before: int) -> bool:
        """Whether an error was reported after the first ``before`` diagnostics (only
        the new ones are looked at: a scan of all would make lowering quadratic in the
        number of errors)."""
        diagnostics = self.ctx.diagnostics
        return any(diagnostics[i].is_error for i in range(before, len(diagnostics)))

    def _wire(self) -> None:
        ctx, ops_by_id = self.ctx, {op.id: op for lw in self.lowerings.values() for op in lw.ops}
        base = pointer_join(self.workflow.pointer_base, "connections")
        for index, conn in enumerate(self.workflow.connections):
            where = conn._pointer or pointer_join(base, index)
            problems = False
            for end, key in ((conn.source, "from"), (conn.target, "to")):
                node = ctx.nodes.get(end)
                if node is None and end in self._renamed:  # told with the duplicate id
                    problems = True
                elif node is None:
                    ctx.diagnostics.append(
                        Diagnostic(
                            "connection-unknown-node",
                            f"connection {conn.id or index} refers to unknown node {end!r}"
                            f"{ctx.suggest_node(end)}",
                            pointer=pointer_join(where, key),
                        )
                    )
                    problems = True
                elif node.type == "group":
                    ctx.diagnostics.append(
                        Diagnostic(
                            "connection-group",
                            f"group node {end!r} is visual only and cannot be connected",
                            node_id=end,
                            pointer=pointer_join(where, key),
                        )
                    )
                    problems = True
            if problems:
                self._stand_in_for(conn)
                continue
            ports = self.ports[conn.source]
            if ports is not None and conn.port not in ports:
                ctx.diagnostics.append(self._port_problem(conn, ports, where))
                self.graph.add_edge(conn.source, conn.target)  # its ends are clear
                continue
            self.graph.add_edge(conn.source, conn.target)
            target_entry = self.lowerings[conn.target].entry
            if target_entry is None:
                continue
            for op_id, ir_port in self.lowerings[conn.source].exits.get(conn.port, []):
                ops_by_id[op_id].next.append(Edge(port=ir_port, to=target_entry))

    def _port_problem(self, conn: Connection, ports: list[str], where: str) -> Diagnostic:
        """``connection-unknown-port``, located at what was written: ``fromPort`` when
        the connection has one, else ``from`` (a node with no outputs, such as an end
        node) or the connection itself (a node whose ports all have names)."""
        source = conn.source
        if conn.from_port is not None:
            message = (
                f"node {source!r} has no output port {conn.from_port!r} "
                f"(its ports: {', '.join(ports) if ports else 'none'})"
            )
            return Diagnostic(
                "connection-unknown-port",
                message,
                node_id=source,
                pointer=pointer_join(where, "fromPort"),
            )
        if not ports:
            kind = self.ctx.nodes[source].type
            message = f"node {source!r} ({kind}) has no outputs: no connection can leave it"
            return Diagnostic(
                "connection-unknown-port",
                message,
                node_id=source,
                pointer=pointer_join(where, "from"),
            )
        message = (
            f"node {source!r} has no default output: the connection needs a fromPort "
            f"(one of {', '.join(ports)})"
        )
        return Diagnostic("connection-unknown-port", message, node_id=source, pointer=where)

    def _stand_in_for(self, conn: Connection) -> None:
        """A connection with an end that is not a node could have been meant for any
        node: the graph joins its known end to every node through a stand-in, so that the
        checks that follow the graph (reachability, which node can run before which)
        report only what is wrong whatever it was meant to be, not what follows from the
        mistake."""
        if self._stand_ins is None:
            taken = set(self.graph.succ)
            any_source, any_target = (
                _free_name(name, taken) for name in ("any source", "any target")
            )
            for node_id in taken:
                self.graph.add_edge(node_id, any_source)
                self.graph.add_edge(any_target, node_id)
            self._stand_ins = any_source, any_target
        any_source, any_target = self._stand_ins
        if conn.source in self.graph:
            self.graph.add_edge(conn.source, any_target)
        if conn.target in self.graph:
            self.graph.add_edge(any_source, conn.target)

    def _wire_bodies(self) -> None:
        """A forEach node comes before its flow's nodes (reachability, references)."""
        for node in self.workflow.nodes:
            body = self.ctx.for_each_bodies.get(node.id) if node.type == "forEach" else None
            if isinstance(body, str) and body in self.graph:
                self.graph.add_edge(node.id, body)

    def _check_references(self, start: str | None) -> dict[str, Any]:
        variables: dict[str, list[str]] = {}
        for node in self.workflow.nodes:
            if node.type == "variableStore" and node.data.get("operation") in (
                "set",
                "append",
                "increment",
            ):
                name = node.data.get("name")
                if isinstance(name, str) and name:
                    variables.setdefault(name, []).append(node.id)
        for name, setters in variables.items():
            if name in self.lowerings:
                node = self.ctx.nodes[setters[0]]
                self.ctx.error(
                    node,
                    "variable-name-clash",
                    f"variable {name!r} has the same name as a node",
                    "data",
                    "name",
                )
        declared = self.lowerings[start].result_schema if start in self.lowerings else None
        checker = ReferenceChecker(
            self.ctx,
            self.graph,
            self.lowerings,
            variables,
            declared,
            unjudged=self.unjudged,
        )
        checker.check_all(self.ctx.ref_uses)
        if declared is not None:
            return declared
        keys = sorted(checker.input_keys)
        # A dataTransform over the default {in, vars, ctx} view may read any input by name.
        open_inputs = checker.reads_all_inputs or any(
            n.type == "dataTransform" and not n.data.get("input") for n in self.workflow.nodes
        )
        return {
            "type": "object",
            "properties": {key: {} for key in keys},
            "required": keys,
            "additionalProperties": open_inputs,
        }


PROMOTE_AT = 10_000
"""Objects lowering leaves in the youngest generation from which they are handed to the
oldest one unexamined (``_promote_survivors``): about 700 nodes' worth."""


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while lowering builds many small objects that
    live until the end: its repeated full-heap scans would make lowering cost grow
    faster than the document (measured 1.6x per node at 10k nodes with it, 1.1x without).
    Every entry point pauses it: ``lower``, ``lower_document`` (reading the file as well)
    and ``lower_workflow``; a collector that was off stays off. What lowering leaves
    goes to the oldest generation as the collector comes back (``_promote_survivors``)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            _promote_survivors()
            gc.enable()


def _promote_survivors() -> None:
    """Hand what lowering left in the youngest generation (the IR: about ten objects an op)
    to the oldest one without a collection examining it.

    The first young collection after lowering would walk every one of them (and, ten
    young collections later, the middle generation again) to find nothing to free:
    lowering leaves no reference cycles (``tests/lower/test_collector.py`` holds it), and
    the IR is freed by reference counting when dropped. That walk cost 3 µs a node at
    1,000 nodes and 6 at 50,000, where the heap no longer fits the CPU's caches.
    ``gc.freeze`` then ``gc.unfreeze`` moves every young object to the oldest generation
    in constant time; the few the program made just before lowering (at most the
    collector's young thresholds, about 7,700) go with them and are examined at the next
    full collection instead. Skipped below PROMOTE_AT objects (nothing to gain) and when
    the process keeps objects frozen (``lattice serve`` freezes what it loaded at
    start): ``unfreeze`` would hand those back to the collector."""
    if gc.get_count()[0] < PROMOTE_AT or gc.get_freeze_count():
        return
    gc.freeze()
    gc.unfreeze()


def lower_workflow(
    workflow: Workflow, *, registry: LowererRegistry | None = None, base_dir: Path | None = None
) -> LoweringResult:
    """Lower an already-loaded Workflow; never raises for document problems."""
    with _gc_paused():
        return _Compiler(workflow, registry or DEFAULT_REGISTRY, base_dir).run()


def _beyond_limits(workflow: Workflow) -> list[Diagnostic]:
    """The document limits for a Workflow built in Python (a file or dict is checked by
    ``parse_workflow``): node ids and data must be plain, bounded JSON values."""
    found: list[Diagnostic] = []
    groups = [(workflow.nodes, pointer_join(workflow.pointer_base, "nodes"))]
    groups += [
        (flow.nodes, pointer_join(workflow.pointer_base, "subAgentFlows", k, "nodes"))
        for k, flow in enumerate(workflow.sub_agent_flows)
    ]
    for nodes, base in groups:
        for index, node in enumerate(nodes):
            where = node._pointer or pointer_join(base, index)
            problems = check_json_value(node.id, pointer_join(where, "id"))
            problems += check_json_value(node.data, pointer_join(where, "data"))
            found += [replace(d, node_id=node.id) for d in problems]
    return found


def lower_document(
    source: str | Path | Mapping[str, Any] | Workflow,
    *,
    registry: LowererRegistry | None = None,
    base_dir: Path | None = None,
    mcp_servers: Collection[str] | None = None,
    unknown_mcp: Severity = Severity.ERROR,
) -> LoweringResult:
    """Load and lower a document, returning the IR (or None) and all diagnostics.

    ``mcp_servers``: the server ids the user's config declares; given, an mcp node naming
    another server is reported as ``unknown_mcp`` says (an error unless told otherwise).
    Unreadable files and malformed JSON still raise DocumentError (nothing to lower).
    """
    with _gc_paused():  # reading and parsing the file too: they build most of the objects
        return _lower_document(source, registry, base_dir, mcp_servers, unknown_mcp)


def _lower_document(
    source: str | Path | Mapping[str, Any] | Workflow,
    registry: LowererRegistry | None,
    base_dir: Path | None,
    mcp_servers: Collection[str] | None,
    unknown_mcp: Severity = Severity.ERROR,
) -> LoweringResult:
    if isinstance(source, Workflow):
        problems = _beyond_limits(source)
        if problems:
            return LoweringResult(None, problems)
        return lower_workflow(source, registry=registry, base_dir=base_dir)
    if isinstance(source, Mapping):
        raw: Any = source
    else:
        path = Path(source)
        raw = read_json_file(path)
        base_dir = base_dir or path.parent
    workflow, diagnostics = parse_workflow(raw)
    del raw  # a file's parsed JSON is not needed again: lowering works in less memory
    if workflow is None:
        return LoweringResult(None, diagnostics)
    result = lower_workflow(workflow, registry=registry, base_dir=base_dir)
    if mcp_servers is not None:
        diagnostics += unknown_mcp_servers(workflow, mcp_servers, unknown_mcp)
    result.diagnostics[:0] = diagnostics
    if diagnostics and any(d.is_error for d in diagnostics):
        result.ir = None
    return result


def lower(
    source: str | Path | Mapping[str, Any] | Workflow,
    *,
    registry: LowererRegistry | None = None,
    base_dir: Path | None = None,
) -> ExecIR:
    """Lower a document to ExecIR; raise DocumentError listing every error."""
    result = lower_document(source, registry=registry, base_dir=base_dir)
    if result.ir is None:
        label = str(source) if isinstance(source, str | Path) else None
        raise DocumentError(result.diagnostics, source=label)
    return result.ir

"""The LowererRegistry (node type → lowerer) and what a lowerer sees and returns."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

from lattice.document.loader import pointer_join
from lattice.document.models import SEQUENTIAL_PORT, Node, Workflow
from lattice.errors import Diagnostic, Severity, closest
from lattice.ir.models import Op
from lattice.ir.templates import NameRef, Ref, TemplateSyntaxError, iter_value_refs

PRODUCER_TYPES = frozenset(
    {
        "prompt",
        "subAgent",
        "skill",
        "codex",
        "mcp",
        "httpRequest",
        "dataTransform",
        "askUserQuestion",
    }
)
"""Node types whose ``$vars.<id>.result`` carries content worth passing downstream."""
ROUTING_TYPES = frozenset({"ifElse", "switch", "askUserQuestion", "variableStore"})
"""Node types that context wiring looks through to find the content before them."""


@dataclass
class NodeLowering:
    """The ops one node became, where incoming edges enter, and where each port leaves.

    ``exits`` maps a document port (``default``, ``branch-1``, ``failed``) to the
    ``(op_id, ir_port)`` pairs that leave through it.
    """

    ops: list[Op] = field(default_factory=list)
    entry: str | None = None
    exits: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    result_schema: dict[str, Any] | None = None
    """JSON Schema of ``$vars.<node>.result`` when known, for reference checks."""
    produces: tuple[str, ...] = ("result",)
    """Keys this node writes under ``$vars.<node>`` (empty for routing-only nodes)."""

    @classmethod
    def single(
        cls, op: Op, *, ports: Iterable[str] = (SEQUENTIAL_PORT,), **kw: Any
    ) -> NodeLowering:
        """One op whose every port leaves from itself under the same name."""
        exits = {port: [(op.id, port)] for port in ports}
        return cls(ops=[op], entry=op.id, exits=exits, **kw)


@dataclass(frozen=True, slots=True)
class RefUse:
    """A template reference found while lowering: who reads what, and where it is written."""

    node_id: str
    ref: Ref
    pointer: str


class LoweringContext:
    """What a lowerer may use: the document, diagnostics and reference collection."""

    def __init__(
        self,
        workflow: Workflow,
        *,
        base_dir: Path | None = None,
        node_pointers: dict[str, str] | None = None,
    ) -> None:
        self.workflow = workflow
        self.base_dir = base_dir
        self.diagnostics: list[Diagnostic] = []
        self.ref_uses: list[RefUse] = []
        self.node_pointers = node_pointers or {
            n.id: pointer_join(workflow.pointer_base, "nodes", i)
            for i, n in enumerate(workflow.nodes)
        }
        self.nodes = {n.id: n for n in workflow.nodes}
        self.incoming: dict[str, list[str]] = {}
        for conn in workflow.connections:
            self.incoming.setdefault(conn.target, []).append(conn.source)

    def upstream_results(self, node_id: str) -> list[str]:
        """Paths of the results that flow into ``node_id``, for an LLM op's context.

        Walks back through routing nodes (branches, questions, variable writes)
        to the nearest value-producing nodes; the start node contributes ``$in``.
        """
        out: list[str] = []
        seen = {node_id}
        queue = list(self.incoming.get(node_id, []))
        while queue:
            source = queue.pop(0)
            if source in seen or source not in self.nodes:
                continue
            seen.add(source)
            node = self.nodes[source]
            if node.type == "start":
                out.append("$in")
            elif node.type in PRODUCER_TYPES or (
                node.type == "variableStore" and node.data.get("operation") == "get"
            ):
                out.append(f"$vars.{source}.result")
            if node.type in ROUTING_TYPES:
                queue.extend(self.incoming.get(source, []))
        return out

    def pointer(self, node: Node, *parts: str | int) -> str:
        """JSON pointer of ``node`` (or a field inside it) in the file as read."""
        base = (
            node._pointer
            or self.node_pointers.get(node.id)
            or pointer_join(self.workflow.pointer_base, "nodes")
        )
        return pointer_join(base, *parts)

    def error(self, node: Node | None, code: str, message: str, *parts: str | int) -> None:
        self._add(node, code, message, parts, Severity.ERROR)

    def warn(self, node: Node | None, code: str, message: str, *parts: str | int) -> None:
        self._add(node, code, message, parts, Severity.WARNING)

    def _add(
        self,
        node: Node | None,
        code: str,
        message: str,
        parts: tuple[str | int, ...],
        sev: Severity,
    ) -> None:
        if node is None:
            pointer = pointer_join(self.workflow.pointer_base, *parts)
            self.diagnostics.append(Diagnostic(code, message, severity=sev, pointer=pointer))
        else:
            self.diagnostics.append(
                Diagnostic(
                    code, message, severity=sev, node_id=node.id, pointer=self.pointer(node, *parts)
                )
            )

    def use_template(self, node: Node, value: Any, *parts: str | int) -> list[str]:
        """Record every reference in a value template at ``data/<parts>``; return their texts.

        Syntax errors become diagnostics; the returned list feeds the op's ``reads``.
        """
        pointer = self.pointer(node, *parts)
        try:
            refs = list(iter_value_refs(value))
        except TemplateSyntaxError as exc:
            self.error(node, "template-syntax", str(exc), *parts)
            return []
        variables = node.data.get("variables")
        texts = []
        for ref in refs:
            self.ref_uses.append(RefUse(node.id, ref, pointer))
            if isinstance(ref, NameRef):
                if isinstance(variables, dict) and ref.name in variables:
                    continue
                texts.append(ref.as_input_path().text)
            else:
                texts.append(ref.text)
        return texts


class Lowerer(Protocol):
    """Lowers one node type. ``ports`` lists the output ports a node of this type has."""

    node_type: ClassVar[str]

    def ports(self, node: Node) -> list[str]: ...

    def lower(self, node: Node, ctx: LoweringContext) -> NodeLowering: ...


class LowererRegistry:
    """Node type → Lowerer. Unknown types get a "did you mean" suggestion."""

    def __init__(self) -> None:
        self._lowerers: dict[str, Lowerer] = {}

    def register(self, lowerer: Lowerer) -> Lowerer:
        """Add (or replace) the lowerer for ``lowerer.node_type``; returns it (decorator-friendly)."""
        self._lowerers[lowerer.node_type] = lowerer
        return lowerer

    def get(self, node_type: str) -> Lowerer | None:
        return self._lowerers.get(node_type)

    def types(self) -> list[str]:
        return sorted(self._lowerers)

    def suggest(self, node_type: str) -> str | None:
        """The closest registered type name, if one is close enough."""
        return closest(node_type, self._lowerers)

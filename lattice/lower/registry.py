"""The LowererRegistry (node type → lowerer) and what a lowerer sees and returns."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

from lattice.document.loader import pointer_join
from lattice.document.models import SEQUENTIAL_PORT, Node, Workflow
from lattice.errors import Diagnostic, Severity, Suggester, closest
from lattice.ir.models import Op
from lattice.ir.templates import (
    NameRef,
    Ref,
    TemplateSyntaxError,
    is_path,
    is_secret,
    parse_path,
    parse_template,
    path_text,
)

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
        "branchSession",
    }
)
"""Node types whose ``$vars.<id>.result`` carries content worth passing downstream."""
ROUTING_TYPES = frozenset({"ifElse", "switch", "askUserQuestion", "variableStore"})
"""Node types that context wiring looks through to find the content before them."""
SECRET_LANE = "an httpRequest node's url, headers, query or body"
"""Where ``$secrets`` may be read: the places whose values leave the process for the
request's destination (and nothing else: no prompt, state, output or condition)."""

UPSTREAM_MEMO_LIMIT = 64
"""Longest list of upstream results that is memoised and reused along a chain."""

Where = tuple[str | int, ...]


def _value_refs(value: Any, where: Where) -> Iterator[tuple[Where, Ref | TemplateSyntaxError]]:
    """Every ref of a value template with its place, as ``ValueTemplate`` reads it (a
    string that is exactly a path is a ref; other strings are text templates); a string
    that does not parse yields its TemplateSyntaxError instead. Values are at most
    MAX_JSON_DEPTH deep (the document limits), so this recursion is bounded."""
    if isinstance(value, str):
        if "{{" in value:
            try:
                refs = parse_template(value).refs
            except TemplateSyntaxError as exc:
                yield where, exc
                return
            for ref in refs:
                yield where, ref
        elif is_path(value):
            yield where, parse_path(value)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _value_refs(item, (*where, index))
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _value_refs(item, (*where, key))


def _text_refs(text: str) -> Iterator[tuple[Where, Ref | TemplateSyntaxError]]:
    """Every ref of a text template, as ``parse_template`` reads it (a string that is
    exactly a path stays text)."""
    try:
        refs = parse_template(text).refs
    except TemplateSyntaxError as exc:
        yield (), exc
        return
    for ref in refs:
        yield (), ref


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
        self._flow_names: Suggester | None = None
        self._node_names: Suggester | None = None
        self._upstream_memo: dict[str, list[tuple[str, str]]] = {}
        self.for_each_bodies: dict[str, str] = {}
        """forEach node → the first node of its flow's copy (``expand_for_each``)."""
        self.document_model_class = "default"
        """The model class of LLM nodes that name none (``slashCommandOptions.model``)."""
        self.template_errors = 0
        """``template-syntax`` diagnostics so far (``check_prompt`` reports only new ground)."""

    def suggest_node(self, node_id: str) -> str:
        """`` (did you mean 'x'?)`` for an unknown node id (computed once per distinct id,
        within a budget, so a document full of unknown ids still checks in linear time)."""
        if self._node_names is None:
            self._node_names = Suggester(self.nodes)
        return self._node_names.hint(node_id)

    def suggest_flow(self, flow_id: str) -> str:
        """`` (did you mean 'x'?)`` for an unknown sub-flow id (suggestions computed once
        per distinct id, within a budget)."""
        if self._flow_names is None:
            self._flow_names = Suggester(f.id for f in self.workflow.sub_agent_flows)
        return self._flow_names.hint(flow_id)

    def upstream_results(self, node_id: str) -> list[str]:
        """Paths of the results that flow into ``node_id``, for an LLM op's context.

        Walks back through routing nodes (branches, questions, variable writes)
        to the nearest value-producing nodes; the start node contributes ``$in``.
        """
        return [text for _, text in self._upstream(node_id)]

    def _contribution(self, node: Node) -> str | None:
        if node.type == "start":
            return "$in"
        if node.type in PRODUCER_TYPES or (
            node.type == "variableStore" and node.data.get("operation") == "get"
        ):
            return path_text("$vars", node.id, "result")
        return None

    def _sources(self, node_id: str) -> list[str]:
        """The distinct known nodes with an edge into ``node_id`` (itself excluded), in order."""
        return [
            s
            for s in dict.fromkeys(self.incoming.get(node_id, ()))
            if s in self.nodes and s != node_id
        ]

    def _walk(self, node_id: str) -> list[tuple[str, str]]:
        """``(node, path)`` of what flows into ``node_id``: a breadth-first walk back."""
        out: list[tuple[str, str]] = []
        seen = {node_id}
        queue = deque(self.incoming.get(node_id, []))
        while queue:
            source = queue.popleft()
            if source in seen or source not in self.nodes:
                continue
            seen.add(source)
            node = self.nodes[source]
            text = self._contribution(node)
            if text is not None:
                out.append((source, text))
            if node.type in ROUTING_TYPES:
                queue.extend(self.incoming.get(source, []))
        return out

    def _upstream(self, node_id: str) -> list[tuple[str, str]]:
        """``_walk(node_id)``, memoised along chains of routing nodes.

        A node whose one source ``s`` is a routing node sees what ``s`` contributes, then
        what ``s`` sees (less its own contribution): the walk from the node continues
        exactly as the walk from ``s`` does. Lowering asks for every branch and LLM node,
        so a chain of n branches would cost n walks of up to n nodes each; this reuses
        the answer of the node before. Answers longer than UPSTREAM_MEMO_LIMIT are walked
        afresh instead (copying them along a chain would cost as much again).
        """
        memo = self._upstream_memo
        if node_id in memo:
            return memo[node_id]
        chain = [node_id]
        on_chain = {node_id}
        base: list[tuple[str, str]] | None = None
        while True:
            current = chain[-1]
            sources = self._sources(current)
            if len(sources) != 1 or self.nodes[sources[0]].type not in ROUTING_TYPES:
                base = memo[current] = self._walk(current)
                chain.pop()
                break
            source = sources[0]
            if source in memo:
                base = memo[source]
                break
            if source in on_chain:  # a loop of single-source routing nodes: walk it
                base = memo[current] = self._walk(current)
                chain.pop()
                break
            chain.append(source)
            on_chain.add(source)
        # Unwind: each node on the chain from its one source, the nearest first.
        previous = base
        for current in reversed(chain):
            source = self._sources(current)[0]
            text = self._contribution(self.nodes[source])
            head = [(source, text)] if text is not None else []
            answer = head + [pair for pair in previous if pair[0] != current]
            if len(answer) > UPSTREAM_MEMO_LIMIT:
                return self._walk(node_id)
            memo[current] = previous = answer
        return memo[node_id]

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

    def use_template(
        self, node: Node, value: Any, *parts: str | int, secrets: bool = False
    ) -> list[str]:
        """Record every reference in a value template at ``<node>/<parts>``; return their texts.

        The value is read as ``ValueTemplate`` reads it at run time. Syntax errors become
        ``template-syntax`` diagnostics at the string that breaks; a ``$secrets`` reference
        is ``secret-outside-lane`` unless ``secrets`` (only the SECRET_LANE passes it).
        The returned list feeds the op's ``reads``.
        """
        return self._use(node, _value_refs(value, ()), parts, secrets)

    def use_text(
        self, node: Node, text: str, *parts: str | int, secrets: bool = False
    ) -> list[str]:
        """Like ``use_template`` for a text template (an LLM prompt, a URL, document text
        built into a prompt), read as ``parse_template`` reads it at run time."""
        return self._use(node, _text_refs(text), parts, secrets)

    def _use(
        self,
        node: Node,
        found: Iterable[tuple[Where, Ref | TemplateSyntaxError]],
        parts: tuple[str | int, ...],
        secrets: bool,
    ) -> list[str]:
        variables = node.data.get("variables")
        texts = []
        for where, ref in found:
            if isinstance(ref, TemplateSyntaxError):
                self.error(node, "template-syntax", str(ref), *parts, *where)
                self.template_errors += 1
                continue
            if is_secret(ref):
                if not secrets:
                    self.error(
                        node,
                        "secret-outside-lane",
                        f"{ref.text}: a secret may be read only in {SECRET_LANE}, where it "
                        f"leaves for the request's destination; here ({node.type} node) it "
                        "would reach a model, the run's state or its output",
                        *parts,
                        *where,
                    )
                    continue
                texts.append(ref.text)
                continue
            self.ref_uses.append(RefUse(node.id, ref, self.pointer(node, *parts, *where)))
            if isinstance(ref, NameRef):
                if isinstance(variables, dict) and ref.name in variables:
                    continue
                texts.append(ref.as_input_path().text)
            else:
                texts.append(ref.text)
        return texts

    def check_prompt(self, node: Node, prompt: str, *parts: str | int, since: int) -> None:
        """Report a prompt assembled from document text that would not parse at run time.

        Each piece is checked where it is written (``use_text``); this catches what only
        the whole shows, so that ``check`` accepts nothing ``run`` cannot start. ``since``
        is ``template_errors`` before the pieces were checked: when a piece already failed,
        the whole is not reported again."""
        if self.template_errors > since:
            return
        try:
            parse_template(prompt)
        except TemplateSyntaxError as exc:
            self.error(
                node,
                "template-syntax",
                f"the prompt built from this node's fields is not a valid template: {exc}",
                *parts,
            )


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

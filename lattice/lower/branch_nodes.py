"""Lowerers of branching nodes: ifElse, switch (SWITCH, or classifier + SWITCH) and askUserQuestion."""

from __future__ import annotations

import json
from typing import Any, ClassVar

from lattice.document.models import SEQUENTIAL_PORT, Node
from lattice.ir.models import AskOp, AskOption, Case, Condition, Edge, LLMWriteOp, SwitchOp
from lattice.ir.templates import TemplateSyntaxError, parse_path, path_text
from lattice.lower.conditions import ConditionError, ParsedCondition, parse_condition
from lattice.lower.fields import get_list, get_str
from lattice.lower.llm_nodes import llm_contract
from lattice.lower.registry import LoweringContext, NodeLowering

SWITCH_SUFFIX = "#switch"


def branch_ports(count: int) -> list[str]:
    return [f"branch-{i}" for i in range(count)]


def unique_labels(raw: list[str]) -> list[str]:
    """Branch labels as IR port names: blank → ``branch-N``, repeats get `` (N)``."""
    out: list[str] = []
    taken: set[str] = set()
    for i, label in enumerate(raw):
        name = label.strip() or f"branch-{i}"
        if name in taken or name == SEQUENTIAL_PORT:
            name = f"{name} ({i})"
        out.append(name)
        taken.add(name)
    return out


def classifier_schema(labels: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"branch": {"type": "string", "enum": labels}},
        "required": ["branch"],
        "additionalProperties": False,
    }


def classifier_prompt(question: str | None, branches: list[tuple[str, str]]) -> str:
    lines = ["Choose the one branch whose condition holds for the input."]
    if question:
        lines.append(f"What to evaluate: {question}")
    lines.append("Branches:")
    lines += [
        f"- {json.dumps(label, ensure_ascii=False)}: {cond or '(otherwise)'}"
        for label, cond in branches
    ]
    lines.append('Answer with {"branch": "<label>"} using one of the labels above exactly.')
    return "\n".join(lines)


class _BranchLowerer:
    """Shared lowering of ifElse and switch."""

    node_type: ClassVar[str]

    def _branches(self, node: Node) -> list[Any]:
        branches = node.data.get("branches")
        return branches if isinstance(branches, list) else []

    def ports(self, node: Node) -> list[str]:
        return branch_ports(len(self._branches(node)))

    def _default_index(self, node: Node, branches: list[dict[str, Any]]) -> int | None:
        for i, branch in enumerate(branches):
            if branch.get("isDefault") is True:
                return i
        return None

    # long: one branch node top to bottom: its branches checked, their conditions parsed, the SWITCH built
    def lower(self, node: Node, ctx: LoweringContext) -> NodeLowering:
        branches = get_list(ctx, node, "branches")
        if not branches:
            if branches is not None or "branches" not in node.data:
                ctx.error(
                    node,
                    "missing-field",
                    f"{node.type} node needs a non-empty data.branches",
                    "data",
                )
            return NodeLowering(produces=())
        valid: list[dict[str, Any]] = []
        for i, branch in enumerate(branches):
            if not isinstance(branch, dict):
                ctx.error(
                    node,
                    "invalid-field",
                    "a branch is an object {label, condition}",
                    "data",
                    "branches",
                    i,
                )
                branch = {}
            valid.append(branch)
        if self.node_type == "ifElse" and len(valid) != 2:
            ctx.error(
                node,
                "invalid-field",
                "an ifElse node has exactly two branches (if, else)",
                "data",
                "branches",
            )
        labels = unique_labels([str(b.get("label") or "") for b in valid])
        default = (
            1
            if self.node_type == "ifElse" and len(valid) == 2
            else self._default_index(node, valid)
        )

        target = get_str(ctx, node, "evaluationTarget")
        target_path: str | None = None
        if target and target.strip().startswith("$"):
            try:
                target_path = parse_path(target).text
            except TemplateSyntaxError as exc:
                ctx.error(node, "template-syntax", str(exc), "data", "evaluationTarget")
            else:
                ctx.use_template(node, target_path, "data", "evaluationTarget")

        parsed: list[ParsedCondition | None] = []
        for i, branch in enumerate(valid):
            if i == default:
                parsed.append(None)
                continue
            text = branch.get("condition")
            text = text if isinstance(text, str) else ""
            try:
                parsed.append(
                    parse_condition(text) if text.strip() else ParsedCondition(text, None)
                )
            except ConditionError as exc:
                ctx.error(node, "condition-invalid", str(exc), "data", "branches", i, "condition")
                parsed.append(ParsedCondition(text, Condition(op="exists")))
        natural = any(p is not None and p.is_natural_language for p in parsed)
        exits = {
            f"branch-{i}": [(self._switch_id(node, natural), label)]
            for i, label in enumerate(labels)
        }
        if natural:
            return self._lower_classifier(node, ctx, valid, labels, target, target_path, exits)
        if target and target_path is None:
            ctx.warn(
                node,
                "evaluation-target-not-path",
                f"evaluationTarget {target!r} is not a $-path, so the conditions test the incoming "
                f"result; write e.g. $in.{target} or $vars.<node>.result.{target}",
                "data",
                "evaluationTarget",
            )
        switch_input = target_path or self._single_upstream(ctx, node)
        cases = [
            Case(port=labels[i], test=p.condition, source=p.text)
            for i, p in enumerate(parsed)
            if p is not None and p.condition is not None
        ]
        switch = SwitchOp(
            id=node.id,
            source_node=node.id,
            name=node.title,
            input=switch_input,
            cases=cases,
            default_port=labels[default] if default is not None else None,
            reads=[switch_input] if switch_input else [],
        )
        return NodeLowering(ops=[switch], entry=switch.id, exits=exits, produces=())

    @staticmethod
    def _switch_id(node: Node, natural: bool) -> str:
        return node.id + SWITCH_SUFFIX if natural else node.id

    @staticmethod
    def _single_upstream(ctx: LoweringContext, node: Node) -> str | None:
        upstream = ctx.upstream_results(node.id)
        return upstream[0] if len(upstream) == 1 else None

    def _lower_classifier(
        self,
        node: Node,
        ctx: LoweringContext,
        branches: list[dict[str, Any]],
        labels: list[str],
        target: str | None,
        target_path: str | None,
        exits: dict[str, list[tuple[str, str]]],
    ) -> NodeLowering:
        contract = llm_contract(ctx, node)
        if contract["model_class"] == "default" and "modelClass" not in node.data:
            contract["model_class"] = "small"
        contract["output_schema"] = classifier_schema(labels)
        contract["template"] = contract["template"] or "classifier@1"
        conditions = [str(b.get("condition") or "") for b in branches]
        context = [target_path] if target_path else ctx.upstream_results(node.id)
        # The classifier's prompt is a template at run time: the document text built into
        # it (what to evaluate, labels, conditions) is checked where it is written.
        piece_reads: list[str] = []
        mark = ctx.template_errors
        if target and not target_path:
            piece_reads += ctx.use_text(node, target, "data", "evaluationTarget")
        for i, (label, condition) in enumerate(zip(labels, conditions, strict=True)):
            dumped = json.dumps(label, ensure_ascii=False)
            piece_reads += ctx.use_text(node, dumped, "data", "branches", i, "label")
            piece_reads += ctx.use_text(node, condition, "data", "branches", i, "condition")
        prompt = classifier_prompt(
            None if target_path else target, list(zip(labels, conditions, strict=True))
        )
        ctx.check_prompt(node, prompt, "data", "branches", since=mark)
        branch = path_text("$vars", node.id, "result", "branch")
        classify = LLMWriteOp(
            id=node.id,
            source_node=node.id,
            name=node.title,
            purpose="classify",
            prompt=prompt,
            context=context,
            labels=labels,
            writes=path_text("$vars", node.id, "result"),
            reads=context + [r for r in dict.fromkeys(piece_reads) if r not in context],
            **contract,
        )
        switch = SwitchOp(
            id=node.id + SWITCH_SUFFIX,
            source_node=node.id,
            name=node.title,
            input=branch,
            cases=[
                Case(port=label, test=Condition(op="eq", value=label), source=cond)
                for label, cond in zip(labels, conditions, strict=True)
            ],
            reads=[branch],
        )
        classify.next.append(Edge(to=switch.id))
        return NodeLowering(
            ops=[classify, switch],
            entry=classify.id,
            exits=exits,
            result_schema=classify.output_schema,
        )


class IfElseLowerer(_BranchLowerer):
    """``ifElse``: branch-0 is "if", branch-1 is "else" (the default)."""

    node_type: ClassVar[str] = "ifElse"


class SwitchLowerer(_BranchLowerer):
    """``switch``: the first matching branch wins; an ``isDefault`` branch catches the rest."""

    node_type: ClassVar[str] = "switch"


class LegacyBranchLowerer(_BranchLowerer):
    """``branch``, the node upstream's editor still reads from old files: ``branchType``
    ``conditional`` (exactly two ways) or ``switch`` (two or more). Upstream has the
    orchestrating model pick the branch whose condition holds, so no branch is a default:
    natural-language conditions make a classifier, deterministic ones a SWITCH (a value
    no condition matches fails the run), as for ``switch``."""

    node_type: ClassVar[str] = "branch"

    def _default_index(self, node: Node, branches: list[dict[str, Any]]) -> int | None:
        return None

    def lower(self, node: Node, ctx: LoweringContext) -> NodeLowering:
        kind = node.data.get("branchType", "conditional")
        branches = node.data.get("branches")
        if kind not in ("conditional", "switch"):
            ctx.error(
                node,
                "invalid-field",
                f"branchType is 'conditional' (two ways) or 'switch' (two or more), not {kind!r}",
                "data",
                "branchType",
            )
        elif isinstance(branches, list) and branches:
            wanted = "exactly two" if kind == "conditional" else "two or more"
            if len(branches) != 2 if kind == "conditional" else len(branches) < 2:
                ctx.error(
                    node,
                    "invalid-field",
                    f"a {kind} branch node has {wanted} branches, not {len(branches)}",
                    "data",
                    "branches",
                )
        return super().lower(node, ctx)


ASK_RESULT_SCHEMA = {
    "type": "object",
    "properties": {
        "label": {"type": "string"},
        "index": {"type": "integer"},
        "labels": {"type": "array", "items": {"type": "string"}},
        "indexes": {"type": "array", "items": {"type": "integer"}},
        "text": {"type": "string"},
    },
}


class AskUserQuestionLowerer:
    """``askUserQuestion``: ASK (halts without an answer), then a SWITCH on the chosen label."""

    node_type: ClassVar[str] = "askUserQuestion"

    def _options(self, node: Node) -> list[Any]:
        options = node.data.get("options")
        return options if isinstance(options, list) else []

    def _branching(self, node: Node) -> bool:
        return bool(self._options(node)) and node.data.get("multiSelect") is not True

    def ports(self, node: Node) -> list[str]:
        if self._branching(node):
            return branch_ports(len(self._options(node)))
        return [SEQUENTIAL_PORT]

    def lower(self, node: Node, ctx: LoweringContext) -> NodeLowering:
        question = get_str(ctx, node, "questionText", required=True) or ""
        ctx.use_template(node, question, "data", "questionText")
        raw = get_list(ctx, node, "options") or []
        options: list[AskOption] = []
        for i, option in enumerate(raw):
            if not isinstance(option, dict) or not isinstance(option.get("label"), str):
                ctx.error(
                    node,
                    "invalid-field",
                    "an option is an object with a string label",
                    "data",
                    "options",
                    i,
                )
                continue
            desc = option.get("description")
            options.append(
                AskOption(
                    label=option["label"], description=desc if isinstance(desc, str) else None
                )
            )
        if not raw and node.data.get("useAiSuggestions") is not True:
            ctx.error(node, "missing-field", "askUserQuestion needs data.options", "data")
        multi = node.data.get("multiSelect") is True
        ask = AskOp(
            id=node.id,
            source_node=node.id,
            name=node.title,
            question=question,
            options=options,
            multi_select=multi,
            writes=path_text("$vars", node.id, "result"),
        )
        if not self._branching(node):
            return NodeLowering.single(ask, result_schema=ASK_RESULT_SCHEMA)
        labels = unique_labels([o.label for o in options])
        chosen = path_text("$vars", node.id, "result", "label")
        switch = SwitchOp(
            id=node.id + SWITCH_SUFFIX,
            source_node=node.id,
            name=node.title,
            input=chosen,
            cases=[
                Case(port=p, test=Condition(op="eq", value=o.label), source=o.label)
                for p, o in zip(labels, options, strict=True)
            ],
            reads=[chosen],
        )
        ask.next.append(Edge(to=switch.id))
        exits = {f"branch-{i}": [(switch.id, label)] for i, label in enumerate(labels)}
        return NodeLowering(
            ops=[ask, switch], entry=ask.id, exits=exits, result_schema=ASK_RESULT_SCHEMA
        )

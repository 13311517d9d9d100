"""Emitters: ExecIR as JSON, as a Mermaid flowchart, or as Graphviz DOT."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from lattice.ir.models import DEFAULT_PORT, ExecIR, ForEachOp, ForkOp, Op
from lattice.ir.serialize import ir_to_json

_SHAPES = {  # kind -> (mermaid open, close)
    "START": ("([", "])"),
    "END": ("([", "])"),
    "SWITCH": ("{", "}"),
    "ASK": ("[/", "/]"),
    "LLM_WRITE": ("[[", "]]"),
    "AGENT": ("[[", "]]"),
    "TOOL_CALL": ("[(", ")]"),
    "FORK": ("[/", "\\]"),
    "JOIN": ("[\\", "/]"),
    "FOR_EACH": ("[[", "]]"),
}


def _branches(op: Op) -> list[tuple[str, str]]:
    """(label, first op) of each branch of a FORK, or of a FOR_EACH's body."""
    if isinstance(op, ForkOp):
        return [(f"branch {n}", target) for n, target in enumerate(op.branches, 1)]
    if isinstance(op, ForEachOp):
        return [("each item", op.body)]
    return []


def _label(op: Op) -> str:
    title = op.name or op.id
    return f"{op.kind}: {title}" if title.upper() != op.kind else op.kind


def _mermaid_text(text: str) -> str:
    return text.replace('"', "#quot;").replace("\n", " ")


def to_mermaid(ir: ExecIR) -> str:
    """A ``flowchart TD`` any Mermaid viewer renders; branch edges carry their labels."""
    ids = {op_id: f"n{i}" for i, op_id in enumerate(ir.ops)}
    lines = ["flowchart TD"]
    for op_id, op in ir.ops.items():
        open_, close = _SHAPES.get(op.kind, ("[", "]"))
        lines.append(f'    {ids[op_id]}{open_}"{_mermaid_text(_label(op))}"{close}')
    for op_id, op in ir.ops.items():
        for label, target in _branches(op):
            lines.append(f'    {ids[op_id]} ==>|"{label}"| {ids[target]}')
        for edge in op.next:
            if edge.to not in ids:
                continue
            if isinstance(op, ForkOp):  # the walk goes on at the join once every branch ended
                lines.append(f'    {ids[op_id]} -.->|"joins"| {ids[edge.to]}')
            elif edge.port == DEFAULT_PORT:
                lines.append(f"    {ids[op_id]} --> {ids[edge.to]}")
            else:
                lines.append(f'    {ids[op_id]} -->|"{_mermaid_text(edge.port)}"| {ids[edge.to]}')
    return "\n".join(lines) + "\n"


def _dot_text(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


_DOT_SHAPES = {
    "START": "oval",
    "END": "oval",
    "SWITCH": "diamond",
    "ASK": "parallelogram",
    "LLM_WRITE": "box3d",
    "AGENT": "box3d",
    "TOOL_CALL": "cylinder",
    "FORK": "trapezium",
    "JOIN": "invtrapezium",
    "FOR_EACH": "box3d",
}


def to_dot(ir: ExecIR) -> str:
    """Graphviz DOT (``dot -Tsvg``); branch edges are labelled."""
    name = re.sub(r"\W+", "_", ir.workflow.id) or "workflow"
    lines = [f"digraph {name} {{", "  rankdir=TB;", '  node [fontname="Helvetica"];']
    for op_id, op in ir.ops.items():
        shape = _DOT_SHAPES.get(op.kind, "box")
        lines.append(f"  {_dot_text(op_id)} [label={_dot_text(_label(op))}, shape={shape}];")
    for op_id, op in ir.ops.items():
        for label, target in _branches(op):
            lines.append(
                f"  {_dot_text(op_id)} -> {_dot_text(target)} [label={_dot_text(label)}, penwidth=2];"
            )
        for edge in op.next:
            if isinstance(op, ForkOp):
                lines.append(
                    f'  {_dot_text(op_id)} -> {_dot_text(edge.to)} [label="joins", style=dashed];'
                )
                continue
            attrs = "" if edge.port == DEFAULT_PORT else f" [label={_dot_text(edge.port)}]"
            lines.append(f"  {_dot_text(op_id)} -> {_dot_text(edge.to)}{attrs};")
    lines.append("}")
    return "\n".join(lines) + "\n"


EMITTERS: dict[str, Callable[[ExecIR], str]] = {
    "execir": ir_to_json,
    "mermaid": to_mermaid,
    "dot": to_dot,
}
"""Output formats of ``lattice lower --emit``."""

"""Emitters: ExecIR as JSON, as a Mermaid flowchart, or as Graphviz DOT."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from lattice.ir.models import DEFAULT_PORT, ExecIR, Op
from lattice.ir.serialize import ir_to_json

_SHAPES = {  # kind -> (mermaid open, close)
    "START": ("([", "])"),
    "END": ("([", "])"),
    "SWITCH": ("{", "}"),
    "ASK": ("[/", "/]"),
    "LLM_WRITE": ("[[", "]]"),
    "TOOL_CALL": ("[(", ")]"),
}


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
        for edge in op.next:
            if edge.to not in ids:
                continue
            if edge.port == DEFAULT_PORT:
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
    "TOOL_CALL": "cylinder",
}


def to_dot(ir: ExecIR) -> str:
    """Graphviz DOT (``dot -Tsvg``); branch edges are labelled."""
    name = re.sub(r"\W+", "_", ir.workflow.id) or "workflow"
    lines = [f"digraph {name} {{", "  rankdir=TB;", '  node [fontname="Helvetica"];']
    for op_id, op in ir.ops.items():
        shape = _DOT_SHAPES.get(op.kind, "box")
        lines.append(f"  {_dot_text(op_id)} [label={_dot_text(_label(op))}, shape={shape}];")
    for op_id, op in ir.ops.items():
        for edge in op.next:
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

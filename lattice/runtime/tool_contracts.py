"""Contracts of the LLM ops that MCP AI modes put before a tool call.

``aiParameterConfig``: the op's output schema **is** the tool's ``inputSchema`` as the
server lists it. ``aiToolSelection``: the output is ``{"tool", "arguments"}`` where
``tool`` is one of the server's tools and ``arguments`` must satisfy that tool's
``inputSchema`` (``if``/``then`` per tool, so violations point into ``/arguments``).
"""

from __future__ import annotations

import json
from typing import Any

from lattice.ir.models import LLMWriteOp
from lattice.llm.base import ToolDef
from lattice.tools.mcp import ToolSessions


async def tool_contract(op: LLMWriteOp, tools: ToolSessions) -> tuple[dict[str, Any], str]:
    """(output schema, a ``## Tools`` block for the prompt) from the op's server."""
    assert op.tool_server is not None
    if op.purpose == "tool_arguments" and op.tool_name:
        spec = await tools.tool(op.tool_server, op.tool_name)
        return _object_schema(spec.input_schema), _describe([spec])
    specs = await tools.list_tools(op.tool_server)
    return selection_schema(specs), _describe(specs)


def selection_schema(specs: list[ToolDef]) -> dict[str, Any]:
    """``{"tool": <one of specs>, "arguments": <that tool's inputSchema>}``."""
    return {
        "type": "object",
        "properties": {
            "tool": {"enum": [s.name for s in specs]},
            "arguments": {"type": "object"},
        },
        "required": ["tool", "arguments"],
        "additionalProperties": False,
        "allOf": [
            {
                "if": {"properties": {"tool": {"const": s.name}}},
                "then": {"properties": {"arguments": _object_schema(s.input_schema)}},
            }
            for s in specs
        ],
    }


def _object_schema(schema: dict[str, Any]) -> dict[str, Any]:
    clean = {k: v for k, v in schema.items() if k != "$schema"}
    return clean or {"type": "object"}


def _describe(specs: list[ToolDef]) -> str:
    lines = []
    for spec in specs:
        lines.append(f"- {spec.name}: {spec.description.strip() or '(no description)'}")
        lines.append(f"  inputSchema: {json.dumps(spec.input_schema, ensure_ascii=False)}")
    return "\n".join(lines)

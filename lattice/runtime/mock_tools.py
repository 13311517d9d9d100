"""Tool calls answered by the run's mock script (its ``tools`` section) instead of a
server: an mcp or httpRequest node's results by node id, an MCP tool's by
``server/tool``. A call the script does not list goes to the real tool."""

from __future__ import annotations

from typing import Any

from lattice.runtime.context import RunContext

OPEN_ARGUMENTS: dict[str, Any] = {"type": "object"}
"""The contract of a mocked tool's arguments: no server lists its inputSchema offline."""


def scripted_tool(
    ctx: RunContext, node_id: str, server: str | None, tool: str | None
) -> str | None:
    """The mock script's ``tools`` key answering this call, or None (a real call)."""
    find = getattr(ctx.root.walk.base_provider, "tool_key", None)
    return find(node_id, server, tool) if callable(find) else None


def scripted_result(ctx: RunContext, key: str) -> Any:
    """The next result the mock script gives under ``key`` (see ``MockProvider.tool_answer``)."""
    provider: Any = ctx.root.walk.base_provider  # a MockProvider, as scripted_tool found
    return provider.tool_answer(key)


def offline_contract(purpose: str) -> dict[str, Any]:
    """The output schema of an MCP AI-mode LLM op whose tool call is mocked: arguments
    (``tool_arguments``) or ``{"tool", "arguments"}`` (``tool_selection``)."""
    if purpose == "tool_arguments":
        return OPEN_ARGUMENTS
    return {
        "type": "object",
        "properties": {"tool": {"type": "string"}, "arguments": OPEN_ARGUMENTS},
        "required": ["tool", "arguments"],
    }

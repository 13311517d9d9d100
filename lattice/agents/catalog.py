"""The tools an agent may ask for, by their Claude Code names, and the grant each needs."""

from __future__ import annotations

READ_ONLY_TOOLS = ("Read", "LS", "Glob", "Grep")
EDIT_TOOLS = ("Edit", "MultiEdit", "Write")
SHELL_TOOLS = ("Bash",)
WEB_TOOLS = ("WebFetch",)

TOOL_GRANTS: dict[str, str] = {
    **dict.fromkeys(READ_ONLY_TOOLS, "read"),
    **dict.fromkeys(EDIT_TOOLS, "write"),
    **dict.fromkeys(SHELL_TOOLS, "shell"),
    **dict.fromkeys(WEB_TOOLS, "web"),
}
"""Each built-in tool and the grant it needs: ``read``, ``write``, ``shell`` or ``web``."""

BUILTIN_TOOLS = tuple(TOOL_GRANTS)

BUILTIN_TYPE_TOOLS: dict[str, tuple[str, ...]] = {
    "explore": READ_ONLY_TOOLS,
    "plan": READ_ONLY_TOOLS,
    "general-purpose": (*READ_ONLY_TOOLS, *EDIT_TOOLS, *SHELL_TOOLS),
}
"""The tools a Claude Code built-in agent type stands for."""

MCP_PREFIX = "mcp__"


def mcp_tool(name: str) -> tuple[str, str] | None:
    """``(server, tool)`` of ``mcp__<server>__<tool>``; None for any other name."""
    if not name.startswith(MCP_PREFIX):
        return None
    server, sep, tool = name[len(MCP_PREFIX) :].partition("__")
    return (server, tool) if server and sep and tool else None


def is_known_tool(name: str) -> bool:
    """A built-in tool or an MCP tool's name."""
    return name in TOOL_GRANTS or mcp_tool(name) is not None

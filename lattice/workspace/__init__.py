"""Agent tools over a granted workspace: read, search, edit, a sandboxed shell, web fetch,
and the configured MCP servers' tools, each behind the ``Toolset`` interface.

Nothing here is reachable from a document alone: a ``WorkspaceGrant`` built from the
user's configuration and flags decides which tools an agent node gets.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lattice.workspace.grants import (
        BUILTIN_TYPE_TOOLS,
        CLAUDE_CODE_TOOLS,
        ToolDecision,
        WorkspaceGrant,
        is_known_tool,
        parse_tool_list,
        suggest_tool,
        tools_for,
    )
    from lattice.workspace.paths import ToolRefused, Workspace
    from lattice.workspace.shell import sandbox_problem
    from lattice.workspace.toolset import (
        TOOL_DEFS,
        McpToolset,
        WorkspaceToolset,
        workspace_toolsets,
    )

_HOMES = {
    "BUILTIN_TYPE_TOOLS": "grants",
    "CLAUDE_CODE_TOOLS": "grants",
    "ToolDecision": "grants",
    "WorkspaceGrant": "grants",
    "is_known_tool": "grants",
    "parse_tool_list": "grants",
    "suggest_tool": "grants",
    "tools_for": "grants",
    "ToolRefused": "paths",
    "Workspace": "paths",
    "sandbox_problem": "shell",
    "TOOL_DEFS": "toolset",
    "McpToolset": "toolset",
    "WorkspaceToolset": "toolset",
    "workspace_toolsets": "toolset",
}
"""Where each public name lives: imported on first use, so that importing
``lattice.workspace.grants`` (lowering and the runtime's settings do) does not load
httpx and the shell (the toolset does, when an agent runs)."""


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'lattice.workspace' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"lattice.workspace.{home}"), name)


__all__ = [
    "BUILTIN_TYPE_TOOLS",
    "CLAUDE_CODE_TOOLS",
    "TOOL_DEFS",
    "McpToolset",
    "ToolDecision",
    "ToolRefused",
    "Workspace",
    "WorkspaceGrant",
    "WorkspaceToolset",
    "is_known_tool",
    "parse_tool_list",
    "sandbox_problem",
    "suggest_tool",
    "tools_for",
    "workspace_toolsets",
]

"""Agent tools over a granted workspace: read, search, edit, a sandboxed shell, web fetch,
and the configured MCP servers' tools, each behind the ``Toolset`` interface.

Nothing here is reachable from a document alone: a ``WorkspaceGrant`` built from the
user's configuration and flags decides which tools an agent node gets.
"""

from lattice.workspace.grants import (
    BUILTIN_TYPE_TOOLS,
    CLAUDE_CODE_TOOLS,
    ToolDecision,
    WorkspaceGrant,
    is_known_tool,
    parse_tool_list,
    split_mcp_name,
    suggest_tool,
    tools_for,
)
from lattice.workspace.paths import ToolRefused, Workspace
from lattice.workspace.shell import sandbox_problem
from lattice.workspace.toolset import TOOL_DEFS, McpToolset, WorkspaceToolset, workspace_toolsets

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
    "split_mcp_name",
    "suggest_tool",
    "tools_for",
    "workspace_toolsets",
]

"""Claude Code's names for MCP tools, as documents ask for them and users grant them.

``mcp__<server>__<tool>`` is one tool of a server; ``mcp__<server>`` and
``mcp__<server>__*`` are every tool of it (Claude Code's permission rules read them the
same way). Lowering checks the names an AGENT op asks for, the configuration the names
it grants, and the agent's toolsets which tools each name stands for.
"""

from __future__ import annotations

import re

MCP_PREFIX = "mcp__"
_MCP_PART = re.compile(r"[A-Za-z0-9_-]+")
"""A server id or a tool name inside an MCP name."""


def parse_mcp_name(name: str) -> tuple[str, str | None] | None:
    """``("server", "tool")`` for ``mcp__server__tool``, ``("server", None)`` for the
    whole server (``mcp__server`` or ``mcp__server__*``); None for any other name."""
    if not name.startswith(MCP_PREFIX):
        return None
    server, sep, tool = name[len(MCP_PREFIX) :].partition("__")
    if not _MCP_PART.fullmatch(server):
        return None
    if not sep or tool == "*":
        return server, None
    return (server, tool) if _MCP_PART.fullmatch(tool) else None


def split_mcp_name(name: str) -> tuple[str, str] | None:
    """``("server", "tool")`` for one tool, ``mcp__server__tool``; None for any other name."""
    parsed = parse_mcp_name(name)
    if parsed is None or parsed[1] is None:
        return None
    return parsed[0], parsed[1]


def mcp_grant_entry(entry: str) -> tuple[str, str | None] | None:
    """What one ``mcp_servers`` entry grants: a server id or ``mcp__server`` /
    ``mcp__server__*`` (``(server, None)``: all its tools), ``mcp__server__tool`` (that
    tool); None when the entry is none of these."""
    if entry.startswith(MCP_PREFIX):
        return parse_mcp_name(entry)
    return (entry, None) if entry and "__" not in entry else None

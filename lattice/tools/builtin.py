"""Lattice's built-in tools, served in-process as the MCP server id ``lattice``.

A document calls them like any MCP tool (``"serverId": "lattice"``). They can only
touch what the user handed to the run: ``retrieve_context`` reads files under the
repository root given with ``--repo`` (``RuntimeSettings.repo_root``) and nothing else.
The search itself (``lattice.tools.retrieve``) is imported when a run first uses it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from lattice.llm.base import ToolDef
from lattice.tools.mcp import BUILTIN_SERVER_ID, tool_error


class BuiltinTools:
    """The ``lattice`` tool server of one run."""

    def __init__(self, *, repo_root: Path | None) -> None:
        self.repo_root = repo_root

    async def list_tools(self) -> list[ToolDef]:
        from lattice.tools.retrieve import RETRIEVE_CONTEXT_TOOL as tool

        return [ToolDef(tool["name"], tool["description"], tool["inputSchema"])]

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        if name != "retrieve_context":  # list_tools is checked first; this guards direct use
            raise tool_error(BUILTIN_SERVER_ID, f"has no tool {name!r}", tool=name)
        if self.repo_root is None:
            raise tool_error(
                BUILTIN_SERVER_ID,
                "retrieve_context needs a repository root: run with --repo DIR "
                "(RuntimeSettings(repo_root=...) from Python)",
                tool=name,
            )
        from lattice.tools.retrieve import retrieve_context

        return await asyncio.to_thread(retrieve_context, self.repo_root, arguments)

    async def aclose(self) -> None:
        return None

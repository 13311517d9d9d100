"""``lattice mcp list [SERVER]``: the configured MCP servers and their tools;
``lattice mcp serve DIR``: the workflows under DIR as MCP tools, over stdio.

``list`` connects to each server named in ``[mcp.servers]`` of the user's config (or
just SERVER), lists its tools with their input schemas, and closes the session. The
built-in server ``lattice`` is listed too. Useful when writing ``mcp`` nodes.

``serve`` is what an MCP client's configuration starts (Claude Code's ``.mcp.json``,
docs/services.md): stdout carries the protocol, stderr the log.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from lattice.cli.common import config_with_grants, note, provider_choice
from lattice.config import load_config
from lattice.errors import InputError, LatticeRunError
from lattice.llm.base import ToolDef
from lattice.service.runs import ProviderSpec
from lattice.tools.builtin import BuiltinTools
from lattice.tools.mcp import BUILTIN_SERVER_ID, McpServerSpec, ToolSessions, specs_from_config


def mcp(args: argparse.Namespace) -> int:
    """The ``lattice mcp`` command."""
    if args.action == "serve":
        return mcp_serve(args)
    return mcp_list(args)


def mcp_serve(args: argparse.Namespace) -> int:
    """Serve the workflows of a folder as MCP tools over stdio until the client leaves."""
    from mcp.server.stdio import stdio_server

    from lattice.services.catalog import Catalog
    from lattice.services.mcp_tools import workflow_server
    from lattice.services.runs import LocalHost, WorkflowRuns

    if not args.server:
        raise InputError("lattice mcp serve DIR (the folder of the workflows to serve)")
    root = Path(args.server)
    if not root.is_dir():
        raise InputError(f"lattice mcp serve {args.server}: not a directory")
    choice = provider_choice(args)
    if args.mocks and choice.given:
        raise InputError("--mocks runs each workflow with its own mock script: give no provider")
    config = config_with_grants(load_config(args.config), args)
    catalog = Catalog(root, mcp_servers=list(config.mcp.servers) if config.source else None)
    runs = WorkflowRuns(
        catalog,
        LocalHost(Path(args.runs_dir)),
        config=config,
        config_path=str(Path(args.config).resolve()) if args.config else None,
        provider=ProviderSpec(choice, latency=args.mock_latency),
        mocks=args.mocks,
        max_calls=args.max_calls,
        max_tokens_total=args.max_tokens_total,
    )
    catalog.workflows()  # lowered now: the problems are known, the first call is quick
    for where, problem in sorted(catalog.problems.items()):
        note(f"warning: {where} is not served: {problem}")
    server = workflow_server(runs)

    async def serve() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    asyncio.run(serve())
    return 0


def mcp_list(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    specs = specs_from_config(config.mcp.servers)
    names = [*sorted(specs), BUILTIN_SERVER_ID]
    if args.server is not None:
        if args.server not in names:
            raise InputError(
                f"MCP server {args.server!r} is not configured "
                f"(configured: {', '.join(sorted(specs)) or 'none'}; built in: {BUILTIN_SERVER_ID})"
            )
        names = [args.server]
    listing = asyncio.run(_list(specs, names))
    if args.json:
        sys.stdout.write(json.dumps(listing, indent=2, ensure_ascii=False) + "\n")
    else:
        sys.stdout.write(_text(listing))
    return 1 if any("error" in entry for entry in listing) else 0


async def _list(specs: dict[str, McpServerSpec], names: list[str]) -> list[dict[str, Any]]:
    listing: list[dict[str, Any]] = []
    for name in names:
        sessions = ToolSessions(specs, builtin=BuiltinTools(repo_root=None))
        entry: dict[str, Any] = {
            "server": name,
            "transport": "builtin" if name == BUILTIN_SERVER_ID else specs[name].describe(),
        }
        try:
            entry["tools"] = [_as_listed(tool) for tool in await sessions.list_tools(name)]
        except LatticeRunError as exc:
            entry["error"] = exc.message
        finally:
            await sessions.aclose()
        listing.append(entry)
    return listing


def _as_listed(tool: ToolDef) -> dict[str, Any]:
    """A tool in MCP's own spelling (``inputSchema``), as its server lists it."""
    return {"name": tool.name, "description": tool.description, "inputSchema": tool.input_schema}


def _text(listing: list[dict[str, Any]]) -> str:
    lines: list[str] = []
    for entry in listing:
        lines.append(f"{entry['server']}  ({entry['transport']})")
        if "error" in entry:
            lines.append(f"  error: {entry['error']}")
        for tool in entry.get("tools", []):
            description = tool["description"].strip()
            lines.append(f"  {tool['name']}: {description.splitlines()[0] if description else ''}")
            lines.append(f"    inputSchema: {json.dumps(tool['inputSchema'], ensure_ascii=False)}")
        lines.append("")
    return "\n".join(lines)

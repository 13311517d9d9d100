"""The config-aware check of ``mcp`` nodes: every ``serverId`` must be a configured server.

Documents never say how to reach a server; the user's ``lattice.toml`` does. When a
config is present, ``lattice check``/``lower``/``run`` report a document that names a
server the config lacks as an error, with the node and the JSON pointer of its serverId;
without a config file, as a warning (the server may be configured later, but a run
without it fails at that node).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator

from lattice.document.loader import pointer_join
from lattice.document.models import Node, Workflow
from lattice.errors import Diagnostic, Severity
from lattice.tools.mcp import BUILTIN_SERVER_ID


def unknown_mcp_servers(
    workflow: Workflow, configured: Collection[str], severity: Severity = Severity.ERROR
) -> list[Diagnostic]:
    """One diagnostic (an error, or ``severity``) per mcp node whose ``serverId`` is
    neither configured nor built in."""
    known = ", ".join(sorted(configured)) or "none"
    then = (
        ""
        if severity is Severity.ERROR
        else "; until then a run fails at this node (unless a mock script's tools answer it)"
    )
    diagnostics = []
    for node in _all_nodes(workflow):
        server = node.data.get("serverId")
        if node.type != "mcp" or not isinstance(server, str):
            continue
        if server == BUILTIN_SERVER_ID or server in configured:
            continue
        diagnostics.append(
            Diagnostic(
                code="mcp-server-unknown",
                message=f"MCP server {server!r} is not configured: add [mcp.servers.{server}] "
                f"to lattice.toml (configured: {known}){then}",
                severity=severity,
                node_id=node.id,
                pointer=pointer_join(node._pointer or "", "data", "serverId"),
            )
        )
    return diagnostics


def _all_nodes(workflow: Workflow) -> Iterator[Node]:
    yield from workflow.nodes
    for flow in workflow.sub_agent_flows:
        yield from flow.nodes

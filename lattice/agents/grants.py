"""What the user grants agents: a workspace, reading, writing, a shell, the web, MCP servers.

A workflow document only asks for tools; the grant comes from the user's ``[agents]``
section of lattice.toml and the flags of ``run``/``batch``/``serve``. Nothing is granted
by default. ``AgentGrant.decide`` splits what a node asks for into the tools it is
offered and those left out, each with the setting that would grant it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from lattice.agents.catalog import TOOL_GRANTS, mcp_tool

GRANT_KINDS = ("read", "write", "shell", "web")


@dataclass(frozen=True, slots=True)
class ToolDecision:
    """The tools a node is offered, and those refused with the setting that would grant each."""

    granted: tuple[str, ...]
    refused: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class AgentGrant:
    """The user's grant. ``root`` is the workspace every file tool and the shell are confined
    to (None: no workspace, so no file tool and no shell); ``patch_only`` records changes
    as patches without touching the files."""

    root: Path | None = None
    read: bool = False
    write: bool = False
    shell: bool = False
    web: bool = False
    mcp_servers: tuple[str, ...] = ()
    patch_only: bool = False

    def allows(self, kind: str) -> bool:
        """Whether tools needing ``kind`` (read/write/shell/web) are granted."""
        if kind == "web":
            return self.web
        if self.root is None:
            return False
        return {"read": self.read, "write": self.write, "shell": self.shell}.get(kind, False)

    def decide(self, asked: Sequence[str]) -> ToolDecision:
        granted: list[str] = []
        refused: list[tuple[str, str]] = []
        for name in asked:
            setting = self.missing_setting(name)
            if setting is None:
                granted.append(name)
            else:
                refused.append((name, setting))
        return ToolDecision(tuple(granted), tuple(refused))

    def missing_setting(self, name: str) -> str | None:
        """None when ``name`` is granted, else the setting that would grant it."""
        server = mcp_tool(name)
        if server is not None:
            if server[0] in self.mcp_servers:
                return None
            return f'--allow-mcp {server[0]} (or [agents] mcp = ["{server[0]}"])'
        kind = TOOL_GRANTS.get(name)
        if kind is None:
            return "nothing: Lattice has no such tool"
        if self.allows(kind):
            return None
        needs = f"--allow {kind} (or [agents] {kind} = true)"
        if kind != "web" and self.root is None:
            return f"--workspace DIR (or [agents] workspace) and {needs}"
        return needs

    def summary(self) -> str:
        """The grant in a few words, for ``lattice check`` and run events."""
        kinds = [kind for kind in GRANT_KINDS if self.allows(kind)]
        parts = [f"workspace {self.root}" if self.root else "no workspace"]
        parts.append("allows " + (", ".join(kinds) if kinds else "nothing"))
        if self.mcp_servers:
            parts.append("MCP " + ", ".join(self.mcp_servers))
        if self.patch_only:
            parts.append("patch-only")
        return "; ".join(parts)

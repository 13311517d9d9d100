"""What the user grants agents, and which of the tools a document asks for that allows.

A workflow document may ask for tools (a sub-agent's ``tools``, a built-in agent type);
only the user's configuration and flags grant them. Every built-in tool answers to its
Claude Code name and needs one grant: ``read`` (Read, LS, Glob, Grep), ``write`` (Edit,
MultiEdit, Write), ``shell`` (Bash) or ``web`` (WebFetch). An MCP tool,
``mcp__<server>__<tool>``, needs its server named in ``mcp_servers``. Nothing is granted
by default, and nothing at all without a workspace root, except the web.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from lattice.errors import Suggester

if TYPE_CHECKING:
    from lattice.ir.models import ExecIR

CLAUDE_CODE_TOOLS: dict[str, str] = {
    "Read": "read",
    "LS": "read",
    "Glob": "read",
    "Grep": "read",
    "Edit": "write",
    "MultiEdit": "write",
    "Write": "write",
    "Bash": "shell",
    "WebFetch": "web",
}
"""Each built-in tool, by its Claude Code name, and the grant it needs."""

READ_ONLY_TOOLS = ("Read", "LS", "Glob", "Grep")

BUILTIN_TYPE_TOOLS: dict[str, tuple[str, ...]] = {
    "explore": READ_ONLY_TOOLS,
    "plan": READ_ONLY_TOOLS,
    "general-purpose": (*READ_ONLY_TOOLS, "Edit", "MultiEdit", "Write", "Bash"),
}
"""The tools a Claude Code built-in agent type stands for."""

GRANTS = ("read", "write", "shell", "web")

MCP_PREFIX = "mcp__"


def split_mcp_name(name: str) -> tuple[str, str] | None:
    """``("server", "tool")`` for ``mcp__server__tool``; None for any other name."""
    if not name.startswith(MCP_PREFIX):
        return None
    server, sep, tool = name[len(MCP_PREFIX) :].partition("__")
    return (server, tool) if sep and server and tool else None


def is_known_tool(name: str) -> bool:
    """A built-in tool's Claude Code name, or a well-formed ``mcp__server__tool``."""
    return name in CLAUDE_CODE_TOOLS or split_mcp_name(name) is not None


def suggest_tool(name: str) -> str | None:
    """The built-in tool name closest to ``name`` (for "did you mean")."""
    return Suggester(CLAUDE_CODE_TOOLS).closest(name)


def parse_tool_list(text: str) -> tuple[str, ...]:
    """A format's comma-separated tool list (``"Read, Grep, Glob"``), names trimmed, once each."""
    names = (part.strip() for part in text.split(","))
    return tuple(dict.fromkeys(name for name in names if name))


@dataclass(frozen=True, slots=True)
class ToolDecision:
    """The tools an agent node gets: those granted, and those refused with the setting
    that would grant each."""

    granted: tuple[str, ...]
    refused: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class WorkspaceGrant:
    """What the user lets agents do. Defaults: no workspace, nothing granted.

    ``root`` is the one directory the file tools and the shell see; ``patch_only`` records
    every change as a diff without touching the files. The limits bound each call.
    """

    root: Path | None = None
    read: bool = False
    write: bool = False
    shell: bool = False
    web: bool = False
    mcp_servers: tuple[str, ...] = ()
    patch_only: bool = False
    tool_timeout: float = 30.0
    """Seconds one tool call may take (the shell's command included)."""
    max_read_bytes: int = 256_000
    """Bytes one Read, Grep or WebFetch answer may hold before it is cut."""
    max_file_bytes: int = 10_000_000
    """Files larger than this are not read, searched or edited."""
    max_entries: int = 1_000
    """Paths one LS or Glob lists, matches one Grep lists."""
    shell_memory_bytes: int = 1_073_741_824
    shell_processes: int = 128
    shell_output_bytes: int = 64_000

    def __post_init__(self) -> None:
        if self.root is not None:
            object.__setattr__(self, "root", Path(self.root).resolve())

    def allows(self, kind: str) -> bool:
        """Whether the grant ``kind`` (read, write, shell, web) is given, root included."""
        if kind == "web":
            return self.web
        return self.root is not None and bool(getattr(self, kind))

    def decide(self, asked: Iterable[str]) -> ToolDecision:
        """Split ``asked`` (tool names) into the granted and the refused ones."""
        granted: list[str] = []
        refused: list[tuple[str, str]] = []
        for name in dict.fromkeys(asked):
            setting = self.missing_setting(name)
            if setting is None:
                granted.append(name)
            else:
                refused.append((name, setting))
        return ToolDecision(tuple(granted), tuple(refused))

    def missing_setting(self, name: str) -> str | None:
        """None when ``name`` is granted, else the setting that would grant it."""
        mcp = split_mcp_name(name)
        if mcp is not None:
            server = mcp[0]
            if server in self.mcp_servers:
                return None
            return f"[agents] mcp_servers = [{server!r}] (or --allow-mcp {server})"
        kind = CLAUDE_CODE_TOOLS.get(name)
        if kind is None:
            return "nothing: it is not a tool Lattice has"
        if self.allows(kind):
            return None
        if kind != "web" and self.root is None:
            return f"[agents] workspace and allow = [{kind!r}] (or --workspace DIR --allow {kind})"
        return f"[agents] allow = [{kind!r}] (or --allow {kind})"

    def describe(self) -> str:
        """One line for ``lattice check`` and the start of a run."""
        given = [kind for kind in GRANTS if self.allows(kind)]
        parts = [f"workspace {self.root}" if self.root else "no workspace"]
        parts.append("grants " + (", ".join(given) if given else "nothing"))
        if self.mcp_servers:
            parts.append("MCP " + ", ".join(self.mcp_servers))
        if self.patch_only:
            parts.append("patch-only")
        return "; ".join(parts)


def tools_for(builtin_type: str | None, tools: Sequence[str]) -> tuple[str, ...]:
    """The tools an agent node asks for: its own list, else its built-in type's set."""
    if tools:
        return tuple(dict.fromkeys(tools))
    return BUILTIN_TYPE_TOOLS.get(builtin_type or "", ())


@dataclass(frozen=True, slots=True)
class RefusedTools:
    """Tools an agent node asks for that the user's grant leaves out, and the setting
    that would grant them."""

    node: str
    tools: tuple[str, ...]
    setting: str

    def message(self) -> str:
        names = ", ".join(self.tools)
        return (
            f"agent node {self.node!r} asks for {names}, not granted: left out of the "
            f"model's tools (to grant: {self.setting})"
        )


def refused_tools(ir: ExecIR, grant: WorkspaceGrant) -> list[RefusedTools]:
    """The tools the IR's agent ops ask for that ``grant`` leaves out, by node and setting."""
    grouped: dict[tuple[str, str], list[str]] = {}
    for op in ir.ops.values():
        if op.kind == "AGENT":
            for tool, setting in grant.decide(op.tools).refused:
                names = grouped.setdefault((op.source_node, setting), [])
                if tool not in names:
                    names.append(tool)
    return [RefusedTools(node, tuple(tools), setting) for (node, setting), tools in grouped.items()]

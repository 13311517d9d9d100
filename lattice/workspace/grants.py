"""What the user grants agents, and which of the tools a document asks for that allows.

A workflow document may ask for tools (a sub-agent's ``tools``, a built-in agent type);
only the user's configuration and flags grant them. Every built-in tool answers to its
Claude Code name and needs one grant: ``read`` (Read, LS, Glob, Grep), ``write`` (Edit,
MultiEdit, Write), ``shell`` (Bash) or ``web`` (WebFetch). MCP tools are named as
Claude Code names them: ``mcp__<server>__<tool>`` is one tool, ``mcp__<server>`` and
``mcp__<server>__*`` are every tool of the server; a node asks in those names, and
``mcp_servers`` grants in them too (a bare server id is the whole server). Nothing is
granted by default, and nothing at all without a workspace root, except the web.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from lattice.errors import Suggester
from lattice.ir.tool_names import mcp_grant_entry, parse_mcp_name

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

EVERY_TOOL = "*"
"""Asks for every tool the main agent has: what a Claude Code sub-agent whose definition
names no ``tools`` inherits. What it gets is every tool the user grants."""

ASK_TOOL = "AskUserQuestion"
"""Claude Code's tool for asking the person; only the main agent (a prompt step run under
a grant) is offered it, and it needs no grant."""

READ_ONLY_TYPES = frozenset({"explore", "plan"})
"""Built-in agent types whose Bash is read-only (the workspace bound read-only)."""

BUILTIN_TYPE_TOOLS: dict[str, tuple[str, ...]] = {
    "explore": (*READ_ONLY_TOOLS, "Bash"),
    "plan": (*READ_ONLY_TOOLS, "Bash"),
    "general-purpose": (EVERY_TOOL,),
}
"""The tools a Claude Code built-in agent type stands for: ``explore`` and ``plan`` read
and run read-only commands, ``general-purpose`` has every tool."""

GRANTS = ("read", "write", "shell", "web")


def is_known_tool(name: str) -> bool:
    """A built-in tool's Claude Code name, or a well-formed MCP name (one tool or a server)."""
    return name in CLAUDE_CODE_TOOLS or parse_mcp_name(name) is not None


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
    """Entries of ``mcp_grant_entry``'s forms: whole servers, or single tools."""
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
    shell_tmp_bytes: int = 128_000_000
    """The size of a command's private ``/tmp`` (memory-backed, so capped on its own)."""
    shell_file_bytes: int = 100_000_000
    """The largest file a command may write (``RLIMIT_FSIZE``)."""
    shell_write_bytes: int = 1_000_000_000
    """What one command may add to the workspace, in bytes of disk; it is stopped past it."""
    shell_write_files: int = 10_000
    """How many files (and folders) one command may add to the workspace."""

    def __post_init__(self) -> None:
        if self.root is not None:
            object.__setattr__(self, "root", Path(self.root).resolve())

    def allows(self, kind: str) -> bool:
        """Whether the grant ``kind`` (read, write, shell, web) is given, root included."""
        if kind == "web":
            return self.web
        return self.root is not None and bool(getattr(self, kind))

    @cached_property
    def _mcp_grants(self) -> dict[str, frozenset[str] | None]:
        grants: dict[str, frozenset[str] | None] = {}
        for entry in self.mcp_servers:
            parsed = mcp_grant_entry(entry)
            if parsed is None:
                continue
            server, tool = parsed
            held = grants.get(server, frozenset())
            if tool is None or held is None:
                grants[server] = None
            else:
                grants[server] = held | {tool}
        return grants

    def mcp_tools(self, server: str) -> frozenset[str] | None:
        """The tools of MCP server ``server`` granted: None for all of them, else their
        names (empty: none)."""
        return self._mcp_grants.get(server, frozenset())

    def every_tool(self) -> tuple[str, ...]:
        """What ``EVERY_TOOL`` stands for under this grant: each built-in tool granted, then
        each granted MCP server (``mcp__<server>__*``) or tool."""
        names = [name for name, kind in CLAUDE_CODE_TOOLS.items() if self.allows(kind)]
        for server, tools in self._mcp_grants.items():
            if tools is None:
                names.append(f"mcp__{server}__*")
            else:
                names += [f"mcp__{server}__{tool}" for tool in sorted(tools)]
        return tuple(names)

    def decide(self, asked: Iterable[str]) -> ToolDecision:
        """Split ``asked`` (tool names) into the granted and the refused ones. ``EVERY_TOOL``
        is every granted tool (and refuses none); ``ASK_TOOL`` needs no grant."""
        granted: list[str] = []
        refused: list[tuple[str, str]] = []
        names: list[str] = []
        for name in asked:
            names += self.every_tool() if name == EVERY_TOOL else [name]
        for name in dict.fromkeys(names):
            if name == ASK_TOOL:
                granted.append(name)
                continue
            setting = self.missing_setting(name)
            if setting is None:
                granted.append(name)
            else:
                refused.append((name, setting))
        return ToolDecision(tuple(granted), tuple(refused))

    def missing_setting(self, name: str) -> str | None:
        """None when ``name`` is granted, else the setting that would grant it."""
        mcp = parse_mcp_name(name)
        if mcp is not None:
            server, tool = mcp
            allowed = self.mcp_tools(server)
            if allowed is None or (tool is None and allowed) or tool in allowed:
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

    def missing_settings(self, names: Iterable[str]) -> str:
        """The settings that would grant every tool of ``names``: the built-in tools'
        grants as one ``--allow`` list, then each other tool's own setting."""
        names = list(names)
        kinds = [kind for kind in GRANTS if any(CLAUDE_CODE_TOOLS.get(n) == kind for n in names)]
        parts: list[str] = []
        if kinds:
            listed = ",".join(kinds)
            if self.root is None and kinds != ["web"]:
                parts.append(
                    f"[agents] workspace and allow = {kinds!r} "
                    f"(or --workspace DIR --allow {listed})"
                )
            else:
                parts.append(f"[agents] allow = {kinds!r} (or --allow {listed})")
        others = (self.missing_setting(n) for n in names if n not in CLAUDE_CODE_TOOLS)
        parts += dict.fromkeys(setting for setting in others if setting is not None)
        return "; ".join(parts)

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

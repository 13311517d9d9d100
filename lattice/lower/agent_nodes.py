"""Which nodes are agents, and with which tools: what lowering turns into an AGENT op.

As in Claude Code, every ``subAgent`` is an agent: its ``tools`` (a comma-separated list
of Claude Code tool names) narrow what it asks for; with none it asks for every tool the
main agent has (``EVERY_TOOL``), and a ``builtInType`` stands for its Claude Code set
(``explore`` and ``plan``: read and read-only shell commands; ``general-purpose``:
everything). A ``skill`` that executes (``executionMode`` other than ``load``; the
format's default is ``execute``) is an agent with its ``allowedTools``, else everything.
A ``codex`` node with a ``sandbox`` is one too (``read-only``: the read-only set;
``workspace-write``: read, edit and shell). Asking is all a document does: which tools
an agent gets is the user's grant (``[agents]`` in lattice.toml, ``--allow``), decided
at run time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lattice.document.models import Node
from lattice.errors import did_you_mean
from lattice.ir.models import MAX_AGENT_TOOL_CALLS, MAX_AGENT_TURNS, AgentLimits
from lattice.lower.fields import get_number, get_str
from lattice.lower.registry import LoweringContext
from lattice.workspace.grants import (
    BUILTIN_TYPE_TOOLS,
    CLAUDE_CODE_TOOLS,
    EVERY_TOOL,
    READ_ONLY_TOOLS,
    is_known_tool,
)

WORKSPACE_WRITE_TOOLS = (*READ_ONLY_TOOLS, "Edit", "MultiEdit", "Write", "Bash")

CODEX_SANDBOX_TOOLS: dict[str, tuple[str, ...]] = {
    "read-only": READ_ONLY_TOOLS,
    "workspace-write": WORKSPACE_WRITE_TOOLS,
    "danger-full-access": WORKSPACE_WRITE_TOOLS,
}
"""A codex node's sandbox mode and the tools it stands for (the user's grant still
decides; ``danger-full-access`` gets no more than ``workspace-write``)."""


@dataclass(frozen=True, slots=True)
class AgentAsk:
    """What a node asks for as an agent: its tools (known names, document order), the
    kind of agent it is and its limits."""

    tools: tuple[str, ...]
    agent_type: str
    limits: AgentLimits

    def op_fields(self) -> dict[str, Any]:
        return {"tools": list(self.tools), "agent_type": self.agent_type, "limits": self.limits}


def agent_ask(ctx: LoweringContext, node: Node) -> AgentAsk | None:
    """The node's request for tools, or None when it is not an agent (one LLM_WRITE)."""
    asked = _asked_tools(ctx, node)
    if asked is None:
        return None
    names, agent_type, field = asked
    if field in ("tools", "allowedTools"):
        names = _known_tools(ctx, node, names, field)
    return AgentAsk(names, agent_type, _limits(ctx, node))


def _asked_tools(ctx: LoweringContext, node: Node) -> tuple[tuple[str, ...], str, str] | None:
    """(names as written, agent type, the field they came from)."""
    data = node.data
    if node.type == "subAgent":
        if data.get("tools") not in (None, "", []):
            builtin_type = data.get("builtInType")
            kind = builtin_type if isinstance(builtin_type, str) and builtin_type else "custom"
            return _tool_list(ctx, node, "tools"), kind, "tools"
        builtin = get_str(ctx, node, "builtInType")
        if builtin is None:
            return (EVERY_TOOL,), "custom", "inherited"
        if builtin not in BUILTIN_TYPE_TOOLS:
            ctx.warn(
                node,
                "agent-type-unknown",
                f"builtInType {builtin!r} is not a Claude Code built-in agent"
                f"{did_you_mean(str(builtin), BUILTIN_TYPE_TOOLS)}; known: "
                f"{', '.join(BUILTIN_TYPE_TOOLS)}; the node runs as a custom sub-agent "
                "(every tool of the main agent)",
                "data",
                "builtInType",
            )
            return (EVERY_TOOL,), "custom", "inherited"
        return BUILTIN_TYPE_TOOLS[builtin], builtin, "builtInType"
    if node.type == "skill":
        if data.get("executionMode") == "load":
            return None
        if data.get("allowedTools") in (None, "", []):
            return (EVERY_TOOL,), "skill", "inherited"
        return _tool_list(ctx, node, "allowedTools"), "skill", "allowedTools"
    if node.type == "codex":
        sandbox = get_str(ctx, node, "sandbox")
        if sandbox is None:
            return None
        if sandbox not in CODEX_SANDBOX_TOOLS:
            ctx.warn(
                node,
                "agent-sandbox-unknown",
                f"sandbox {sandbox!r} is not a Codex sandbox mode"
                f"{did_you_mean(str(sandbox), CODEX_SANDBOX_TOOLS)}; the node runs as one "
                "model call without tools",
                "data",
                "sandbox",
            )
            return None
        return CODEX_SANDBOX_TOOLS[sandbox], "codex", "sandbox"
    return None


def _tool_list(ctx: LoweringContext, node: Node, key: str) -> tuple[str, ...]:
    """A comma-separated tool list (or a JSON list of names), trimmed, each name once."""
    value = node.data.get(key)
    if isinstance(value, str):
        parts: list[Any] = value.split(",")
    elif isinstance(value, list):
        parts = value
    else:
        ctx.error(
            node,
            "invalid-field",
            f"data.{key} must be a comma-separated list of tool names",
            "data",
            key,
        )
        return ()
    names = [part.strip() for part in parts if isinstance(part, str) and part.strip()]
    # "Bash(git:*)" is Claude Code's way of narrowing a tool; Lattice grants whole tools.
    names = [name.split("(", 1)[0].strip() for name in names]
    return tuple(dict.fromkeys(names))


UNKNOWN_TOOLS_NAMED = 10
"""Unknown tool names warned about one by one; the rest of a node's are one warning."""


def _known_tools(
    ctx: LoweringContext, node: Node, names: tuple[str, ...], field: str
) -> tuple[str, ...]:
    """``names`` without those Lattice has no tool for (a warning each, with a hint, for
    the first ``UNKNOWN_TOOLS_NAMED``; one warning counts the rest)."""
    kept = [name for name in names if is_known_tool(name)]
    unknown = [name for name in names if not is_known_tool(name)]
    for name in unknown[:UNKNOWN_TOOLS_NAMED]:
        shown = name if len(name) <= 100 else f"{name[:100]}…"
        hint = (
            " (name the server: mcp__<server>__* asks for all of its tools)"
            if name.startswith("mcp__")
            else did_you_mean(shown, CLAUDE_CODE_TOOLS)
        )
        ctx.warn(
            node,
            "agent-tool-unknown",
            f"unknown tool {shown!r}{hint}; the agent is not offered it (tools: "
            f"{', '.join(CLAUDE_CODE_TOOLS)}, mcp__<server>__<tool> or mcp__<server>__*)",
            "data",
            field,
        )
    if len(unknown) > UNKNOWN_TOOLS_NAMED:
        ctx.warn(
            node,
            "agent-tool-unknown",
            f"{len(unknown) - UNKNOWN_TOOLS_NAMED:,} more unknown tools; the agent is not "
            "offered them",
            "data",
            field,
        )
    return tuple(kept)


def _limits(ctx: LoweringContext, node: Node) -> AgentLimits:
    """The document's ``maxTurns`` / ``maxToolCalls`` when given, at most 1000 / 10,000
    (the user's ``[agents]`` limits cap them further at run time)."""
    fields: dict[str, Any] = {}
    turns = get_number(ctx, node, "maxTurns", integer=True, minimum=1, maximum=MAX_AGENT_TURNS)
    if turns is not None:
        fields["max_turns"] = int(turns)
    calls = get_number(
        ctx, node, "maxToolCalls", integer=True, minimum=0, maximum=MAX_AGENT_TOOL_CALLS
    )
    if calls is not None:
        fields["max_tool_calls"] = int(calls)
    return AgentLimits(**fields)

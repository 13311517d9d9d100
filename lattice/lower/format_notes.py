"""What a document asks of its editor's runtime (Claude Code) that Lattice reads but
does not do: slash-command options, hooks, agent tools and grants, memory, colours …

Each such field is read here and said back as a note (kept in the IR's
``workflow.notes``, printed by ``lattice lower`` and ``lattice check``), with why it
does not change a run; hooks are a warning, since a document never runs a command.
docs/documents.md ("Every field of the format") lists every field and what Lattice
does with it.
"""

from __future__ import annotations

from typing import Any

from lattice.document.models import Node, Workflow
from lattice.lower.registry import LoweringContext

AGENT_DOC = "used by agent nodes: see docs/agents.md"
SLASH_MODEL_CLASSES = {
    "haiku": "small",
    "sonnet": "medium",
    "opus": "large",
    "inherit": "default",
    "default": "default",
}
"""``slashCommandOptions.model`` → the model class of LLM nodes that name none."""

_NODE_FIELDS: dict[str, dict[str, str]] = {
    "subAgent": {
        "tools": f"tools asked for ({AGENT_DOC})",
        "builtInType": f"built-in agent type ({AGENT_DOC})",
        "memory": "memory scope: Lattice keeps no memory between runs",
        "color": "editor colour",
        "agentType": "editor field set",
        "commandFilePath": "the agent file the editor linked (not read: a document reads no file)",
        "commandScope": "scope of the linked agent file",
        "pluginName": "plugin that provides the agent (Claude Code plugins are not loaded)",
    },
    "subAgentFlow": {
        "tools": f"tools asked for ({AGENT_DOC})",
        "memory": "memory scope: Lattice keeps no memory between runs",
        "color": "editor colour",
        "model": "the model of the flow's LLM nodes that name none",
    },
    "skill": {
        "allowedTools": f"tools asked for ({AGENT_DOC})",
        "pluginName": "plugin that provides the skill (Claude Code plugins are not loaded)",
        "skillPath": "not the standard place of the skill's SKILL.md, which is the only one "
        "Lattice reads",
        "validationStatus": "the editor's last check found the skill so",
    },
    "codex": {
        "sandbox": f"Codex sandbox ({AGENT_DOC})",
        "reasoningEffort": "Codex reasoning effort: not sent (providers differ)",
        "skipGitRepoCheck": "Codex CLI flag: no Codex CLI is started",
        "promptMode": "prompt mode",
    },
    "mcp": {
        "source": "which client's MCP configuration the editor read: servers come from lattice.toml",
        "validationStatus": "the editor's last check found the tool so",
        "preservedManualParameterConfig": "manual values kept by the editor for another mode",
    },
}


def format_notes(ctx: LoweringContext) -> list[str]:
    """Notes on the fields Lattice reads and shows but does not act on, and a
    ``hooks-not-run`` warning for hooks."""
    workflow = ctx.workflow
    notes = _slash_command_notes(ctx, workflow)
    tour = (workflow.model_extra or {}).get("tour")
    if isinstance(tour, list) and tour:
        notes.append(f"tour: {len(tour)} step(s) for the editor's tour player (not run)")
    for node in _all_nodes(workflow):
        notes += _node_notes(node)
    return notes


def document_model_class(workflow: Workflow) -> str:
    """The model class ``slashCommandOptions.model`` gives nodes that name none."""
    options = (workflow.model_extra or {}).get("slashCommandOptions")
    model = options.get("model") if isinstance(options, dict) else None
    return SLASH_MODEL_CLASSES.get(model, "default") if isinstance(model, str) else "default"


def tools_asked(workflow: Workflow) -> list[str]:
    """``slashCommandOptions.allowedTools`` as a list (upstream writes it comma-separated)."""
    options = (workflow.model_extra or {}).get("slashCommandOptions")
    tools = options.get("allowedTools") if isinstance(options, dict) else None
    if not isinstance(tools, str):
        return []
    return [tool.strip() for tool in tools.split(",") if tool.strip()]


def _slash_command_notes(ctx: LoweringContext, workflow: Workflow) -> list[str]:
    options = (workflow.model_extra or {}).get("slashCommandOptions")
    if not isinstance(options, dict):
        return []
    notes: list[str] = []
    model = options.get("model")
    if isinstance(model, str) and model in SLASH_MODEL_CLASSES and model != "default":
        notes.append(
            f"slashCommandOptions.model {model!r}: LLM nodes that name no model use the "
            f"model class {SLASH_MODEL_CLASSES[model]!r}"
        )
    tools = options.get("allowedTools")
    if isinstance(tools, str) and tools.strip():
        notes.append(
            f"slashCommandOptions.allowedTools asks for {tools.strip()} (asked for only: "
            "granted by you, see docs/agents.md)"
        )
    for key, why in (
        ("context", "how Claude Code runs the command (a run has its own context)"),
        ("argumentHint", "Claude Code's completion hint"),
        ("disableModelInvocation", "Claude Code's Skill-tool switch"),
    ):
        value = options.get(key)
        if value not in (None, "", "default", False):
            notes.append(f"slashCommandOptions.{key} {value!r}: {why}")
    hooks = options.get("hooks")
    if isinstance(hooks, dict) and hooks:
        listed = []
        for event, entries in hooks.items():
            count = sum(
                len(entry.get("hooks") or [])
                for entry in (entries if isinstance(entries, list) else [])
                if isinstance(entry, dict)
            )
            listed.append(f"{event} ({count} command(s))")
        ctx.warn(
            None,
            "hooks-not-run",
            f"slashCommandOptions.hooks {', '.join(listed)} are not run: a document never "
            "runs a command in Lattice",
            "slashCommandOptions",
            "hooks",
        )
    return notes


def _node_notes(node: Node) -> list[str]:
    notes = []
    fields = _NODE_FIELDS.get(node.type, {})
    for key, why in fields.items():
        value = node.data.get(key)
        if value in (None, "", [], {}) or _as_expected(node, key, value):
            continue
        notes.append(f"node {node.id!r} {node.type}.{key} {_short(value)}: {why}")
    if node.type == "askUserQuestion" and node.data.get("useAiSuggestions") is True:
        notes.append(
            f"node {node.id!r} askUserQuestion.useAiSuggestions: the question takes a "
            "free-text answer (no options are suggested)"
        )
    if node.type == "branchSession":
        notes.append(
            f"node {node.id!r} branchSession: an interactive session (Claude Code's /branch): "
            "the run halts for each of the person's messages, an agent answers it; "
            "/done ends the session and its summary is the node's result (docs/runtime.md)"
        )
    return notes


def _as_expected(node: Node, key: str, value: Any) -> bool:
    """A value that says nothing worth a note: a check that passed, a skill file at its
    standard place."""
    if key == "validationStatus":
        return bool(value == "valid")
    if key == "skillPath" and isinstance(value, str):
        folder = ".github/skills" if node.data.get("source") == "copilot" else ".claude/skills"
        standard = f"{folder}/{node.data.get('name')}/SKILL.md"
        return value.replace("\\", "/").endswith(standard)
    return False


def _all_nodes(workflow: Workflow) -> list[Node]:
    nodes = list(workflow.nodes)
    for flow in workflow.sub_agent_flows:
        nodes += flow.nodes
    return nodes


def _short(value: Any, limit: int = 60) -> str:
    text = value if isinstance(value, str) else repr(value)
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")

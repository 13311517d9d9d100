"""Nodes meant to act that would run without tools: what ``lattice check`` and the start
of ``lattice run`` list, and what a run's result counts.

Claude Code gives every sub-agent, executing skill and prompt step tools (the main
agent's, or those its definition names). A run whose grant leaves a node none of them
runs it as one text-only model call: ``toolless_nodes`` names each such node with what
would grant it. For a prompt step this is said only when its text asks for tools
(``acting_words``: a small, reviewed list of commands and phrases that ask to run
commands or touch files); a prompt that only talks needs none.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lattice.ir.models import AgentOp, ExecIR, LLMWriteOp
from lattice.workspace.grants import ASK_TOOL, EVERY_TOOL, WorkspaceGrant

COMMANDS = (
    "git", "gh", "npm", "npx", "yarn", "pnpm", "pip", "pytest", "python", "python3",
    "cargo", "docker", "kubectl", "curl", "mkdir", "rm", "mv", "cp", "sed", "grep",
)  # fmt: skip
"""Programs whose name starts a shell command: quoted (`` `gh issue view 12` ``) or on a
line of its own (a step's command). Words that also start sentences (make, go, cat,
node) are not among them."""

_COMMAND = re.compile(
    r"`(" + "|".join(COMMANDS) + r")\b([^`\n]*)`"
    r"|(?m:^[ \t]*(?:\d+[.)][ \t]*|[-*][ \t]*)?(" + "|".join(COMMANDS) + r") ([^\n#]*))"
)
_PHRASES = re.compile(
    r"\b(?:re-?run|run|execute)\s+(?:the\s+|all\s+|its\s+|project's\s+|your\s+)?"
    r"(?:tests?|test suite|commands?|quality checks|linter|formatter|build|script)\b"
    r"|\bcommands? to run\b"
    r"|\bcreate\s+(?:a\s+|the\s+|new\s+)?"
    r"(?:worktree|branch|file|folder|directory|commit|pull request)\b"
    r"|\bcommit\s+(?:the\s+|your\s+|all\s+)?changes\b"
    r"|\b(?:edit|modify|change|update|write|save)\s+(?:the\s+|these\s+|those\s+)?"
    r"(?:files?|code|source)\b"
    r"|\bfix\s+(?:what|whatever|anything)\s+fails\b"
    r"|\bimplement\s+the\s+(?:plan|fix|changes?|feature)\b"
    r"|\bapply\s+the\s+(?:fix|changes?|patch)\b"
    r"|\b(?:read|review)\s+(?:the\s+)?(?:following\s+)?files?\b"
    r"|\b(?:identify|find|locate)\s+(?:the\s+)?(?:related\s+|relevant\s+)?code\s+files\b",
    re.IGNORECASE,
)
_WORD = re.compile(r"[a-z][a-z0-9_-]*")
MAX_WORDS = 5


def _command_words(program: str, rest: str) -> list[str]:
    """``git worktree add`` of ``git worktree add ../x -b y && npm test``: each command's
    program and its leading sub-command words (at most three words)."""
    out = []
    for segment in re.split(r"&&|\|\||;|\|", f"{program} {rest}"):
        words: list[str] = []
        for token in segment.split():
            word = _WORD.match(token)
            if word is None or len(words) == 3:
                break
            words.append(word.group(0))
            if word.end() < len(token):
                break
        if words and words[0] in COMMANDS:
            out.append(" ".join(words))
    return out


def acting_words(text: str) -> list[str]:
    """The commands and phrases of ``text`` that ask to run commands or touch files, in
    order, each once (at most ``MAX_WORDS``); empty when it asks for neither."""
    found: dict[str, int] = {}
    spans: list[tuple[int, int]] = []
    for match in _COMMAND.finditer(text):
        program = match.group(1) or match.group(3)
        rest = match.group(2) if match.group(1) else match.group(4)
        for words in _command_words(program, rest or ""):
            found.setdefault(words, match.start())
        spans.append(match.span())
    for match in _PHRASES.finditer(text):
        if any(start <= match.start() < end for start, end in spans):
            continue  # part of a command already found ("npm run build")
        found.setdefault(" ".join(match.group(0).split()), match.start())
    return [words for words, _ in sorted(found.items(), key=lambda kv: kv[1])][:MAX_WORDS]


@dataclass(frozen=True, slots=True)
class Toolless:
    """A node Claude Code would run with tools that this run runs without them."""

    node: str
    op: str
    kind: str
    """``sub-agent``, ``skill``, ``codex`` or ``prompt``."""
    grant: str
    """What would grant it tools."""
    words: tuple[str, ...] = ()
    """For a prompt step: the words that show it asks for tools."""

    def message(self) -> str:
        if self.kind == "prompt":
            said = ", ".join(repr(word) for word in self.words)
            return (
                f"prompt step {self.node!r} asks to act ({said}) but runs without tools: "
                f"one model call, which cannot do it (to grant: {self.grant})"
            )
        calls = (
            "each reply one model call" if self.kind == "branch session" else "as one model call"
        )
        return (
            f"{self.kind} {self.node!r} runs without tools, {calls} (Claude Code "
            f"gives it tools; to grant: {self.grant})"
        )

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"node": self.node, "kind": self.kind, "grant": self.grant}
        if self.words:
            out["words"] = list(self.words)
        return out


WHOLE_GRANT = "read,write,shell"

#: How a tool-less agent node is named to the user, by its agent type (else "sub-agent").
_KINDS = {"skill": "skill", "codex": "codex", "branchSession": "branch session"}


def _main_grant(grant: WorkspaceGrant) -> str:
    if grant.root is None:
        return f"[agents] workspace and allow (or --workspace DIR --allow {WHOLE_GRANT})"
    return f"[agents] allow (or --allow {WHOLE_GRANT})"


def toolless_nodes(ir: ExecIR, grant: WorkspaceGrant) -> list[Toolless]:
    """The sub-agents, skills and codex nodes that ``grant`` leaves without any tool, and
    the prompt steps that ask to act while the main agent has none, in op order."""
    found: list[Toolless] = []
    seen: set[str] = set()
    main_acts = bool(grant.every_tool())
    for op in ir.ops.values():
        if op.source_node in seen:
            continue
        if isinstance(op, AgentOp) and op.agent_type != "main":
            decision = grant.decide(op.tools)
            if any(name != ASK_TOOL for name in decision.granted):
                continue
            if EVERY_TOOL in op.tools or not decision.refused:
                setting = _main_grant(grant)
            else:
                setting = grant.missing_settings(name for name, _ in decision.refused)
            kind = _KINDS.get(op.agent_type or "", "sub-agent")
            found.append(Toolless(op.source_node, op.id, kind, setting))
            seen.add(op.source_node)
        elif isinstance(op, LLMWriteOp) and op.main_agent and not main_acts:
            words = acting_words(op.prompt)
            if words:
                grants = _main_grant(grant)
                found.append(Toolless(op.source_node, op.id, "prompt", grants, tuple(words)))
                seen.add(op.source_node)
    return found

"""Approvals of agents' tool calls: what is asked, what was decided, and by whom.

A call the permission rules send to a person (``ask``) becomes an ``ApprovalRequest``:
the tool, its arguments and what it would do (an edit's diff against the workspace as
it is, a command and its folder, an MCP server and its arguments). A person answers it
with an ``ApprovalDecision``: allow once, allow the tool for the rest of the run, or deny
with a reason, through one of the front doors (the terminal, ``lattice resume``, the
gateway). Each decision, a rule's included, is journaled before anything acts on it, so
a resumed run neither asks again nor runs a decided call twice.

When no one can answer now, the agent loop raises ``ApprovalsPending`` (not a run error:
the contract engine lets it through) once the turn's other calls ran, and the AGENT op
halts the run with the pending requests.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from lattice.permissions.rules import bash_parts, command_prefix_rule

Choice = Literal["allow", "allow_run", "deny"]
CHOICES: tuple[Choice, ...] = ("allow", "allow_run", "deny")
APPROVALS = "$approvals"
"""The key of a run's answers that holds approvals by id (``{"<id>": decision}``) or for
every pending call (``{"*": decision}``)."""


@dataclass(frozen=True)
class ApprovalRequest:
    """A tool call waiting for a person's approval."""

    id: str
    """``<node>.<turn>.<call>``: unique among a run's pending approvals."""
    node: str
    tool: str
    arguments: dict[str, Any]
    why: str
    """The rule (or mode) that asks."""
    preview: dict[str, Any]
    """What the call would do: ``{"diff": …}``, ``{"command", "cwd"}``, ``{"server", …}``."""
    key: str = field(default="", compare=False)
    planned: dict[str, Any] | None = field(default=None, compare=False, repr=False)
    """An edit's planned change: the diff the person sees is the one applied."""

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "node": self.node,
            "tool": self.tool,
            "arguments": self.arguments,
            "why": self.why,
            **self.preview,
        }


@dataclass(frozen=True)
class ApprovalDecision:
    """A decision on one call: who or what decided it, through which door, when."""

    choice: Choice
    by: str
    """``rule`` or ``person``."""
    door: str
    """``terminal``, ``lattice resume``, ``gateway``, ``--no-wait``, or the rule's text."""
    reason: str = ""
    at: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))

    @property
    def allows(self) -> bool:
        return self.choice != "deny"

    def to_json(self) -> dict[str, Any]:
        return {
            "decision": self.choice,
            "by": self.by,
            "door": self.door,
            "reason": self.reason,
            "at": self.at,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ApprovalDecision:
        choice = data.get("decision", "deny")
        return cls(
            choice if choice in CHOICES else "deny",
            str(data.get("by", "person")),
            str(data.get("door", "")),
            str(data.get("reason", "")),
            str(data.get("at", "")),
        )

    def refusal(self, tool: str) -> str:
        """What the model is told of a denied call."""
        said = f": {self.reason}" if self.reason else ""
        who = "the user" if self.by == "person" else self.door
        return f"Permission to use {tool} was denied by {who}{said}. Do not retry this call as is."


def allow_run_scope(tool: str, arguments: Mapping[str, Any]) -> str:
    """In words, what "allow for the rest of the run" on a call of ``tool`` allows: a
    command's program and subcommand (``git diff`` commands), every edit, or the tool."""
    if tool == "Bash":
        command = str(arguments.get("command", ""))
        rules = [command_prefix_rule(part) for part in bash_parts(command) or []]
        if not rules or None in rules:
            return "this command, this once (it cannot be scoped to a prefix)"
        prefixes = dict.fromkeys(rule[len("Bash(") : -len(":*)")] for rule in rules if rule)
        return " and ".join(f"`{prefix}` commands" for prefix in prefixes)
    if tool in ("Edit", "MultiEdit", "Write"):
        return "every edit"
    return f"every {tool} call"


def answer_decision(value: Any, door: str) -> ApprovalDecision:
    """A decision as a front door passes it: ``"allow"``, ``"allow_run"``, ``"deny"`` or
    ``{"decision": …, "reason": …}`` (with ``"door"`` and ``"at"``, when it was given, if
    the door says); a ValueError for anything else."""
    if isinstance(value, str):
        value = {"decision": value}
    if not isinstance(value, Mapping) or value.get("decision") not in CHOICES:
        raise ValueError(
            f"an approval is one of {', '.join(CHOICES)} or "
            '{"decision": "deny", "reason": "..."}, not ' + repr(value)
        )
    reason = value.get("reason", "")
    if not isinstance(reason, str):
        raise ValueError("an approval's reason is text")
    decision = ApprovalDecision(value["decision"], "person", str(value.get("door") or door), reason)
    at = value.get("at")  # when it was given, if not now (kept by a Temporal workflow)
    return replace(decision, at=at) if isinstance(at, str) and at else decision


def check_approvals(value: Any) -> list[str]:
    """The problems of an answers' ``$approvals`` value (``{"<id>" or "*": decision}``)."""
    if not isinstance(value, Mapping):
        return [f"{APPROVALS}: an object of approval id to decision"]
    problems = []
    for key, decision in value.items():
        try:
            answer_decision(decision, "")
        except ValueError as exc:
            problems.append(f"{APPROVALS}[{key!r}]: {exc}")
    return problems


Approver = Callable[
    [ApprovalRequest], "ApprovalDecision | Awaitable[ApprovalDecision | None] | None"
]
"""A person who can answer now (the terminal); None: they chose not to (the run halts)."""


class ApprovalsPending(Exception):
    """Calls of an agent's turn wait for a person; the turn's other calls have run."""

    def __init__(self, requests: list[ApprovalRequest]) -> None:
        super().__init__(f"{len(requests)} tool call(s) wait for approval")
        self.requests = requests

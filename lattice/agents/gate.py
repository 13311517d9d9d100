"""The gate every tool call of an agent passes before it runs: the permission rules'
verdict, a decision journaled before anything acts on it, a person asked when a rule
says so (see ``lattice.permissions.approvals``).

``CallGate.check`` answers one call with ``Pass`` (run it, with the edit's approved plan
if there is one), a refusal the model sees, or the ``ApprovalRequest`` a person must
answer. A call the journal already holds a decision for is not decided again; a call
the journal holds a start or result for is past the gate.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from lattice.ir.tool_names import parse_mcp_name
from lattice.llm.base import ToolCall
from lattice.permissions.approvals import (
    APPROVALS,
    ApprovalDecision,
    ApprovalRequest,
    Approver,
    answer_decision,
)
from lattice.permissions.policy import Permissions
from lattice.permissions.rules import Rule, RuleSource, bash_parts, command_prefix_rule, parse_rule
from lattice.tools.toolset import ToolResult
from lattice.workspace.grants import ASK_TOOL

EDITS = frozenset({"Edit", "MultiEdit", "Write"})


@runtime_checkable
class DecisionJournal(Protocol):
    """A tool journal that also keeps decisions (the run folder's)."""

    def recorded_decision(self, op_id: str | None, key: str) -> dict[str, Any] | None:
        """The journaled decision on call ``key`` of op ``op_id``, if any."""
        ...

    def was_asked(self, op_id: str | None, key: str) -> bool:
        """Whether call ``key`` of op ``op_id`` waited for a person when the run halted."""
        ...

    def journal_tool(self, line: dict[str, Any]) -> None: ...


@dataclass(frozen=True)
class Pass:
    """Run the call (an approved edit applies the plan the person saw)."""

    planned: dict[str, Any] | None = None


@dataclass
class CallGate:
    """What decides an agent's calls: the rules, the answers given, a person, the journal."""

    permissions: Permissions
    cwd: Path
    node: str
    answers: MutableMapping[str, Any] = field(default_factory=dict)
    """The run's answers: approvals given by id under ``$approvals`` (used up as they
    decide a call)."""
    approver: Approver | None = None
    no_wait: bool = False
    allowed_tools: set[str] = field(default_factory=set)
    """Tools a person allowed for the rest of this agent's run (an edit: all three)."""
    allowed_commands: list[Rule] = field(default_factory=list)
    """Bash rules a person allowed for the rest of this agent's run (``Bash(git diff:*)``:
    the command and subcommand they allowed, as Claude Code's "don't ask again")."""

    def offers(self, tool: str) -> bool:
        """Whether the model is offered ``tool`` at all (not denied as a whole)."""
        if self.permissions.removes(tool) is not None:
            return False
        return not (self.permissions.mode == "plan" and tool not in (*_READ_ONLY, ASK_TOOL))

    async def check(
        self,
        call: ToolCall,
        request_id: str,
        key: str,
        op_id: str | None,
        journal: Any,
        plan: Callable[[], Awaitable[ToolResult]] | None,
    ) -> Pass | ToolResult | ApprovalRequest:
        """The call's fate (see the module docstring). ``plan`` plans an edit's change
        when called (None for other tools); ``journal`` is the run's tool journal, if any."""
        recorded = (
            journal.recorded_decision(op_id, key) if isinstance(journal, DecisionJournal) else None
        )
        if recorded is not None:
            decision = ApprovalDecision.from_json(recorded)
            return self._act(call, decision, recorded.get("planned"))
        verdict = self.permissions.decide(call.name, call.arguments, self.cwd)
        if verdict.behavior == "allow":
            return Pass()
        if verdict.behavior == "deny":
            decision = ApprovalDecision("deny", "rule", verdict.reason)
            self._journal(journal, op_id, key, request_id, call, decision, None)
            return self._act(call, decision, None)
        allowed_by = self._allowed_before(call)
        if allowed_by is not None:
            decision = ApprovalDecision("allow", "person", allowed_by)
            self._journal(journal, op_id, key, request_id, call, decision, None)
            return Pass()
        return await self._ask(call, request_id, key, op_id, journal, plan, verdict.reason)

    async def _ask(
        self,
        call: ToolCall,
        request_id: str,
        key: str,
        op_id: str | None,
        journal: Any,
        plan: Callable[[], Awaitable[ToolResult]] | None,
        why: str,
    ) -> Pass | ToolResult | ApprovalRequest:
        """A call a rule asks about: its request (with an edit's diff), then a decision
        given, made now, or none yet (the request, journaled, for the run to halt on)."""
        planned: dict[str, Any] | None = None
        preview = self._preview(call)
        if plan is not None:
            result: ToolResult = await plan()
            if result.is_error:
                return result  # the edit cannot apply: nothing to approve
            planned = result.to_json()
            preview = {"diff": "".join(change.diff for change in result.changes)}
        request = ApprovalRequest(
            request_id,
            self.node,
            call.name,
            dict(call.arguments),
            why,
            preview,
            key=key,
            planned=planned,
        )
        waiting = not isinstance(journal, DecisionJournal) or journal.was_asked(op_id, key)
        answered = await self._decision(request, waiting=waiting)
        if answered is None:
            if journal is not None:
                journal.journal_tool(
                    {"kind": "approval_request", "op_id": op_id, "key": key, **request.to_json()}
                )
            return request
        self._journal(journal, op_id, key, request_id, call, answered, planned)
        return self._act(call, answered, planned)

    async def _decision(
        self, request: ApprovalRequest, *, waiting: bool
    ) -> ApprovalDecision | None:
        """A decision given with the run's answers, by a person now, or ``--no-wait``'s.
        ``"*"`` answers only a call that was ``waiting`` (asked before the run halted): a
        call the model makes after the resume was seen by no one."""
        given = self.answers.get(APPROVALS)
        if isinstance(given, MutableMapping):
            value = given.pop(request.id, None)
            if value is None and waiting:
                value = given.get("*")
            if value is not None:
                return answer_decision(value, "answers")
        if self.approver is not None:
            answered = self.approver(request)
            if inspect.isawaitable(answered):
                answered = await answered
            if answered is not None:
                return answered
        if self.no_wait:
            return ApprovalDecision("deny", "rule", "--no-wait", "no one could approve it")
        return None

    def remember(self, call: ToolCall, op_id: str | None, key: str, journal: Any) -> None:
        """Take up again what the recorded decision on a finished call (replayed from the
        journal, past the gate) allowed for the rest of the visit: a run that halted and
        resumed keeps every "allow for the rest of the run" given before."""
        if isinstance(journal, DecisionJournal):
            recorded = journal.recorded_decision(op_id, key)
            if recorded is not None:
                self._act(call, ApprovalDecision.from_json(recorded), recorded.get("planned"))

    def _act(self, call: ToolCall, decision: ApprovalDecision, planned: Any) -> Pass | ToolResult:
        if not decision.allows:
            return ToolResult(decision.refusal(call.name), True)
        if decision.choice == "allow_run" and call.name == "Bash":
            self.allowed_commands.extend(_command_rules(str(call.arguments.get("command", ""))))
        elif decision.choice == "allow_run":  # an edit: every edit, as in Claude Code
            self.allowed_tools.update(EDITS if call.name in EDITS else {call.name})
        return Pass(planned if isinstance(planned, dict) else None)

    def _allowed_before(self, call: ToolCall) -> str | None:
        """Why a person's earlier "allow for the rest of the run" covers ``call``, or None."""
        if call.name in self.allowed_tools:
            return "allowed for the rest of the agent's run"
        if call.name != "Bash" or not self.allowed_commands:
            return None
        rule = Permissions(tuple(self.allowed_commands)).allowing(
            call.name, call.arguments, self.cwd
        )
        return None if rule is None else f"{rule.text} allowed for the rest of the agent's run"

    def _preview(self, call: ToolCall) -> dict[str, Any]:
        if call.name == "Bash":
            return {"command": str(call.arguments.get("command", "")), "cwd": str(self.cwd)}
        mcp = parse_mcp_name(call.name)
        if mcp is not None:
            return {"server": mcp[0], "mcp_tool": mcp[1]}
        return {}

    def _journal(
        self,
        journal: Any,
        op_id: str | None,
        key: str,
        request_id: str,
        call: ToolCall,
        decision: ApprovalDecision,
        planned: dict[str, Any] | None,
    ) -> None:
        if journal is None:
            return
        line: dict[str, Any] = {
            "kind": "tool_decision",
            "op_id": op_id,
            "key": key,
            "id": request_id,
            "tool": call.name,
            **decision.to_json(),
        }
        if planned is not None:
            line["planned"] = planned
        journal.journal_tool(line)


_READ_ONLY = frozenset({"Read", "LS", "Glob", "Grep"})


def _command_rules(command: str) -> list[Rule]:
    """The rules "allow for the rest of the run" on ``command`` adds: one per simple
    command in it (none for a part it cannot scope: that part was allowed once)."""
    source = RuleSource("a person's allow for the rest of the run")
    texts = [command_prefix_rule(part) for part in bash_parts(command) or []]
    return [parse_rule(text, "allow", source) for text in texts if text is not None]

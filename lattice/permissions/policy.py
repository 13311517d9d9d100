"""Deciding one tool call: deny, then ask, then allow rules, then the permission mode.

The grant (``--workspace``, ``--allow``, ``[agents]``) is the outer bound: a tool it
leaves out is never offered, whatever a rule says. Inside it the grant acts as an allow
rule for each tool it gives, and the rules decide per call as Claude Code does:

1. a deny rule that matches denies (the first in order of reading: user, project,
   local settings, ``lattice.toml``, the command line);
2. ``plan`` mode denies every tool but the read-only ones;
3. an ask rule that matches asks a person (``bypassPermissions`` allows instead,
   ``dontAsk`` denies);
4. an allow rule that matches allows;
5. else the mode: ``acceptEdits`` asks before a Bash command, ``dontAsk`` allows only
   what a rule allows, the others allow what the grant gives.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from lattice.permissions.rules import (
    BEHAVIORS,
    Behavior,
    CallPlace,
    Rule,
    bash_parts,
    checked_forms,
)

Mode = Literal["default", "acceptEdits", "plan", "dontAsk", "bypassPermissions"]
MODES: tuple[Mode, ...] = ("default", "acceptEdits", "plan", "dontAsk", "bypassPermissions")
READ_ONLY = frozenset({"Read", "LS", "Glob", "Grep"})
"""The tools ``plan`` mode leaves an agent."""
WRITE_TOOLS = frozenset({"Edit", "MultiEdit", "Write"})


@dataclass(frozen=True)
class Verdict:
    """What was decided for a call (or a tool) and why."""

    behavior: Behavior
    reason: str
    """The rule (its text and where it was written) or the mode or grant that decided."""
    rule: Rule | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"behavior": self.behavior, "by": self.reason}
        if self.rule is not None:
            out["rule"] = self.rule.text
            out["source"] = str(self.rule.source)
        return out


@dataclass(frozen=True)
class Permissions:
    """The rules and mode agents' tool calls are decided by (see the module docstring)."""

    rules: tuple[Rule, ...] = ()
    mode: Mode = "default"
    mode_source: str = "default"
    """Where the mode was set (a settings file, ``lattice.toml``, ``--permission-mode``)."""
    notes: tuple[str, ...] = ()
    """What Lattice says before the run about these permissions (a mode it refused)."""
    home: Path = field(default_factory=Path.home)

    @property
    def said_nothing(self) -> bool:
        """No rule, the default mode, nothing to say: every granted call runs."""
        return not self.rules and self.mode == "default" and not self.notes

    def _rules(self, behavior: Behavior, tool: str) -> list[Rule]:
        return [r for r in self.rules if r.behavior == behavior and r.covers_tool(tool)]

    def removes(self, tool: str) -> Rule | None:
        """A deny rule on every use of ``tool``: then the tool is not offered at all."""
        return next((r for r in self._rules("deny", tool) if r.whole_tool), None)

    def decide(self, tool: str, arguments: Mapping[str, Any], cwd: Path) -> Verdict:
        """The verdict for one call of a granted tool, run in folder ``cwd``."""
        place = CallPlace(cwd=cwd, home=self.home)
        denied = self._match("deny", tool, arguments, place)
        if denied is not None:
            return Verdict("deny", denied.describe(), denied)
        if self.mode == "plan" and tool not in READ_ONLY:
            return Verdict("deny", f"plan mode ({self.mode_source}): agents only read")
        asked = self._match("ask", tool, arguments, place, unreadable=True) or self._match(
            "deny", tool, arguments, place, unreadable=True
        )
        if asked is not None:
            if self.mode == "bypassPermissions":
                return Verdict("allow", f"bypassPermissions mode ({self.mode_source})", asked)
            if self.mode == "dontAsk":
                return Verdict(
                    "deny", f"dontAsk mode ({self.mode_source}) and " + asked.describe(), asked
                )
            return Verdict("ask", asked.describe(), asked)
        allowed = self._allowed(tool, arguments, place)
        if allowed is not None:
            return Verdict("allow", allowed.describe(), allowed)
        return self._by_mode(tool)

    def _by_mode(self, tool: str) -> Verdict:
        mode, where = self.mode, self.mode_source
        if mode == "acceptEdits" and tool == "Bash":
            return Verdict("ask", f"acceptEdits mode ({where}): commands ask")
        if mode == "dontAsk":
            return Verdict("deny", f"dontAsk mode ({where}): no allow rule matches")
        grant = mode in ("default", "plan") or (mode == "acceptEdits" and tool not in WRITE_TOOLS)
        return Verdict("allow", "the grant" if grant else f"{mode} mode ({where})")

    def _match(
        self,
        behavior: Behavior,
        tool: str,
        arguments: Mapping[str, Any],
        place: CallPlace,
        *,
        unreadable: bool = False,
    ) -> Rule | None:
        """The first ``behavior`` rule matching the call (for Bash: any part of it, in any
        of its ``checked_forms``). With ``unreadable``, a Bash command no rule can read
        whole (one that cannot be split, or a part that runs a command given as
        arguments) is matched by every Bash rule: ``decide`` asks for it when an ask or a
        deny rule names some commands."""
        forms = _checked_forms(tool, arguments)
        for rule in self._rules(behavior, tool):
            if rule.whole_tool or rule.matches(tool, arguments, place):
                return rule
            if forms is None and rule.tool == "Bash" and unreadable:
                return rule
            if forms and any(rule.matches(tool, {"command": f}, place) for f in forms):
                return rule
        return None

    def allowing(self, tool: str, arguments: Mapping[str, Any], cwd: Path) -> Rule | None:
        """The allow rule (only) that allows the call, if one does."""
        return self._allowed(tool, arguments, CallPlace(cwd=cwd, home=self.home))

    def _allowed(self, tool: str, arguments: Mapping[str, Any], place: CallPlace) -> Rule | None:
        """An allow rule for the call; a compound Bash command needs one for every part."""
        rules = self._rules("allow", tool)
        whole = next((r for r in rules if r.whole_tool), None)
        if whole is not None or tool != "Bash":
            return whole or next((r for r in rules if r.matches(tool, arguments, place)), None)
        parts = _parts(tool, arguments)
        if not parts:
            return None
        found: Rule | None = None
        for part in parts:
            rule = next((r for r in rules if r.matches(tool, {"command": part}, place)), None)
            if rule is None:
                return None
            found = found or rule
        return found

    def tool_summary(self, tool: str) -> tuple[Behavior | Literal["depends"], str]:
        """For ``lattice check``: what calls of ``tool`` get whatever their arguments
        (``depends`` when rules on some of its uses decide), and by what."""
        removed = self.removes(tool)
        if removed is not None:
            return "deny", removed.describe() + ": not offered"
        if self.mode == "plan" and tool not in READ_ONLY:
            return "deny", f"plan mode ({self.mode_source}): not offered"
        whole = {
            b: next((r for r in self._rules(b, tool) if r.whole_tool), None) for b in BEHAVIORS
        }
        partial = [r for r in self.rules if r.covers_tool(tool) and not r.whole_tool]
        if whole["ask"] is not None and self.mode not in ("bypassPermissions", "dontAsk"):
            verdict: Verdict = Verdict("ask", whole["ask"].describe())
        elif whole["allow"] is not None:
            verdict = Verdict("allow", whole["allow"].describe())
        else:
            verdict = self._by_mode(tool)
        if partial:
            said = "; ".join(f"{r.behavior} {r.text} ({r.source})" for r in partial)
            return "depends", f"{verdict.behavior} ({verdict.reason}), but {said}"
        return verdict.behavior, verdict.reason

    def describe(self) -> str:
        """One line for ``lattice check`` and the start of a run."""
        counts = {b: sum(1 for r in self.rules if r.behavior == b) for b in BEHAVIORS}
        rules = ", ".join(f"{n} {b}" for b, n in counts.items() if n) or "no rules"
        return f"permissions: {rules}; mode {self.mode} ({self.mode_source})"


def _checked_forms(tool: str, arguments: Mapping[str, Any]) -> list[str] | None:
    """What ask and deny rules read of a call: for Bash, every spelling of every part
    (None when some part cannot be read: see ``Permissions._match``); nothing else."""
    if tool != "Bash":
        return []
    parts = bash_parts(str(arguments.get("command", "")))
    if parts is None:
        return None
    forms: list[str] = []
    for part in parts:
        spelled = checked_forms(part)
        if spelled is None:
            return None
        forms.extend(spelled)
    return forms


def _parts(tool: str, arguments: Mapping[str, Any]) -> list[str] | None:
    if tool != "Bash":
        return None
    return bash_parts(str(arguments.get("command", "")))


def merged(groups: Iterable[Permissions]) -> Permissions:
    """Several sources' permissions as one: rules in order, the last mode set wins."""
    rules: list[Rule] = []
    mode: Mode = "default"
    source = "default"
    notes: list[str] = []
    for group in groups:
        rules.extend(group.rules)
        notes.extend(group.notes)
        if group.mode_source != "default":
            mode, source = group.mode, group.mode_source
    return Permissions(tuple(rules), mode, source, tuple(notes))

"""The prompts a contract sends after a failure: fix-only repair packets and escalations."""

from __future__ import annotations

from lattice.llm.base import Message
from lattice.prompts.builtin import REPAIR

Violation = dict[str, str]


def repair_messages(
    builtins: dict[str, str], output: str, violations: list[Violation]
) -> tuple[Message, ...]:
    """The fix-only packet: the contract (``builtins``: rules and schema), the invalid
    output and the exact violations. No original context."""
    listed = "\n".join(f"- {v['pointer']}: {v['message']}" for v in violations) or "- (unknown)"
    system, user = REPAIR.render({**builtins, "output": output, "violations": listed})
    return (Message("system", system), Message("user", user))


def escalation_messages(
    base: tuple[Message, ...], best: tuple[str, list[Violation]] | None
) -> tuple[Message, ...]:
    """The original prompt, plus what the best failed attempt got wrong."""
    if best is None:
        return base
    _, violations = best
    note = (
        "\n\nA previous attempt at this artifact failed validation:\n"
        + "\n".join(f"- {v['pointer']}: {v['message']}" for v in violations[:20])
        + "\nAvoid these mistakes."
    )
    *head, last = base
    return (*head, Message(last.role, last.content + note))

"""The prompts a contract sends after a failure: fix-only repair packets and escalations.

A repair packet (``repair@2``) carries the contract, the invalid output and its violations,
not the original prompt. When a violated field has to be filled in from the input (a
missing property, a value outside an enum, a list with too few items), the packet also
carries the lines of the original user message that mention the field or the allowed
values (``repair_context``), up to ``limit`` characters.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from lattice.contracts.violations import Violation
from lattice.llm.base import Message
from lattice.prompts.builtin import REPAIR_WITH_CONTEXT

__all__ = ["Violation", "escalation_messages", "repair_context", "repair_messages"]

REPAIR_CONTEXT_CHARS = 2_000
"""The default cap on a repair packet's input excerpts (``repair_context_chars``)."""

_LINE_CAP = 400
"""Characters of one input line a packet quotes at most."""


def repair_messages(
    builtins: dict[str, str], output: str, violations: list[Violation], context: str = ""
) -> tuple[Message, ...]:
    """The fix-only packet: the contract (``builtins``: rules and schema), the invalid
    output, the exact violations and ``context`` (``repair_context``; may be empty)."""
    listed = "\n".join(f"- {v['pointer']}: {v['message']}" for v in violations) or "- (unknown)"
    system, user = REPAIR_WITH_CONTEXT.render(
        {**builtins, "output": output, "violations": listed, "context": context}
    )
    return (Message("system", system), Message("user", user))


def _pattern(term: str) -> re.Pattern[str]:
    spellings = {term, term.replace("_", " "), term.replace("-", " ")}
    alternatives = "|".join(re.escape(s) for s in sorted(spellings, key=len, reverse=True))
    return re.compile(rf"(?<![\w]){alternatives}(?![\w])", re.IGNORECASE)


def repair_context(messages: Sequence[Message], terms: Sequence[str], limit: int) -> str:
    """The lines of the original user message(s) that mention ``terms``, as a packet section.

    Lines that mention more of the terms come first (the first term of a violation, the
    field's name, counts double); they are shown in their original order, at most
    ``limit`` characters in all, each line cut to 400 characters; ``""`` when nothing
    matches or ``limit`` is 0.
    """
    terms = [t for t in dict.fromkeys(str(t) for t in terms) if t.strip()]
    if limit <= 0 or not terms:
        return ""
    patterns = [_pattern(t) for t in terms]
    lines = [
        line.strip()
        for m in messages
        if m.role == "user"
        for line in m.content.splitlines()
        if line.strip()
    ]
    scored: list[tuple[int, int]] = []
    for index, line in enumerate(lines):
        score = sum(2 if i == 0 else 1 for i, p in enumerate(patterns) if p.search(line))
        if score:
            scored.append((-score, index))
    header = (
        "\nLines of the original input that mention "
        + ", ".join(repr(t) for t in terms[:12])
        + " (use them to fill in or correct those values):\n"
    )
    budget = limit - len(header)
    chosen: list[int] = []
    for _, index in sorted(scored):
        line = lines[index]
        cost = min(len(line), _LINE_CAP) + 3  # the newline and a possible "…" line
        if cost > budget:
            continue
        chosen.append(index)
        budget -= cost
    if not chosen:
        return ""
    shown = []
    previous = None
    for index in sorted(chosen):
        if previous is not None and index != previous + 1:
            shown.append("…")
        line = lines[index]
        shown.append(line if len(line) <= _LINE_CAP else line[: _LINE_CAP - 1] + "…")
        previous = index
    return header + "\n".join(shown) + "\n"


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

"""Answers to questions: what a run halted on a question says, and the answer a person
gave, taken from the run's answers and stored as ``{label, index}``, ``{labels,
indexes}`` or ``{text}``. Shared by ASK ops and the main agent's ``AskUserQuestion``."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from lattice.errors import ErrorType, LatticeRunError

if TYPE_CHECKING:
    from lattice.ir.models import AskOp


def _excerpt(value: Any, limit: int = 200) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def waiting_summary(question: str, options: list[str]) -> str:
    """What a run halted on a question says: the question quoted on one line, or, when it
    has several, after the summary's first line, as its lines."""
    listed = f" (options: {', '.join(options)})" if options else ""
    text = question.strip("\n")
    if "\n" in text:
        return f"waiting for an answer{listed} to:\n{text}"
    return f"waiting for an answer to {question!r}{listed}"


def take_answer(answers: dict[str, Any], op: AskOp) -> Any:
    """The answer for ``op``: a single value answers every visit (an op asked ``once``:
    the next visit only); a list (for a single-choice question) is a queue, one item
    per visit."""
    key = op.source_node if op.source_node in answers else op.id
    answer = answers.get(key)
    if op.once and answer is not None and not isinstance(answer, list):
        del answers[key]
        return answer
    if isinstance(answer, list) and not op.multi_select:
        if not answer:
            return None
        answer = answer[0]
        answers[key] = answers[key][1:]
    return answer


def normalize_answer(op: AskOp, answer: Any) -> dict[str, Any]:
    """An answer as stored: ``{label, index}``, ``{labels, indexes}`` or ``{text}``.

    Accepts an option label (case-insensitive), a 0-based index (int or digits), or
    for multi-select a list or comma-separated string of those. Raises
    LatticeRunError(invalid_answer) naming the options when it matches none.
    """
    labels = [o.label for o in op.options]
    if not labels:
        return {"text": answer if isinstance(answer, str) else _excerpt(answer)}

    def one(item: Any) -> int:
        if isinstance(item, int) and not isinstance(item, bool) and 0 <= item < len(labels):
            return item
        if isinstance(item, str):
            text = item.strip()
            for i, label in enumerate(labels):
                if label == text or label.lower() == text.lower():
                    return i
            if text.isdigit() and int(text) < len(labels):
                return int(text)
        raise LatticeRunError(
            f"answer {item!r} to {op.source_node!r} is none of the options: "
            + ", ".join(f"{i}={label!r}" for i, label in enumerate(labels)),
            error_type=ErrorType.INVALID_ANSWER,
            details={"answer": item, "options": labels},
        )

    if op.multi_select:
        items = answer if isinstance(answer, list) else str(answer).split(",")
        indexes = [one(item) for item in items if str(item).strip()]
        return {"labels": [labels[i] for i in indexes], "indexes": indexes}
    index = one(answer)
    return {"label": labels[index], "index": index}

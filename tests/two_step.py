"""A two-step workflow (outline, then summary) and the answers for ``lattice.llm.fake_server``
to give its requests, for end-to-end tests against a provider over HTTP."""

from __future__ import annotations

import json
from typing import Any

from tests.builders import node

OUTLINE_SCHEMA = {
    "type": "object",
    "properties": {
        "title": {"type": "string"},
        "points": {"type": "array", "items": {"type": "string"}, "minItems": 2},
    },
    "required": ["title", "points"],
    "additionalProperties": False,
}
SUMMARY_SCHEMA = {
    "type": "object",
    "properties": {"summary": {"type": "string"}},
    "required": ["summary"],
    "additionalProperties": False,
}


def two_step_document(**extra_summary: Any) -> dict[str, Any]:
    """``start → outline (small) → summary (medium) → end``: two LLM nodes with output schemas.

    ``extra_summary`` adds fields to the summary node's data (``modelClass``, ``model``, …).
    """

    return {
        "id": "two-step",
        "name": "two-step",
        "version": "1.0.0",
        "nodes": [
            node(
                "start",
                "start",
                inputs={
                    "type": "object",
                    "properties": {"topic": {"type": "string"}},
                    "required": ["topic"],
                },
            ),
            node(
                "outline",
                "prompt",
                prompt="OUTLINE the topic <{{ $in.topic }}>",
                modelClass="small",
                outputSchema=OUTLINE_SCHEMA,
            ),
            node(
                "summary",
                "prompt",
                prompt="SUMMARY of <{{ $vars.outline.result.title }}>",
                outputSchema=SUMMARY_SCHEMA,
                **{"modelClass": "medium", **extra_summary},
            ),
            node("end", "end", output="$vars.summary.result"),
        ],
        "connections": [
            {"id": "c1", "from": "start", "to": "outline"},
            {"id": "c2", "from": "outline", "to": "summary"},
            {"id": "c3", "from": "summary", "to": "end"},
        ],
    }


def _between(text: str, marker: str) -> str | None:
    start = text.find(marker + " <")
    if start < 0:
        return None
    start += len(marker) + 2
    return text[start : text.index(">", start)]


def two_step_answer(body: dict[str, Any]) -> str:
    """The artifact for a request of ``two_step_document`` (OpenAI or Anthropic body)."""
    user = "\n".join(m["content"] for m in body.get("messages", []) if m.get("role") == "user")
    topic = _between(user, "OUTLINE the topic")
    if topic is not None:
        return json.dumps({"title": topic.title(), "points": [f"what {topic} is", "why"]})
    title = _between(user, "SUMMARY of")
    if title is not None:
        return json.dumps({"summary": f"All about {title}"})
    return json.dumps({"error": "invalid_request", "details": "unknown prompt"})

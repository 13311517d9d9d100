"""An op's events while it runs on a worker, for whoever watches the run.

The workflow learns what an op did (its model attempts, tool calls, agent turns) when
its activity ends. Meanwhile ``LiveOp`` keeps what the op has emitted so far, and the
text of the model answer being streamed, and the worker sends it with the op's
heartbeats (their details: ``[journal, live]``), which Temporal keeps beside the
pending activity, outside the run's history. A gateway reads them with the workflow's
description (``backend.py``: ``GET /v1/runs/{id}/live``, and ``llm_delta`` messages in
the event stream with ``?deltas=1``), so a watcher sees the op's events and its answer
grow while it runs, at the pace of the heartbeats (every 2 seconds at most), not only
when it ends.

What it sends is masked with the run's redactor (an answer as a whole, so that a secret
cut across two streamed pieces is masked too), and bounded: the last ``MAX_EVENTS``
events and ``MAX_TEXT`` characters of the answer. This module does not import
``temporalio``.
"""

from __future__ import annotations

from typing import Any

from lattice.runs.redaction import Redactor, redact_value

MAX_EVENTS = 100
"""Events of the op sent at most (its latest)."""
MAX_TEXT = 16_000
"""Characters of the streamed answer sent at most (its end)."""


class LiveOp:
    """A listener of one op's events (it takes streamed pieces: ``wants_deltas``)."""

    wants_deltas = True

    def __init__(self) -> None:
        self.redact: Redactor | None = None
        """The run's redactor (set when the op starts)."""
        self.events: list[dict[str, Any]] = []
        self.attempt: Any = None
        self.text = ""
        self.cut = 0
        """Characters of the answer dropped from the start of ``text`` (over ``MAX_TEXT``)."""

    def __call__(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        if kind == "llm_content":
            return
        if kind == "llm_delta":
            data = event["data"]
            if data.get("attempt") != self.attempt:
                self.attempt, self.text, self.cut = data.get("attempt"), "", 0
            text = self.text + str(data.get("text") or "")
            self.cut += max(0, len(text) - MAX_TEXT)
            self.text = text[-MAX_TEXT:]
            return
        if kind == "llm_request":
            self.attempt, self.text, self.cut = None, "", 0
        self.events.append(event)
        del self.events[:-MAX_EVENTS]

    def snapshot(self) -> dict[str, Any]:
        """What is sent with the next heartbeat: the op's events so far and the answer
        being streamed (``attempt``, ``text``, after ``cut`` characters left out), masked."""
        live = {
            "events": list(self.events),
            "attempt": self.attempt,
            "text": self.text,
            "cut": self.cut,
        }
        if self.redact is None:
            return {"events": [], "attempt": None, "text": "", "cut": 0}
        masked: dict[str, Any] = redact_value(live, self.redact)
        return masked


def live_of(details: Any) -> dict[str, Any] | None:
    """The live part of an op's heartbeat details (None when it sent none)."""
    if isinstance(details, list | tuple) and len(details) > 1 and isinstance(details[1], dict):
        return details[1]
    return None

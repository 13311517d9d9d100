"""A run's journal keeps an agent turn's tool calls: a resumed run gets the calls its op in
flight had already been answered with from the journal, without asking the model again."""

from __future__ import annotations

import asyncio
from typing import Any

from lattice.llm.base import LLMRequest, Message, ToolCall, ToolDef
from lattice.llm.mock import MockProvider
from lattice.runs.store import NullRecorder
from lattice.runtime.journaled import JournaledProvider

TURN = LLMRequest(
    messages=(Message("user", "Find the bug."),),
    node_id="explore",
    op_id="explore",
    tools=(ToolDef("Read", "Read a file.", {"type": "object"}),),
)
SCRIPT = {"explore": [{"$tool_calls": [{"name": "Read", "arguments": {"file_path": "a.py"}}]}]}


class Lines(NullRecorder):
    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []

    def journal(self, line: dict[str, Any]) -> None:
        self.lines.append(line)


def test_a_journaled_tool_turn_is_replayed_on_resume() -> None:
    recorder = Lines()
    answered = asyncio.run(JournaledProvider(MockProvider(SCRIPT), recorder).complete(TURN))
    (answer,) = [line for line in recorder.lines if line["kind"] == "answer"]
    assert answer["tool_calls"] == [
        {"id": "call_1", "name": "Read", "arguments": {"file_path": "a.py"}}
    ]

    model = MockProvider({"explore": []})  # would fail if asked
    resumed = JournaledProvider(model, Lines(), [answer])  # a resume hands over the answers
    replayed = asyncio.run(resumed.complete(TURN))
    assert (
        replayed.tool_calls
        == answered.tool_calls
        == (ToolCall("call_1", "Read", {"file_path": "a.py"}),)
    )
    assert model.calls == []

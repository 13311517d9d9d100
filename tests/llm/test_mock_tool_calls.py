"""The mock provider scripts an agent's turns: a ``{"$tool_calls": [...]}`` item answers a
turn with tool calls (ids ``call_<n>``, numbered on from the transcript), the next item
the next turn; malformed items are refused when the script loads."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from lattice.errors import LatticeRunError, LatticeUserError
from lattice.llm.base import LLMRequest, LLMResponse, Message, ToolCall, ToolDef
from lattice.llm.mock import MockProvider

READ = ToolDef("Read", "Read a file.", {"type": "object", "properties": {}})
EXPLORE = [
    {
        "$tool_calls": [
            {"name": "Glob", "arguments": {"pattern": "**/*.py"}},
            {"name": "Read", "arguments": {"file_path": "src/app.py"}},
        ],
        "text": "Let me look.",
    },
    {"$tool_calls": [{"name": "Grep", "arguments": {"pattern": "add_todo"}}]},
    {"files": ["src/app.py"]},
]


def turn(*history: Message, tools: tuple[ToolDef, ...] = (READ,), **extra: Any) -> LLMRequest:
    return LLMRequest(
        messages=(Message("user", "Find the bug."), *history),
        node_id="explore",
        op_id="explore",
        tools=tools,
        **extra,
    )


def ask(provider: MockProvider, request: LLMRequest) -> LLMResponse:
    return asyncio.run(provider.complete(request))


def results(calls: tuple[ToolCall, ...]) -> tuple[Message, ...]:
    return (
        Message("assistant", "", tool_calls=calls),
        *(Message("tool", f"result of {c.name}", tool_call_id=c.id) for c in calls),
    )


def test_a_scripted_agent_turns_calls_then_answers() -> None:
    provider = MockProvider.from_script({"responses": {"explore": EXPLORE}})

    first = ask(provider, turn())
    assert first.tool_calls == (
        ToolCall("call_1", "Glob", {"pattern": "**/*.py"}),
        ToolCall("call_2", "Read", {"file_path": "src/app.py"}),
    )
    assert first.text == "Let me look."
    assert first.finish_reason == "tool_calls"
    assert first.usage.output_tokens > 0

    second = ask(provider, turn(*results(first.tool_calls)))
    assert second.tool_calls == (ToolCall("call_3", "Grep", {"pattern": "add_todo"}),)
    assert second.text == ""

    history = results(first.tool_calls) + results(second.tool_calls)
    final = ask(provider, turn(*history))
    assert final.tool_calls == ()
    assert final.finish_reason == "stop"
    assert json.loads(final.text) == {"files": ["src/app.py"]}


def test_ids_follow_the_transcript_so_a_resumed_turn_gets_the_same_ones() -> None:
    provider = MockProvider({"explore": EXPLORE})
    first = ask(provider, turn())
    saved = provider.checkpoint()
    second = ask(provider, turn(*results(first.tool_calls)))

    resumed = MockProvider({"explore": EXPLORE})
    resumed.restore(saved)
    again = ask(resumed, turn(*results(first.tool_calls)))
    assert again.tool_calls == second.tool_calls
    assert resumed.checkpoint() == provider.checkpoint()


def test_a_streamed_tool_turn_streams_only_its_text() -> None:
    pieces: list[str] = []
    provider = MockProvider({"explore": EXPLORE}, pieces=3)
    response = ask(provider, turn(on_delta=pieces.append))
    assert "".join(pieces) == "Let me look."
    assert len(response.tool_calls) == 2

    pieces.clear()
    ask(provider, turn(*results(response.tool_calls), on_delta=pieces.append))
    assert pieces == []  # calls without text: nothing to stream


def test_tool_calls_for_a_request_without_tools_say_so() -> None:
    provider = MockProvider({"explore": EXPLORE})
    with pytest.raises(LatticeRunError) as raised:
        ask(provider, turn(tools=()))
    assert raised.value.error_type == "invalid_request"
    assert "offers no tools" in raised.value.message


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        ({"$tool_calls": []}, "non-empty list of calls"),
        ({"$tool_calls": {"name": "Read"}}, "non-empty list of calls"),
        ({"$tool_calls": ["Read"]}, '["$tool_calls"][0] must be an object'),
        ({"$tool_calls": [{"arguments": {}}]}, '"name" must be a tool\'s name'),
        ({"$tool_calls": [{"name": "Read", "arguments": "a.py"}]}, '"arguments" must be an object'),
        ({"$tool_calls": [{"name": "Read", "args": {}}]}, "unknown keys ['args']"),
        ({"$tool_calls": [{"name": "Read"}], "text": 3}, '"text" must be text'),
        ({"$tool_calls": [{"name": "Read"}], "final": "x"}, "unknown keys ['final']"),
    ],
)
def test_a_malformed_tool_calls_item_is_refused_when_the_script_loads(
    item: dict[str, Any], expected: str, tmp_path: Path
) -> None:
    path = tmp_path / "mock.json"
    path.write_text(json.dumps({"responses": {"explore": ["ok", item]}}))
    with pytest.raises(LatticeUserError) as raised:
        MockProvider.from_file(path)
    assert raised.value.error_type == "mock_error"
    assert 'responses["explore"][1]' in raised.value.message
    assert expected in raised.value.message


def test_a_default_of_tool_calls_is_checked_too() -> None:
    with pytest.raises(LatticeUserError) as raised:
        MockProvider.from_script({"default": {"$tool_calls": []}})
    assert raised.value.message.startswith("mock script: default:")


def test_a_call_without_arguments_has_empty_ones() -> None:
    provider = MockProvider.from_script({"default": {"$tool_calls": [{"name": "LS"}]}})
    assert ask(provider, turn()).tool_calls == (ToolCall("call_1", "LS", {}),)


def test_an_agent_whose_turns_are_used_up_is_shown_both_kinds_of_item() -> None:
    provider = MockProvider({"explore": []})
    with pytest.raises(LatticeRunError) as raised:
        ask(provider, turn(response_schema={"type": "object"}))
    assert raised.value.error_type == "mock_exhausted"
    assert '"explore": [{}] (a value of its output schema)' in raised.value.message
    assert '{"$tool_calls": [{"name": "Read", "arguments": {}}]}' in raised.value.message


def test_a_transcripts_calls_count_toward_the_request_size() -> None:
    calls = (ToolCall("call_1", "Read", {"file_path": "src/app.py"}),)
    plain = turn()
    with_calls = turn(*results(calls))
    expected = len("Read") + len('{"file_path": "src/app.py"}') + len("result of Read")
    assert with_calls.size_chars() - plain.size_chars() == expected

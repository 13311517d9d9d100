"""Tool calling in the SDK adapters, at the HTTP level under the real SDKs: a local
OpenAI- and Anthropic-compatible server (``lattice/llm/fake_server.py``) answers with tool
calls, whole and streamed; the adapters send tools and the transcript of tool calls and
results in each API's shape, read parallel calls, keep malformed arguments for the loop,
and take a stream cut in the middle of a call's arguments for a retryable error."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lattice.errors import LatticeRunError, LatticeUserError
from lattice.llm.anthropic_provider import AnthropicProvider
from lattice.llm.base import (
    MALFORMED_ARGUMENTS,
    LLMRequest,
    LLMResponse,
    Message,
    ToolCall,
    ToolDef,
    parse_tool_arguments,
)
from lattice.llm.fake_server import FakeLLMServer, ToolTurn, serve
from lattice.llm.fixture import FixtureProvider
from lattice.llm.openai_provider import OpenAIProvider
from lattice.llm.sdk_provider import SdkProvider

READ = ToolDef(
    "Read",
    "Read a file of the workspace.",
    {
        "type": "object",
        "properties": {"file_path": {"type": "string"}},
        "required": ["file_path"],
    },
)
GREP = ToolDef(
    "Grep",
    "Search files for a regular expression.",
    {"type": "object", "properties": {"pattern": {"type": "string"}}, "required": ["pattern"]},
)
SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
    "additionalProperties": False,
}
SCHEMA_TEXT = json.dumps(SCHEMA)

TWO_CALLS = ToolTurn(
    [
        ("call_a1", "Read", json.dumps({"file_path": "src/app.py"})),
        ("call_b2", "Grep", json.dumps({"pattern": "def (add|remove)_todo"})),
    ],
    text="Looking at the code first.",
)

PROVIDERS: dict[str, Callable[[str], SdkProvider]] = {
    "openai": lambda url: OpenAIProvider(api_key="sk-test", base_url=url + "/v1"),
    "anthropic": lambda url: AnthropicProvider(api_key="sk-test", base_url=url),
}


@pytest.fixture(params=sorted(PROVIDERS))
def name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=[False, True], ids=["whole", "streamed"])
def streamed(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


class Script:
    """The server's answers, one per request, in order."""

    def __init__(self, *answers: str | ToolTurn) -> None:
        self.answers = list(answers)

    def __call__(self, body: dict[str, Any]) -> str | ToolTurn:
        return self.answers.pop(0)


@pytest.fixture
def script() -> Script:
    return Script()


@pytest.fixture
def server(script: Script) -> Iterator[FakeLLMServer]:
    with serve(script) as srv:
        yield srv


def first_turn(*, on_delta: Callable[[str], None] | None = None) -> LLMRequest:
    return LLMRequest(
        messages=(
            Message("system", f"You fix bugs. Answer as JSON of this schema: {SCHEMA_TEXT}"),
            Message("user", "Find where todos are added."),
        ),
        model="test-model",
        max_tokens=300,
        response_schema=SCHEMA,
        prompt_schema=SCHEMA_TEXT,
        tools=(READ, GREP),
        on_delta=on_delta,
    )


def second_turn(calls: tuple[ToolCall, ...], *, on_delta: Any = None) -> LLMRequest:
    """The first turn's transcript, the model's calls and one result per call."""
    first = first_turn(on_delta=on_delta)
    return LLMRequest(
        messages=(
            *first.messages,
            Message("assistant", "Looking at the code first.", tool_calls=calls),
            Message("tool", "1: def add_todo(items, text):", tool_call_id=calls[0].id),
            Message("tool", "error: no such file", tool_call_id=calls[1].id, is_error=True),
        ),
        model=first.model,
        max_tokens=first.max_tokens,
        response_schema=SCHEMA,
        prompt_schema=SCHEMA_TEXT,
        tools=first.tools,
        on_delta=on_delta,
    )


def complete(name: str, server: FakeLLMServer, request: LLMRequest) -> LLMResponse:
    async def go() -> LLMResponse:
        provider = PROVIDERS[name](server.base_url)
        try:
            return await provider.complete(request)
        finally:
            await provider.aclose_loop_clients()

    return asyncio.run(go())


def _sink(streamed: bool, pieces: list[str]) -> Callable[[str], None] | None:
    return pieces.append if streamed else None


# -- the answer -----------------------------------------------------------------------------


def test_parallel_tool_calls_are_read(
    name: str, streamed: bool, script: Script, server: FakeLLMServer
) -> None:
    script.answers = [TWO_CALLS]
    pieces: list[str] = []
    response = complete(name, server, first_turn(on_delta=_sink(streamed, pieces)))

    assert response.tool_calls == (
        ToolCall("call_a1", "Read", {"file_path": "src/app.py"}),
        ToolCall("call_b2", "Grep", {"pattern": "def (add|remove)_todo"}),
    )
    assert response.text == "Looking at the code first."
    assert response.finish_reason == "tool_calls"  # Anthropic's tool_use spelt the same
    assert response.usage.output_tokens > 0 and response.usage.input_tokens > 0
    assert ("stream" in server.received[-1].body) is streamed
    if streamed:
        assert "".join(pieces) == "Looking at the code first."  # text only, never arguments


def test_a_final_answer_after_tool_results_is_text(
    name: str, streamed: bool, script: Script, server: FakeLLMServer
) -> None:
    final = json.dumps({"answer": "src/app.py:add_todo"})
    script.answers = [TWO_CALLS, final]
    pieces: list[str] = []
    sink = _sink(streamed, pieces)
    calls = complete(name, server, first_turn(on_delta=sink)).tool_calls
    response = complete(name, server, second_turn(calls, on_delta=sink))

    assert response.text == final
    assert response.tool_calls == ()
    assert response.finish_reason in ("stop", "end_turn")


def test_malformed_arguments_come_back_raw_for_the_loop(
    name: str, streamed: bool, script: Script, server: FakeLLMServer
) -> None:
    """Arguments that are no JSON object (here cut short, as by max_tokens) are the model's
    mistake: the call comes back with its raw text, for the loop to answer with an error."""
    if name == "anthropic" and not streamed:
        pytest.skip("a whole Anthropic answer carries its input as a JSON object already")
    script.answers = [ToolTurn([("call_x", "Read", '{"file_path": "src/app.py"')])]
    response = complete(name, server, first_turn(on_delta=_sink(streamed, [])))

    (call,) = response.tool_calls
    assert (call.id, call.name) == ("call_x", "Read")
    assert call.arguments == {MALFORMED_ARGUMENTS: '{"file_path": "src/app.py"'}
    assert call.malformed == '{"file_path": "src/app.py"'


# -- what is sent --------------------------------------------------------------------------


def test_openai_request_carries_function_tools_and_the_transcript(
    script: Script, server: FakeLLMServer
) -> None:
    script.answers = [TWO_CALLS, json.dumps({"answer": "done"})]
    calls = complete("openai", server, first_turn()).tool_calls
    complete("openai", server, second_turn(calls))

    body = server.received[-1].body
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.input_schema,
            },
        }
        for tool in (READ, GREP)
    ]
    assert body["messages"][2:] == [
        {
            "role": "assistant",
            "content": "Looking at the code first.",
            "tool_calls": [
                {
                    "id": "call_a1",
                    "type": "function",
                    "function": {"name": "Read", "arguments": '{"file_path": "src/app.py"}'},
                },
                {
                    "id": "call_b2",
                    "type": "function",
                    "function": {
                        "name": "Grep",
                        "arguments": '{"pattern": "def (add|remove)_todo"}',
                    },
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_a1", "content": "1: def add_todo(items, text):"},
        {"role": "tool", "tool_call_id": "call_b2", "content": "error: no such file"},
    ]


def test_anthropic_request_carries_tools_tool_use_and_merged_results(
    script: Script, server: FakeLLMServer
) -> None:
    script.answers = [TWO_CALLS, json.dumps({"answer": "done"})]
    calls = complete("anthropic", server, first_turn()).tool_calls
    complete("anthropic", server, second_turn(calls))

    body = server.received[-1].body
    assert body["tools"] == [
        {"name": t.name, "description": t.description, "input_schema": t.input_schema}
        for t in (READ, GREP)
    ]
    assert body["system"].startswith("You fix bugs.")
    assert body["messages"] == [
        {"role": "user", "content": "Find where todos are added."},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Looking at the code first."},
                {
                    "type": "tool_use",
                    "id": "call_a1",
                    "name": "Read",
                    "input": {"file_path": "src/app.py"},
                },
                {
                    "type": "tool_use",
                    "id": "call_b2",
                    "name": "Grep",
                    "input": {"pattern": "def (add|remove)_todo"},
                },
            ],
        },
        {  # both results in one user turn, in the order of the calls
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "call_a1",
                    "content": "1: def add_todo(items, text):",
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "call_b2",
                    "content": "error: no such file",
                    "is_error": True,
                },
            ],
        },
    ]


def test_with_tools_the_schema_stays_in_the_prompt(
    name: str, script: Script, server: FakeLLMServer
) -> None:
    """Native structured output would keep the model from calling tools (LLMRequest)."""
    script.answers = [TWO_CALLS]
    complete(name, server, first_turn())
    body = server.received[-1].body
    assert "response_format" not in body and "output_config" not in body
    system = body["messages"][0] if name == "openai" else {"content": body["system"]}
    assert SCHEMA_TEXT in system["content"]  # the prompt still spells it


def test_a_malformed_call_goes_back_as_the_model_wrote_it(
    script: Script, server: FakeLLMServer
) -> None:
    script.answers = ["ok"]
    raw = '{"file_path": "src/app.py"'
    broken = ToolCall("call_x", "Read", {MALFORMED_ARGUMENTS: raw})
    request = LLMRequest(
        messages=(
            Message("user", "go"),
            Message("assistant", "", tool_calls=(broken,)),
            Message("tool", "error: arguments are not JSON", tool_call_id="call_x"),
        ),
        tools=(READ,),
    )
    complete("openai", server, request)
    sent = server.received[-1].body["messages"][1]
    assert sent["content"] is None
    assert sent["tool_calls"][0]["function"]["arguments"] == raw


# -- a cut stream ----------------------------------------------------------------------------


@pytest.mark.parametrize("style", ["chunked", "eof"])
def test_a_stream_cut_inside_a_calls_arguments_is_a_retryable_error(
    name: str, style: str, script: Script, server: FakeLLMServer
) -> None:
    server.piece_chars = 5
    script.answers = [ToolTurn([("call_a1", "Read", json.dumps({"file_path": "src/app.py"}))])]
    server.cuts = [(2, style)]  # two pieces of the arguments, then the connection ends
    with pytest.raises(LatticeRunError) as info:
        complete(name, server, first_turn(on_delta=lambda text: None))
    assert info.value.error_type == "provider_error"  # the default policies retry it
    assert "stream ended before it was complete" in info.value.message


# -- fixtures: record and replay a tool turn -----------------------------------------------


def test_a_tool_turn_is_recorded_and_replayed_by_fixtures(
    name: str, script: Script, server: FakeLLMServer, tmp_path: Path
) -> None:
    """Recorded from the live adapter (real SDK, local server), replayed with no server:
    the same calls, ids and arguments, turn by turn."""
    final = json.dumps({"answer": "src/app.py:add_todo"})
    script.answers = [TWO_CALLS, final]
    path = tmp_path / "agent.jsonl"

    async def record() -> list[LLMResponse]:
        live = PROVIDERS[name](server.base_url)
        recorder = FixtureProvider(path, record_with=live)
        try:
            first = await recorder.complete(first_turn())
            return [first, await recorder.complete(second_turn(first.tool_calls))]
        finally:
            await recorder.aclose_loop_clients()

    recorded = asyncio.run(record())
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0]["tool_calls"] == [call.to_json() for call in recorded[0].tool_calls]
    assert lines[0]["meta"]["finish_reason"] == "tool_calls"
    assert "tool_calls" not in lines[1]

    server.stop()  # replay asks no one
    replay = FixtureProvider(path)
    first = asyncio.run(replay.complete(first_turn()))
    assert first.tool_calls == recorded[0].tool_calls
    assert (first.text, first.finish_reason) == ("Looking at the code first.", "tool_calls")
    second = asyncio.run(replay.complete(second_turn(first.tool_calls)))
    assert (second.text, second.tool_calls) == (final, ())


def test_a_fixture_line_with_malformed_tool_calls_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(
        json.dumps({"prompt_hash": "ab", "completion": "", "tool_calls": [{"name": "Read"}]}) + "\n"
    )
    with pytest.raises(LatticeUserError) as raised:
        FixtureProvider(path)
    assert raised.value.message.startswith(f"{path}:1: each tool call is")


def test_arguments_a_server_sends_as_an_object_are_taken_as_they_are() -> None:
    assert parse_tool_arguments({"file_path": "a.py"}) == {"file_path": "a.py"}
    assert parse_tool_arguments("") == parse_tool_arguments(None) == {}
    assert parse_tool_arguments("[1, 2]") == {MALFORMED_ARGUMENTS: "[1, 2]"}

"""Streaming: the OpenAI and Anthropic adapters read answers as server-sent events from a
local server, pass each piece to ``on_delta`` and return the whole answer; a stream cut
short is a retryable ``provider_error``. A run sends ``llm_delta`` events to its listeners
only (not to ``events.jsonl``, not to ``RunResult.events``), and streams only when a
listener takes them (or the settings say so)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lattice.contracts.calls import TRANSIENT_EVENTS
from lattice.errors import LatticeRunError
from lattice.llm.anthropic_provider import AnthropicProvider
from lattice.llm.base import LLMRequest, LLMResponse, Message
from lattice.llm.fake_server import FakeLLMServer, serve
from lattice.llm.mock import MockProvider
from lattice.llm.openai_provider import OpenAIProvider
from lattice.llm.sdk_provider import SdkProvider
from lattice.primitive import LLMPrimitive
from lattice.runtime import Runner, RunStore
from lattice.runtime.settings import RuntimeSettings
from tests.builders import lower_ok
from tests.two_step import two_step_answer, two_step_document

SCHEMA = {
    "type": "object",
    "properties": {"summary": {"type": "string"}},
    "required": ["summary"],
    "additionalProperties": False,
}
ANSWER = json.dumps({"summary": "A streamed answer, in several pieces"})


def _answer(body: dict[str, Any]) -> str:
    return ANSWER


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with serve(_answer) as srv:
        yield srv


PROVIDERS: dict[str, Callable[[str], SdkProvider]] = {
    "openai": lambda url: OpenAIProvider(api_key="sk-test", base_url=url + "/v1"),
    "anthropic": lambda url: AnthropicProvider(api_key="sk-test", base_url=url),
}


@pytest.fixture(params=sorted(PROVIDERS))
def name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _request(on_delta: Callable[[str], None] | None) -> LLMRequest:
    return LLMRequest(
        messages=(Message("system", "Reply with JSON."), Message("user", "Summarise.")),
        model="test-model",
        max_tokens=200,
        response_schema=SCHEMA,
        on_delta=on_delta,
    )


async def _complete(provider: SdkProvider, request: LLMRequest) -> LLMResponse:
    try:
        return await provider.complete(request)
    finally:
        await provider.aclose_loop_clients()


def test_a_streamed_answer_arrives_in_pieces_and_whole(name: str, server: FakeLLMServer) -> None:
    pieces: list[str] = []
    response = asyncio.run(_complete(PROVIDERS[name](server.base_url), _request(pieces.append)))

    body = server.received[-1].body
    assert body["stream"] is True
    assert ("response_format" if name == "openai" else "output_config") in body
    assert len(pieces) == len(ANSWER) // server.piece_chars + 1
    assert "".join(pieces) == ANSWER == response.text
    reply = server.replies[-1]
    usage = reply["usage"]
    if name == "openai":
        assert body["stream_options"] == {"include_usage": True}
        expected = (usage["prompt_tokens"], usage["completion_tokens"])
        assert response.finish_reason == "stop"
    else:
        expected = (usage["input_tokens"], usage["output_tokens"])
        assert response.finish_reason == "end_turn"
    assert (response.usage.input_tokens, response.usage.output_tokens) == expected
    assert response.model == "test-model"
    assert response.latency_ms > 0


def test_streamed_pieces_of_an_answer_with_a_lone_surrogate_hold_u_fffd(name: str) -> None:
    """The API's JSON may spell ``"\\ud800"`` in a piece: each piece a listener gets, and
    the whole answer, hold U+FFFD there, so a listener can write them anywhere."""
    with serve(lambda body: "ok \ud800 then more text") as srv:
        pieces: list[str] = []
        response = asyncio.run(_complete(PROVIDERS[name](srv.base_url), _request(pieces.append)))
    assert len(pieces) > 1
    assert "".join(pieces) == "ok \ufffd then more text" == response.text
    for piece in pieces:
        piece.encode("utf-8")


def test_pieces_arrive_before_the_answer_is_finished(name: str, server: FakeLLMServer) -> None:
    """The server holds the rest of the answer until the first piece has reached us."""
    server.gate = gate = threading.Event()
    pieces: list[str] = []

    def on_delta(text: str) -> None:
        pieces.append(text)
        gate.set()

    response = asyncio.run(_complete(PROVIDERS[name](server.base_url), _request(on_delta)))
    assert server.gate_was_open is True
    assert response.text == ANSWER


def test_without_on_delta_nothing_streams(name: str, server: FakeLLMServer) -> None:
    response = asyncio.run(_complete(PROVIDERS[name](server.base_url), _request(None)))
    assert "stream" not in server.received[-1].body
    assert response.text == ANSWER


@pytest.mark.parametrize("style", ["chunked", "eof"])
def test_a_stream_cut_short_is_a_retryable_provider_error(
    name: str, style: str, server: FakeLLMServer
) -> None:
    server.cuts = [(2, style)]
    pieces: list[str] = []
    with pytest.raises(LatticeRunError) as info:
        asyncio.run(_complete(PROVIDERS[name](server.base_url), _request(pieces.append)))
    assert info.value.error_type == "provider_error"  # retried by the default policies
    assert "stream ended before it was complete" in info.value.message
    assert len(pieces) == 2  # what arrived was passed on, and nothing was returned


def test_the_prompt_hash_and_identity_ignore_on_delta() -> None:
    plain, streamed = _request(None), _request(lambda text: None)
    assert plain == streamed
    assert plain.prompt_hash() == streamed.prompt_hash()
    assert "on_delta" not in repr(streamed)


# -- runs --------------------------------------------------------------------------------


@pytest.fixture
def two_step() -> Iterator[FakeLLMServer]:
    with serve(two_step_answer) as srv:
        yield srv


def _runner(
    server: FakeLLMServer, tmp_path: Path, settings: RuntimeSettings | None = None
) -> Runner:
    ir = lower_ok(two_step_document())
    provider = OpenAIProvider(api_key="sk-test", base_url=server.base_url + "/v1")
    return Runner(ir, provider=provider, store=RunStore(tmp_path), settings=settings)


def test_a_run_sends_deltas_to_listeners_only(two_step: FakeLLMServer, tmp_path: Path) -> None:
    runner = _runner(two_step, tmp_path)
    seen: list[dict[str, Any]] = []
    runner.subscribe(seen.append)
    result = runner.run({"topic": "tides"})

    assert result.status == "completed"
    assert result.output == {"summary": "All about Tides"}
    assert all(r.body.get("stream") is True for r in two_step.received)
    deltas = [e for e in seen if e["type"] == "llm_delta"]
    by_node: dict[str, str] = {}
    for event in deltas:
        assert event["data"]["attempt"] == 1
        by_node[event["node_id"]] = by_node.get(event["node_id"], "") + event["data"]["text"]
    assert json.loads(by_node["summary"]) == result.output
    assert json.loads(by_node["outline"]) == result.vars["outline"]["result"]

    # a delta carries the number of the last recorded event: the recorded ones stay gapless
    recorded = [e for e in seen if e["type"] not in TRANSIENT_EVENTS]
    assert [e["seq"] for e in recorded] == list(range(1, len(recorded) + 1))
    for i, event in enumerate(seen):
        if event["type"] == "llm_delta":
            assert event["seq"] == seen[i - 1]["seq"]
    lines = (result.run_dir / "events.jsonl").read_text(encoding="utf-8")  # type: ignore[operator]
    assert "llm_delta" not in lines
    assert [e["seq"] for e in map(json.loads, lines.splitlines())] == [e["seq"] for e in recorded]
    assert not [e for e in result.events if e["type"] in TRANSIENT_EVENTS]


def test_a_cut_stream_is_retried_and_its_half_never_accepted(
    two_step: FakeLLMServer, tmp_path: Path
) -> None:
    async def no_wait(seconds: float) -> None:
        return None

    two_step.cuts = [(3, "chunked")]
    runner = _runner(two_step, tmp_path, RuntimeSettings(sleep=no_wait))
    seen: list[dict[str, Any]] = []
    runner.subscribe(seen.append)
    result = runner.run({"topic": "tides"})

    assert result.status == "completed"
    retries = [e for e in seen if e["type"] == "retry"]
    assert [r["data"]["error_type"] for r in retries] == ["provider_error"]
    outline = [e for e in seen if e["type"] == "llm_delta" and e["node_id"] == "outline"]
    first = "".join(e["data"]["text"] for e in outline if e["data"]["attempt"] == 1)
    second = "".join(e["data"]["text"] for e in outline if e["data"]["attempt"] == 2)
    assert len(first) == 3 * two_step.piece_chars  # the cut answer, passed on as it came
    assert json.loads(second) == result.vars["outline"]["result"]
    assert not [e for e in seen if e["type"] == "validation_failed"]


@pytest.mark.parametrize(
    ("setting", "listener", "streams"),
    [
        (None, None, False),  # nobody listens: one plain request
        (None, "plain", True),  # a listener takes deltas unless it says otherwise
        (None, "declines", False),  # ``wants_deltas = False``
        (True, None, True),
        (False, "plain", False),
    ],
)
def test_when_a_run_streams(
    two_step: FakeLLMServer,
    tmp_path: Path,
    setting: bool | None,
    listener: str | None,
    streams: bool,
) -> None:
    runner = _runner(two_step, tmp_path, RuntimeSettings(stream=setting))
    seen: list[dict[str, Any]] = []

    class Declines:
        wants_deltas = False

        def __call__(self, event: dict[str, Any]) -> None:
            seen.append(event)

    if listener == "plain":
        runner.subscribe(seen.append)
    elif listener == "declines":
        runner.subscribe(Declines())
    assert runner.run({"topic": "tides"}).status == "completed"
    assert [bool(r.body.get("stream")) for r in two_step.received] == [streams, streams]
    assert not [e for e in seen if e["type"] == "llm_delta"] or streams


def test_mock_runs_ignore_streaming_and_keep_their_hashes() -> None:
    ir = lower_ok(two_step_document())
    script = {
        "outline": [{"title": "Tides", "points": ["a", "b"]}],
        "summary": [{"summary": "s"}],
    }
    quiet = Runner(ir, provider=MockProvider(script), store=RunStore(None)).run({"topic": "t"})
    runner = Runner(ir, provider=MockProvider(script), store=RunStore(None))
    seen: list[dict[str, Any]] = []
    runner.subscribe(seen.append)
    loud = runner.run({"topic": "t"})
    hashes = [
        [e["data"]["prompt_hash"] for e in r.events if e["type"] == "llm_request"]
        for r in (quiet, loud)
    ]
    assert hashes[0] == hashes[1] and len(hashes[0]) == 2
    assert not [e for e in seen if e["type"] == "llm_delta"]


def test_the_primitive_streams_to_its_listener(server: FakeLLMServer) -> None:
    seen: list[dict[str, Any]] = []
    block = LLMPrimitive(
        name="summarise",
        output_schema=SCHEMA,
        provider=OpenAIProvider(api_key="sk-test", base_url=server.base_url + "/v1"),
        on_event=seen.append,
    )
    response = block.run("the tides")
    assert response.status == "completed"
    text = "".join(e["data"]["text"] for e in seen if e["type"] == "llm_delta")
    assert text == ANSWER
    assert not [e for e in response.events if e["type"] == "llm_delta"]
    kept = [e["seq"] for e in response.events]
    assert kept == list(range(1, len(kept) + 1))

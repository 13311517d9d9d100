"""What only the Anthropic adapter does, against the real ``anthropic`` SDK, HTTP mocked at
the transport (respx). What it shares with the OpenAI adapter (error mapping, retry-after,
structured-output fallback, model and base URL from the environment …) is tested for both
in ``test_sdk_adapters.py``.

The installed SDK (2.x, API version 2026-10-21) has no sampling parameters: the adapter
must not send ``temperature``/``top_p`` (the API rejects them even at default values), so
requests here carry them and the bodies are checked to be free of them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace

import anthropic
import httpx
import pytest
import respx

from lattice.llm.anthropic_provider import DEFAULT_MAX_TOKENS, AnthropicProvider
from lattice.llm.base import SCHEMA_NOTE, Message
from tests.llm.sdk_fakes import (
    ANTHROPIC_API,
    KEY,
    SCHEMA,
    anthropic_error,
    body_of,
    complete,
    mock_api,
)
from tests.llm.sdk_fakes import anthropic_message as message
from tests.llm.sdk_fakes import anthropic_request as request


@pytest.fixture
def api() -> Iterator[respx.MockRouter]:
    with mock_api(ANTHROPIC_API, assert_all_called=False) as router:
        yield router


@pytest.fixture
def provider() -> AnthropicProvider:
    return AnthropicProvider(api_key=KEY)


# -- success -----------------------------------------------------------------------------


def test_structured_request_body_and_text_blocks(
    api: respx.MockRouter, provider: AnthropicProvider
) -> None:
    """The rest of the response mapping is checked for both adapters in test_sdk_adapters.py."""
    route = api.post("/v1/messages").respond(
        200,
        json=message(
            '{"label": "bug"}',
            stop_reason="max_tokens",
            extra_blocks=[{"type": "thinking", "thinking": "hmm", "signature": "sig"}],
        ),
    )
    response = complete(provider, request())

    assert route.call_count == 1
    sent = route.calls.last.request
    credentials = sent.headers.get("x-api-key", "") + sent.headers.get("authorization", "")
    assert "sk-test" in credentials
    assert sent.headers.get("anthropic-version")
    body = json.loads(sent.content)
    assert body["model"] == "claude-test"
    assert body["max_tokens"] == 300
    assert body["system"] == "You emit one artifact.\n\nSchema follows."
    assert body["messages"] == [{"role": "user", "content": "Classify: x"}]
    assert body["output_config"] == {"format": {"type": "json_schema", "schema": SCHEMA}}
    assert "temperature" not in body
    assert "top_p" not in body

    assert response.text == '{"label": "bug"}'  # only text blocks
    assert response.finish_reason == "max_tokens"


def test_text_blocks_are_joined(api: respx.MockRouter, provider: AnthropicProvider) -> None:
    payload = message("b")
    payload["content"].insert(0, {"type": "text", "text": "a"})
    api.post("/v1/messages").respond(200, json=payload)
    assert complete(provider, request()).text == "ab"


def test_plain_request_defaults(api: respx.MockRouter, provider: AnthropicProvider) -> None:
    route = api.post("/v1/messages").respond(200, json=message("hello"))
    complete(
        provider,
        request(messages=(Message("user", "hi"),), max_tokens=None, response_schema=None),
    )
    body = body_of(route)
    assert body["max_tokens"] == DEFAULT_MAX_TOKENS
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    for key in ("system", "output_config", "temperature", "top_p"):
        assert key not in body


def test_multi_turn_roles_are_kept(api: respx.MockRouter, provider: AnthropicProvider) -> None:
    route = api.post("/v1/messages").respond(200, json=message("{}"))
    turns = (
        Message("system", "s"),
        Message("user", "u1"),
        Message("assistant", "a1"),
        Message("user", "u2"),
    )
    complete(provider, request(messages=turns))
    assert [m["role"] for m in body_of(route)["messages"]] == ["user", "assistant", "user"]


def test_runtime_default_temperature_is_not_sent(
    api: respx.MockRouter, provider: AnthropicProvider
) -> None:
    route = api.post("/v1/messages").respond(200, json=message('{"label": "bug"}'))
    response = complete(provider, request(temperature=0.0))
    assert response.text == '{"label": "bug"}'
    body = body_of(route)
    assert "temperature" not in body
    assert "top_p" not in body


# -- errors ------------------------------------------------------------------------------


def test_overloaded_is_a_server_error() -> None:
    """529 raises the SDK's OverloadedError (the shared status table names it exactly)."""
    assert issubclass(anthropic.OverloadedError, anthropic.InternalServerError)


# -- the schema goes out once ----------------------------------------------------------------


def test_output_config_sends_the_schema_once_and_the_fallback_puts_it_back(
    api: respx.MockRouter, provider: AnthropicProvider
) -> None:
    schema_text = json.dumps(SCHEMA, ensure_ascii=False)
    req = request(
        messages=(
            Message(
                "system", f"Rules.\nThe artifact must conform to this JSON Schema:\n{schema_text}"
            ),
            Message("user", "Classify: x"),
        ),
        prompt_schema=schema_text,
    )
    route = api.post("/v1/messages").mock(
        side_effect=[
            httpx.Response(200, json=message('{"label": "bug"}')),
            httpx.Response(
                400, json=anthropic_error("output_config: Extra inputs are not permitted")
            ),
            httpx.Response(200, json=message('{"label": "bug"}')),
        ]
    )
    complete(provider, req)
    structured = body_of(route, 0)
    assert structured["output_config"]["format"]["schema"] == SCHEMA
    assert schema_text not in structured["system"]
    assert structured["system"].endswith(SCHEMA_NOTE)
    complete(provider, replace(req, model="claude-plain"))
    plain = body_of(route, 2)
    assert "output_config" not in plain
    assert plain["system"].endswith(schema_text)

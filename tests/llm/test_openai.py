"""What only the OpenAI adapter does, against the real ``openai`` SDK, HTTP mocked at the
transport (respx). What it shares with the Anthropic adapter (error mapping, retry-after,
structured-output fallback, model and base URL from the environment …) is tested for both
in ``test_sdk_adapters.py``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import respx

from lattice.llm.base import SCHEMA_NOTE, LLMRequest, Message
from lattice.llm.openai_provider import DEFAULT_MODEL, OpenAIProvider, strict_compatible
from tests.llm.sdk_fakes import (
    CLOSED,
    KEY,
    OPENAI_API,
    body_of,
    complete,
    mock_api,
    openai_error,
)
from tests.llm.sdk_fakes import openai_completion as completion
from tests.llm.sdk_fakes import openai_request as request


@pytest.fixture
def api() -> Iterator[respx.MockRouter]:
    with mock_api(OPENAI_API, assert_all_called=False) as router:
        yield router


@pytest.fixture
def provider() -> OpenAIProvider:
    return OpenAIProvider(api_key=KEY)


# -- success -----------------------------------------------------------------------------


def test_structured_request_body(api: respx.MockRouter, provider: OpenAIProvider) -> None:
    """The response side of this call is checked for both adapters in test_sdk_adapters.py."""
    route = api.post("/chat/completions").respond(
        200, json=completion('{"label": "bug", "tags": []}', finish_reason="length")
    )
    complete(provider, request())

    assert route.call_count == 1
    sent = route.calls.last.request
    assert sent.headers["authorization"] == "Bearer sk-test"
    body = json.loads(sent.content)
    assert body["model"] == "gpt-test"
    assert body["messages"] == [
        {"role": "system", "content": "You emit one artifact."},
        {"role": "user", "content": "Classify: x"},
    ]
    assert body["temperature"] == 0.2
    assert body["top_p"] == 0.9
    assert body["max_tokens"] == 300
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["schema"] == CLOSED
    assert body["response_format"]["json_schema"]["strict"] is True
    assert body["response_format"]["json_schema"]["name"]
    assert "stream" not in body or body["stream"] is False


OPEN_SCHEMAS = {
    "no additionalProperties": {"type": "object", "properties": {"a": {"type": "string"}}},
    "not all required": {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
        "required": ["a"],
        "additionalProperties": False,
    },
    "open nested object": {
        "type": "object",
        "properties": {"inner": {"type": "object", "properties": {"x": {"type": "integer"}}}},
        "required": ["inner"],
        "additionalProperties": False,
    },
    "open array items": {
        "type": "array",
        "items": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]},
    },
    "open anyOf branch": {"anyOf": [{"type": "object", "properties": {"x": {"type": "string"}}}]},
}


@pytest.mark.parametrize("schema", list(OPEN_SCHEMAS.values()), ids=list(OPEN_SCHEMAS))
def test_open_schemas_are_sent_without_strict(
    api: respx.MockRouter, provider: OpenAIProvider, schema: dict[str, Any]
) -> None:
    route = api.post("/chat/completions").respond(200, json=completion("{}"))
    complete(provider, request(response_schema=schema))
    fmt = body_of(route)["response_format"]
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"]["schema"] == schema
    assert fmt["json_schema"]["strict"] is False


def test_strict_compatible() -> None:
    assert strict_compatible(CLOSED)
    assert strict_compatible({"type": "string"})
    assert strict_compatible({"type": "array", "items": {"type": "integer"}})
    for schema in OPEN_SCHEMAS.values():
        assert not strict_compatible(schema)


def test_plain_request_sends_no_schema_and_no_unset_sampling(
    api: respx.MockRouter, provider: OpenAIProvider
) -> None:
    route = api.post("/chat/completions").respond(200, json=completion("hello"))
    response = complete(
        provider,
        LLMRequest(messages=(Message("user", "hi"),), temperature=None),
    )
    body = body_of(route)
    assert body["model"] == DEFAULT_MODEL
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    for key in ("response_format", "temperature", "top_p", "max_tokens"):
        assert key not in body
    assert response.text == "hello"


def test_temperature_zero_is_sent(api: respx.MockRouter, provider: OpenAIProvider) -> None:
    route = api.post("/chat/completions").respond(200, json=completion("{}"))
    complete(provider, request(temperature=0.0, top_p=None))
    body = body_of(route)
    assert body["temperature"] == 0.0
    assert "top_p" not in body


def test_missing_usage_and_null_content_map_to_zero_and_empty(
    api: respx.MockRouter, provider: OpenAIProvider
) -> None:
    payload = completion()
    payload["choices"][0]["message"]["content"] = None
    del payload["usage"]
    api.post("/chat/completions").respond(200, json=payload)
    response = complete(provider, request())
    assert response.text == ""
    assert (response.usage.input_tokens, response.usage.output_tokens) == (0, 0)


def test_local_server_needs_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    with mock_api("http://llm.local:8000/v1") as router:
        route = router.post("/chat/completions").respond(200, json=completion("{}"))
        complete(OpenAIProvider(base_url="http://llm.local:8000/v1"), request())
        assert route.call_count == 1


# -- the schema goes out once ----------------------------------------------------------------

SCHEMA_TEXT = json.dumps(CLOSED, ensure_ascii=False)


def with_prompt_schema(**overrides: Any) -> LLMRequest:
    """A request whose system prompt spells the schema, as the contract's template does."""
    system = f"Rules.\n\nThe artifact must conform to this JSON Schema:\n{SCHEMA_TEXT}"
    return request(
        messages=(Message("system", system), Message("user", "Classify: x")),
        prompt_schema=SCHEMA_TEXT,
        **overrides,
    )


def test_structured_output_sends_the_schema_once(
    api: respx.MockRouter, provider: OpenAIProvider
) -> None:
    route = api.post("/chat/completions").respond(200, json=completion())
    req = with_prompt_schema()
    complete(provider, req)
    body = body_of(route)
    assert body["response_format"]["json_schema"]["schema"] == CLOSED
    system = body["messages"][0]["content"]
    assert SCHEMA_TEXT not in system
    assert system == f"Rules.\n\nThe artifact must conform to this JSON Schema:\n{SCHEMA_NOTE}"
    assert route.calls.last.request.content.count(b'"additionalProperties"') == 2  # one schema
    # the request itself (what the prompt hash covers) is unchanged
    assert SCHEMA_TEXT in (req.system or "")
    assert req.schema_sent_natively().prompt_hash() != req.prompt_hash()


def test_plain_prompting_keeps_the_schema_in_the_prompt(
    api: respx.MockRouter, provider: OpenAIProvider
) -> None:
    route = api.post("/chat/completions").mock(
        side_effect=[
            httpx.Response(400, json=openai_error("response_format is not supported here")),
            httpx.Response(200, json=completion()),
            httpx.Response(200, json=completion()),
        ]
    )
    complete(provider, with_prompt_schema())
    first, second = body_of(route, 0), body_of(route, 1)
    assert SCHEMA_TEXT not in first["messages"][0]["content"]
    assert "response_format" not in second
    assert SCHEMA_TEXT in second["messages"][0]["content"]  # the fallback puts it back
    complete(provider, with_prompt_schema())  # remembered: plain at once, schema in the prompt
    assert SCHEMA_TEXT in body_of(route)["messages"][0]["content"]


def test_a_request_without_a_prompt_schema_is_sent_as_it_is(
    api: respx.MockRouter, provider: OpenAIProvider
) -> None:
    route = api.post("/chat/completions").respond(200, json=completion())
    system = f"Schema: {SCHEMA_TEXT}"
    complete(provider, request(messages=(Message("system", system), Message("user", "x"))))
    assert body_of(route)["messages"][0]["content"] == system

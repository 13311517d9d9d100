"""The OpenAI adapter against the real ``openai`` SDK, HTTP mocked at the transport (respx)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
import respx

from lattice.errors import LatticeRunError, LatticeUserError
from lattice.llm.base import SCHEMA_NOTE, LLMRequest, LLMResponse, Message
from lattice.llm.openai_provider import DEFAULT_MODEL, OpenAIProvider, strict_compatible
from tests import respx_httpx2

API = "https://api.openai.com/v1"

CLOSED = {
    "type": "object",
    "properties": {
        "label": {"type": "string", "enum": ["billing", "bug"]},
        "tags": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string"}},
                "required": ["name"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["label", "tags"],
    "additionalProperties": False,
}


def completion(
    text: str = '{"label": "bug", "tags": []}',
    *,
    model: str = "gpt-test-2025",
    finish_reason: str = "stop",
    usage: tuple[int, int] = (11, 7),
) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": finish_reason,
            }
        ],
        "usage": {
            "prompt_tokens": usage[0],
            "completion_tokens": usage[1],
            "total_tokens": sum(usage),
        },
    }


def error_body(message: str, code: str | None = None, kind: str = "invalid_request_error") -> Any:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def request(**overrides: Any) -> LLMRequest:
    fields: dict[str, Any] = {
        "messages": (Message("system", "You emit one artifact."), Message("user", "Classify: x")),
        "model_class": "small",
        "model": "gpt-test",
        "temperature": 0.2,
        "top_p": 0.9,
        "max_tokens": 300,
        "response_schema": CLOSED,
        "node_id": "classify",
        "op_id": "classify",
    }
    fields.update(overrides)
    return LLMRequest(**fields)


def complete(provider: OpenAIProvider, req: LLMRequest) -> LLMResponse:
    return asyncio.run(provider.complete(req))


def failure(provider: OpenAIProvider, req: LLMRequest) -> LatticeRunError:
    with pytest.raises(LatticeRunError) as info:
        complete(provider, req)
    return info.value


def body_of(route: respx.Route, index: int = -1) -> dict[str, Any]:
    return json.loads(route.calls[index].request.content)


@pytest.fixture
def api() -> Iterator[respx.MockRouter]:
    with respx.mock(base_url=API, using=respx_httpx2.USING, assert_all_called=False) as router:
        yield router


@pytest.fixture
def provider() -> OpenAIProvider:
    return OpenAIProvider(api_key="sk-test")


# -- success -----------------------------------------------------------------------------


def test_structured_request_body_and_response_mapping(
    api: respx.MockRouter, provider: OpenAIProvider
) -> None:
    route = api.post("/chat/completions").respond(
        200, json=completion('{"label": "bug", "tags": []}', finish_reason="length")
    )
    response = complete(provider, request())

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

    assert response.text == '{"label": "bug", "tags": []}'
    assert response.usage.input_tokens == 11
    assert response.usage.output_tokens == 7
    assert response.model == "gpt-test-2025"
    assert response.finish_reason == "length"
    assert response.latency_ms >= 0


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


def test_default_model_from_environment(
    api: respx.MockRouter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LATTICE_OPENAI_MODEL", "gpt-env")
    route = api.post("/chat/completions").respond(200, json=completion("{}"))
    complete(OpenAIProvider(api_key="sk-test"), request(model=None))
    assert body_of(route)["model"] == "gpt-env"


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


def test_base_url_argument_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    with respx.mock(base_url="http://llm.local:8000/v1", using=respx_httpx2.USING) as router:
        route = router.post("/chat/completions").respond(200, json=completion("{}"))
        complete(OpenAIProvider(api_key="sk-test", base_url="http://llm.local:8000/v1"), request())
        monkeypatch.setenv("OPENAI_BASE_URL", "http://llm.local:8000/v1")
        complete(OpenAIProvider(api_key="sk-test"), request())
        assert route.call_count == 2


def test_local_server_needs_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    with respx.mock(base_url="http://llm.local:8000/v1", using=respx_httpx2.USING) as router:
        route = router.post("/chat/completions").respond(200, json=completion("{}"))
        complete(OpenAIProvider(base_url="http://llm.local:8000/v1"), request())
        assert route.call_count == 1


def test_no_key_and_no_base_url_is_a_user_error() -> None:
    with pytest.raises(LatticeUserError) as info:
        OpenAIProvider()
    assert info.value.error_type == "api_key_error"
    assert "OPENAI_API_KEY" in info.value.message


# -- errors ------------------------------------------------------------------------------

STATUS_ERRORS = {
    "429 retry-after": (
        429,
        error_body("Rate limit reached", "rate_limit_exceeded", "requests"),
        {"retry-after": "7"},
        "rate_limit_error",
        openai.RateLimitError,
    ),
    "401": (
        401,
        error_body("Incorrect API key provided", "invalid_api_key"),
        {},
        "api_key_error",
        openai.AuthenticationError,
    ),
    "403": (
        403,
        error_body("Project does not have access", None, "permission_error"),
        {},
        "api_key_error",
        openai.PermissionDeniedError,
    ),
    "400 context length": (
        400,
        error_body(
            "This model's maximum context length is 8192 tokens. However, your messages "
            "resulted in 9000 tokens.",
            "context_length_exceeded",
        ),
        {},
        "context_length_error",
        openai.BadRequestError,
    ),
    "400 other": (
        400,
        error_body("Invalid value for 'messages'"),
        {},
        "invalid_request",
        openai.BadRequestError,
    ),
    "404 model": (
        404,
        error_body("The model `gpt-nope` does not exist", "model_not_found"),
        {},
        "invalid_request",
        openai.NotFoundError,
    ),
    "500": (
        500,
        error_body("The server had an error", None, "server_error"),
        {},
        "provider_error",
        openai.InternalServerError,
    ),
    "503": (503, error_body("overloaded"), {}, "provider_error", openai.InternalServerError),
}


@pytest.mark.parametrize(
    ("status", "payload", "headers", "error_type", "sdk_error"),
    list(STATUS_ERRORS.values()),
    ids=list(STATUS_ERRORS),
)
def test_status_errors_are_mapped_with_one_http_call(
    api: respx.MockRouter,
    provider: OpenAIProvider,
    status: int,
    payload: Any,
    headers: dict[str, str],
    error_type: str,
    sdk_error: type[Exception],
) -> None:
    route = api.post("/chat/completions").respond(status, json=payload, headers=headers)
    error = failure(provider, request())
    assert error.error_type == error_type
    assert route.call_count == 1  # SDK retries are off: recovery is Lattice's job
    assert isinstance(error.__cause__, sdk_error)
    assert error.details["sdk_error"] == sdk_error.__name__
    assert error.node_id == "classify"
    assert "gpt-test" in error.message
    assert "sk-test" not in error.message


def test_rate_limit_carries_retry_after(api: respx.MockRouter, provider: OpenAIProvider) -> None:
    api.post("/chat/completions").respond(
        429, json=error_body("Rate limit reached"), headers={"retry-after": "7"}
    )
    error = failure(provider, request())
    assert error.error_type == "rate_limit_error"
    assert error.details["retry_after"] == 7


def test_rate_limit_retry_after_ms(api: respx.MockRouter, provider: OpenAIProvider) -> None:
    api.post("/chat/completions").respond(
        429, json=error_body("slow down"), headers={"retry-after-ms": "1500"}
    )
    assert failure(provider, request()).details["retry_after"] == 1.5


def test_rate_limit_without_retry_after(api: respx.MockRouter, provider: OpenAIProvider) -> None:
    api.post("/chat/completions").respond(429, json=error_body("slow down"))
    error = failure(provider, request())
    assert error.error_type == "rate_limit_error"
    assert "retry_after" not in error.details


def test_rate_limit_with_unparsable_retry_after(
    api: respx.MockRouter, provider: OpenAIProvider
) -> None:
    api.post("/chat/completions").respond(
        429, json=error_body("slow down"), headers={"retry-after": "soon"}
    )
    error = failure(provider, request())
    assert error.error_type == "rate_limit_error"
    assert "retry_after" not in error.details


@pytest.mark.parametrize(
    "exc", [httpx.ReadTimeout, httpx.ConnectTimeout, httpx.WriteTimeout, httpx.PoolTimeout]
)
def test_timeouts_are_timeout_errors(
    api: respx.MockRouter, provider: OpenAIProvider, exc: type[Exception]
) -> None:
    route = api.post("/chat/completions").mock(side_effect=exc)
    error = failure(provider, request())
    assert error.error_type == "timeout_error"
    assert route.call_count == 1
    assert isinstance(error.__cause__, openai.APITimeoutError)


@pytest.mark.parametrize("exc", [httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError])
def test_connection_errors_are_provider_errors(
    api: respx.MockRouter, provider: OpenAIProvider, exc: type[Exception]
) -> None:
    route = api.post("/chat/completions").mock(side_effect=exc)
    error = failure(provider, request())
    assert error.error_type == "provider_error"
    assert route.call_count == 1
    assert isinstance(error.__cause__, openai.APIConnectionError)
    assert "cannot connect" in error.message


def test_non_json_success_body_is_a_provider_error(
    api: respx.MockRouter, provider: OpenAIProvider
) -> None:
    api.post("/chat/completions").respond(
        200, text="<html>gateway</html>", headers={"content-type": "application/json"}
    )
    error = failure(provider, request())
    assert error.error_type == "provider_error"


# -- structured-output fallback ----------------------------------------------------------


def test_response_format_rejected_falls_back_to_plain_prompting(
    api: respx.MockRouter, provider: OpenAIProvider
) -> None:
    route = api.post("/chat/completions").mock(
        side_effect=[
            httpx.Response(
                400, json=error_body("response_format 'json_schema' is not supported by this model")
            ),
            httpx.Response(200, json=completion('{"label": "bug", "tags": []}')),
            httpx.Response(200, json=completion('{"label": "bug", "tags": []}')),
            httpx.Response(200, json=completion('{"label": "bug", "tags": []}')),
        ]
    )
    response = complete(provider, request())
    assert response.text == '{"label": "bug", "tags": []}'
    assert route.call_count == 2
    first, second = body_of(route, 0), body_of(route, 1)
    assert "response_format" in first
    assert "response_format" not in second
    assert {k: v for k, v in first.items() if k != "response_format"} == second

    # the model is remembered: the next call goes plain at once
    complete(provider, request())
    assert route.call_count == 3
    assert "response_format" not in body_of(route)
    # another model still gets structured output
    complete(provider, request(model="gpt-other"))
    assert "response_format" in body_of(route)


def test_fallback_failure_is_mapped(api: respx.MockRouter, provider: OpenAIProvider) -> None:
    route = api.post("/chat/completions").mock(
        side_effect=[
            httpx.Response(400, json=error_body("Unknown parameter: response_format")),
            httpx.Response(500, json=error_body("boom")),
        ]
    )
    error = failure(provider, request())
    assert error.error_type == "provider_error"
    assert route.call_count == 2
    assert isinstance(error.__cause__, openai.InternalServerError)


def test_response_format_error_without_a_schema_is_not_retried(
    api: respx.MockRouter, provider: OpenAIProvider
) -> None:
    route = api.post("/chat/completions").respond(
        400, json=error_body("response_format is not supported")
    )
    error = failure(provider, request(response_schema=None))
    assert error.error_type == "invalid_request"
    assert error.details["status"] == 400
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
            httpx.Response(400, json=error_body("response_format is not supported here")),
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

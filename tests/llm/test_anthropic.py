"""The Anthropic adapter against the real ``anthropic`` SDK, HTTP mocked at the transport (respx).

The installed SDK (2.x, API version 2026-10-21) has no sampling parameters: the adapter
must not send ``temperature``/``top_p`` (the API rejects them even at default values), so
requests here carry them and every body is checked to be free of them.
"""

from __future__ import annotations

import asyncio
import json
import warnings
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import anthropic
import httpx
import pytest
import respx

from lattice.errors import LatticeRunError, LatticeUserError
from lattice.llm.anthropic_provider import DEFAULT_MAX_TOKENS, AnthropicProvider
from lattice.llm.base import SCHEMA_NOTE, LLMRequest, LLMResponse, Message
from tests import respx_httpx2

API = "https://api.anthropic.com"

SCHEMA = {
    "type": "object",
    "properties": {"label": {"type": "string", "enum": ["billing", "bug"]}},
    "required": ["label"],
    "additionalProperties": False,
}


def message(
    text: str = '{"label": "bug"}',
    *,
    model: str = "claude-test-20260101",
    stop_reason: str = "end_turn",
    usage: tuple[int, int] = (21, 9),
    extra_blocks: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [*(extra_blocks or []), {"type": "text", "text": text}],
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": usage[0], "output_tokens": usage[1]},
    }


def error_body(message: str, kind: str = "invalid_request_error") -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


def request(**overrides: Any) -> LLMRequest:
    fields: dict[str, Any] = {
        "messages": (
            Message("system", "You emit one artifact."),
            Message("system", "Schema follows."),
            Message("user", "Classify: x"),
        ),
        "model_class": "small",
        "model": "claude-test",
        "temperature": 0.2,
        "top_p": 0.9,
        "max_tokens": 300,
        "response_schema": SCHEMA,
        "node_id": "classify",
        "op_id": "classify",
    }
    fields.update(overrides)
    return LLMRequest(**fields)


def complete(provider: AnthropicProvider, req: LLMRequest) -> LLMResponse:
    return asyncio.run(provider.complete(req))


def failure(provider: AnthropicProvider, req: LLMRequest) -> LatticeRunError:
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
def provider() -> AnthropicProvider:
    return AnthropicProvider(api_key="sk-test")


# -- success -----------------------------------------------------------------------------


def test_structured_request_body_and_response_mapping(
    api: respx.MockRouter, provider: AnthropicProvider
) -> None:
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
    assert response.usage.input_tokens == 21
    assert response.usage.output_tokens == 9
    assert response.model == "claude-test-20260101"
    assert response.finish_reason == "max_tokens"
    assert response.latency_ms >= 0


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


def test_default_model_from_environment(
    api: respx.MockRouter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LATTICE_ANTHROPIC_MODEL", "claude-env")
    route = api.post("/v1/messages").respond(200, json=message("{}"))
    complete(AnthropicProvider(api_key="sk-test"), request(model=None))
    assert body_of(route)["model"] == "claude-env"


def test_default_model_is_not_deprecated(
    api: respx.MockRouter, provider: AnthropicProvider
) -> None:
    api.post("/v1/messages").respond(200, json=message("{}"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        complete(provider, request(model=None))
    assert not [w for w in caught if issubclass(w.category, DeprecationWarning)]


def test_base_url_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://claude.local:9000")
    with respx.mock(base_url="http://claude.local:9000", using=respx_httpx2.USING) as router:
        route = router.post("/v1/messages").respond(200, json=message("{}"))
        complete(AnthropicProvider(api_key="sk-test"), request())
        assert route.call_count == 1


def test_no_key_is_a_user_error() -> None:
    with pytest.raises(LatticeUserError) as info:
        AnthropicProvider()
    assert info.value.error_type == "api_key_error"
    assert "ANTHROPIC_API_KEY" in info.value.message


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

STATUS_ERRORS = {
    "429 retry-after": (
        429,
        error_body("Number of requests has exceeded your rate limit", "rate_limit_error"),
        {"retry-after": "7"},
        "rate_limit_error",
        anthropic.RateLimitError,
    ),
    "401": (
        401,
        error_body("invalid x-api-key", "authentication_error"),
        {},
        "api_key_error",
        anthropic.AuthenticationError,
    ),
    "403": (
        403,
        error_body("Your API key does not have permission", "permission_error"),
        {},
        "api_key_error",
        anthropic.PermissionDeniedError,
    ),
    "400 prompt too long": (
        400,
        error_body("prompt is too long: 210000 tokens > 200000 maximum"),
        {},
        "context_length_error",
        anthropic.BadRequestError,
    ),
    "400 other": (
        400,
        error_body("messages: roles must alternate"),
        {},
        "invalid_request",
        anthropic.BadRequestError,
    ),
    "500": (
        500,
        error_body("Internal server error", "api_error"),
        {},
        "provider_error",
        anthropic.InternalServerError,
    ),
    "529 overloaded": (
        529,
        error_body("Overloaded", "overloaded_error"),
        {},
        "provider_error",
        anthropic.InternalServerError,
    ),
}


@pytest.mark.parametrize(
    ("status", "payload", "headers", "error_type", "sdk_error"),
    list(STATUS_ERRORS.values()),
    ids=list(STATUS_ERRORS),
)
def test_status_errors_are_mapped_with_one_http_call(
    api: respx.MockRouter,
    provider: AnthropicProvider,
    status: int,
    payload: Any,
    headers: dict[str, str],
    error_type: str,
    sdk_error: type[Exception],
) -> None:
    route = api.post("/v1/messages").respond(status, json=payload, headers=headers)
    error = failure(provider, request())
    assert error.error_type == error_type
    assert route.call_count == 1  # SDK retries are off
    assert isinstance(error.__cause__, sdk_error)
    assert error.details["sdk_error"] == type(error.__cause__).__name__
    assert error.node_id == "classify"
    assert "claude-test" in error.message
    assert "sk-test" not in error.message


def test_rate_limit_carries_retry_after(api: respx.MockRouter, provider: AnthropicProvider) -> None:
    api.post("/v1/messages").respond(
        429, json=error_body("slow down", "rate_limit_error"), headers={"retry-after": "7"}
    )
    error = failure(provider, request())
    assert error.error_type == "rate_limit_error"
    assert error.details["retry_after"] == 7


def test_invalid_request_names_the_status(
    api: respx.MockRouter, provider: AnthropicProvider
) -> None:
    api.post("/v1/messages").respond(422, json=error_body("bad field"))
    error = failure(provider, request())
    assert error.error_type == "invalid_request"
    assert error.details["status"] == 422


@pytest.mark.parametrize("exc", [httpx.ReadTimeout, httpx.ConnectTimeout])
def test_timeouts_are_timeout_errors(
    api: respx.MockRouter, provider: AnthropicProvider, exc: type[Exception]
) -> None:
    route = api.post("/v1/messages").mock(side_effect=exc)
    error = failure(provider, request())
    assert error.error_type == "timeout_error"
    assert route.call_count == 1
    assert isinstance(error.__cause__, anthropic.APITimeoutError)


@pytest.mark.parametrize("exc", [httpx.ConnectError, httpx.ReadError])
def test_connection_errors_are_provider_errors(
    api: respx.MockRouter, provider: AnthropicProvider, exc: type[Exception]
) -> None:
    route = api.post("/v1/messages").mock(side_effect=exc)
    error = failure(provider, request())
    assert error.error_type == "provider_error"
    assert route.call_count == 1
    assert isinstance(error.__cause__, anthropic.APIConnectionError)


def test_non_json_success_body_is_a_provider_error(
    api: respx.MockRouter, provider: AnthropicProvider
) -> None:
    api.post("/v1/messages").respond(
        200, text="<html>gateway</html>", headers={"content-type": "application/json"}
    )
    assert failure(provider, request()).error_type == "provider_error"


# -- structured-output fallback ----------------------------------------------------------


def test_output_config_rejected_falls_back_to_plain_prompting(
    api: respx.MockRouter, provider: AnthropicProvider
) -> None:
    route = api.post("/v1/messages").mock(
        side_effect=[
            httpx.Response(400, json=error_body("output_config: Extra inputs are not permitted")),
            httpx.Response(200, json=message('{"label": "bug"}')),
            httpx.Response(200, json=message('{"label": "bug"}')),
        ]
    )
    assert complete(provider, request()).text == '{"label": "bug"}'
    assert route.call_count == 2
    first, second = body_of(route, 0), body_of(route, 1)
    assert "output_config" in first
    assert "output_config" not in second
    assert {k: v for k, v in first.items() if k != "output_config"} == second
    complete(provider, request())  # remembered for this model
    assert route.call_count == 3
    assert "output_config" not in body_of(route)


def test_unrelated_400_mentioning_format_is_not_retried(
    api: respx.MockRouter, provider: AnthropicProvider
) -> None:
    route = api.post("/v1/messages").respond(
        400, json=error_body("messages.0.content.0.image.source: invalid image format")
    )
    error = failure(provider, request())
    assert error.error_type == "invalid_request"
    assert route.call_count == 1


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
            httpx.Response(400, json=error_body("output_config: Extra inputs are not permitted")),
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

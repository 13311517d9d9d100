"""Wire-level fakes of the OpenAI and Anthropic APIs, for the adapters under their real SDKs.

Each provider gets builders of its success and error bodies and of a typical request, and
one ``Adapter`` row gathering what the shared suite (``test_sdk_adapters.py``) varies per
provider. HTTP is mocked at the transport with respx (see ``tests/respx_httpx2.py``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import anthropic
import openai
import pytest
import respx

from lattice.errors import LatticeRunError
from lattice.llm.anthropic_provider import AnthropicProvider
from lattice.llm.base import LLMRequest, LLMResponse, Message
from lattice.llm.openai_provider import OpenAIProvider
from lattice.llm.sdk_provider import SdkProvider
from tests import respx_httpx2

KEY = "sk-test"

# -- OpenAI ------------------------------------------------------------------------------

OPENAI_API = "https://api.openai.com/v1"

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


def openai_completion(
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


def openai_error(message: str, code: str | None = None, kind: str = "invalid_request_error") -> Any:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def openai_request(**overrides: Any) -> LLMRequest:
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


# -- Anthropic ---------------------------------------------------------------------------

ANTHROPIC_API = "https://api.anthropic.com"

SCHEMA = {
    "type": "object",
    "properties": {"label": {"type": "string", "enum": ["billing", "bug"]}},
    "required": ["label"],
    "additionalProperties": False,
}


def anthropic_message(
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


def anthropic_error(message: str, kind: str = "invalid_request_error") -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


def anthropic_request(**overrides: Any) -> LLMRequest:
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


# -- calling -----------------------------------------------------------------------------


def complete(provider: SdkProvider, req: LLMRequest) -> LLMResponse:
    return asyncio.run(provider.complete(req))


def failure(provider: SdkProvider, req: LLMRequest) -> LatticeRunError:
    with pytest.raises(LatticeRunError) as info:
        complete(provider, req)
    return info.value


def body_of(route: respx.Route, index: int = -1) -> dict[str, Any]:
    return json.loads(route.calls[index].request.content)


@contextmanager
def mock_api(base_url: str, **kwargs: Any) -> Iterator[respx.MockRouter]:
    with respx.mock(base_url=base_url, using=respx_httpx2.USING, **kwargs) as router:
        yield router


# -- one row per provider ----------------------------------------------------------------

StatusError = tuple[int, Any, dict[str, str], str, type[Exception]]
"""(HTTP status, error body, response headers, Lattice error type, the SDK's exact exception)"""


@dataclass(frozen=True)
class Adapter:
    """What the shared adapter suite varies per provider."""

    name: str
    provider: Callable[..., SdkProvider]
    api: str
    """The API's base URL, as the SDK builds it."""
    local: str
    """The base URL of a local server speaking the same API."""
    path: str
    """The route of a completion, under ``api``."""
    model: str
    """The model ``request()`` names."""
    response_model: str
    """The model ``success`` reports."""
    text: str
    """The artifact ``success`` answers by default."""
    request: Callable[..., LLMRequest]
    success: Callable[..., dict[str, Any]]
    """``success(text, finish=...)``: a 200 body."""
    error: Callable[..., Any]
    """``error(message, kind="invalid_request_error")``: an error body of the API."""
    sdk: ModuleType
    key_variable: str
    model_variable: str
    base_url_variable: str
    schema_field: str
    """The body field carrying the output schema (what a rejecting server names)."""
    truncated: str
    """The finish reason of an answer cut at ``max_tokens``."""
    usage: tuple[int, int]
    """The token usage ``success`` reports by default."""
    rate_limit_kind: str
    """The error type of the API's 429 body."""
    rejection: str
    """A 400 message of a server that does not take the structured-output field."""
    status_errors: dict[str, StatusError] = field(default_factory=dict)


OPENAI = Adapter(
    name="openai",
    provider=OpenAIProvider,
    api=OPENAI_API,
    local="http://llm.local:8000/v1",
    path="/chat/completions",
    model="gpt-test",
    response_model="gpt-test-2025",
    text='{"label": "bug", "tags": []}',
    request=openai_request,
    success=lambda text, finish="stop": openai_completion(text, finish_reason=finish),
    error=lambda message, kind="invalid_request_error": openai_error(message, None, kind),
    sdk=openai,
    key_variable="OPENAI_API_KEY",
    model_variable="LATTICE_OPENAI_MODEL",
    base_url_variable="OPENAI_BASE_URL",
    schema_field="response_format",
    truncated="length",
    usage=(11, 7),
    rate_limit_kind="requests",
    rejection="response_format 'json_schema' is not supported by this model",
    status_errors={
        "429 retry-after": (
            429,
            openai_error("Rate limit reached", "rate_limit_exceeded", "requests"),
            {"retry-after": "7"},
            "rate_limit_error",
            openai.RateLimitError,
        ),
        "401": (
            401,
            openai_error("Incorrect API key provided", "invalid_api_key"),
            {},
            "api_key_error",
            openai.AuthenticationError,
        ),
        "403": (
            403,
            openai_error("Project does not have access", None, "permission_error"),
            {},
            "api_key_error",
            openai.PermissionDeniedError,
        ),
        "400 context length": (
            400,
            openai_error(
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
            openai_error("Invalid value for 'messages'"),
            {},
            "invalid_request",
            openai.BadRequestError,
        ),
        "404 model": (
            404,
            openai_error("The model `gpt-nope` does not exist", "model_not_found"),
            {},
            "invalid_request",
            openai.NotFoundError,
        ),
        "500": (
            500,
            openai_error("The server had an error", None, "server_error"),
            {},
            "provider_error",
            openai.InternalServerError,
        ),
        "503": (503, openai_error("overloaded"), {}, "provider_error", openai.InternalServerError),
    },
)

ANTHROPIC = Adapter(
    name="anthropic",
    provider=AnthropicProvider,
    api=ANTHROPIC_API,
    local="http://claude.local:9000",
    path="/v1/messages",
    model="claude-test",
    response_model="claude-test-20260101",
    text='{"label": "bug"}',
    request=anthropic_request,
    success=lambda text, finish="end_turn": anthropic_message(text, stop_reason=finish),
    error=anthropic_error,
    sdk=anthropic,
    key_variable="ANTHROPIC_API_KEY",
    model_variable="LATTICE_ANTHROPIC_MODEL",
    base_url_variable="ANTHROPIC_BASE_URL",
    schema_field="output_config",
    truncated="max_tokens",
    usage=(21, 9),
    rate_limit_kind="rate_limit_error",
    rejection="output_config: Extra inputs are not permitted",
    status_errors={
        "429 retry-after": (
            429,
            anthropic_error("Number of requests has exceeded your rate limit", "rate_limit_error"),
            {"retry-after": "7"},
            "rate_limit_error",
            anthropic.RateLimitError,
        ),
        "401": (
            401,
            anthropic_error("invalid x-api-key", "authentication_error"),
            {},
            "api_key_error",
            anthropic.AuthenticationError,
        ),
        "403": (
            403,
            anthropic_error("Your API key does not have permission", "permission_error"),
            {},
            "api_key_error",
            anthropic.PermissionDeniedError,
        ),
        "400 prompt too long": (
            400,
            anthropic_error("prompt is too long: 210000 tokens > 200000 maximum"),
            {},
            "context_length_error",
            anthropic.BadRequestError,
        ),
        "400 other": (
            400,
            anthropic_error("messages: roles must alternate"),
            {},
            "invalid_request",
            anthropic.BadRequestError,
        ),
        "500": (
            500,
            anthropic_error("Internal server error", "api_error"),
            {},
            "provider_error",
            anthropic.InternalServerError,
        ),
        "529 overloaded": (
            529,
            anthropic_error("Overloaded", "overloaded_error"),
            {},
            "provider_error",
            anthropic.OverloadedError,  # an InternalServerError (test_anthropic.py)
        ),
    },
)

ADAPTERS = [OPENAI, ANTHROPIC]

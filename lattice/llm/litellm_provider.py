"""LiteLLM adapter: one ``litellm.acompletion`` call for the hundred-odd backends LiteLLM
speaks to (``gemini/gemini-2.5-flash``, ``bedrock/anthropic.claude-…``, ``vertex_ai/…``,
``mistral/…``, ``ollama/…``, ``openai/…`` at any ``api_base``), imported on first use
(``pip install -e '.[litellm]'`` in a clone of Lattice).

It works like the OpenAI adapter, whose chat-completion format LiteLLM returns: structured
output as ``response_format`` (a JSON Schema), with a plain-prompt fallback remembered
per model when a backend rejects it; tools as function tools and tool calls as the
message's ``tool_calls`` (LiteLLM translates them for its backends), streamed ones put
together from their deltas; streaming with ``stream_options.include_usage``;
LiteLLM's own retries off (``num_retries=0``: Lattice's policies decide). LiteLLM's
exceptions are subclasses of the ``openai`` SDK's, so they map to Lattice error types the
same way (rate limit with its Retry-After, context length, credentials, timeout, server
errors). Credentials come from each backend's usual environment variables
(``GEMINI_API_KEY``, ``AWS_ACCESS_KEY_ID``, …), which LiteLLM reads itself.

A stream that breaks off is a ``provider_error`` (retried). LiteLLM stands a finish reason
in when a stream just ends; on its ``openai/`` route the adapter checks that the server
sent one itself, so a body cut short there is an error too.

Unless ``LITELLM_LOCAL_MODEL_COST_MAP`` is set otherwise, the adapter sets it to ``True``
before importing LiteLLM, so that the import does not download LiteLLM's model price list
(Lattice estimates costs from ``[prices]``), and it turns LiteLLM's debug hints off.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from lattice.errors import ErrorType, LatticeRunError, LatticeUserError, install_hint
from lattice.llm.base import DeltaSink, LLMRequest, LLMResponse
from lattice.llm.errors import map_sdk_error, provider_error, retry_after_seconds
from lattice.llm.openai_provider import chat_body, chat_response, read_chat_stream
from lattice.llm.sdk_provider import SdkProvider, StreamBroken

MODEL_VARIABLE = "LATTICE_LITELLM_MODEL"

FINISH_REASON_CHECKED = frozenset({"openai"})
"""LiteLLM routes whose streams are checked for the server's own finish reason (LiteLLM
stands one in at the end of any stream)."""


def _context_length(exc: Exception) -> bool:
    import litellm

    if isinstance(exc, litellm.ContextWindowExceededError):
        return True
    body = str(getattr(exc, "message", "")).lower()
    return "context length" in body or "context window" in body or "maximum context" in body


def map_litellm_error(exc: Exception, *, model: str, node_id: str | None) -> LatticeRunError:
    """Translate a LiteLLM exception (an ``openai`` SDK exception underneath) into a
    LatticeRunError."""
    import openai

    error = map_sdk_error(
        openai,
        exc,
        where=f"LiteLLM ({model})",
        key_variable="the backend's API key variable (GEMINI_API_KEY, AWS_…, …)",
        is_context_length=_context_length,
        node_id=node_id,
    )
    if (
        error.error_type == ErrorType.PROVIDER_ERROR
        and "missing credentials" in error.message.lower()
    ):
        # LiteLLM reports a key it could not find as a server error
        return provider_error(
            ErrorType.API_KEY_ERROR,
            f"LiteLLM ({model}) found no credentials: set the backend's API key variable "
            f"(OPENAI_API_KEY, GEMINI_API_KEY, AWS_…) ({getattr(exc, 'message', exc)})",
            exc,
            node_id,
        )
    if error.error_type == ErrorType.RATE_LIMIT_ERROR and error.details.get("retry_after") is None:
        # LiteLLM keeps the backend's headers here, not on the response it attaches
        headers = getattr(exc, "litellm_response_headers", None) or getattr(exc, "headers", None)
        if headers:
            lowered = {str(k).lower(): str(v) for k, v in dict(headers).items()}
            wait = retry_after_seconds(lowered)
            if wait is not None:
                error.details["retry_after"] = wait
    return error


class LiteLLMProvider(SdkProvider):
    """Chat completions through ``litellm.acompletion``.

    ``default_model`` (else ``LATTICE_LITELLM_MODEL``) is used by requests that name no
    model; LiteLLM model names carry their backend (``gemini/gemini-2.5-flash``).
    ``api_base``, ``api_key`` and ``timeout`` go to every call, and so do
    ``completion_kwargs`` (any other ``acompletion`` argument: ``api_version``,
    ``extra_headers``, ``mock_response`` for tests, …).
    """

    name = "litellm"
    label = "LiteLLM"
    schema_field = "response_format"
    sdk_error = "OpenAIError"

    def __init__(
        self,
        *,
        default_model: str | None = None,
        api_base: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        completion_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self._sdk()
        self.default_model = default_model or os.environ.get(MODEL_VARIABLE) or ""
        self.api_base = api_base
        self.api_key = api_key
        self._keys = (api_key,) if api_key else ()
        self.timeout = timeout
        self.completion_kwargs = dict(completion_kwargs or {})

    def _sdk(self) -> ModuleType:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        try:
            litellm: Any = importlib.import_module("litellm")
        except ImportError as exc:
            raise LatticeUserError(
                f"the litellm provider needs LiteLLM: {install_hint('litellm')}"
            ) from exc
        litellm.suppress_debug_info = True
        return litellm  # type: ignore[no-any-return]

    def _errors(self, sdk: ModuleType) -> tuple[type[Exception], ...]:
        import openai

        return (openai.OpenAIError,)

    async def aclose_loop_clients(self) -> None:
        """LiteLLM keeps its own HTTP clients (per event loop); nothing of ours to close."""

    async def complete(self, request: LLMRequest) -> LLMResponse:
        if not (request.model or self.default_model):
            raise LatticeRunError(
                "the litellm provider needs a model: map the model classes in lattice.toml "
                '([llm.models] default = "litellm:gemini/gemini-2.5-flash") or set '
                f"{MODEL_VARIABLE}",
                error_type=ErrorType.INVALID_REQUEST,
                node_id=request.node_id,
            )
        return await super().complete(request)

    def _body(self, request: LLMRequest, model: str, *, structured: bool) -> dict[str, Any]:
        body: dict[str, Any] = {
            **self.completion_kwargs,
            **chat_body(request, model, structured=structured),
            "timeout": self.timeout,
            "num_retries": 0,
            "max_retries": 0,
        }
        if self.api_base:
            body["api_base"] = self.api_base
        if self.api_key:
            body["api_key"] = self.api_key
        return body

    async def _create(self, body: dict[str, Any]) -> Any:
        return await self._sdk().acompletion(**body)

    def _response(self, raw: Any, model: str, latency_ms: float) -> LLMResponse:
        return chat_response(raw, model, latency_ms)

    async def _open_stream(self, body: dict[str, Any]) -> Any:
        return await self._sdk().acompletion(
            **body, stream=True, stream_options={"include_usage": True}
        )

    async def _read_stream(self, stream: Any, on_delta: DeltaSink, model: str) -> LLMResponse:
        response = await read_chat_stream(stream, on_delta, model)
        # LiteLLM ends every stream with a finish reason, standing in "stop" when the
        # backend sent none, as when a body without a declared length is cut short. On
        # its OpenAI route (OpenAI-compatible servers) what the server itself said is
        # kept on the stream wrapper; other backends' ends are LiteLLM's to judge.
        if (
            getattr(stream, "custom_llm_provider", None) in FINISH_REASON_CHECKED
            and "mock_response" not in self.completion_kwargs
            and getattr(stream, "received_finish_reason", "") is None
            and getattr(stream, "intermittent_finish_reason", None) is None
        ):
            raise StreamBroken("the server sent no finish reason")
        return response

    def _map_error(self, exc: Exception, model: str, node_id: str | None) -> LatticeRunError:
        return map_litellm_error(exc, model=model, node_id=node_id)

"""Anthropic adapter (official ``anthropic`` SDK, async client).

The output schema goes through the Messages API's native structured output
(``output_config={"format": {"type": "json_schema", "schema": ...}}``); a server
that rejects it gets plain prompting (the contract is in the prompt and validated
anyway). ``ANTHROPIC_BASE_URL`` is honoured by the SDK. SDK retries are off.
"""

from __future__ import annotations

import os
from typing import Any

from lattice.errors import LatticeRunError, LatticeUserError
from lattice.llm.base import DeltaSink, LLMRequest, LLMResponse, TokenUsage
from lattice.llm.errors import LoopLocalClients, map_sdk_error
from lattice.llm.sdk_provider import SdkProvider, StreamBroken

DEFAULT_MODEL = "claude-sonnet-5-5"
DEFAULT_MAX_TOKENS = 4096


def _anthropic_context_length(exc: Exception) -> bool:
    body = str(getattr(exc, "message", "")).lower()
    return "prompt is too long" in body or ("context" in body and "too long" in body)


def map_anthropic_error(exc: Exception, *, model: str, node_id: str | None) -> LatticeRunError:
    """Translate an ``anthropic`` exception into a LatticeRunError."""
    import anthropic

    return map_sdk_error(
        anthropic,
        exc,
        where=f"Anthropic ({model})",
        key_variable="ANTHROPIC_API_KEY",
        is_context_length=_anthropic_context_length,
        node_id=node_id,
    )


class AnthropicProvider(SdkProvider):
    """Messages through ``anthropic.AsyncAnthropic``; the key comes from ``ANTHROPIC_API_KEY``."""

    name = "anthropic"
    label = "Anthropic"
    schema_field = "output_config"
    sdk_error = "AnthropicError"

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        default_model: str | None = None,
        timeout: float = 60.0,
        http_client: Any = None,
    ) -> None:
        super().__init__()
        anthropic = self._sdk()
        key = api_key or os.environ.get("ANTHROPIC_API_KEY")
        self._keys = (key,) if key else ()
        if not key:
            raise LatticeUserError(
                "the anthropic provider needs ANTHROPIC_API_KEY in the environment",
                error_type="api_key_error",
            )
        self.default_model = (
            default_model or os.environ.get("LATTICE_ANTHROPIC_MODEL") or DEFAULT_MODEL
        )
        self._clients = LoopLocalClients(
            lambda: anthropic.AsyncAnthropic(
                api_key=key,
                base_url=base_url or os.environ.get("ANTHROPIC_BASE_URL"),
                timeout=timeout,
                max_retries=0,
                http_client=http_client,
            )
        )

    def _body(self, request: LLMRequest, model: str, *, structured: bool) -> dict[str, Any]:
        system = "\n\n".join(m.content for m in request.messages if m.role == "system")
        body: dict[str, Any] = {
            "model": model,
            "max_tokens": request.max_tokens or DEFAULT_MAX_TOKENS,
            "messages": [
                {"role": m.role, "content": m.content}
                for m in request.messages
                if m.role != "system"
            ],
        }
        if system:
            body["system"] = system
        # The 2.x Messages API has no temperature/top_p: sampling is the model's own.
        if request.response_schema is not None and structured:
            body["output_config"] = {
                "format": {"type": "json_schema", "schema": request.response_schema}
            }
        return body

    async def _create(self, body: dict[str, Any]) -> Any:
        return await self.client.messages.create(**body)

    def _response(self, raw: Any, model: str, latency_ms: float) -> LLMResponse:
        text = "".join(
            getattr(block, "text", "")
            for block in raw.content
            if getattr(block, "type", "") == "text"
        )
        return LLMResponse(
            text=text,
            usage=TokenUsage(raw.usage.input_tokens, raw.usage.output_tokens),
            model=raw.model or model,
            latency_ms=latency_ms,
            finish_reason=raw.stop_reason,
        )

    async def _open_stream(self, body: dict[str, Any]) -> Any:
        return await self.client.messages.create(**body, stream=True)

    async def _read_stream(self, stream: Any, on_delta: DeltaSink, model: str) -> LLMResponse:
        """The Messages API's event stream: ``message_start`` (model, input tokens),
        ``content_block_delta`` (text), ``message_delta`` (stop reason, output tokens),
        ``message_stop`` (the answer is complete)."""
        parts: list[str] = []
        answered_by = model
        input_tokens = output_tokens = 0
        stop_reason: str | None = None
        complete = False
        async with stream:
            async for event in stream:
                kind = getattr(event, "type", "")
                if kind == "content_block_delta":
                    text = getattr(event.delta, "text", None)
                    if text:
                        parts.append(text)
                        on_delta(text)
                elif kind == "message_start":
                    answered_by = event.message.model or answered_by
                    input_tokens = event.message.usage.input_tokens or 0
                    output_tokens = event.message.usage.output_tokens or 0
                elif kind == "message_delta":
                    stop_reason = event.delta.stop_reason or stop_reason
                    output_tokens = event.usage.output_tokens or output_tokens
                    input_tokens = getattr(event.usage, "input_tokens", None) or input_tokens
                elif kind == "message_stop":
                    complete = True
        if not complete:
            raise StreamBroken("no message_stop")
        return LLMResponse(
            text="".join(parts),
            usage=TokenUsage(input_tokens, output_tokens),
            model=answered_by,
            finish_reason=stop_reason,
        )

    def _map_error(self, exc: Exception, model: str, node_id: str | None) -> LatticeRunError:
        return map_anthropic_error(exc, model=model, node_id=node_id)

"""Anthropic adapter (official ``anthropic`` SDK, async client).

The output schema goes through the Messages API's native structured output
(``output_config={"format": {"type": "json_schema", "schema": ...}}``); a server
that rejects it gets plain prompting (the contract is in the prompt and validated
anyway). ``ANTHROPIC_BASE_URL`` is honoured by the SDK. SDK retries are off.
"""

from __future__ import annotations

import os
import time
from typing import Any

from lattice.errors import LatticeRunError, LatticeUserError
from lattice.llm.base import LLMRequest, LLMResponse, TokenUsage
from lattice.llm.errors import LoopLocalClients, map_sdk_error, provider_error

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


class AnthropicProvider:
    """Messages through ``anthropic.AsyncAnthropic``; the key comes from ``ANTHROPIC_API_KEY``."""

    name = "anthropic"

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        default_model: str | None = None,
        timeout: float = 60.0,
        http_client: Any = None,
    ) -> None:
        try:
            import anthropic
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise LatticeUserError(
                "the anthropic provider needs the SDK: pip install 'lattice-lre[anthropic]'"
            ) from exc
        key = api_key or os.environ.get("ANTHROPIC_API_KEY")
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
        self._no_schema_models: set[str] = set()

    @property
    def client(self) -> Any:
        """The SDK client of the running event loop."""
        return self._clients.get()

    async def aclose_loop_clients(self) -> None:
        """Close the client of the running loop (``Runner.run`` calls this as its loop ends)."""
        await self._clients.aclose_current()

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

    async def complete(self, request: LLMRequest) -> LLMResponse:
        import anthropic

        model = request.model or self.default_model
        structured = request.response_schema is not None and model not in self._no_schema_models
        started = time.perf_counter()
        try:
            try:
                message = await self.client.messages.create(
                    **self._body(request, model, structured=structured)
                )
            except anthropic.BadRequestError as exc:
                if not structured or "output_config" not in str(exc.message):
                    raise
                self._no_schema_models.add(model)
                message = await self.client.messages.create(
                    **self._body(request, model, structured=False)
                )
        except anthropic.AnthropicError as exc:
            raise map_anthropic_error(exc, model=model, node_id=request.node_id) from exc
        except (ValueError, TypeError, KeyError) as exc:  # e.g. a 200 whose body is not JSON
            raise provider_error(
                "provider_error",
                f"Anthropic ({model}): unreadable response: {exc}",
                exc,
                request.node_id,
            ) from exc
        text = "".join(
            getattr(block, "text", "")
            for block in message.content
            if getattr(block, "type", "") == "text"
        )
        return LLMResponse(
            text=text,
            usage=TokenUsage(message.usage.input_tokens, message.usage.output_tokens),
            model=message.model or model,
            latency_ms=(time.perf_counter() - started) * 1000,
            finish_reason=message.stop_reason,
        )

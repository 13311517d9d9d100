"""Anthropic adapter (official ``anthropic`` SDK, async client).

The output schema goes through the Messages API's native structured output
(``output_config={"format": {"type": "json_schema", "schema": ...}}``); a server
that rejects it gets plain prompting (the contract is in the prompt and validated
anyway). ``ANTHROPIC_BASE_URL`` is honoured by the SDK. SDK retries are off.
"""

from __future__ import annotations

import json
import os
from typing import Any

from lattice.errors import ErrorType, LatticeRunError, LatticeUserError
from lattice.llm.base import (
    MALFORMED_ARGUMENTS,
    DeltaSink,
    LLMRequest,
    LLMResponse,
    Message,
    TokenUsage,
    ToolCall,
    parse_tool_arguments,
)
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
                error_type=ErrorType.API_KEY_ERROR,
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
            "messages": anthropic_messages(request.messages),
        }
        if system:
            body["system"] = system
        if request.tools:
            body["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.input_schema}
                for t in request.tools
            ]
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
        calls = tuple(
            ToolCall(block.id, block.name, _input(block.input))
            for block in raw.content
            if getattr(block, "type", "") == "tool_use"
        )
        return LLMResponse(
            text=text,
            usage=TokenUsage(raw.usage.input_tokens, raw.usage.output_tokens),
            model=raw.model or model,
            latency_ms=latency_ms,
            finish_reason=_finish_reason(raw.stop_reason),
            tool_calls=calls,
        )

    async def _open_stream(self, body: dict[str, Any]) -> Any:
        return await self.client.messages.create(**body, stream=True)

    async def _read_stream(self, stream: Any, on_delta: DeltaSink, model: str) -> LLMResponse:
        """The Messages API's event stream: ``message_start`` (model, input tokens),
        ``content_block_start`` (a text block, or a ``tool_use`` block's id and name),
        ``content_block_delta`` (text, or a piece of a call's input as ``input_json_delta``),
        ``content_block_stop``, ``message_delta`` (stop reason, output tokens),
        ``message_stop`` (the answer is complete)."""
        parts: list[str] = []
        calls = _StreamedToolUses()
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
                    elif getattr(event.delta, "type", "") == "input_json_delta":
                        calls.add_input(event.index, event.delta.partial_json)
                elif kind == "content_block_start":
                    calls.start(event.index, event.content_block)
                elif kind == "content_block_stop":
                    calls.stop(event.index)
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
            raise StreamBroken("no message_stop" + calls.where())
        return LLMResponse(
            text="".join(parts),
            usage=TokenUsage(input_tokens, output_tokens),
            model=answered_by,
            finish_reason=_finish_reason(stop_reason),
            tool_calls=calls.finished(),
        )

    def _map_error(self, exc: Exception, model: str, node_id: str | None) -> LatticeRunError:
        return map_anthropic_error(exc, model=model, node_id=node_id)


def anthropic_messages(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    """The transcript as Messages API turns (system messages go apart): an assistant's tool
    calls become ``tool_use`` blocks after its text; consecutive ``tool`` messages become
    one user turn of ``tool_result`` blocks, as the API wants every result of a turn's
    calls in the next message."""
    out: list[dict[str, Any]] = []
    results: list[dict[str, Any]] | None = None  # the tool results of the turn being built
    for m in messages:
        if m.role == "tool":
            result: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": m.tool_call_id,
                "content": m.content,
            }
            if m.is_error:
                result["is_error"] = True
            if results is None:
                results = []
                out.append({"role": "user", "content": results})
            results.append(result)
            continue
        results = None
        if m.role == "system":
            continue
        if m.tool_calls:
            blocks: list[dict[str, Any]] = (
                [{"type": "text", "text": m.content}] if m.content else []
            )
            blocks += [
                {"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}
                for c in m.tool_calls
            ]
            out.append({"role": m.role, "content": blocks})
        else:
            out.append({"role": m.role, "content": m.content})
    return out


def _finish_reason(stop_reason: str | None) -> str | None:
    """The stop reason, with ``tool_use`` spelt as every provider spells it: ``tool_calls``."""
    return "tool_calls" if stop_reason == "tool_use" else stop_reason


def _input(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, dict) else {MALFORMED_ARGUMENTS: json.dumps(value)}


class _StreamedToolUses:
    """``tool_use`` blocks put together from a stream: opened by ``content_block_start``,
    their input in ``input_json_delta`` pieces, closed by ``content_block_stop``."""

    def __init__(self) -> None:
        self._open: dict[int, tuple[str, str, list[str]]] = {}
        self._done: list[ToolCall] = []

    def start(self, index: int, block: Any) -> None:
        if getattr(block, "type", "") == "tool_use":
            self._open[index] = (block.id, block.name, [])

    def add_input(self, index: int, piece: str) -> None:
        if index in self._open:
            self._open[index][2].append(piece)

    def stop(self, index: int) -> None:
        if index in self._open:
            call_id, name, pieces = self._open.pop(index)
            self._done.append(ToolCall(call_id, name, parse_tool_arguments("".join(pieces))))

    def where(self) -> str:
        """Where a cut stream stopped, when it was in a call's input."""
        if not self._open:
            return ""
        return f" (in the input of tool call {self._open[max(self._open)][1]!r})"

    def finished(self) -> tuple[ToolCall, ...]:
        if self._open:  # a complete message never leaves a block open
            raise StreamBroken("a tool_use block was never closed" + self.where())
        return tuple(self._done)

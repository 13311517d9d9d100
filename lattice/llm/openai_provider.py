"""OpenAI adapter (official ``openai`` SDK, async client); works with any OpenAI-compatible
server (vLLM, Ollama, llama.cpp, LM Studio) through ``base_url`` / ``OPENAI_BASE_URL``.

The SDK's own retries are turned off (``max_retries=0``): retrying belongs to
Lattice's recovery policies. SDK errors are mapped to Lattice error types here, in
one place (``map_openai_error``).
"""

from __future__ import annotations

import inspect
import os
from typing import Any

from lattice.errors import ErrorType, LatticeRunError, LatticeUserError
from lattice.llm.base import (
    DeltaSink,
    LLMRequest,
    LLMResponse,
    Message,
    TokenUsage,
    ToolCall,
    ToolDef,
    parse_tool_arguments,
)
from lattice.llm.errors import LoopLocalClients, map_sdk_error
from lattice.llm.sdk_provider import SdkProvider, StreamBroken

DEFAULT_MODEL = "gpt-4o-mini"


def strict_compatible(schema: dict[str, Any]) -> bool:
    """True when OpenAI's strict structured outputs accept ``schema`` as it is
    (every object closed with additionalProperties false and all properties required)."""
    if not isinstance(schema, dict):
        return True
    if schema.get("type") == "object" or "properties" in schema:
        props = schema.get("properties", {})
        if schema.get("additionalProperties") is not False:
            return False
        if set(schema.get("required", [])) != set(props):
            return False
    children: list[Any] = list((schema.get("properties") or {}).values())
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            children.append(schema[key])
    for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        children.extend(schema.get(key) or [])
    return all(strict_compatible(child) for child in children)


def _openai_context_length(exc: Exception) -> bool:
    body = str(getattr(exc, "message", "")).lower()
    return (
        getattr(exc, "code", None) == "context_length_exceeded"
        or "context length" in body
        or "maximum context" in body
    )


def map_openai_error(exc: Exception, *, model: str, node_id: str | None) -> LatticeRunError:
    """Translate an ``openai`` exception into a LatticeRunError."""
    import openai

    return map_sdk_error(
        openai,
        exc,
        where=f"OpenAI ({model})",
        key_variable="OPENAI_API_KEY",
        is_context_length=_openai_context_length,
        node_id=node_id,
    )


class OpenAIProvider(SdkProvider):
    """Chat completions through ``openai.AsyncOpenAI``.

    ``api_key`` defaults to ``OPENAI_API_KEY``; ``base_url`` to ``OPENAI_BASE_URL``.
    ``http_client`` (an ``httpx.AsyncClient``) is for tests and custom transports.
    """

    name = "openai"
    label = "OpenAI"
    schema_field = "response_format"
    sdk_error = "OpenAIError"

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
        openai = self._sdk()
        key = api_key or os.environ.get("OPENAI_API_KEY")
        base = base_url or os.environ.get("OPENAI_BASE_URL")
        self._keys = (key,) if key else ()
        if not key and not base:
            raise LatticeUserError(
                "the openai provider needs OPENAI_API_KEY in the environment "
                "(or a base_url of an OpenAI-compatible server)",
                error_type=ErrorType.API_KEY_ERROR,
            )
        self.default_model = (
            default_model or os.environ.get("LATTICE_OPENAI_MODEL") or DEFAULT_MODEL
        )
        self._clients = LoopLocalClients(
            lambda: openai.AsyncOpenAI(
                api_key=key or "not-needed",  # local servers accept any key
                base_url=base,
                timeout=timeout,
                max_retries=0,
                http_client=http_client,
            )
        )

    def _body(self, request: LLMRequest, model: str, *, structured: bool) -> dict[str, Any]:
        return chat_body(request, model, structured=structured)

    async def _create(self, body: dict[str, Any]) -> Any:
        return await self.client.chat.completions.create(**body)

    def _response(self, raw: Any, model: str, latency_ms: float) -> LLMResponse:
        return chat_response(raw, model, latency_ms)

    async def _open_stream(self, body: dict[str, Any]) -> Any:
        return await self.client.chat.completions.create(
            **body, stream=True, stream_options={"include_usage": True}
        )

    async def _read_stream(self, stream: Any, on_delta: DeltaSink, model: str) -> LLMResponse:
        return await read_chat_stream(stream, on_delta, model)

    def _map_error(self, exc: Exception, model: str, node_id: str | None) -> LatticeRunError:
        return map_openai_error(exc, model=model, node_id=node_id)


def chat_body(request: LLMRequest, model: str, *, structured: bool) -> dict[str, Any]:
    """A chat-completions request body (the OpenAI format, which LiteLLM takes too);
    ``structured``: ask for the response schema as a strict-if-possible ``json_schema``;
    ``tools`` go as function tools, and the transcript's tool calls and results as the
    assistant's ``tool_calls`` and ``tool`` messages."""
    body: dict[str, Any] = {
        "model": model,
        "messages": [chat_message(m) for m in request.messages],
    }
    if request.tools:
        body["tools"] = [chat_tool(tool) for tool in request.tools]
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.top_p is not None:
        body["top_p"] = request.top_p
    if request.max_tokens is not None:
        body["max_tokens"] = request.max_tokens
    if request.response_schema is not None and structured:
        schema = request.response_schema
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {
                "name": "artifact",
                "schema": schema,
                "strict": strict_compatible(schema),
            },
        }
    return body


def chat_message(message: Message) -> dict[str, Any]:
    """One message in the chat-completions format."""
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    if not message.tool_calls:
        return {"role": message.role, "content": message.content}
    return {
        "role": message.role,
        "content": message.content or None,  # servers accept null beside tool calls
        "tool_calls": [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments_json()},
            }
            for call in message.tool_calls
        ],
    }


def chat_tool(tool: ToolDef) -> dict[str, Any]:
    """A tool as a chat-completions function tool."""
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.input_schema,
        },
    }


def chat_response(raw: Any, model: str, latency_ms: float) -> LLMResponse:
    """The LLMResponse of a chat completion (a missing usage counts zero tokens); the
    message's function tool calls become ``tool_calls`` (see ``parse_tool_arguments``)."""
    choice = raw.choices[0] if raw.choices else None
    usage = getattr(raw, "usage", None)
    calls = (getattr(choice.message, "tool_calls", None) or ()) if choice is not None else ()
    return LLMResponse(
        text=(choice.message.content or "") if choice is not None else "",
        usage=TokenUsage(
            getattr(usage, "prompt_tokens", 0) or 0,
            getattr(usage, "completion_tokens", 0) or 0,
        ),
        model=raw.model or model,
        latency_ms=latency_ms,
        finish_reason=choice.finish_reason if choice is not None else None,
        tool_calls=tuple(
            ToolCall(call.id, call.function.name, parse_tool_arguments(call.function.arguments))
            for call in calls
            if getattr(call, "function", None) is not None  # custom (free-text) tools: not ours
        ),
    )


async def read_chat_stream(stream: Any, on_delta: DeltaSink, model: str) -> LLMResponse:
    """Read a stream of chat-completion chunks (the OpenAI format, which LiteLLM speaks
    too): text to ``on_delta`` as it comes, the whole answer at the end. The usage comes
    in the last chunk (``stream_options.include_usage``); a stream whose choice never
    got a finish reason was cut short."""
    parts: list[str] = []
    calls = StreamedToolCalls()
    finish: str | None = None
    usage: Any = None
    answered_by = model
    try:
        async for chunk in stream:
            answered_by = getattr(chunk, "model", None) or answered_by
            usage = getattr(chunk, "usage", None) or usage
            for choice in chunk.choices or ():
                if getattr(choice, "index", 0) != 0:
                    continue
                delta = choice.delta
                if delta is not None:
                    text = getattr(delta, "content", None)
                    if text:
                        parts.append(text)
                        on_delta(text)
                    for call in getattr(delta, "tool_calls", None) or ():
                        calls.add(call)
                if choice.finish_reason:
                    finish = choice.finish_reason
    finally:
        await close_stream(stream)
    if finish is None:
        raise StreamBroken("no finish reason" + calls.where())
    return LLMResponse(
        text="".join(parts),
        usage=TokenUsage(
            getattr(usage, "prompt_tokens", 0) or 0, getattr(usage, "completion_tokens", 0) or 0
        ),
        model=answered_by,
        finish_reason=finish,
        tool_calls=calls.finished(),
    )


class StreamedToolCalls:
    """Tool calls put together from a chat-completion stream's deltas: each delta names
    its call by ``index``; the first carries the id and name, the rest pieces of the
    arguments text."""

    def __init__(self) -> None:
        self._ids: dict[int, str] = {}
        self._names: dict[int, str] = {}
        self._arguments: dict[int, list[str]] = {}

    def add(self, delta: Any) -> None:
        index = int(getattr(delta, "index", 0) or 0)
        if getattr(delta, "id", None):
            self._ids[index] = delta.id
        function = getattr(delta, "function", None)
        if function is not None:
            if getattr(function, "name", None):
                self._names.setdefault(index, function.name)  # some servers repeat it
            if getattr(function, "arguments", None):
                self._arguments.setdefault(index, []).append(function.arguments)

    def where(self) -> str:
        """Where a cut stream stopped, when it was in a tool call's arguments."""
        if not self._arguments and not self._names:
            return ""
        last = max([*self._names, *self._arguments])
        return f" (in the arguments of tool call {self._names.get(last, '?')!r})"

    def finished(self) -> tuple[ToolCall, ...]:
        return tuple(
            ToolCall(
                self._ids.get(index, f"call_{index}"),
                self._names[index],
                parse_tool_arguments("".join(self._arguments.get(index, ()))),
            )
            for index in sorted(self._names)
        )


async def close_stream(stream: Any) -> None:
    """Close a stream read to its end or abandoned (``close`` of the OpenAI SDK's,
    ``aclose`` of LiteLLM's), releasing its connection."""
    close = getattr(stream, "aclose", None) or getattr(stream, "close", None)
    if callable(close):
        result = close()
        if inspect.isawaitable(result):
            await result

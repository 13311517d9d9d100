"""The provider interface: one async ``complete(request) -> response`` for every LLM backend."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from json.encoder import encode_basestring as _quote
from typing import Any, Literal, Protocol, runtime_checkable

from lattice.text import unicode_text, unicode_value

Role = Literal["system", "user", "assistant", "tool"]

DeltaSink = Callable[[str], None]
"""Receives each piece of a streamed answer's text as it arrives."""

SCHEMA_NOTE = "(given with this request as its structured-output schema)"
"""What stands in a prompt for the schema when the provider sends the schema natively."""


PREVIEW_CHARS = 160
"""How much of the last user message a prompt preview shows."""


LIVE_PROVIDERS = ("openai", "anthropic", "litellm")
"""The providers that call a real model; in ``[llm.models]`` a model may be prefixed with
one (``anthropic:claude-…``)."""


@dataclass(frozen=True, slots=True)
class ToolDef:
    """A tool offered to the model: its name, what it does and its arguments' JSON Schema."""

    name: str
    description: str
    input_schema: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
        }


MALFORMED_ARGUMENTS = "$malformed_arguments"
"""The key under which a ``ToolCall``'s ``arguments`` hold the model's raw arguments text
when that text is not a JSON object (see ``ToolCall.malformed``)."""


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call a model asked for: the provider's call id, the tool and its arguments.

    A model that writes arguments which are not a JSON object (cut short by ``max_tokens``,
    or simply wrong) still gets its call back: ``arguments`` is then
    ``{MALFORMED_ARGUMENTS: "<the raw text>"}`` and ``malformed`` returns that text, so an
    agent loop can answer the call with a tool error the model can act on (the call is
    the model's mistake, not the provider's; retrying the request would only repeat it).
    Sent back to the provider in a later turn, such a call carries its raw text again.
    """

    id: str
    name: str
    arguments: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}

    @property
    def malformed(self) -> str | None:
        """The raw arguments text when the model's arguments were not a JSON object."""
        raw = self.arguments.get(MALFORMED_ARGUMENTS)
        return raw if isinstance(raw, str) and len(self.arguments) == 1 else None

    def arguments_json(self) -> str:
        """The arguments as the model wrote them: JSON text (or the malformed raw text)."""
        raw = self.malformed
        return raw if raw is not None else json.dumps(self.arguments, ensure_ascii=False)


def tool_calls_from_json(items: Any) -> tuple[ToolCall, ...]:
    """Tool calls read back from their ``to_json`` form (a fixture line, a journal line);
    ValueError when ``items`` is not a list of ``{"id", "name", "arguments"}`` objects."""
    if items is None:
        return ()
    if not isinstance(items, list):
        raise ValueError("tool_calls must be a list")
    calls = []
    for item in items:
        if not (
            isinstance(item, dict)
            and isinstance(item.get("id"), str)
            and isinstance(item.get("name"), str)
            and isinstance(item.get("arguments"), dict)
        ):
            raise ValueError('each tool call is {"id": text, "name": text, "arguments": {...}}')
        calls.append(ToolCall(item["id"], item["name"], item["arguments"]))
    return tuple(calls)


def parse_tool_arguments(text: str | dict[str, Any] | None) -> dict[str, Any]:
    """A model's tool-call arguments text as ``ToolCall.arguments``: the JSON object it
    spells (empty text is no arguments), else ``{MALFORMED_ARGUMENTS: text}``."""
    if isinstance(text, dict):  # a server that sends the object itself
        return text
    if text is None or not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    return value if isinstance(value, dict) else {MALFORMED_ARGUMENTS: text}


@dataclass(frozen=True, slots=True)
class Message:
    """One chat message.

    An ``assistant`` message may carry the ``tool_calls`` the model asked for (``content``
    is then its text beside them, often empty); a ``tool`` message answers one call, named
    by ``tool_call_id``, with the tool's result as ``content``, and ``is_error`` when the
    tool failed (Anthropic's ``tool_result`` says so in its ``is_error``; the OpenAI shape
    has only the text, which should say it).
    """

    role: Role
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    is_error: bool = False

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [call.to_json() for call in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.is_error:  # absent otherwise, so the prompt hashes of results stay put
            out["is_error"] = True
        return out


@dataclass(frozen=True, slots=True)
class LLMRequest:
    """What an LLM op asks a provider for.

    ``model`` is the concrete model (None lets the provider use its default);
    ``response_schema`` is a structured-output hint for providers that support one.
    ``prompt_schema`` is how the messages spell that schema (the contract's ``{{ schema }}``):
    a provider that sends ``response_schema`` natively sends the messages of
    ``schema_sent_natively()``, with that text replaced by a short note, so the schema goes
    out once. The prompt hash covers the messages as they are (schema in the prompt),
    whichever way a provider sends them. ``node_id``/``op_id`` say who asks (the mock
    provider scripts by node).

    ``on_delta``, when set, asks for the answer as a stream: a provider that can stream
    calls it with each piece of text as it arrives and still returns the whole answer
    (an answer cut short is an error, never a response); one that cannot (mock, fixtures)
    ignores it. It is not part of the request's identity: not compared, not hashed.

    ``tools`` offers the model tools (an agent's turn). The answer is then either tool
    calls (``LLMResponse.tool_calls``, finish reason ``tool_calls``; ``text`` is whatever
    the model wrote beside them) or a final answer in ``text``. The next turn sends the
    transcript: the assistant message with its ``tool_calls``, then one ``tool`` message
    per call (``tool_call_id``), in the order of the calls. With tools offered, a provider
    never sends ``response_schema`` natively: a server's structured-output decoding would
    hold the model to the schema and keep it from calling tools (local servers' guided
    decoding does). The schema then reaches the model in the prompt (``prompt_schema``,
    unchanged), and the loop holds the final answer to the contract like any answer. A
    loop that wants the final answer under native structured output asks for it in a
    request with no tools; the transcript goes as it is (OpenAI-shaped APIs take tool
    messages without tools; one that refuses them answers ``invalid_request``).

    ``on_send``, when set, is called (through ``sending()``) by the provider that sends the
    request, right before it does: after any wait for a slot (``max_concurrency``, a
    batch's budget gate), so that a run's journal counts the requests that went out, not
    those that waited. Not compared, not hashed either.

    ``kind`` says which attempt of a contract call the request is (``initial``,
    ``retry``, ``repair``, ``escalation``). Providers send every kind alike; a provider
    that holds a conversation over several requests (the agent loop) asks for a repair
    in it instead of starting over. Not compared, not hashed.
    """

    messages: tuple[Message, ...]
    model_class: str = "default"
    model: str | None = None
    temperature: float | None = 0.0
    top_p: float | None = None
    max_tokens: int | None = None
    response_schema: dict[str, Any] | None = None
    node_id: str | None = None
    op_id: str | None = None
    prompt_schema: str | None = None
    tools: tuple[ToolDef, ...] = ()
    """Tools the model may call (an agent's turn); empty for a plain call."""
    on_delta: DeltaSink | None = field(default=None, compare=False, repr=False)
    on_send: Callable[[], None] | None = field(default=None, compare=False, repr=False)
    kind: str = field(default="initial", compare=False)

    def sending(self) -> None:
        """Say the request is being sent now (a provider calls this right before sending)."""
        if self.on_send is not None:
            self.on_send()

    def schema_sent_natively(self) -> LLMRequest:
        """This request as a provider that sends ``response_schema`` natively sends it: each
        occurrence of ``prompt_schema`` in the messages replaced by ``SCHEMA_NOTE``."""
        text = self.prompt_schema
        if not text or self.response_schema is None:
            return self
        messages = tuple(
            replace(m, content=m.content.replace(text, SCHEMA_NOTE)) if text in m.content else m
            for m in self.messages
        )
        return replace(self, messages=messages, prompt_schema=None)

    @property
    def system(self) -> str | None:
        return next((m.content for m in self.messages if m.role == "system"), None)

    def canonical(self) -> dict[str, Any]:
        """The fields that identify a request, newlines normalised (what the prompt hash covers)."""
        canonical: dict[str, Any] = {
            "model_class": self.model_class,
            "messages": [_canonical_message(m) for m in self.messages],
            "schema": self.response_schema,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
        }
        if self.tools:  # absent for plain calls, so their hashes are what they always were
            canonical["tools"] = [tool.to_json() for tool in self.tools]
        return canonical

    def prompt_hash(self, *, schema_json: str | None = None) -> str:
        """sha256 (hex) of the canonical request: stable across runs and machines.

        The hashed text is ``json.dumps(self.canonical(), sort_keys=True,
        ensure_ascii=False, separators=(",", ":"))``, assembled here without the
        intermediate dicts (this runs on every model call). ``schema_json`` is
        ``response_schema`` in that spelling, for a caller that has it already.
        """
        if self.tools or any(m.tool_calls or m.tool_call_id is not None for m in self.messages):
            return hashlib.sha256(canonical_json(self.canonical()).encode("utf-8")).hexdigest()
        schema = self.response_schema
        if schema_json is None:
            schema_json = "null" if schema is None else canonical_json(schema)
        texts: list[str] = []
        for m in self.messages:
            texts += (m.role, m.content)
        return plain_prompt_hash(
            texts, self.model_class, schema_json, self.temperature, self.top_p, self.max_tokens
        )

    def preview(self, limit: int = PREVIEW_CHARS) -> str:
        """The start of the last user message, on one line."""
        for m in reversed(self.messages):
            if m.role == "user":
                return preview_of(m.content, limit)
        return ""

    def is_plain(self) -> bool:
        """Whether the request is text messages only (no tools offered, no tool calls or
        tool results in its messages): what ``plain_prompt_hash`` can hash."""
        if self.tools:
            return False
        for m in self.messages:  # noqa: SIM110 - a loop: this runs on every model call
            if m.tool_calls or m.tool_call_id is not None:
                return False
        return True

    def size_chars(self) -> int:
        """The characters the messages send: their text, and the tool calls' names and
        arguments of an agent's transcript."""
        size = 0
        for m in self.messages:
            size += len(m.content)
            for call in m.tool_calls:
                size += len(call.name) + len(call.arguments_json())
        return size


def plain_prompt_hash(
    texts: list[str] | tuple[str, ...],
    model_class: str,
    schema_json: str,
    temperature: float | None,
    top_p: float | None,
    max_tokens: int | None,
) -> str:
    """``LLMRequest.prompt_hash`` of a plain request (``is_plain``) from its parts:
    ``texts`` holds each message's role and content in turn, ``schema_json`` the
    response schema as ``canonical_json`` spells it. A run that keeps its events compact
    hashes a request's parts only when its events are read."""
    parts = []
    for i in range(0, len(texts), 2):
        content = texts[i + 1]
        if "\r" in content:
            content = content.replace("\r\n", "\n").replace("\r", "\n")
        parts.append(f'{{"content":{_quote(content)},"role":{_quote(texts[i])}}}')
    text = (
        f'{{"max_tokens":{_number(max_tokens)},"messages":[{",".join(parts)}],'
        f'"model_class":{_quote(model_class)},"schema":{schema_json},'
        f'"temperature":{_number(temperature)},"top_p":{_number(top_p)}}}'
    )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def preview_of(text: str, limit: int = PREVIEW_CHARS) -> str:
    """The start of ``text`` on one line, at most ``limit`` characters (``…`` when cut)."""
    flat = " ".join(text[: limit * 4].split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _canonical_message(message: Message) -> dict[str, Any]:
    out = message.to_json()
    out["content"] = message.content.replace("\r\n", "\n").replace("\r", "\n")
    return out


def canonical_json(value: Any) -> str:
    """``value`` as the prompt hash spells it: sorted keys, no spaces, UTF-8 kept."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _number(value: float | None) -> str:
    return "null" if value is None else repr(value)  # json.dumps spells ints and floats as repr


@dataclass(slots=True)
class TokenUsage:
    """Tokens one call used. (Responses are plain records, not frozen: one is built per
    model call, and a frozen dataclass's ``__init__`` costs three times as much.)"""

    input_tokens: int = 0
    output_tokens: int = 0


@dataclass(slots=True)
class LLMResponse:
    """A provider's answer: text, token usage, the model that answered, latency, finish reason."""

    text: str
    usage: TokenUsage = field(default_factory=TokenUsage)
    model: str = "unknown"
    latency_ms: float = 0.0
    finish_reason: str | None = "stop"
    tool_calls: tuple[ToolCall, ...] = ()
    """Tools the model asked to call (finish reason ``tool_calls``); ``text`` is then any
    text it wrote beside them."""

    def __post_init__(self) -> None:
        # A model's JSON may spell a lone surrogate ("\ud800"), which no run folder,
        # log or prompt hash can encode: it becomes U+FFFD here, where every provider's
        # answer passes.
        self.text = unicode_text(self.text)
        if self.tool_calls:
            self.tool_calls = tuple(
                ToolCall(unicode_text(c.id), unicode_text(c.name), unicode_value(c.arguments))
                for c in self.tool_calls
            )


@runtime_checkable
class LLMProvider(Protocol):
    """An LLM backend. Adapters translate SDK errors to LatticeRunError at this boundary."""

    name: str

    async def complete(self, request: LLMRequest) -> LLMResponse: ...


# -- what some providers can do besides ``complete`` --------------------------------------


@runtime_checkable
class CheckpointedProvider(Protocol):
    """A provider with a position a run folder saves and a resume goes on from (a mock's
    cursor through its script). Wrappers pass both through to what they wrap, and their
    ``checkpoint`` is None when that has no position."""

    def checkpoint(self) -> Any:
        """The position, as JSON (saved in the run folder)."""
        ...

    def restore(self, state: Any, *, committed: Any = None) -> None:
        """Go on from ``state``; ``committed`` is the state as of the last committed op,
        given when the resume runs a failed op again."""
        ...


@runtime_checkable
class LoopBoundProvider(Protocol):
    """A provider that keeps clients bound to an event loop (SDK adapters, and wrappers
    of providers that do); each run closes its loop's clients when it ends."""

    async def aclose_loop_clients(self) -> None: ...


@runtime_checkable
class ScriptedProvider(Protocol):
    """A provider that answers from a script, and can say before a run whether a node
    has answers (the mock provider)."""

    def covers(self, node_id: str) -> bool: ...


def provider_checkpoint(provider: object) -> Any:
    """The provider's position (``CheckpointedProvider``), None when it has none."""
    return provider.checkpoint() if isinstance(provider, CheckpointedProvider) else None


def restore_provider(provider: object, state: Any, *, committed: Any = None) -> None:
    """Hand a resumed run's saved position to the provider, when it keeps one."""
    if isinstance(provider, CheckpointedProvider):
        provider.restore(state, committed=committed)


def keeps_loop_clients(provider: object) -> bool:
    """Whether ``provider`` is a ``LoopBoundProvider``: the same test as ``isinstance``
    on the protocol (its one method is there), without the protocol machinery's
    attribute walk, which cost several µs on every synchronous run."""
    return callable(getattr(provider, "aclose_loop_clients", None))


async def close_loop_clients(provider: object) -> None:
    """Close the provider's clients bound to the running event loop, when it keeps any."""
    if keeps_loop_clients(provider):
        await provider.aclose_loop_clients()  # type: ignore[attr-defined]


def estimate_tokens(text: str) -> int:
    """A rough token count (4 characters a token) for providers that report none."""
    return max(1, (len(text) + 3) // 4) if text else 0

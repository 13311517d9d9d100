"""What the OpenAI and Anthropic adapters share.

One SDK client per event loop (``LoopLocalClients``), structured output with a plain-prompt
fallback for servers that reject it (remembered per model; the contract is validated
anyway), and SDK errors mapped to Lattice error types at this boundary. The schema goes out
once: with structured output, the request's messages stand a short note where the prompt
spelt the schema (``LLMRequest.schema_sent_natively``); without it, in the prompt.
An adapter supplies its request body, its SDK call and how to read the response, and
for a request with ``on_delta`` how to read the stream.

Streaming: a request with ``on_delta`` is sent with ``stream=True`` (structured output
too); each piece of text goes to ``on_delta`` as it arrives and the whole answer is
returned as usual. A stream that ends before the server said the answer was complete
(no finish reason, no ``message_stop``), or breaks off, is a ``provider_error``: the
policies retry it, and the part received is never taken for an answer.

Provider keys never leave in an error: a server may echo the key it was sent, an SDK may
quote it; every error ``complete`` raises has the keys taken out of its text
(``without_keys``), however short a key is (``test`` and ``EMPTY`` are too plain for
run folders to mask, so they must not reach one).
"""

from __future__ import annotations

import importlib
import time
from types import ModuleType
from typing import Any

from lattice.errors import ErrorType, LatticeRunError, LatticeUserError, install_hint
from lattice.llm.base import DeltaSink, LLMRequest, LLMResponse
from lattice.llm.errors import LoopLocalClients, provider_error, without_keys
from lattice.masking import provider_keys
from lattice.text import unicode_text


class StreamBroken(Exception):
    """A streamed answer that ended, or broke off, before it was complete."""


class SdkProvider:
    """Base of the SDK adapters; subclasses set the class attributes and the four hooks."""

    name: str
    """The provider's name, which is also the SDK's module and the package extra."""
    label: str
    """How messages name the backend (``OpenAI``)."""
    schema_field: str
    """The body field a server names when it rejects structured output."""
    sdk_error: str
    """The SDK's base exception class (``OpenAIError``)."""
    default_model: str
    _clients: LoopLocalClients

    def __init__(self) -> None:
        self._no_schema_models: set[str] = set()
        self._keys: tuple[str, ...] = ()
        """Keys given to the adapter itself (besides those in the environment): kept out
        of the errors it raises."""

    @property
    def client(self) -> Any:
        """The SDK client of the running event loop."""
        return self._clients.get()

    async def aclose_loop_clients(self) -> None:
        """Close the client of the running loop (``Runner.run`` calls this as its loop ends)."""
        await self._clients.aclose_current()

    # -- hooks ------------------------------------------------------------------------------

    def _sdk(self) -> ModuleType:
        """The SDK module, imported on first use (``name`` is also its extra's name)."""
        try:
            return importlib.import_module(self.name)
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise LatticeUserError(
                f"the {self.name} provider needs the SDK: {install_hint(self.name)}"
            ) from exc

    def _body(self, request: LLMRequest, model: str, *, structured: bool) -> dict[str, Any]:
        raise NotImplementedError

    async def _create(self, body: dict[str, Any]) -> Any:
        raise NotImplementedError

    def _response(self, raw: Any, model: str, latency_ms: float) -> LLMResponse:
        raise NotImplementedError

    async def _open_stream(self, body: dict[str, Any]) -> Any:
        """Send ``body`` as a streaming request; the SDK's stream once the server answered."""
        raise NotImplementedError

    async def _read_stream(self, stream: Any, on_delta: DeltaSink, model: str) -> LLMResponse:
        """Read ``stream``, passing each piece of text to ``on_delta``; the whole answer
        (its latency is set by the caller). Raise StreamBroken when the stream ends
        before the answer is complete."""
        raise NotImplementedError

    def _errors(self, sdk: ModuleType) -> tuple[type[Exception], ...]:
        """The SDK exceptions that ``_map_error`` translates."""
        return (getattr(sdk, self.sdk_error),)

    def _map_error(self, exc: Exception, model: str, node_id: str | None) -> LatticeRunError:
        raise NotImplementedError

    # -- the call ---------------------------------------------------------------------------

    async def _call(self, body: dict[str, Any], request: LLMRequest, model: str) -> Any:
        request.sending()
        on_delta = request.on_delta
        if on_delta is None:
            return await self._create(body)
        stream = await self._open_stream(body)  # errors before the answer: mapped as usual
        sink = on_delta
        try:
            return await self._read_stream(stream, lambda text: sink(unicode_text(text)), model)
        except Exception as exc:
            if isinstance(exc, StreamBroken | LatticeRunError) or not self._broke_off(exc):
                raise  # an error the API sent in the stream is mapped as usual
            raise StreamBroken(f"{type(exc).__name__}: {exc}") from exc

    def _broke_off(self, exc: Exception) -> bool:
        """Whether ``exc``, raised while a stream was read, means the stream broke off:
        anything but an API error (SDKs report a lost connection as a connection error,
        or let their HTTP library's error through); a timeout stays a timeout."""
        sdk = self._sdk()
        if not isinstance(exc, self._errors(sdk)):
            return True
        connection = getattr(sdk, "APIConnectionError", None)
        timeout = getattr(sdk, "APITimeoutError", None)
        return (
            connection is not None
            and isinstance(exc, connection)
            and not (timeout is not None and isinstance(exc, timeout))
        )

    async def complete(self, request: LLMRequest) -> LLMResponse:
        try:
            return await self._complete(request)
        except Exception as exc:
            cleaned = without_keys(exc, (*provider_keys(), *self._keys))
            if cleaned is None:
                raise
            raise cleaned from None

    async def _complete(self, request: LLMRequest) -> LLMResponse:
        sdk = self._sdk()
        model = request.model or self.default_model
        structured = (
            request.response_schema is not None
            and not request.tools  # see LLMRequest: tools and native schemas do not mix
            and model not in self._no_schema_models
        )
        started = time.perf_counter()
        sent = request.schema_sent_natively() if structured else request
        try:
            try:
                raw = await self._call(
                    self._body(sent, model, structured=structured), request, model
                )
            except sdk.BadRequestError as exc:
                if not structured or self.schema_field not in str(exc.message):
                    raise
                self._no_schema_models.add(model)
                raw = await self._call(self._body(request, model, structured=False), request, model)
        except StreamBroken as exc:
            raise provider_error(
                ErrorType.PROVIDER_ERROR,
                f"{self.label} ({model}): the answer's stream ended before it was complete ({exc})",
                exc,
                request.node_id,
            ) from exc
        except self._errors(sdk) as exc:
            raise self._map_error(exc, model, request.node_id) from exc
        except (ValueError, TypeError, KeyError) as exc:  # e.g. a 200 whose body is not JSON
            raise provider_error(
                ErrorType.PROVIDER_ERROR,
                f"{self.label} ({model}): unreadable response: {exc}",
                exc,
                request.node_id,
            ) from exc
        latency_ms = (time.perf_counter() - started) * 1000
        if isinstance(raw, LLMResponse):  # streamed: read as it came
            raw.latency_ms = latency_ms
            return raw
        return self._response(raw, model, latency_ms)

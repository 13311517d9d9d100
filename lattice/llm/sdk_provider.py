"""What the OpenAI and Anthropic adapters share.

One SDK client per event loop (``LoopLocalClients``), structured output with a plain-prompt
fallback for servers that reject it (remembered per model; the contract is validated
anyway), and SDK errors mapped to Lattice error types at this boundary. The schema goes out
once: with structured output, the request's messages stand a short note where the prompt
spelt the schema (``LLMRequest.schema_sent_natively``); without it, in the prompt.
An adapter supplies its request body, its SDK call and how to read the response.
"""

from __future__ import annotations

import importlib
import time
from types import ModuleType
from typing import Any

from lattice.errors import LatticeRunError, LatticeUserError
from lattice.llm.base import LLMRequest, LLMResponse
from lattice.llm.errors import LoopLocalClients, provider_error


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
                f"the {self.name} provider needs the SDK: pip install 'lattice-lre[{self.name}]'"
            ) from exc

    def _body(self, request: LLMRequest, model: str, *, structured: bool) -> dict[str, Any]:
        raise NotImplementedError

    async def _create(self, body: dict[str, Any]) -> Any:
        raise NotImplementedError

    def _response(self, raw: Any, model: str, latency_ms: float) -> LLMResponse:
        raise NotImplementedError

    def _map_error(self, exc: Exception, model: str, node_id: str | None) -> LatticeRunError:
        raise NotImplementedError

    # -- the call ---------------------------------------------------------------------------

    async def complete(self, request: LLMRequest) -> LLMResponse:
        sdk = self._sdk()
        model = request.model or self.default_model
        structured = request.response_schema is not None and model not in self._no_schema_models
        started = time.perf_counter()
        sent = request.schema_sent_natively() if structured else request
        try:
            try:
                raw = await self._create(self._body(sent, model, structured=structured))
            except sdk.BadRequestError as exc:
                if not structured or self.schema_field not in str(exc.message):
                    raise
                self._no_schema_models.add(model)
                raw = await self._create(self._body(request, model, structured=False))
        except getattr(sdk, self.sdk_error) as exc:
            raise self._map_error(exc, model, request.node_id) from exc
        except (ValueError, TypeError, KeyError) as exc:  # e.g. a 200 whose body is not JSON
            raise provider_error(
                "provider_error",
                f"{self.label} ({model}): unreadable response: {exc}",
                exc,
                request.node_id,
            ) from exc
        return self._response(raw, model, (time.perf_counter() - started) * 1000)

"""What one contract call needs from its surroundings: CallEnv and sampling parameters."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from lattice.contracts.policies import DEFAULT_POLICIES, RetrySettings
from lattice.contracts.usage import Budget, Usage
from lattice.events import EventKind
from lattice.llm.base import LLMProvider, LLMRequest, LLMResponse

Emit = Callable[[str, dict[str, Any]], Any]
Sleep = Callable[[float], Awaitable[None]]

TRANSIENT_EVENTS = frozenset({EventKind.LLM_DELTA, EventKind.LLM_CONTENT})
"""Events that go to listeners only: never written to ``events.jsonl`` nor kept with the
run's events. ``llm_delta`` is a piece of a streamed answer (``CallEnv.stream``);
``llm_content`` the messages of a request and the text of its answer, for a listener
that asked for them (``CallEnv.content``: tracing with ``capture_content``)."""


def discard_event(type_: str, data: dict[str, Any]) -> None:
    """An ``Emit`` that keeps nothing."""
    return None


class CallLog(Protocol):
    """Takes a model call's ``llm_request`` and ``llm_response`` events in a compact form
    (a run that keeps its events compact: ``lattice.runtime.events``), so that the call
    builds neither their data nor the request's prompt hash and preview."""

    def requested(
        self,
        request: LLMRequest,
        attempt: int,
        kind: str,
        request_chars: int,
        schema_json: str,
    ) -> int | None:
        """Keep the attempt's ``llm_request``; its seq, or None when the events are no
        longer compact (the caller then emits the event itself)."""
        ...

    def answered(self, requested: int, request: LLMRequest, response: LLMResponse) -> bool:
        """Keep the ``llm_response`` to the request kept as ``requested``; False when the
        events are no longer compact (the caller then emits it itself)."""
        ...


@dataclass
class CallEnv:
    """Everything a contract call needs from its surroundings (built by
    ``RuntimeSettings.call_env`` for runs and for ``LLMPrimitive`` alike)."""

    provider: LLMProvider
    usage: Usage = field(default_factory=lambda: Usage())
    emit: Emit = discard_event
    """Receives each event (type, data); a run context points it at its event log."""
    budget: Budget = field(default_factory=Budget)
    retry: RetrySettings = field(default_factory=RetrySettings)
    sleep: Sleep = asyncio.sleep
    models: Mapping[str, str | None] = field(default_factory=dict)
    """Model class → concrete model (None: the provider's default)."""
    base_policies: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: DEFAULT_POLICIES)
    stream: bool | None = None
    """Ask providers to stream, with an ``llm_delta`` event per piece of text. None: the
    run decides (on when one of its listeners wants deltas; see ``wants_deltas``)."""
    content: bool = False
    """Emit ``llm_content`` events (a request's messages, its answer's text)."""
    log: CallLog | None = None
    """Where ``llm_request``/``llm_response`` go when the run keeps its events compact
    (None: through ``emit``, as every other event)."""
    records: bool = True
    """Whether a call returns the record of an attempt that succeeded at once (a run
    that keeps no op records has no use for it; failed attempts are always recorded)."""


def wants_deltas(listeners: Iterable[object]) -> bool:
    """Whether any of ``listeners`` takes ``llm_delta`` events: a listener says no with
    an attribute ``wants_deltas = False``; one that says nothing takes them."""
    return any(getattr(listener, "wants_deltas", True) for listener in listeners)


def wants_content(listeners: Iterable[object]) -> bool:
    """Whether any of ``listeners`` asks for ``llm_content`` events (``wants_content = True``)."""
    return any(getattr(listener, "wants_content", False) for listener in listeners)


@dataclass(frozen=True)
class Sampling:
    """Sampling parameters of a request (None: the provider's default)."""

    temperature: float | None = 0.0
    top_p: float | None = None
    max_tokens: int | None = None


DEFAULT_SAMPLING = Sampling()
"""Temperature 0, the provider's defaults otherwise."""

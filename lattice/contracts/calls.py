"""What one contract call needs from its surroundings: CallEnv and sampling parameters."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lattice.contracts.policies import DEFAULT_POLICIES, RetrySettings
from lattice.contracts.usage import Budget, Usage
from lattice.llm.base import LLMProvider

Emit = Callable[[str, dict[str, Any]], Any]
Sleep = Callable[[float], Awaitable[None]]


def discard_event(type_: str, data: dict[str, Any]) -> None:
    """An ``Emit`` that keeps nothing."""
    return None


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


@dataclass(frozen=True)
class Sampling:
    """Sampling parameters of a request (None: the provider's default)."""

    temperature: float | None = 0.0
    top_p: float | None = None
    max_tokens: int | None = None


DEFAULT_SAMPLING = Sampling()
"""Temperature 0, the provider's defaults otherwise."""

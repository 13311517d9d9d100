"""LLM providers: the interface and its adapters (mock, disabled; SDK adapters load lazily).

``MockProvider`` is imported on first use (PEP 562): the runtime imports this package for
its interface, and a run with another provider never needs the mock and its example
builder.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from lattice.llm.base import LLMProvider, LLMRequest, LLMResponse, Message, TokenUsage
from lattice.llm.disabled import DisabledProvider

if TYPE_CHECKING:
    from lattice.llm.mock import MockProvider

__all__ = [
    "DisabledProvider",
    "LLMProvider",
    "LLMRequest",
    "LLMResponse",
    "Message",
    "MockProvider",
    "TokenUsage",
]


def __getattr__(name: str) -> Any:
    if name == "MockProvider":
        return importlib.import_module("lattice.llm.mock").MockProvider
    raise AttributeError(f"module 'lattice.llm' has no attribute {name!r}")

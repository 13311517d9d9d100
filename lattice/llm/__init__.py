"""LLM providers: the interface and its adapters (mock, disabled; SDK adapters load lazily)."""

from lattice.llm.base import LLMProvider, LLMRequest, LLMResponse, Message, TokenUsage
from lattice.llm.disabled import DisabledProvider
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

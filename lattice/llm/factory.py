"""Build a provider by name (``mock``, ``disabled``, and the SDK adapters when installed)."""

from __future__ import annotations

from pathlib import Path

from lattice.errors import LatticeUserError
from lattice.llm.base import LLMProvider
from lattice.llm.disabled import DisabledProvider
from lattice.llm.mock import MockProvider

PROVIDER_NAMES = ("mock", "disabled")


def make_provider(name: str | None, *, mock: str | Path | None = None) -> LLMProvider:
    """The provider called ``name``; ``--mock FILE`` alone means ``mock``; nothing means ``disabled``."""
    if name is None:
        name = "mock" if mock is not None else "disabled"
    if name == "mock":
        if mock is None:
            raise LatticeUserError("--provider mock needs --mock FILE (a mock script)")
        return MockProvider.from_file(mock)
    if mock is not None:
        raise LatticeUserError(f"--mock only applies to --provider mock, not {name!r}")
    if name == "disabled":
        return DisabledProvider()
    raise LatticeUserError(f"unknown provider {name!r}; choose one of: {', '.join(PROVIDER_NAMES)}")

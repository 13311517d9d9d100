"""Build the provider a run uses, from command-line choices and the user's configuration."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lattice.config import LatticeConfig
from lattice.errors import LatticeUserError
from lattice.llm.base import LIVE_PROVIDERS, LLMProvider
from lattice.llm.disabled import DisabledProvider
from lattice.llm.fixture import FixtureProvider
from lattice.llm.mock import MockProvider
from lattice.llm.wrappers import LimitedProvider, RouterProvider

PROVIDER_NAMES = (*LIVE_PROVIDERS, "mock", "fixture", "disabled")


def live_provider(name: str, config: LatticeConfig) -> LLMProvider:
    """An SDK adapter (imported lazily) wrapped in its configured client-side limits."""
    settings = config.provider_config(name)
    provider: LLMProvider
    if name == "openai":
        from lattice.llm.openai_provider import OpenAIProvider

        provider = OpenAIProvider(base_url=settings.base_url, timeout=settings.timeout)
    elif name == "anthropic":
        from lattice.llm.anthropic_provider import AnthropicProvider

        provider = AnthropicProvider(base_url=settings.base_url, timeout=settings.timeout)
    elif name == "litellm":
        from lattice.llm.litellm_provider import LiteLLMProvider

        provider = LiteLLMProvider(api_base=settings.base_url, timeout=settings.timeout)
    else:
        raise LatticeUserError(
            f"unknown provider {name!r}; choose one of: {', '.join(PROVIDER_NAMES)}"
        )
    return LimitedProvider(
        provider,
        max_concurrency=settings.max_concurrency,
        requests_per_minute=settings.requests_per_minute,
    )


def _routed(name: str, config: LatticeConfig) -> LLMProvider:
    """The named provider, plus every other provider the model classes route to, built now
    so that a missing key is a usage error before the run starts, not a failure inside it."""
    router = RouterProvider(
        live_provider(name, config), lambda other: live_provider(other, config), LIVE_PROVIDERS
    )
    for model in config.llm.models.values():
        prefix, sep, _ = model.partition(":")
        if sep and prefix in LIVE_PROVIDERS:
            router.ensure(prefix)
    return router


def make_provider(
    name: str | None,
    *,
    mock: str | Path | None = None,
    fixtures: str | Path | None = None,
    record: bool = False,
    config: LatticeConfig | None = None,
) -> LLMProvider:
    """The provider for a run.

    ``--mock FILE`` alone means ``mock``; ``--fixtures FILE`` alone replays;
    ``--fixtures FILE --record --provider openai`` records (``--mock FILE`` instead of a live
    provider records the script's answers); otherwise ``name``, then the
    config's ``llm.provider``, else ``disabled`` (which fails clearly at the first call).
    """
    config = config or LatticeConfig()
    if name is not None and name not in PROVIDER_NAMES:
        raise LatticeUserError(
            f"unknown provider {name!r}; choose one of: {', '.join(PROVIDER_NAMES)}"
        )
    if mock is not None:
        if name not in (None, "mock") or (fixtures is not None and not record):
            raise LatticeUserError(
                "--mock is used alone (it implies --provider mock), or with "
                "--fixtures FILE --record to record its scripted answers as fixtures"
            )
        if record and fixtures is None:
            raise LatticeUserError("--record needs --fixtures FILE to record into")
        scripted = MockProvider.from_file(mock)
        if fixtures is not None:
            # A recorded mock: scripted completions filed under the real prompts' hashes, so
            # the run replays offline with --fixtures alone (a workflow's shipped fixtures).
            return FixtureProvider(fixtures, record_with=scripted)
        return scripted
    if name == "mock":
        raise LatticeUserError("--provider mock needs --mock FILE (a mock script)")
    if fixtures is not None:
        if not record:
            if name not in (None, "fixture"):
                raise LatticeUserError(
                    "--fixtures replays on its own; add --record to record from a provider"
                )
            return FixtureProvider(fixtures)
        live = name or config.llm.provider
        if live not in LIVE_PROVIDERS:
            raise LatticeUserError(
                f"--record needs a live provider: --provider {'|'.join(LIVE_PROVIDERS)}"
            )
        return FixtureProvider(fixtures, record_with=_routed(live, config))
    if record:
        raise LatticeUserError("--record needs --fixtures FILE to record into")
    chosen = name or config.llm.provider or "disabled"
    if chosen == "disabled":
        return DisabledProvider()
    if chosen == "fixture":
        raise LatticeUserError("--provider fixture needs --fixtures FILE")
    return _routed(chosen, config)


@dataclass(frozen=True)
class ProviderChoice:
    """The provider options of a run as a user gave them (``--provider``, ``--mock``,
    ``--fixtures``, ``--record``), kept in the run's checkpoint so that a resume uses
    the same provider unless told otherwise."""

    name: str | None = None
    mock: str | None = None
    fixtures: str | None = None
    record: bool = False

    @property
    def given(self) -> bool:
        return self.name is not None or self.mock is not None or self.fixtures is not None

    def build(self, config: LatticeConfig) -> LLMProvider:
        return make_provider(
            self.name, mock=self.mock, fixtures=self.fixtures, record=self.record, config=config
        )

    def to_meta(self) -> dict[str, Any]:
        """The choice as saved in run metadata (file paths made absolute)."""
        return {
            "provider_arg": self.name,
            "mock": str(Path(self.mock).resolve()) if self.mock else None,
            "fixtures": str(Path(self.fixtures).resolve()) if self.fixtures else None,
            "record": self.record,
        }

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any]) -> ProviderChoice:
        return cls(
            name=meta.get("provider_arg"),
            mock=meta.get("mock"),
            fixtures=meta.get("fixtures"),
            record=bool(meta.get("record")),
        )

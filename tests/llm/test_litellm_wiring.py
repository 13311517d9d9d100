"""The LiteLLM provider's place in Lattice, checked with or without LiteLLM installed:
a live provider by name and in the configuration, imported only when used, and a clear
message when it is missing."""

from __future__ import annotations

import sys

import pytest

from lattice.config import LatticeConfig
from lattice.errors import LatticeUserError
from lattice.service.providers import LIVE_PROVIDERS, PROVIDER_NAMES, make_provider


def test_without_litellm_the_provider_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from lattice.llm.litellm_provider import LiteLLMProvider

    monkeypatch.setitem(sys.modules, "litellm", None)  # import litellm → ImportError
    with pytest.raises(LatticeUserError, match=r"pip install -e '\.\[litellm\]'"):
        LiteLLMProvider()


def test_the_litellm_provider_is_a_live_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "litellm" in LIVE_PROVIDERS and "litellm" in PROVIDER_NAMES
    monkeypatch.setitem(sys.modules, "litellm", None)
    with pytest.raises(LatticeUserError, match="litellm"):
        make_provider("litellm")


def test_providers_litellm_is_a_known_table() -> None:
    config = LatticeConfig.model_validate(
        {"providers": {"litellm": {"base_url": "http://127.0.0.1:4000", "max_concurrency": 2}}}
    )
    assert config.provider_config("litellm").base_url == "http://127.0.0.1:4000"


def test_the_help_names_it(capsys: pytest.CaptureFixture[str]) -> None:
    from lattice.cli import main

    with pytest.raises(SystemExit):
        main(["run", "--help"])
    assert "openai, anthropic, litellm" in " ".join(capsys.readouterr().out.split())


def test_the_keys_of_litellm_backends_are_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    from lattice.runs.redaction import make_redactor

    monkeypatch.setenv("GEMINI_API_KEY", "AIzaSy-gemini-9Value")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalr+AWS/Secret9Key")
    text = make_redactor()("keys: AIzaSy-gemini-9Value wJalr+AWS/Secret9Key")
    assert text == "keys: *** ***"

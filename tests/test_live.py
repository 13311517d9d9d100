"""Live smoke tests against the real providers: skipped unless the API keys are set.

``tests/conftest.py`` deletes the keys (and blocks the network) for every test, so the keys
are read here when the module is imported, and each live test puts its key back and lifts
the network guard for itself only. Run them with ``pytest -m live``. Models can be chosen
with ``LATTICE_LIVE_OPENAI_MODEL`` / ``LATTICE_LIVE_ANTHROPIC_MODEL``.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import socket
import sys
from pathlib import Path

import jsonschema
import pytest

from lattice.llm.base import LLMRequest, Message
from tests import conftest
from tests.two_step import two_step_document

OPENAI_API_KEY = os.environ.get("OPENAI_API_KEY", "")
OPENAI_BASE_URL = os.environ.get("OPENAI_BASE_URL", "")
ANTHROPIC_API_KEY = os.environ.get("ANTHROPIC_API_KEY", "")
ANTHROPIC_BASE_URL = os.environ.get("ANTHROPIC_BASE_URL", "")
OPENAI_MODEL = os.environ.get("LATTICE_LIVE_OPENAI_MODEL") or None
ANTHROPIC_MODEL = os.environ.get("LATTICE_LIVE_ANTHROPIC_MODEL") or None

needs_openai = pytest.mark.skipif(not OPENAI_API_KEY, reason="OPENAI_API_KEY is not set")
needs_anthropic = pytest.mark.skipif(not ANTHROPIC_API_KEY, reason="ANTHROPIC_API_KEY is not set")

SCHEMA = {
    "type": "object",
    "properties": {"label": {"type": "string", "enum": ["billing", "bug", "other"]}},
    "required": ["label"],
    "additionalProperties": False,
}
REQUEST = LLMRequest(
    messages=(
        Message(
            "system",
            "Classify the support ticket. Reply with JSON only, matching this schema: "
            + json.dumps(SCHEMA),
        ),
        Message("user", "I was charged twice for my subscription this month."),
    ),
    model_class="small",
    max_tokens=200,
    response_schema=SCHEMA,
    node_id="classify",
)


@pytest.fixture
def network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lift the network guard for this test only."""
    monkeypatch.setattr(socket.socket, "connect", conftest._real_connect)
    monkeypatch.setattr(socket.socket, "connect_ex", conftest._real_connect_ex)
    monkeypatch.setattr(socket, "getaddrinfo", conftest._real_getaddrinfo)


@pytest.fixture
def openai_key(monkeypatch: pytest.MonkeyPatch, network: None) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_API_KEY)
    if OPENAI_BASE_URL:
        monkeypatch.setenv("OPENAI_BASE_URL", OPENAI_BASE_URL)
    if OPENAI_MODEL:
        monkeypatch.setenv("LATTICE_OPENAI_MODEL", OPENAI_MODEL)


@pytest.fixture
def anthropic_key(monkeypatch: pytest.MonkeyPatch, network: None) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_API_KEY)
    if ANTHROPIC_BASE_URL:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", ANTHROPIC_BASE_URL)
    if ANTHROPIC_MODEL:
        monkeypatch.setenv("LATTICE_ANTHROPIC_MODEL", ANTHROPIC_MODEL)


def check_artifact(text: str) -> None:
    value = json.loads(text.strip().removeprefix("```json").removesuffix("```"))
    jsonschema.validate(value, SCHEMA)
    assert value["label"] == "billing"


@pytest.mark.live
@needs_openai
def test_openai_structured_completion(openai_key: None) -> None:
    from lattice.llm.openai_provider import OpenAIProvider

    response = asyncio.run(OpenAIProvider().complete(REQUEST))
    check_artifact(response.text)
    assert response.usage.input_tokens > 0
    assert response.usage.output_tokens > 0
    assert response.model


@pytest.mark.live
@needs_anthropic
def test_anthropic_structured_completion(anthropic_key: None) -> None:
    from lattice.llm.anthropic_provider import AnthropicProvider

    response = asyncio.run(AnthropicProvider().complete(REQUEST))
    check_artifact(response.text)
    assert response.usage.input_tokens > 0
    assert response.usage.output_tokens > 0
    assert response.model


def run_two_step(
    provider: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from lattice.cli import main

    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    doc = tmp_path / "two-step.json"
    doc.write_text(json.dumps(two_step_document()), encoding="utf-8")
    runs = tmp_path / "runs"
    code = main(
        ["run", str(doc), "--provider", provider, "--input", "topic=tides", "--runs-dir", str(runs)]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    assert isinstance(json.loads(out)["summary"], str)
    key = OPENAI_API_KEY if provider == "openai" else ANTHROPIC_API_KEY
    for path in runs.rglob("*"):
        if path.is_file():
            assert key not in path.read_text(encoding="utf-8", errors="replace"), path


@pytest.mark.live
@needs_openai
def test_openai_workflow_run(
    openai_key: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run_two_step("openai", tmp_path, monkeypatch, capsys)


@pytest.mark.live
@needs_anthropic
def test_anthropic_workflow_run(
    anthropic_key: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run_two_step("anthropic", tmp_path, monkeypatch, capsys)

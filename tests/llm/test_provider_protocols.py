"""What a provider can do besides ``complete`` is told by runtime-checkable protocols
(llm/base.py), through wrappers too, instead of attribute probes."""

from __future__ import annotations

import asyncio
from pathlib import Path

from lattice.llm.base import (
    CheckpointedProvider,
    LLMRequest,
    LoopBoundProvider,
    Message,
    ScriptedProvider,
    close_loop_clients,
    provider_checkpoint,
    restore_provider,
)
from lattice.llm.disabled import DisabledProvider
from lattice.llm.fixture import FixtureProvider
from lattice.llm.mock import MockProvider
from lattice.llm.openai_provider import OpenAIProvider
from lattice.llm.wrappers import RouterProvider


def test_each_provider_says_what_it_can_do() -> None:
    mock = MockProvider({"a": ["x"]})
    live = OpenAIProvider(api_key="sk-test")
    assert isinstance(mock, CheckpointedProvider) and isinstance(mock, ScriptedProvider)
    assert not isinstance(mock, LoopBoundProvider)
    assert isinstance(live, LoopBoundProvider)
    assert not isinstance(live, CheckpointedProvider | ScriptedProvider)
    assert not isinstance(DisabledProvider(), CheckpointedProvider | LoopBoundProvider)


def test_a_router_can_what_its_default_can() -> None:
    mock = MockProvider({"a": ["x"]})
    routed_mock = RouterProvider(mock, lambda name: mock, ("openai",))
    assert isinstance(routed_mock, CheckpointedProvider)
    assert isinstance(routed_mock, ScriptedProvider) and routed_mock.covers("a")
    live = OpenAIProvider(api_key="sk-test")
    routed_live = RouterProvider(live, lambda name: live, ("openai",))
    assert not isinstance(routed_live, CheckpointedProvider | ScriptedProvider)
    assert provider_checkpoint(routed_live) is None


def test_a_recording_fixture_passes_its_providers_position_on(tmp_path: Path) -> None:
    mock = MockProvider({"a": ["x", "y"]})
    recording = FixtureProvider(tmp_path / "f.jsonl", record_with=mock)
    request = LLMRequest(messages=(Message("user", "hi"),), node_id="a", op_id="a")
    asyncio.run(recording.complete(request))
    saved = provider_checkpoint(recording)
    assert saved == mock.checkpoint() and saved["cursor"] == {"a": 1}

    again = MockProvider({"a": ["x", "y"]})
    restore_provider(FixtureProvider(tmp_path / "f.jsonl", record_with=again), saved)
    assert again.cursor == {"a": 1}
    assert provider_checkpoint(FixtureProvider(tmp_path / "f.jsonl")) is None


def test_closing_a_provider_without_loop_clients_does_nothing() -> None:
    asyncio.run(close_loop_clients(MockProvider({})))
    asyncio.run(close_loop_clients(None))

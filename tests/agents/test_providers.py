"""Agent runs against local OpenAI- and Anthropic-compatible servers that answer with tool
calls, through the real SDKs, whole and streamed; a stream cut in the middle of a tool
call's arguments is retried, never taken as a turn."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lattice.llm.anthropic_provider import AnthropicProvider
from lattice.llm.fake_server import ToolTurn, serve
from lattice.llm.openai_provider import OpenAIProvider
from lattice.llm.sdk_provider import SdkProvider
from lattice.runs.store import RunStore
from lattice.runtime.runner import Runner
from lattice.runtime.settings import RuntimeSettings
from tests.agents.fixtures import RecordingToolset, recording_agents
from tests.agents.test_loop import agent_ir
from tests.builders import op_record

PROVIDERS: dict[str, Callable[[str], SdkProvider]] = {
    "openai": lambda url: OpenAIProvider(api_key="sk-test", base_url=url + "/v1"),
    "anthropic": lambda url: AnthropicProvider(api_key="sk-test", base_url=url),
}


@pytest.mark.parametrize("name", sorted(PROVIDERS))
def test_a_later_turn_cut_short_is_sent_again_without_running_the_tools_again(
    name: str, tmp_path: Path
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "app.py").write_text("def add(a, b):\n    return a - b\n")
    with serve(answer) as server:
        server.cuts = [(1000, "chunked"), (1, "eof")]  # the second turn's stream ends early
        opened: list[RecordingToolset] = []
        settings = RuntimeSettings(
            agents=recording_agents(root, opened=opened, read=True), stream=True, sleep=_no_sleep
        )
        runner = Runner(
            agent_ir(),
            provider=PROVIDERS[name](server.base_url),
            settings=settings,
            store=RunStore(tmp_path / "runs"),
        )
        result = runner.run({})
        sent = len(server.received)
    assert result.status == "completed", result.failure
    assert sent == 3 and result.usage.requests == 3
    assert [name for name, _ in opened[0].ran] == ["Read"]  # the tool ran once
    assert [e["data"]["retry"] for e in result.events if e["type"] == "retry"] == [1]


def answer(body: dict[str, Any]) -> str | ToolTurn:
    """Read app.py first (with a long argument, so a stream can be cut inside it), then
    answer from what the tool gave back."""
    text = json.dumps(body.get("messages"))
    if "return a - b" not in text:
        arguments = json.dumps({"file_path": "app.py", "limit": 2000, "note": "x" * 200})
        return ToolTurn([("call_r1", "Read", arguments)])
    return json.dumps({"fixed": False, "file": "app.py"})


@pytest.mark.parametrize("name", sorted(PROVIDERS))
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_an_agent_loop_over_a_real_sdk(name: str, stream: bool, tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "app.py").write_text("def add(a, b):\n    return a - b\n")
    with serve(answer) as server:
        if stream:
            server.cuts = [(2, "chunked")]  # the first stream dies inside the call's arguments
        settings = RuntimeSettings(
            agents=recording_agents(root, read=True), stream=stream, sleep=_no_sleep
        )
        runner = Runner(
            agent_ir(),
            provider=PROVIDERS[name](server.base_url),
            settings=settings,
            store=RunStore(tmp_path / "runs"),
        )
        result = runner.run({})
        bodies = [r.body for r in server.received]
    assert result.status == "completed", result.failure
    assert result.output == {"fixed": False, "file": "app.py"}
    assert all(body.get("tools") for body in bodies)  # every turn offered the tools
    assert len(bodies) == (3 if stream else 2)  # streamed: the cut turn was asked again
    record = op_record(result.run_dir, "fix")
    (first, last) = record["transcript"]["turns"]
    (call,) = first["tool_calls"]
    assert call["name"] == "Read" and call["arguments"]["limit"] == 2000
    assert "return a - b" in call["result"] and not call["is_error"]
    assert last["tool_calls"] == []


async def _no_sleep(seconds: float) -> None:
    return None

"""Fixtures of the agent tests: a scripted tool-calling model, and the workspace's tools
with the calls they ran kept."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from lattice.llm.base import LLMRequest, LLMResponse, TokenUsage, ToolCall, ToolDef
from lattice.runtime.settings import AgentSettings
from lattice.tools.toolset import ToolResult, Toolset
from lattice.workspace.grants import WorkspaceGrant
from lattice.workspace.toolset import WorkspaceToolset

Turn = LLMResponse | Callable[[LLMRequest], LLMResponse]


def calls(*items: tuple[str, dict[str, Any]], text: str = "") -> LLMResponse:
    """A turn that asks for tool calls (ids ``call_<n>``)."""
    tool_calls = tuple(
        ToolCall(f"call_{index}", name, arguments) for index, (name, arguments) in enumerate(items)
    )
    return LLMResponse(
        text, TokenUsage(10, 5), model="scripted", finish_reason="tool_calls", tool_calls=tool_calls
    )


def answer(text: str) -> LLMResponse:
    return LLMResponse(text, TokenUsage(10, 5), model="scripted")


class ScriptedModel:
    """Answers each node's requests with its next scripted turn; keeps every request."""

    name = "scripted"

    def __init__(self, turns: dict[str, list[Turn]]) -> None:
        self.turns = {node: list(items) for node, items in turns.items()}
        self.requests: list[LLMRequest] = []

    async def complete(self, request: LLMRequest) -> LLMResponse:
        self.requests.append(request)
        script = self.turns[str(request.node_id)]
        if not script:
            raise AssertionError(f"no scripted turn left for {request.node_id}")
        turn = script.pop(0)
        return turn(request) if callable(turn) else turn


class RecordingToolset:
    """The workspace's toolset with every call it ran kept (``ran``), and whether it was closed."""

    def __init__(self, inner: WorkspaceToolset) -> None:
        self.inner = inner
        self.name = inner.name
        self.ran: list[tuple[str, dict[str, Any]]] = []
        self.closed = False

    async def list_tools(self) -> list[ToolDef]:
        return await self.inner.list_tools()

    async def call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        self.ran.append((name, arguments))
        return await self.inner.call(name, arguments)

    async def plan(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        self.ran.append((name, arguments))
        return await self.inner.plan(name, arguments)

    async def apply(self, planned: ToolResult) -> ToolResult:
        return await self.inner.apply(planned)

    def hold(self, planned: ToolResult) -> None:
        self.inner.hold(planned)

    async def aclose(self) -> None:
        self.closed = True
        await self.inner.aclose()


def recording_agents(
    root: Path | None, *, opened: list[RecordingToolset] | None = None, **grants: Any
) -> AgentSettings:
    """AgentSettings granting ``grants`` over ``root``: the workspace's own tools, each
    visit's toolset kept in ``opened``."""

    def factory(grant: WorkspaceGrant, tools: tuple[str, ...]) -> list[Toolset]:
        toolset = RecordingToolset(WorkspaceToolset(grant, tools))
        if opened is not None:
            opened.append(toolset)
        return [toolset]

    return AgentSettings(grant=WorkspaceGrant(root=root, **grants), toolsets=factory)

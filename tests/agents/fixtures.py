"""Fixtures of the agent tests: a scripted tool-calling model and a small file toolset.

``FixtureFiles`` is a test fixture standing in for the workspace tools (``Read``, ``LS``,
``Edit``, ``Write`` over a real folder, each write a ``FileChange`` with digests); it is
not Lattice's workspace toolset and confines nothing beyond refusing ``..``.
"""

from __future__ import annotations

import difflib
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lattice.agents.grants import AgentGrant
from lattice.llm.base import LLMRequest, LLMResponse, TokenUsage, ToolCall, ToolDef
from lattice.runtime.settings import AgentSettings
from lattice.tools.toolset import FileChange, ToolResult, Toolset

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


def digest(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


class FixtureFiles:
    """Read / LS / Edit / Write over ``root`` (a test fixture, see the module docstring)."""

    name = "fixture-files"

    def __init__(self, root: Path) -> None:
        self.root = root
        self.ran: list[tuple[str, dict[str, Any]]] = []
        self.closed = False

    async def list_tools(self) -> list[ToolDef]:
        path = {"type": "object", "properties": {"file_path": {"type": "string"}}}
        return [
            ToolDef("Read", "Read a file", path),
            ToolDef("LS", "List a folder", path),
            ToolDef("Edit", "Replace old_string by new_string in a file", path),
            ToolDef("Write", "Write a file", path),
        ]

    async def call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        self.ran.append((name, arguments))
        rel = str(arguments.get("file_path", "."))
        if ".." in Path(rel).parts:
            return ToolResult(f"{rel} is outside the workspace", True)
        target = self.root / rel
        if name == "Read":
            if not target.is_file():
                return ToolResult(f"no file {rel}", True)
            return ToolResult(target.read_text())
        if name == "LS":
            return ToolResult("\n".join(sorted(p.name for p in target.iterdir())))
        before = target.read_bytes() if target.is_file() else None
        old = (before or b"").decode()
        if name == "Edit":
            if arguments["old_string"] not in old:
                return ToolResult(f"old_string not found in {rel}", True)
            new = old.replace(arguments["old_string"], arguments["new_string"], 1)
        else:
            new = str(arguments["content"])
        target.write_text(new)
        diff = "".join(
            difflib.unified_diff(
                old.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{rel}", f"b/{rel}"
            )
        )
        change = FileChange(rel, diff, digest(before), digest(new.encode()))
        return ToolResult(f"edited {rel}", changes=(change,))

    async def aclose(self) -> None:
        self.closed = True


def fixture_agents(
    root: Path | None, *, opened: list[FixtureFiles] | None = None, **grants: Any
) -> AgentSettings:
    """AgentSettings granting ``grants`` over ``root``, served by FixtureFiles."""

    def factory(grant: AgentGrant, tools: tuple[str, ...]) -> list[Toolset]:
        assert grant.root is not None
        files = FixtureFiles(grant.root)
        if opened is not None:
            opened.append(files)
        return [files]

    return AgentSettings(grant=AgentGrant(root=root, **grants), toolsets=factory)

"""The workspace tools and the granted MCP servers' tools, each set behind ``Toolset``.

``workspace_toolsets(grant, tools)`` gives the toolsets an agent node gets: the built-in
tools it asked for that the grant allows (one ``WorkspaceToolset``) and one
``McpToolset`` per granted MCP server it asked tools of. Every failure the model can act
on (a path outside the root, a refused command, a timeout, a malformed argument) comes
back as a ``ToolResult`` with ``is_error``; nothing a model asks for ends the process.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any

import httpx

from lattice.errors import LatticeRunError
from lattice.ir.tool_names import parse_mcp_name, split_mcp_name
from lattice.llm.base import ToolDef
from lattice.tools.mcp import ToolSessions
from lattice.tools.toolset import FileChange, ToolResult, Toolset
from lattice.workspace.edits import apply_change, plan_edit, plan_multi_edit, plan_write
from lattice.workspace.files import glob, grep, list_dir, read
from lattice.workspace.grants import CLAUDE_CODE_TOOLS, WorkspaceGrant
from lattice.workspace.paths import ToolRefused, Workspace
from lattice.workspace.shell import run_command
from lattice.workspace.web import fetch


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def _int(description: str) -> dict[str, Any]:
    return {"type": "integer", "minimum": 1, "description": description}


_PATH = {
    "type": "string",
    "description": "A path relative to the workspace root, or absolute inside it.",
}

TOOL_DEFS: dict[str, ToolDef] = {
    tool.name: tool
    for tool in (
        ToolDef(
            "Read",
            "Read a text file of the workspace, as numbered lines. Use offset and limit for long files.",
            _object(
                {
                    "file_path": _PATH,
                    "offset": _int("First line to read (1-based)."),
                    "limit": _int("How many lines."),
                },
                ["file_path"],
            ),
        ),
        ToolDef(
            "LS",
            "List a directory of the workspace (folders end in /).",
            _object(
                {
                    "path": _PATH,
                    "ignore": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "Globs of names to leave out.",
                    },
                },
                [],
            ),
        ),
        ToolDef(
            "Glob",
            "Find workspace files whose path matches a glob such as **/*.py or src/**/*.{ts,tsx}.",
            _object({"pattern": {"type": "string"}, "path": _PATH}, ["pattern"]),
        ),
        ToolDef(
            "Grep",
            "Search workspace files with a regular expression. output_mode: files_with_matches (default), content (matching lines with numbers) or count.",
            _object(
                {
                    "pattern": {"type": "string"},
                    "path": _PATH,
                    "glob": {
                        "type": "string",
                        "description": "Only files whose name or path matches this glob.",
                    },
                    "output_mode": {
                        "type": "string",
                        "enum": ["files_with_matches", "content", "count"],
                    },
                    "-i": {"type": "boolean", "description": "Case-insensitive."},
                    "head_limit": _int("At most this many results."),
                },
                ["pattern"],
            ),
        ),
        ToolDef(
            "Edit",
            "Replace old_string with new_string in a file. old_string must occur exactly once unless replace_all is true.",
            _object(
                {
                    "file_path": _PATH,
                    "old_string": {"type": "string"},
                    "new_string": {"type": "string"},
                    "replace_all": {"type": "boolean"},
                },
                ["file_path", "old_string", "new_string"],
            ),
        ),
        ToolDef(
            "MultiEdit",
            "Several Edit operations on one file, applied in order, all or none.",
            _object(
                {
                    "file_path": _PATH,
                    "edits": {
                        "type": "array",
                        "items": _object(
                            {
                                "old_string": {"type": "string"},
                                "new_string": {"type": "string"},
                                "replace_all": {"type": "boolean"},
                            },
                            ["old_string", "new_string"],
                        ),
                    },
                },
                ["file_path", "edits"],
            ),
        ),
        ToolDef(
            "Write",
            "Write a file of the workspace (created, or replaced whole).",
            _object({"file_path": _PATH, "content": {"type": "string"}}, ["file_path", "content"]),
        ),
        ToolDef(
            "Bash",
            "Run a bash command in a sandbox: the workspace is the current directory and the only writable path; there is no network.",
            _object(
                {
                    "command": {"type": "string"},
                    "timeout": _int("Milliseconds; at most the configured limit."),
                    "description": {"type": "string"},
                },
                ["command"],
            ),
        ),
        ToolDef(
            "WebFetch",
            "Fetch a web page (public addresses only) and return its text.",
            _object(
                {
                    "url": {"type": "string"},
                    "prompt": {
                        "type": "string",
                        "description": "What you are looking for in the page.",
                    },
                },
                ["url"],
            ),
        ),
    )
}

READ_ONLY_BASH = ToolDef(
    "Bash",
    "Run a read-only bash command in a sandbox (git log, ls, grep, a test that writes "
    "nothing): the workspace is the current directory and cannot be changed; there is no "
    "network.",
    TOOL_DEFS["Bash"].input_schema,
)
"""Bash as Claude Code's read-only agents (explore, plan) have it: the workspace bound
read-only, so no command can change it."""
"""Every built-in tool's definition, as the model is offered it."""

WRITE_TOOLS = frozenset({"Edit", "MultiEdit", "Write"})


class WorkspaceToolset:
    """The built-in tools an agent node was granted, over one workspace.

    ``plan`` and ``apply`` split a writing tool's call in two, so that a caller that
    records the planned change first can apply it again after a crash without applying
    it twice; ``call`` does both. In patch-only mode nothing is applied: ``hold`` keeps
    a planned change as pending, and the file tools read pending text instead of the
    disk (the shell does not: its commands see the files as they are).
    """

    name = "workspace"

    def __init__(
        self,
        grant: WorkspaceGrant,
        tools: Sequence[str],
        *,
        http_client: Callable[[], httpx.AsyncClient] | None = None,
        read_only_shell: bool = False,
    ) -> None:
        self.grant = grant
        self.tools = tuple(name for name in tools if name in TOOL_DEFS)
        self.read_only_shell = read_only_shell
        """Bash sees the workspace read-only (Claude Code's read-only agents: explore, plan)."""
        self.workspace = Workspace(grant.root) if grant.root is not None else None
        self._http_client = http_client
        self._own_client: httpx.AsyncClient | None = None

    async def list_tools(self) -> list[ToolDef]:
        if not self.read_only_shell:
            return [TOOL_DEFS[name] for name in self.tools]
        return [READ_ONLY_BASH if name == "Bash" else TOOL_DEFS[name] for name in self.tools]

    async def call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        if name in WRITE_TOOLS:
            planned = await self.plan(name, arguments)
            if planned.is_error:
                return planned
            if self.grant.patch_only:
                self.hold(planned)
                return planned
            return await self.apply(planned)
        return await self._guarded(name, lambda: self._run(name, arguments))

    async def plan(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        """A writing tool's change, worked out and not applied (``changes[0].applied`` False)."""
        planners = {
            "Edit": plan_edit,
            "MultiEdit": plan_multi_edit,
            "Write": plan_write,
        }

        async def plan() -> ToolResult:
            workspace = self._workspace(name)
            change = await asyncio.to_thread(planners[name], workspace, self.grant, arguments)
            verb = "would change" if self.grant.patch_only else "changes"
            return ToolResult(
                f"{name} {verb} {change.path}:\n{change.diff or '(no difference)'}",
                changes=(change,),
            )

        return await self._guarded(name, plan)

    async def apply(self, planned: ToolResult) -> ToolResult:
        """Apply a planned result's changes (each idempotent: a change already made is kept)."""

        async def apply() -> ToolResult:
            workspace = self._workspace("Write")
            done: list[FileChange] = []
            for change in planned.changes:
                done.append(await asyncio.to_thread(apply_change, workspace, change))
            text = "\n".join(f"changed {c.path}" for c in done) or "nothing to change"
            return ToolResult(text, changes=tuple(done))

        return await self._guarded("apply", apply)

    def hold(self, planned: ToolResult) -> None:
        """Patch-only: keep a planned result's changes as pending, unwritten, so that the
        agent's later Read, LS, Glob, Grep and edits of those files see them."""
        if self.workspace is None:
            return
        for change in planned.changes:
            if change.content is not None:
                self.workspace.pending[change.path] = change.content

    async def aclose(self) -> None:
        if self._own_client is not None:
            await self._own_client.aclose()
            self._own_client = None

    async def _guarded(
        self, name: str, work: Callable[[], Awaitable[ToolResult | str]]
    ) -> ToolResult:
        if name not in self.tools and name != "apply":
            offered = ", ".join(self.tools) or "none"
            return ToolResult(f"there is no tool {name!r} here (tools: {offered})", is_error=True)
        limit = self.grant.tool_timeout
        try:
            async with asyncio.timeout(limit + 5 if name == "Bash" else limit):
                outcome = await work()
        except ToolRefused as exc:
            return ToolResult(str(exc), is_error=True)
        except TimeoutError:
            return ToolResult(f"{name} took longer than {limit:g} s and was stopped", is_error=True)
        except (OSError, UnicodeError, LatticeRunError) as exc:
            return ToolResult(f"{name} failed: {exc}", is_error=True)
        return outcome if isinstance(outcome, ToolResult) else ToolResult(outcome)

    async def _run(self, name: str, arguments: dict[str, Any]) -> ToolResult | str:
        grant = self.grant
        if name == "Bash":
            return await self._bash(arguments)
        if name == "WebFetch":
            client = self._client()
            return await fetch(client, arguments, grant.max_read_bytes, grant.tool_timeout)
        readers = {"Read": read, "LS": list_dir, "Glob": glob, "Grep": grep}
        return await asyncio.to_thread(readers[name], self._workspace(name), grant, arguments)

    async def _bash(self, arguments: dict[str, Any]) -> ToolResult:
        command = arguments.get("command")
        if not isinstance(command, str) or not command.strip():
            raise ToolRefused("'command' must be a non-empty string")
        self._workspace("Bash")
        limit = self.grant.tool_timeout
        asked = arguments.get("timeout")
        if isinstance(asked, int) and not isinstance(asked, bool) and asked > 0:
            limit = min(limit, asked / 1000)
        outcome = await run_command(self.grant, command, limit, read_only=self.read_only_shell)
        return ToolResult(outcome.describe(limit), is_error=outcome.failed)

    def _workspace(self, name: str) -> Workspace:
        if self.workspace is None:
            raise ToolRefused(f"{name} needs a workspace, and none is granted")
        return self.workspace

    def _client(self) -> httpx.AsyncClient:
        if self._http_client is not None:
            return self._http_client()
        if self._own_client is None:
            from lattice.tools.http import HttpPolicy

            self._own_client = httpx.AsyncClient(transport=HttpPolicy().transport_for_run())
        return self._own_client


class McpToolset:
    """One configured MCP server's tools, offered as ``mcp__<server>__<tool>``.

    ``tools`` are the names asked for: one tool (``mcp__<server>__<tool>``) or all of
    them (``mcp__<server>``, ``mcp__<server>__*``); ``granted`` narrows them to the tools
    the user granted (None: the whole server).
    """

    def __init__(
        self,
        sessions: ToolSessions,
        server: str,
        tools: Sequence[str] = (),
        granted: frozenset[str] | None = None,
    ) -> None:
        self.sessions = sessions
        self.server = server
        self.name = f"mcp__{server}"
        self._granted = granted
        asked = [parse_mcp_name(name) for name in tools]
        self._everything = not tools or any(p is not None and p[1] is None for p in asked)
        self._wanted = frozenset(p[1] for p in asked if p is not None and p[1] is not None)

    def _offers(self, tool: str) -> bool:
        asked = self._everything or tool in self._wanted
        return asked and (self._granted is None or tool in self._granted)

    async def list_tools(self) -> list[ToolDef]:
        specs = await self.sessions.list_tools(self.server)
        return [
            replace(spec, name=f"mcp__{self.server}__{spec.name}")
            for spec in specs
            if self._offers(spec.name)
        ]

    async def call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        parts = split_mcp_name(name)
        if parts is None or parts[0] != self.server or not self._offers(parts[1]):
            return ToolResult(
                f"{name!r} is not a tool of MCP server {self.server!r}", is_error=True
            )
        try:
            value = await self.sessions.call(self.server, parts[1], arguments)
        except LatticeRunError as exc:
            return ToolResult(str(exc), is_error=True)
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        return ToolResult(text)

    async def aclose(self) -> None:
        """The run's ``ToolSessions`` owns the sessions and closes them."""


def workspace_toolsets(
    grant: WorkspaceGrant,
    tools: Sequence[str],
    *,
    http_client: Callable[[], httpx.AsyncClient] | None = None,
    mcp: ToolSessions | None = None,
    read_only_shell: bool = False,
) -> Iterator[Toolset]:
    """The toolsets for an agent node whose granted tool names are ``tools``
    (``read_only_shell``: its Bash cannot change the workspace), opened one at a time:
    a caller that takes charge of each as it comes closes those already opened when a
    later one fails to open."""
    servers: dict[str, list[str]] = {}
    for name in tools:
        parts = parse_mcp_name(name)
        if parts is not None and grant.mcp_tools(parts[0]) != frozenset():
            servers.setdefault(parts[0], []).append(name)
    if servers and mcp is None:
        raise ValueError("MCP tools were granted but no MCP sessions were given")
    built_in = [name for name in tools if name in CLAUDE_CODE_TOOLS]
    if built_in:
        yield WorkspaceToolset(
            grant, built_in, http_client=http_client, read_only_shell=read_only_shell
        )
    for server, names in servers.items():
        assert mcp is not None
        yield McpToolset(mcp, server, names, grant.mcp_tools(server))

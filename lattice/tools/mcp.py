"""MCP tool calls over the official ``mcp`` SDK, one session per server per run.

Servers are declared in the user's ``lattice.toml`` (``[mcp.servers.<id>]``: ``command`` +
``args`` + ``env`` for stdio, or ``url`` for streamable HTTP), never in a workflow
document. A run opens a server's session on first use, reuses it for every call to
that server, and closes all of them when it ends (also on failure). The server id
``lattice`` is reserved for Lattice's built-in tools (``lattice.tools.builtin``).

Errors become ``LatticeRunError``: a server that does not start, an unknown tool,
arguments that break the tool's ``inputSchema``, a call that times out
(``timeout_error``) and a tool result with ``isError`` (``tool_error`` carrying the
server's text).
"""

from __future__ import annotations

import asyncio
import os
import re
import threading
from collections.abc import Callable, Mapping
from contextlib import AsyncExitStack, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TextIO

from lattice.errors import ErrorType, LatticeRunError, install_hint
from lattice.events import EventKind
from lattice.llm.base import ToolDef
from lattice.schemas import schema_errors, schema_problems, schema_validator, uses_patterns
from lattice.text import unicode_text, unicode_value

BUILTIN_SERVER_ID = "lattice"
ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
"""An ``env`` value that is exactly ``${NAME}``: passed on from Lattice's environment."""
_UNSAFE_IN_FILE_NAMES = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class McpServerSpec:
    """How to reach one configured server."""

    server_id: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    url: str | None = None
    timeout: float = 30.0
    """Seconds for connecting and for each call."""

    def describe(self) -> str:
        if self.url:
            return self.url
        return " ".join([self.command or "", *self.args]).strip()

    def env_references(self) -> tuple[str, ...]:
        """The variables of Lattice's environment that ``env`` values name as ``${NAME}``."""
        return tuple(m.group(1) for v in self.env.values() if (m := ENV_REFERENCE.fullmatch(v)))

    def resolved_env(self) -> dict[str, str]:
        """``env`` with each ``${NAME}`` value read from Lattice's environment."""
        resolved = {}
        for key, value in self.env.items():
            match = ENV_REFERENCE.fullmatch(value)
            if match is None:
                resolved[key] = value
                continue
            name = match.group(1)
            found = os.environ.get(name)
            if found is None:
                raise tool_error(
                    self.server_id,
                    f"env {key} = ${{{name}}}, but the environment variable {name} is not set",
                )
            resolved[key] = found
        return resolved


class ToolServer(Protocol):
    """A connected tool server (an MCP session or the built-in one)."""

    async def list_tools(self) -> list[ToolDef]: ...

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any: ...

    async def aclose(self) -> None: ...


def tool_error(server_id: str, message: str, **details: Any) -> LatticeRunError:
    return LatticeRunError(
        f"MCP server {server_id!r}: {message}",
        error_type=ErrorType.TOOL_ERROR,
        details={"server": server_id, **details},
    )


class ServerLog:
    """A stdio server's stderr, copied line by line through ``redact`` into ``path``.

    ``writer`` is the write end of a pipe, handed to the server process as its stderr;
    a thread reads the other end (the file is created at the first line). The parent's
    copy of the write end is released once the process has started, so the copy ends
    when the server exits.
    """

    def __init__(self, path: Path, redact: Callable[[str], str]) -> None:
        self.path = path
        self._redact = redact
        read_fd, write_fd = os.pipe()
        self.writer: TextIO = os.fdopen(write_fd, "w")
        self._reader = threading.Thread(
            target=self._copy, args=(read_fd,), name=f"mcp-stderr-{path.stem}", daemon=True
        )
        self._reader.start()

    def _copy(self, read_fd: int) -> None:
        with os.fdopen(read_fd, encoding="utf-8", errors="replace") as source:
            sink: TextIO | None = None
            try:
                for line in source:
                    if sink is None:
                        self.path.parent.mkdir(parents=True, exist_ok=True)
                        sink = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
                    sink.write(self._redact(line))
                    sink.flush()
            finally:
                if sink is not None:
                    sink.close()

    def release_writer(self) -> None:
        if not self.writer.closed:
            self.writer.close()

    def close(self, timeout: float = 5.0) -> None:
        """Wait (at most ``timeout`` s) for the server's last lines."""
        self.release_writer()
        self._reader.join(timeout)


class McpSession:
    """One open session with a configured MCP server (``mcp.Client``).

    ``log``: where a stdio server's stderr goes (None: Lattice's own stderr)."""

    def __init__(self, spec: McpServerSpec, log: ServerLog | None = None) -> None:
        self.spec = spec
        self.log = log
        self._stack = AsyncExitStack()
        self._client: Any = None
        self._tools: list[ToolDef] | None = None

    async def open(self) -> McpSession:
        spec = self.spec
        try:
            from mcp import Client, StdioServerParameters
            from mcp.client.stdio import stdio_client
        except ImportError:
            raise tool_error(
                spec.server_id, f"MCP needs the mcp package: {install_hint('mcp')}"
            ) from None

        target: Any
        if spec.url:
            target = spec.url
        else:
            params = StdioServerParameters(
                command=spec.command or "", args=list(spec.args), env=spec.resolved_env() or None
            )
            target = params if self.log is None else stdio_client(params, errlog=self.log.writer)
        try:
            async with asyncio.timeout(spec.timeout):
                self._client = await self._stack.enter_async_context(
                    Client(target, read_timeout_seconds=spec.timeout)
                )
        except TimeoutError:
            await self._close_quietly()
            raise LatticeRunError(
                f"MCP server {spec.server_id!r} did not answer within {spec.timeout:g} s "
                f"({spec.describe()})",
                error_type=ErrorType.TIMEOUT_ERROR,
                details={"server": spec.server_id},
            ) from None
        except Exception as exc:  # OSError, ExceptionGroup from the transport, MCPError
            await self._close_quietly()
            raise tool_error(
                spec.server_id,
                f"could not start or connect ({spec.describe()}): {_reason(exc)}",
            ) from exc
        finally:
            if self.log is not None:
                self.log.release_writer()  # the process has its own copy by now
        return self

    async def list_tools(self) -> list[ToolDef]:
        if self._tools is None:
            tools: list[ToolDef] = []
            cursor: str | None = None
            while True:
                page = await self._request(self._client.list_tools(cursor=cursor), "list_tools")
                tools += [
                    ToolDef(
                        unicode_text(t.name),
                        unicode_text(t.description or ""),
                        unicode_value(dict(t.input_schema or {})),
                    )
                    for t in page.tools
                ]
                cursor = getattr(page, "next_cursor", None)
                if not cursor:
                    break
            self._tools = tools
        return self._tools

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        """The tool's result (structured content, its text, or its content blocks), each
        lone surrogate in it made U+FFFD; a result marked as an error raises."""
        return unicode_value(await self._call_tool(name, arguments))

    async def _call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        result = await self._request(
            self._client.call_tool(name, arguments, read_timeout_seconds=self.spec.timeout),
            f"tool {name!r}",
        )
        text = "\n".join(
            block.text for block in result.content if getattr(block, "type", None) == "text"
        )
        text = unicode_text(text)
        if result.is_error:
            raise tool_error(
                self.spec.server_id,
                f"tool {name!r} failed: {text or '(no message)'}",
                tool=name,
                text=text,
            )
        if result.structured_content is not None:
            return result.structured_content
        if all(getattr(block, "type", None) == "text" for block in result.content):
            return text
        return [block.model_dump(mode="json", exclude_none=True) for block in result.content]

    async def _request(self, awaitable: Any, what: str) -> Any:
        from mcp.shared.exceptions import MCPError

        server = self.spec.server_id
        try:
            async with asyncio.timeout(self.spec.timeout):
                return await awaitable
        except TimeoutError:
            raise LatticeRunError(
                f"MCP server {server!r}: {what} took longer than {self.spec.timeout:g} s",
                error_type=ErrorType.TIMEOUT_ERROR,
                details={"server": server},
            ) from None
        except MCPError as exc:
            raise tool_error(server, f"{what}: {exc}") from exc
        except (OSError, EOFError, RuntimeError) as exc:
            raise tool_error(server, f"{what}: the connection failed: {_reason(exc)}") from exc

    async def aclose(self) -> None:
        await self._close_quietly()
        if self.log is not None:
            self.log.close()

    async def _close_quietly(self) -> None:
        with suppress(Exception):  # a server that already died cannot be closed more cleanly
            await self._stack.aclose()


class ToolSessions:
    """The tool servers of one run: opened on first use, reused, closed by ``aclose``."""

    def __init__(
        self,
        servers: Mapping[str, McpServerSpec],
        *,
        builtin: ToolServer | None = None,
        log_dir: Path | None = None,
        redact: Callable[[str], str] | None = None,
    ) -> None:
        self.servers = servers
        self.builtin = builtin
        self.log_dir = log_dir
        """Where stdio servers' stderr goes, as ``<server>.stderr.log`` (None: Lattice's stderr)."""
        self.redact = redact or (lambda text: text)
        self._open: dict[str, ToolServer] = {}
        self.emit: Callable[[str, dict[str, Any]], Any] = lambda type_, data: None
        """Receives ``tool_session_opened`` events; a run context points it at its event log."""

    async def server(self, server_id: str) -> ToolServer:
        session = self._open.get(server_id)
        if session is not None:
            return session
        spec: McpServerSpec | None = None
        if server_id == BUILTIN_SERVER_ID and self.builtin is not None:
            session = self.builtin
        else:
            spec = self.servers.get(server_id)
            if spec is None:
                configured = ", ".join(sorted(self.servers)) or "none"
                raise tool_error(
                    server_id,
                    "not configured: add [mcp.servers."
                    f"{server_id}] to lattice.toml (configured: {configured})",
                )
            log = None
            if self.log_dir is not None and not spec.url:
                name = _UNSAFE_IN_FILE_NAMES.sub("_", server_id).strip("._") or "_"
                log = ServerLog(self.log_dir / f"{name}.stderr.log", self.redact)
            session = await McpSession(spec, log).open()
        self._open[server_id] = session
        transport = "builtin" if spec is None else ("http" if spec.url else "stdio")
        self.emit(EventKind.TOOL_SESSION_OPENED, {"server": server_id, "transport": transport})
        return session

    async def tool(self, server_id: str, name: str) -> ToolDef:
        """The server's tool ``name``; an unknown tool is a ``tool_error`` listing the others."""
        tools = await (await self.server(server_id)).list_tools()
        for spec in tools:
            if spec.name == name:
                return spec
        names = ", ".join(t.name for t in tools) or "none"
        raise tool_error(server_id, f"has no tool {name!r} (its tools: {names})", tool=name)

    async def list_tools(self, server_id: str) -> list[ToolDef]:
        return await (await self.server(server_id)).list_tools()

    async def call(self, server_id: str, name: str, arguments: dict[str, Any]) -> Any:
        """Check ``arguments`` against the tool's ``inputSchema``, then call it."""
        spec = await self.tool(server_id, name)
        if uses_patterns(spec.input_schema):  # a slow pattern must not hold up the loop
            violations = await asyncio.to_thread(argument_violations, spec.input_schema, arguments)
        else:
            violations = argument_violations(spec.input_schema, arguments)
        if violations:
            raise LatticeRunError(
                f"MCP server {server_id!r}: arguments for tool {name!r} break its inputSchema: "
                + "; ".join(f"{v['pointer']}: {v['message']}" for v in violations[:5]),
                error_type=ErrorType.TOOL_ERROR,
                details={"server": server_id, "tool": name, "violations": violations},
            )
        session = await self.server(server_id)
        return await session.call_tool(name, arguments)

    async def aclose(self) -> None:
        sessions, self._open = list(self._open.values()), {}
        for session in reversed(sessions):
            await session.aclose()


def argument_violations(schema: Mapping[str, Any], arguments: Any) -> list[dict[str, str]]:
    """Every way ``arguments`` breaks ``schema`` (a tool's inputSchema), with JSON pointers."""
    if not schema:
        return []
    import jsonschema  # a heavy module, imported when a tool call is first checked

    problems = schema_problems(schema, meta_schema=False)  # taken as the server wrote it
    if problems:
        where = "".join(f"/{part}" for part in problems[0].path) or "/"
        message = f"the tool's inputSchema cannot be used (at {where}): {problems[0].message}"
        return [{"pointer": "/", "message": message}]
    try:
        # formats stay annotations: the server is the judge of its own arguments
        errors = schema_errors(schema_validator(schema, formats=False), arguments)
    except LatticeRunError as exc:
        return [{"pointer": "/", "message": f"the tool's inputSchema is unusable: {exc}"}]
    except jsonschema.SchemaError as exc:
        return [{"pointer": "/", "message": f"the tool's inputSchema is invalid: {exc.message}"}]
    return [
        {"pointer": "/" + "/".join(str(p) for p in e.absolute_path), "message": e.message}
        for e in sorted(errors, key=lambda e: list(e.absolute_path))
    ]


def specs_from_config(servers: Mapping[str, Any]) -> dict[str, McpServerSpec]:
    """``[mcp.servers]`` of a LatticeConfig as McpServerSpecs."""
    return {
        server_id: McpServerSpec(
            server_id=server_id,
            command=server.command,
            args=tuple(server.args),
            env=dict(server.env),
            url=server.url,
            timeout=server.timeout,
        )
        for server_id, server in servers.items()
    }


def _reason(exc: BaseException) -> str:
    """The innermost useful message of ``exc`` (unwrapping exception groups)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, FileNotFoundError):
        return f"command not found ({exc.filename or exc})"
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 300 else text[:299] + "…"

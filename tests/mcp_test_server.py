"""A small MCP server written with the ``mcp`` SDK's server API, for tests.

Served over streamable HTTP on 127.0.0.1 (``serve_http``) in a background thread, or over
stdio when run as a script (``python tests/mcp_test_server.py``).
Tools: ``add`` (structured result), ``shout`` (text result), ``fail`` (a tool error),
``nap`` (sleeps, for timeouts), a GitHub-like ``get_pull_request``, ``env`` (reads its
own environment) and ``complain`` (writes to its stderr); ``served`` lists
the calls this process answered.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel

served: list[str] = []


class Sum(BaseModel):
    total: float


class PullRequest(BaseModel):
    title: str
    author: str
    number: int
    lines_changed: int
    files: list[str]


def build_server() -> MCPServer:
    server = MCPServer("lattice-test", log_level="WARNING")

    @server.tool(description="Add two numbers.")
    def add(a: float, b: float) -> Sum:
        served.append("add")
        return Sum(total=a + b)

    @server.tool(description="Upper-case a text.", structured_output=False)
    def shout(text: str) -> str:
        served.append("shout")
        return text.upper()

    @server.tool(description="Always fails with the given message.")
    def fail(message: str) -> str:
        served.append("fail")
        raise ToolError(message)

    @server.tool(description="Sleep for some seconds.")
    async def nap(seconds: float) -> str:
        served.append("nap")
        await asyncio.sleep(seconds)
        return "rested"

    @server.tool(description="Get details of a specific pull request.")
    def get_pull_request(owner: str, repo: str, pull_number: int) -> PullRequest:
        served.append("get_pull_request")
        return PullRequest(
            title=f"Fix race in {repo} cache",
            author=owner,
            number=pull_number,
            lines_changed=42,
            files=["cache.py", "tests/test_cache.py"],
        )

    @server.tool(
        description="An environment variable of this server process.", structured_output=False
    )
    def env(name: str) -> str:
        return os.environ.get(name, "(unset)")

    @server.tool(description="Write a line to this server's stderr.", structured_output=False)
    def complain(text: str) -> str:
        print(text, file=sys.stderr, flush=True)
        return "written"

    return server


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serve_http() -> Iterator[str]:
    """Serve the test server on 127.0.0.1; yields its MCP URL."""
    port = free_port()
    app = build_server().streamable_http_app()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test MCP server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


if __name__ == "__main__":
    build_server().run("stdio")

"""WebFetch through the guarded client, and MCP servers' tools under mcp__server__tool names."""

from __future__ import annotations

import asyncio
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest

from lattice.tools.http import HttpPolicy
from lattice.workspace import WorkspaceGrant, WorkspaceToolset, workspace_toolsets

PAGE = b"<html><head><style>p{}</style><script>var secret=1</script></head><body><h1>Title</h1><p>Hello <b>world</b></p></body></html>"


class _Handler(http.server.BaseHTTPRequestHandler):
    hits: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        _Handler.hits.append(self.path)
        if self.path == "/moved":
            self.send_response(302)
            self.send_header("Location", "/page")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def local_site() -> Iterator[str]:
    _Handler.hits = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def fetch(url: str, client: httpx.AsyncClient | None = None) -> Any:
    grant = WorkspaceGrant(web=True)
    factory = None if client is None else (lambda: client)
    tools = WorkspaceToolset(grant, ("WebFetch",), http_client=factory)

    async def go() -> Any:
        try:
            return await tools.call("WebFetch", {"url": url, "prompt": "the greeting"})
        finally:
            await tools.aclose()
            if client is not None:
                await client.aclose()

    return asyncio.run(go())


def test_webfetch_refuses_loopback_by_default_and_sends_nothing(local_site: str) -> None:
    result = fetch(f"{local_site}/page")
    assert result.is_error and "not reachable from agents" in result.text
    assert _Handler.hits == []


def test_webfetch_follows_redirects_where_the_user_allows_and_gives_text(local_site: str) -> None:
    policy = HttpPolicy(allow_hosts=["127.0.0.1"])
    client = httpx.AsyncClient(transport=policy.transport_for_run())
    result = fetch(f"{local_site}/moved", client)
    assert not result.is_error, result.text
    assert _Handler.hits == ["/moved", "/page"]
    assert result.text.splitlines()[1:] == ["[asked: the greeting]", "Title", "Hello world"]
    assert "secret" not in result.text


def test_mcp_tools_are_offered_under_claude_code_names(tmp_path: Path) -> None:
    import sys

    from lattice.tools.mcp import McpServerSpec, ToolSessions

    server = Path(__file__).resolve().parent.parent / "mcp_test_server.py"
    spec = McpServerSpec("demo", command=sys.executable, args=(str(server),))
    grant = WorkspaceGrant(mcp_servers=("demo",))

    async def go() -> tuple[list[str], Any, Any]:
        sessions = ToolSessions({"demo": spec})
        try:
            (toolset,) = workspace_toolsets(grant, ["mcp__demo__shout"], mcp=sessions)
            names = [t.name for t in await toolset.list_tools()]
            ok = await toolset.call("mcp__demo__shout", {"text": "hi"})
            bad = await toolset.call("mcp__other__echo", {"text": "hi"})
            return names, ok, bad
        finally:
            await sessions.aclose()

    names, ok, bad = asyncio.run(go())
    assert names == ["mcp__demo__shout"]
    assert not ok.is_error and ok.text == "HI"
    assert bad.is_error


def test_mcp_tools_of_a_server_not_granted_are_left_out() -> None:
    assert list(workspace_toolsets(WorkspaceGrant(), ["mcp__demo__echo"])) == []

"""The gateway's ``/mcp`` (Streamable HTTP, behind its token) driven by the MCP SDK's
client: the example workflows as tools, a call to completion, a question answered, a
cancelled call; a request without the token is refused."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from lattice.server.app import ServerSettings
from lattice.server.in_thread import serve_in_thread
from tests.conftest import EXAMPLES

TOKEN = "s3cret-token"
KEY = "sk-ant-test-4f9c2b7e1d8a6035"
"""A provider key: its value is masked wherever a caller would read it."""
EXPENSE = json.loads((EXAMPLES / "expense-approval.inputs.json").read_text(encoding="utf-8"))


def settings(runs: Path) -> ServerSettings:
    return ServerSettings(runs_dir=runs, workflows_dir=EXAMPLES, token=TOKEN, mocks=True)


@asynccontextmanager
async def client(url: str, **options: Any) -> AsyncIterator[Client]:
    """The MCP SDK's client of the gateway's ``/mcp``, sending the token."""
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(headers=headers, timeout=60) as http:
        transport = streamable_http_client(f"{url}/mcp", http_client=http)
        async with Client(transport, read_timeout_seconds=60, **options) as mcp:
            yield mcp


def checkpoint(runs: Path, run_id: str) -> dict[str, Any]:
    return json.loads((runs / run_id / "checkpoint.json").read_text(encoding="utf-8"))


def test_the_gateway_serves_the_examples_as_tools_behind_its_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)

    async def go(url: str) -> None:
        async with client(url) as mcp:
            listed = {tool.name: tool for tool in (await mcp.list_tools()).tools}
            assert {"hello-world", "expense-approval", "answer"} <= set(listed)
            assert listed["expense-approval"].input_schema["required"] == [
                "employee",
                "amount",
                "purpose",
            ]
            done = await mcp.call_tool("hello-world", {"name": "Ada"})
            assert done.structured_content is not None
            assert done.structured_content["status"] == "completed"
            assert checkpoint(tmp_path, done.structured_content["run_id"])["meta"][
                "started_by"
            ] == {"via": "mcp", "tool": "hello-world"}

            refused = await mcp.call_tool("hello-world", {"name": "Ada", KEY: 1})
            assert refused.is_error and "***" in str(refused.content)
            assert KEY not in str(refused.content)
            asked = await mcp.call_tool("expense-approval", {**EXPENSE, "employee": KEY})
            waiting = asked.structured_content
            assert waiting is not None and waiting["question"]["node_id"] == "approve"
            answered = await mcp.call_tool(
                "answer", {"run_id": waiting["run_id"], "answers": {"approve": "Approve"}}
            )
            assert answered.structured_content is not None
            assert answered.structured_content["output"].startswith("Approved: *** is paid")
            assert KEY not in str(answered.content)  # a secret never reaches a response

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"answer": "Reject"})

    async def elicited(url: str) -> None:
        async with client(url, elicitation_callback=elicit) as mcp:
            result = await mcp.call_tool("expense-approval", EXPENSE)
            assert result.structured_content is not None
            assert result.structured_content["status"] == "completed"
            assert result.structured_content["output"].startswith("Rejected")

    with serve_in_thread(settings(tmp_path)) as url:
        anyio.run(elicited, url)
        refused = httpx.post(f"{url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert refused.status_code == 401
        anyio.run(go, url)


def test_cancelling_a_call_at_the_gateway_stops_its_run(tmp_path: Path) -> None:
    from dataclasses import replace

    progressed = anyio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        progressed.set()

    async def go(url: str) -> None:
        async with client(url) as mcp:
            inputs = json.loads((EXAMPLES / "brainstorm-ideas.inputs.json").read_text())
            async with anyio.create_task_group() as group:

                async def call() -> None:
                    await mcp.call_tool("brainstorm-ideas", inputs, progress_callback=on_progress)

                group.start_soon(call)
                await progressed.wait()
                group.cancel_scope.cancel()
            for _ in range(600):
                runs = [p for p in tmp_path.iterdir() if p.is_dir() and not p.name.startswith(".")]
                if runs and checkpoint(tmp_path, runs[0].name).get("status") == "interrupted":
                    break
                await asyncio.sleep(0.05)
            assert len(runs) == 1
            assert checkpoint(tmp_path, runs[0].name)["status"] == "interrupted"

    slow = replace(settings(tmp_path), mock_latency=0.3)
    with serve_in_thread(slow) as url:
        anyio.run(go, url)

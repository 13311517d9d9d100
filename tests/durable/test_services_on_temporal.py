"""The services of ``lattice serve --engine temporal``: two gateway replicas over one
Temporal server serve the example workflows as MCP tools at ``/mcp`` (the MCP SDK's
client over HTTP: a call to completion, a question answered through the other replica)
and a signed webhook, whose delivery starts one run however many replicas it reaches;
a schedule is refused, not ignored."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from lattice.config import LatticeConfig
from lattice.errors import LatticeUserError
from lattice.server.app import ServerSettings, create_app
from lattice.server.in_thread import serve_in_thread
from lattice.services.webhooks import sign
from tests.conftest import EXAMPLES
from tests.durable.helpers import worker_process

pytest.importorskip("temporalio")

from lattice.durable.temporal.backend import TemporalRuns

TOKEN = "gateway-token"
SECRET = "whsec-test-0123456789"
WAIT = 120.0
"""Seconds a run may take at most on a loaded machine (a bound, not a timing)."""
EXPENSE = json.loads((EXAMPLES / "expense-approval.inputs.json").read_text(encoding="utf-8"))
CONFIG = {
    "triggers": {
        "greet": {
            "path": "greet",
            "workflow": "hello-world.json",
            "inputs": {"name": "body.sender.login"},
            "secret_env": "LATTICE_TEST_HOOK_SECRET",
        }
    }
}


def settings(address: str, queue: str, runs_dir: Path, config: Any = CONFIG) -> ServerSettings:
    return ServerSettings(
        runs_dir=runs_dir,
        workflows_dir=EXAMPLES,
        config=LatticeConfig.model_validate(config),
        token=TOKEN,
        mocks=True,
        backend=TemporalRuns(address, task_queue=queue),
    )


@pytest.fixture
def replicas(
    temporal_address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[list[str]]:
    """Two gateways over one Temporal server, and one worker."""
    monkeypatch.setenv("LATTICE_TEST_HOOK_SECRET", SECRET)
    queue = f"svc-{uuid.uuid4().hex[:10]}"
    worker = worker_process(temporal_address, queue, tmp_path)
    try:
        with ExitStack() as stack:
            yield [
                stack.enter_context(
                    serve_in_thread(settings(temporal_address, queue, tmp_path / name))
                )
                for name in ("a", "b")
            ]
    finally:
        worker.kill()
        worker.wait()


@asynccontextmanager
async def client(url: str) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(headers=headers, timeout=WAIT) as http:
        transport = streamable_http_client(f"{url}/mcp", http_client=http)
        async with Client(transport, read_timeout_seconds=WAIT) as mcp:
            yield mcp


def run_of(url: str, run_id: str) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    response = httpx.get(f"{url}/v1/runs/{run_id}", headers=headers, timeout=WAIT)
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_the_replicas_serve_the_workflows_as_tools(replicas: list[str]) -> None:
    a, b = replicas

    async def go() -> None:
        async with client(a) as mcp:
            listed = {tool.name for tool in (await mcp.list_tools()).tools}
            assert {"hello-world", "expense-approval", "answer"} <= listed
            done = await mcp.call_tool("hello-world", {"name": "Ada"})
            assert done.structured_content is not None, done.content
            assert done.structured_content["status"] == "completed"
            asked = await mcp.call_tool("expense-approval", EXPENSE)
            waiting = asked.structured_content
            assert waiting is not None and waiting["question"]["node_id"] == "approve"
        assert run_of(b, done.structured_content["run_id"])["status"] == "completed"
        async with client(b) as mcp:  # the other replica answers it: the run is Temporal's
            answered = await mcp.call_tool(
                "answer", {"run_id": waiting["run_id"], "answers": {"approve": "Approve"}}
            )
        out = answered.structured_content
        assert out is not None and out["status"] == "completed", answered.content
        assert out["output"].startswith("Approved:")
        assert run_of(a, waiting["run_id"])["status"] == "completed"

    asyncio.run(go())


def signed(body: bytes, delivery: str) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {TOKEN}",
        "Content-Type": "application/json",
        "X-Lattice-Signature": sign(SECRET.encode(), body, timestamp=int(time.time())),
        "X-Lattice-Delivery": delivery,
    }


def test_a_delivery_starts_one_run_whichever_replicas_it_reaches(replicas: list[str]) -> None:
    a, b = replicas
    body = json.dumps({"sender": {"login": "ada"}}).encode()
    first = httpx.post(f"{a}/hooks/greet", content=body, headers=signed(body, "d-1"), timeout=WAIT)
    assert first.status_code == 202, first.text
    run_id = first.json()["run_id"]
    deadline = time.monotonic() + WAIT
    while (run := run_of(b, run_id))["status"] == "running":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert run["status"] == "completed"
    # the same delivery at the other replica (its ledger never saw it), after the run
    # ended: Temporal refuses a second run of that id
    again = httpx.post(f"{b}/hooks/greet", content=body, headers=signed(body, "d-1"), timeout=WAIT)
    assert again.status_code == 409, again.text
    assert again.json()["error"] == "repeated_delivery"
    assert run_id in again.json()["message"]
    grace = json.dumps({"sender": {"login": "grace"}}).encode()
    other = httpx.post(
        f"{b}/hooks/greet", content=grace, headers=signed(grace, "d-2"), timeout=WAIT
    )
    assert other.status_code == 202, other.text
    assert other.json()["run_id"] != run_id
    assert "Ada" in str(run["output"])


def test_a_schedule_on_temporal_is_refused(temporal_address: str, tmp_path: Path) -> None:
    config = {
        "schedules": {"nightly": {"workflow": "hello-world.json", "cron": "0 3 * * *"}},
    }
    with pytest.raises(LatticeUserError, match=r"\[schedules.nightly\].*temporal"):
        create_app(settings(temporal_address, "q", tmp_path, config))


def test_cancelling_a_call_stops_its_run_on_temporal(temporal_address: str, tmp_path: Path) -> None:
    queue = f"svc-{uuid.uuid4().hex[:10]}"
    slow = replace(
        settings(temporal_address, queue, tmp_path, {}), mock_latency=3.0
    )  # 12 s of calls: the cancel lands first, even on a loaded machine
    inputs = json.loads((EXAMPLES / "brainstorm-ideas.inputs.json").read_text(encoding="utf-8"))
    headers = {"Authorization": f"Bearer {TOKEN}"}
    mine = {"workflow": "brainstorm-ideas", "status": "running"}  # the server is shared

    async def go(url: str) -> str:
        async with client(url) as mcp:
            call = asyncio.ensure_future(mcp.call_tool("brainstorm-ideas", inputs))
            deadline = time.monotonic() + WAIT
            while not (
                runs := httpx.get(
                    f"{url}/v1/runs", params=mine, headers=headers, timeout=WAIT
                ).json()["runs"]
            ):
                assert time.monotonic() < deadline and not call.done()
                await asyncio.sleep(0.1)
            call.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await call
        return str(runs[0]["run_id"])

    worker = worker_process(temporal_address, queue, tmp_path)
    try:
        with serve_in_thread(slow) as url:
            run_id = asyncio.run(go(url))
            deadline = time.monotonic() + WAIT
            while (run := run_of(url, run_id))["status"] == "running":
                assert time.monotonic() < deadline
                time.sleep(0.2)
            assert run["status"] == "interrupted"
    finally:
        worker.kill()
        worker.wait()

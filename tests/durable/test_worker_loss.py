"""A worker killed with ``kill -9`` in the middle of runs: another worker finishes them,
with the local engine's outputs, and no model call whose answer was recorded is sent again
(counted at a local OpenAI-compatible server)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from lattice.lower.compiler import lower_document
from lattice.runs.store import RunStore
from lattice.runtime.runner import Runner
from lattice.service.providers import make_provider
from tests.fake_llm_server import serve, two_step_answer, two_step_document

pytest.importorskip("temporalio")

from lattice.durable.temporal.client import connect, follow, start_run
from lattice.durable.temporal.plan import ActivityOptions

RUNS = 5
HEARTBEAT = 3.0
"""Seconds without a heartbeat after which an op's worker counts as lost."""
WAIT = 60.0
"""Seconds a step may take at most on a loaded machine (a bound, not a timing)."""


class HoldingServer:
    """Answers as ``two_step_answer``; from the first SUMMARY request on, holds every
    request until ``release`` is set: those are the calls in flight when the worker dies.
    Each prompt's sends are counted, split at the kill."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.holding = False
        self.release = threading.Event()
        self.killed = False
        self.answered_before: list[str] = []
        self.held: list[str] = []
        self.sent_after: list[str] = []

    def __call__(self, body: dict[str, Any]) -> str:
        prompt = "\n".join(m["content"] for m in body["messages"] if m["role"] == "user")
        with self.lock:
            if self.killed:
                self.sent_after.append(prompt)
                hold = False
            else:
                self.holding = self.holding or "SUMMARY of" in prompt
                hold = self.holding
                (self.held if hold else self.answered_before).append(prompt)
        if hold:
            self.release.wait(WAIT)
        return two_step_answer(body)


def worker_process(address: str, queue: str, base_url: str, cwd: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "LATTICE_CONFIG"}
    env |= {"OPENAI_BASE_URL": base_url + "/v1", "OPENAI_API_KEY": "sk-test"}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "lattice.cli",
            "worker",
            "--temporal",
            address,
            "--task-queue",
            queue,
        ],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def wait_for(check: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not check():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


def test_a_killed_worker_loses_no_recorded_call(
    temporal_address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ir = lower_document(two_step_document()).ir
    assert ir is not None
    topics = [f"topic {i}" for i in range(RUNS)]
    with serve(two_step_answer) as reference:
        monkeypatch.setenv("OPENAI_BASE_URL", reference.base_url + "/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        local = [
            Runner(ir, provider=make_provider("openai"), store=RunStore(None)).run({"topic": t})
            for t in topics
        ]
    holding = HoldingServer()
    queue = f"test-{uuid.uuid4().hex[:12]}"
    ids = [f"kill-{uuid.uuid4().hex[:10]}" for _ in topics]
    with serve(holding) as server:
        first = worker_process(temporal_address, queue, server.base_url, tmp_path)
        second: subprocess.Popen[bytes] | None = None
        try:

            async def start() -> Any:
                client = await connect(temporal_address)
                for rid, topic in zip(ids, topics, strict=True):
                    await start_run(
                        client,
                        ir,
                        run_id=rid,
                        inputs={"topic": topic},
                        provider={"provider_arg": "openai"},
                        activity=ActivityOptions(heartbeat_seconds=HEARTBEAT),
                        task_queue=queue,
                    )
                return client

            client = asyncio.run(start())
            wait_for(lambda: holding.holding, "a SUMMARY call to be in flight")

            async def recorded_calls() -> int:
                client = await connect(temporal_address)
                total = 0
                for rid in ids:
                    progress = await client.get_workflow_handle(rid).query("progress", 0)
                    total += sum(1 for e in progress["events"] if e["type"] == "llm_response")
                return total

            # every answer the server gave is recorded in a workflow before the kill
            wait_for(
                lambda: asyncio.run(recorded_calls()) == len(holding.answered_before),
                "the answered calls to be recorded",
            )
            with holding.lock:
                first.send_signal(signal.SIGKILL)
                first.wait(WAIT)
                holding.killed = True
            holding.release.set()
            second = worker_process(temporal_address, queue, server.base_url, tmp_path)

            async def results() -> list[dict[str, Any]]:
                client = await connect(temporal_address)
                return [
                    await asyncio.wait_for(follow(client.get_workflow_handle(rid)), WAIT)
                    for rid in ids
                ]

            outcomes = asyncio.run(results())
        finally:
            for process in (first, second):
                if process is not None and process.poll() is None:
                    process.kill()
                    process.wait()
    assert client is not None
    assert [o["status"] for o in outcomes] == ["completed"] * RUNS
    assert [o["output"] for o in outcomes] == [r.output for r in local]
    assert holding.held, "the worker was not killed in the middle of a call"
    assert holding.answered_before, "the worker was killed before any call was recorded"
    for prompt in holding.answered_before:  # recorded: never sent again
        assert prompt not in holding.sent_after
    # in flight at the kill, so never recorded: sent again (more than once only when a
    # loaded worker missed its heartbeats and Temporal started the op once more)
    assert set(holding.sent_after) == set(holding.held)
    assert {*holding.answered_before, *holding.held} == {
        *(f"OUTLINE the topic <{t}>" for t in topics),
        *(f"SUMMARY of <{t.title()}>" for t in topics),
    }

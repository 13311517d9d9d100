"""A worker killed with ``kill -9`` in the middle of 20 runs: another worker finishes them,
with the local engine's outputs, and no model call whose answer was recorded is sent again
(counted at a local OpenAI-compatible server), the first call of an op killed between
its two calls (a repair) included. The runs' payloads, the ops' journals among them,
are encrypted with the payload codec."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from lattice.llm.fake_server import serve
from lattice.lower.compiler import lower_document
from lattice.runs.store import RunStore
from lattice.runtime.runner import Runner
from lattice.service.providers import make_provider
from tests.durable.helpers import worker_process
from tests.two_step import two_step_answer, two_step_document

pytest.importorskip("temporalio")

from lattice.durable.temporal.client import connect, follow, start_run
from lattice.durable.temporal.plan import ActivityOptions

RUNS = 20
HEARTBEAT = 3.0
"""Seconds without a heartbeat after which an op's worker counts as lost."""
WAIT = 90.0
"""Seconds a step may take at most on a loaded machine (a bound, not a timing)."""
KINDS = ("done", "plain", "repair", "repair")
"""Run ``i`` is of kind ``KINDS[i % 4]``: ``done`` completes before the kill; ``plain``
dies with its summary call in flight; ``repair`` dies between the two calls of its
summary op (the first answer breaks the schema, the repair is in flight)."""


def request_key(body: dict[str, Any]) -> str:
    """A request as the server tells requests apart (its whole conversation)."""
    return json.dumps(body["messages"], sort_keys=True)


def answer(body: dict[str, Any]) -> str:
    """``two_step_answer``, but a ``repair`` run's first summary breaks the schema."""
    user = "\n".join(m["content"] for m in body["messages"] if m["role"] == "user")
    if user.startswith("SUMMARY of <Repair"):  # the first call (a repair quotes it inside)
        return json.dumps({"summary": 5})
    return two_step_answer(body)


class HoldingServer:
    """Answers as ``answer``; holds every summary request that would complete a
    ``plain`` or ``repair`` run's summary op until ``release`` is set: those are the
    calls in flight when the worker dies. Requests are counted, split at the kill."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.release = threading.Event()
        self.killed = False
        self.answered_before: list[str] = []
        self.held: list[str] = []
        self.sent_after: list[str] = []

    def __call__(self, body: dict[str, Any]) -> str:
        text = answer(body)
        user = "\n".join(m["content"] for m in body["messages"] if m["role"] == "user")
        completes = "SUMMARY of" in user and '"summary": 5' not in text
        key = request_key(body)
        with self.lock:
            if self.killed:
                self.sent_after.append(key)
                hold = False
            else:
                hold = completes and "SUMMARY of <Done" not in user
                (self.held if hold else self.answered_before).append(key)
        if hold:
            self.release.wait(WAIT)
        return text


def openai_worker(address: str, queue: str, base_url: str, cwd: Path) -> subprocess.Popen[bytes]:
    """A worker whose OpenAI provider is the local server at ``base_url``."""
    env = {"OPENAI_BASE_URL": base_url + "/v1", "OPENAI_API_KEY": "sk-test"}
    return worker_process(address, queue, cwd, env)


def wait_for(check: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not check():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.1)


async def recorded_answers(client: Any, ids: list[str]) -> tuple[int, int]:
    """The model answers the runs have recorded: in the results of their ops, and in the
    journals (heartbeat details) of their ops in flight; and how many runs completed."""
    total = completed = 0
    for rid in ids:
        handle = client.get_workflow_handle(rid)
        progress = await handle.query("progress", 0)
        total += sum(1 for e in progress["events"] if e["type"] == "llm_response")
        completed += progress["result"] is not None
        described = await handle.describe()
        for pending in described.raw_description.pending_activities:
            raw = pending.heartbeat_details.payloads
            assert all(p.metadata["encoding"] == b"binary/encrypted" for p in raw)
            details = await client.data_converter.decode(raw)
            if details:
                total += sum(1 for line in details[0] if line.get("kind") == "answer")
    return total, completed


def test_a_killed_worker_loses_no_recorded_call(
    temporal_address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ir = lower_document(two_step_document()).ir
    assert ir is not None
    topics = [f"{KINDS[i % len(KINDS)]} {i}" for i in range(RUNS)]
    with serve(answer) as reference:
        monkeypatch.setenv("OPENAI_BASE_URL", reference.base_url + "/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        local = [
            Runner(ir, provider=make_provider("openai"), store=RunStore(None)).run({"topic": t})
            for t in topics
        ]
    repairs = sum(1 for t in topics if t.startswith("repair"))
    assert [r.status for r in local] == ["completed"] * RUNS
    # the journals travel encrypted, as everything else (the workers inherit the key)
    monkeypatch.setenv("LATTICE_TEMPORAL_KEY", base64.b64encode(os.urandom(32)).decode())
    # every held call is in flight at once: no provider slot may keep one waiting
    (tmp_path / "lattice.toml").write_text(
        "[providers.openai]\nmax_concurrency = 64\n", encoding="utf-8"
    )
    holding = HoldingServer()
    queue = f"test-{uuid.uuid4().hex[:12]}"
    ids = [f"kill-{uuid.uuid4().hex[:10]}" for _ in topics]
    in_flight = sum(1 for t in topics if not t.startswith("done"))
    with serve(holding) as server:
        first = openai_worker(temporal_address, queue, server.base_url, tmp_path)
        second: subprocess.Popen[bytes] | None = None
        try:

            async def start() -> None:
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

            asyncio.run(start())
            wait_for(lambda: len(holding.held) == in_flight, "every run's last call in flight")

            async def settled() -> bool:
                client = await connect(temporal_address)
                recorded, completed = await recorded_answers(client, ids)
                return recorded == len(holding.answered_before) and completed == RUNS - in_flight

            # every answer the server gave is recorded, in a run or in an op's journal
            wait_for(lambda: asyncio.run(settled()), "the answered calls to be recorded")
            with holding.lock:
                first.send_signal(signal.SIGKILL)
                first.wait(WAIT)
                holding.killed = True
            holding.release.set()
            second = openai_worker(temporal_address, queue, server.base_url, tmp_path)

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
    assert [o["status"] for o in outcomes] == ["completed"] * RUNS
    assert [o["output"] for o in outcomes] == [r.output for r in local]
    assert len(holding.held) == in_flight
    # recorded (in an op's result, or in the journal of an op in flight): never sent again
    resent = [key for key in holding.answered_before if key in holding.sent_after]
    assert resent == []
    first_of_repairs = [
        key for key in holding.answered_before if '"content": "SUMMARY of <Repair' in key
    ]
    assert len(first_of_repairs) == repairs == RUNS // 2  # killed between two calls
    # in flight at the kill, so never answered: sent again (more than once only when a
    # loaded worker missed its heartbeats and Temporal started the op once more)
    assert set(holding.sent_after) == set(holding.held)

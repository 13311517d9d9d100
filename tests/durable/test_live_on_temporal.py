"""An op's events and its streamed answer, seen while it runs on a worker (``live.py``):
read by the gateway from the op's heartbeats, as ``GET /v1/runs/{id}/live`` and as
``llm_delta`` messages of the event stream with ``?deltas=1``."""

from __future__ import annotations

import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from lattice.server.in_thread import serve_in_thread
from tests.builders import chain, node
from tests.durable.test_gateway import WAIT, gateway, workers
from tests.server.helpers import read_sse

pytest.importorskip("temporalio")

ANSWER = "Tea is a drink made by pouring hot water over cured leaves. " * 4


def test_an_ops_model_call_and_its_answer_are_seen_while_it_runs(
    temporal_address: str, tmp_path: Path
) -> None:
    queue = f"live-{uuid.uuid4().hex[:10]}"
    doc = chain(node("draft", "prompt", prompt="Write about tea"))
    body = {
        "document": doc,
        "inputs": {},
        "mock_script": {"responses": {"draft": [ANSWER]}},
        "mock_latency_ms": 8000,  # the answer streams in 8 pieces over 8 seconds
        "mock_pieces": 8,
    }
    with ExitStack() as stack:
        stack.enter_context(workers(temporal_address, queue, tmp_path, 1))
        base = stack.enter_context(serve_in_thread(gateway(temporal_address, queue, tmp_path)))
        client = stack.enter_context(httpx.Client(base_url=base, timeout=WAIT))
        run_id = client.post("/v1/runs", json=body).json()["run_id"]
        deadline = time.monotonic() + WAIT
        seen: dict[str, Any] = {}
        while not seen:  # the op's model call, and part of its answer, before it ends
            assert time.monotonic() < deadline, "nothing of the op was seen while it ran"
            live = client.get(f"/v1/runs/{run_id}/live")
            assert live.status_code == 200, live.text
            for op in live.json()["ops"]:
                types = [e["type"] for e in op["events"]]
                if op["op_id"] == "draft" and "llm_request" in types and op["text"]:
                    seen = op
            time.sleep(0.2)
        assert ANSWER.startswith(seen["text"]) and len(seen["text"]) < len(ANSWER)
        recorded = client.get(f"/v1/runs/{run_id}").json()
        assert recorded["status"] == "running"  # its events are not the run's yet
        pieces: list[str] = []
        ended = None
        with client.stream("GET", f"/v1/runs/{run_id}/events", params={"deltas": 1}) as stream:
            for message in read_sse(stream):
                if message.event == "llm_delta":
                    assert message.data["op_id"] == "draft"
                    pieces.append(message.data["data"]["text"])
                elif message.event == "end":
                    ended = message.data["status"]
                    break
        assert ended == "completed"
        assert pieces and ANSWER.startswith("".join(pieces))
        assert client.get(f"/v1/runs/{run_id}/live").json()["ops"] == []

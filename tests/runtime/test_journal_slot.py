"""A model request reaches the journal when it is sent, not while it waits for a slot.

Two branches call the model through ``max_concurrency = 1``: the first holds the slot,
the second waits for it. Stopped at that moment (the run cancelled, as a killed process
would be), the journal holds one request, the one that went out: the resume counts one
call toward ``--max-calls``, not two."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

from lattice.llm.base import LLMRequest, LLMResponse
from lattice.llm.wrappers import LimitedProvider
from lattice.runs.store import RunStore
from lattice.runtime.runner import Runner
from tests.builders import lower_ok
from tests.runtime.test_parallel import fan_out


class Held:
    """Sends (says so) and never answers."""

    name = "held"

    def __init__(self) -> None:
        self.sent: list[str | None] = []

    async def complete(self, request: LLMRequest) -> LLMResponse:
        request.sending()
        self.sent.append(request.node_id)
        await asyncio.Event().wait()
        raise AssertionError("never answered")


class Arrivals:
    """Counts the requests that reach the provider's slot."""

    name = "arrivals"

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.arrived = 0

    async def complete(self, request: LLMRequest) -> LLMResponse:
        self.arrived += 1
        response: LLMResponse = await self.inner.complete(request)
        return response


def journal(folder: Path) -> list[dict[str, Any]]:
    lines = (folder / "journal.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


async def stopped_while_one_waits(tmp_path: Path) -> tuple[Held, Path]:
    held = Held()
    provider = Arrivals(LimitedProvider(held, max_concurrency=1))
    runner = Runner(lower_ok(fan_out(2)), provider=provider, store=RunStore(tmp_path))
    task = asyncio.create_task(runner.arun({"topic": "tides"}))
    for _ in range(100_000):  # turns of the loop, not time
        if provider.arrived == 2 and len(held.sent) == 1:
            break
        await asyncio.sleep(0)
    else:
        raise AssertionError("the branches never met at the slot")
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    (folder,) = tmp_path.iterdir()
    return held, folder


def test_a_request_waiting_for_its_slot_is_not_journaled(tmp_path: Path) -> None:
    held, folder = asyncio.run(stopped_while_one_waits(tmp_path))
    requests = [line for line in journal(folder) if line["kind"] == "request"]
    assert len(held.sent) == 1
    assert len(requests) == 1, "only the request that went out counts"
    checkpoint = json.loads((folder / "checkpoint.json").read_text(encoding="utf-8"))
    assert checkpoint["status"] == "interrupted"

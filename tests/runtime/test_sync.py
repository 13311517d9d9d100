"""The synchronous entry points reuse one event loop per thread."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from lattice.errors import LatticeUserError
from lattice.llm.base import LLMRequest, LLMResponse
from lattice.lower import lower
from lattice.runtime import Runner, RunStore
from lattice.runtime.sync import close_thread_loop
from tests.builders import chain, node


class LoopSpy:
    name = "spy"

    def __init__(self) -> None:
        self.loops: list[int] = []

    async def complete(self, request: LLMRequest) -> LLMResponse:
        self.loops.append(id(asyncio.get_running_loop()))
        return LLMResponse(text="ok")


def runner(provider: Any) -> Runner:
    return Runner(
        lower(chain(node("a", "prompt", prompt="A"))), provider=provider, store=RunStore(None)
    )


def test_sync_runs_on_one_thread_share_a_loop_and_threads_have_their_own() -> None:
    spy = LoopSpy()
    subject = runner(spy)
    assert subject.run().status == "completed"
    assert subject.run().status == "completed"
    assert len(set(spy.loops)) == 1
    other: list[int] = []

    def in_thread() -> None:
        thread_spy = LoopSpy()
        runner(thread_spy).run()
        other.extend(thread_spy.loops)
        close_thread_loop()

    worker = threading.Thread(target=in_thread)
    worker.start()
    worker.join()
    assert len(other) == 1 and other[0] != spy.loops[0]


def test_a_closed_thread_loop_is_made_again() -> None:
    spy = LoopSpy()
    subject = runner(spy)
    subject.run()
    close_thread_loop()
    assert subject.run().status == "completed"
    assert len(spy.loops) == 2


def test_run_inside_a_running_loop_names_the_async_call() -> None:
    spy = LoopSpy()
    subject = runner(spy)

    async def inside() -> None:
        subject.run()

    with pytest.raises(LatticeUserError, match=r"await runner\.arun"):
        asyncio.run(inside())
    assert spy.loops == []


def test_inputs_take_the_defaults_of_the_inputs_schema() -> None:
    from lattice.llm.mock import MockProvider

    doc = chain(node("a", "prompt", prompt="{{ $in.name }} in {{ $in.city }}"))
    doc["nodes"][0]["data"]["inputs"] = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "city": {"type": "string", "default": "Oslo"}},
        "required": ["name", "city"],
    }
    provider = MockProvider(default="ok")
    subject = Runner(lower(doc), provider=provider, store=RunStore(None))
    assert subject.run({"name": "Ada"}).state["in"] == {"name": "Ada", "city": "Oslo"}
    assert subject.run({"name": "Ada", "city": "Rome"}).state["in"]["city"] == "Rome"
    assert provider.calls[0].messages[-1].content.startswith("Ada in Oslo")

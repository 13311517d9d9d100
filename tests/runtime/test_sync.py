"""The synchronous entry points reuse one event loop per thread."""

from __future__ import annotations

import asyncio
import contextvars
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
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


# -- what each call keeps from asyncio.Runner.run -------------------------------------------


class Interrupting:
    """Sends this process SIGINT (Ctrl-C) from inside its first call, then waits."""

    name = "interrupting"

    async def complete(self, request: LLMRequest) -> LLMResponse:
        os.kill(os.getpid(), signal.SIGINT)
        await asyncio.sleep(5)
        return LLMResponse(text="too late")


@pytest.mark.usefixtures("default_ctrl_c")
def test_ctrl_c_during_a_sync_run_interrupts_it_and_raises_keyboard_interrupt(
    tmp_path: Path,
) -> None:
    assert threading.current_thread() is threading.main_thread()
    subject = Runner(
        lower(chain(node("a", "prompt", prompt="A"))),
        provider=Interrupting(),
        store=RunStore(tmp_path),
    )
    with pytest.raises(KeyboardInterrupt):
        subject.run()
    (folder,) = tmp_path.iterdir()
    assert json.loads((folder / "checkpoint.json").read_text())["status"] == "interrupted"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored
    assert runner(LoopSpy()).run().status == "completed"  # the loop is usable again


@pytest.mark.usefixtures("default_ctrl_c")
def test_a_handler_of_the_host_application_is_left_alone() -> None:
    seen: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: seen.append(signum))
    try:
        spy = LoopSpy()
        assert runner(spy).run().status == "completed"
        assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
        os.kill(os.getpid(), signal.SIGINT)
        assert seen == [signal.SIGINT]
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_sync_call_from_inside_a_run_names_the_async_call() -> None:
    """Re-entrancy: a listener (called on the run's loop) cannot start a synchronous run."""
    subject = runner(LoopSpy())
    inner = runner(LoopSpy())
    errors: list[LatticeUserError] = []

    def listener(event: dict[str, Any]) -> None:
        if event["type"] == "run_started":
            try:
                inner.run()
            except LatticeUserError as exc:
                errors.append(exc)

    subject.subscribe(listener)
    assert subject.run().status == "completed"
    assert len(errors) == 1 and "await runner.arun" in errors[0].message


CALLER: contextvars.ContextVar[str] = contextvars.ContextVar("caller", default="unset")


class ContextSpy:
    name = "context"

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def complete(self, request: LLMRequest) -> LLMResponse:
        self.seen.append(CALLER.get())
        CALLER.set("changed inside the run")
        return LLMResponse(text="ok")


def test_each_call_runs_in_a_copy_of_the_callers_context() -> None:
    spy = ContextSpy()
    subject = runner(spy)
    token = CALLER.set("first")
    try:
        subject.run()
        CALLER.set("second")
        subject.run()
        assert CALLER.get() == "second"  # what the run set stays inside it
    finally:
        CALLER.reset(token)
    assert spy.seen == ["first", "second"]


FORK_THEN_WAIT = """
import asyncio, os, sys, time
from lattice.runtime.sync import run_sync

async def nothing():
    return None

async def wait_for_a_worker():
    loop = asyncio.get_running_loop()  # no timer pending: only the wake-up pipe wakes it
    return await loop.run_in_executor(None, time.sleep, 0.05)

run_sync(nothing, what="x")          # the parent's loop exists before the fork
pid = os.fork()
if pid == 0:
    run_sync(nothing, what="x")      # the child's own loop; exit runs atexit
    sys.exit(0)
os.waitpid(pid, 0)
run_sync(wait_for_a_worker, what="x")
print("woken")
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_leaves_the_parents_loop_working() -> None:
    """A child inherits the parent's thread loop; closing it at the child's exit took its
    wake-up pipe out of the epoll set both share, and the parent's loop no longer woke
    for results from worker threads."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", FORK_THEN_WAIT], capture_output=True, text=True, timeout=30
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the parent's loop was never woken by its worker thread")
    assert done.stdout.strip() == "woken", done.stderr


@pytest.mark.usefixtures("default_ctrl_c")
def test_ctrl_c_stops_a_run_whose_ops_never_wait(tmp_path: Path) -> None:
    """A loop of deterministic ops never awaits, so the cancellation Ctrl-C requests
    would wait for the step limit; the walk takes it at the next op boundary."""
    from lattice.runtime import RunLimits
    from tests.runtime.test_ops import infinite_loop

    subject = Runner(
        lower(infinite_loop()),
        store=RunStore(tmp_path),
        limits=RunLimits(max_steps=200_000, max_visits=100_000),
    )

    def listener(event: dict[str, Any]) -> None:
        if event["type"] == "op_started" and event["op_id"] == "inc" and event["seq"] > 100:
            os.kill(os.getpid(), signal.SIGINT)

    subject.subscribe(listener)
    with pytest.raises(KeyboardInterrupt):
        subject.run()
    (folder,) = tmp_path.iterdir()
    checkpoint = json.loads((folder / "checkpoint.json").read_text())
    assert checkpoint["status"] == "interrupted"
    state = json.loads((folder / "state_final.json").read_text())
    assert state["vars"]["n"] < 100  # stopped near where it was asked, not at a limit


# -- a call that never waits: its task's first step, taken without the loop's iterations ----


def pure_runner(store: RunStore | None = None) -> Runner:
    """A run whose ops only compute: it never waits."""
    doc = chain(
        node("count", "variableStore", operation="increment", name="n"),
        node("size", "dataTransform", expression="length(vars)"),
    )
    return Runner(lower(doc), store=store if store is not None else RunStore(None))


class Selects:
    """Counts the thread loop's waits for I/O (each iteration of the loop makes one)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from lattice.runtime import sync

        runner(LoopSpy()).run()  # the thread's loop exists
        selector = sync._local.runner.loop._selector
        self.count = 0
        select = selector.select

        def counted(timeout: float | None = None) -> Any:
            self.count += 1
            return select(timeout)

        monkeypatch.setattr(selector, "select", counted)


def test_a_run_that_never_waits_finishes_without_an_iteration_of_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    selects = Selects(monkeypatch)
    result = pure_runner().run()
    assert result.status == "completed" and result.vars["n"] == 1
    assert selects.count == 0

    class Waiting:
        name = "waiting"

        async def complete(self, request: LLMRequest) -> LLMResponse:
            await asyncio.sleep(0)
            return LLMResponse(text="waited")

    assert runner(Waiting()).run().output == "waited"  # a run that waits: the loop runs it
    assert selects.count > 0


def test_a_run_that_never_waits_is_still_a_task_in_a_copy_of_the_callers_context() -> None:
    seen: list[tuple[bool, str]] = []

    def listener(event: dict[str, Any]) -> None:
        if event["type"] == "op_started":
            seen.append((asyncio.current_task() is not None, CALLER.get()))
            CALLER.set("changed inside the run")

    subject = pure_runner()
    subject.subscribe(listener)
    token = CALLER.set("caller")
    try:
        assert subject.run().status == "completed"
        assert CALLER.get() == "caller"
    finally:
        CALLER.reset(token)
    assert seen[0] == (True, "caller")
    assert all(is_task for is_task, _ in seen)


def test_what_a_run_that_never_waits_schedules_runs_before_the_call_returns() -> None:
    """A callback the run schedules (anyio's worker threads stop from one) and the task's
    done callbacks run before ``run`` returns, not at the thread's next call."""
    seen: list[str] = []

    def listener(event: dict[str, Any]) -> None:
        if event["type"] == "run_started":
            asyncio.get_running_loop().call_soon(seen.append, "scheduled")
            task = asyncio.current_task()
            assert task is not None
            task.add_done_callback(lambda _: seen.append("task done"))

    subject = pure_runner()
    subject.subscribe(listener)
    assert subject.run().status == "completed"
    assert seen == ["scheduled", "task done"]


@pytest.mark.usefixtures("default_ctrl_c")
def test_ctrl_c_stops_an_in_memory_run_that_never_waits() -> None:
    from lattice.runtime import RunLimits
    from tests.runtime.test_ops import infinite_loop

    subject = Runner(
        lower(infinite_loop()),
        store=RunStore(None),
        limits=RunLimits(max_steps=200_000, max_visits=100_000),
    )
    types: list[str] = []

    def listener(event: dict[str, Any]) -> None:
        types.append(event["type"])
        ask = event["type"] == "op_started" and event["op_id"] == "inc" and len(types) > 100
        if ask and "sent" not in types:
            types.append("sent")
            os.kill(os.getpid(), signal.SIGINT)

    subject.subscribe(listener)
    with pytest.raises(KeyboardInterrupt):
        subject.run()
    assert types[-1] == "run_interrupted"
    assert len(types) < 120  # at the next op boundary, not at a limit
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert pure_runner().run().status == "completed"  # the loop is usable again


def test_runs_that_never_wait_in_threads_each_use_their_own_loop() -> None:
    results: list[Any] = []

    def in_thread() -> None:
        try:
            subject = pure_runner()
            results.extend(subject.run().vars["n"] for _ in range(3))
        finally:
            close_thread_loop()

    workers = [threading.Thread(target=in_thread) for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert results == [1] * 6

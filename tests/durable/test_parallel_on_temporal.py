"""Parallel branches and forEach on Temporal: Lattice's own walk in the workflow, with the
local engine's semantics (joins, conflicts, questions, max_parallel), ops that never wait
run in the workflow itself, and a run's history replays deterministically."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lattice.config import LatticeConfig
from lattice.ir.models import ExecIR, StateOp
from lattice.llm.fake_server import serve
from lattice.llm.mock import MockProvider
from lattice.lower.compiler import lower_document
from lattice.runs.store import RunStore
from lattice.runs.view import show_run
from lattice.runtime.runner import Runner
from tests.builders import conn, node, op_names
from tests.durable.helpers import example, op_path, run_locally, with_worker
from tests.runtime.test_for_each import each_doc
from tests.runtime.test_parallel import fan_out

pytest.importorskip("temporalio")

from lattice.durable.temporal.client import answer, follow, start_run
from lattice.durable.temporal.export import export_run

WAIT = 60.0
"""Seconds a branch may take to reach the server on a loaded machine (a bound, not a timing)."""
LINGER = 1.0
"""Seconds a paired call stays in flight: a third call would be seen meanwhile (only how
sure the check is depends on it, never whether it passes)."""


def run_id() -> str:
    return f"test-{uuid.uuid4().hex[:12]}"


def lowered(doc: dict[str, Any]) -> ExecIR:
    ir = lower_document(doc).ir
    assert ir is not None
    return ir


def scheduled_activities(history: Any) -> list[str]:
    """The activity ids a workflow's history scheduled, in order."""
    return [
        event.activity_task_scheduled_event_attributes.activity_id
        for event in history.events
        if event.HasField("activity_task_scheduled_event_attributes")
    ]


def test_only_ops_that_do_io_are_activities_and_the_history_replays(
    temporal_address: str, tmp_path: Path
) -> None:
    from temporalio.worker import Replayer

    from lattice.config import TemporalConfig
    from lattice.durable.temporal.codec import codec_from_config
    from lattice.durable.temporal.converter import data_converter
    from lattice.durable.temporal.worker import workflow_runner
    from lattice.durable.temporal.workflow import LatticeRunWorkflow

    ir, script, inputs = example("analyst-panel")
    local = run_locally(ir, script, inputs)

    rid = run_id()

    async def body(client: Any, queue: str) -> tuple[dict[str, Any], Any]:
        handle = await start_run(
            client,
            ir,
            run_id=rid,
            inputs=inputs,
            provider={"mock_script": script},
            task_queue=queue,
        )
        done = await follow(handle)
        await export_run(client, rid, tmp_path / rid)
        return done, await handle.fetch_history()

    done, history = asyncio.run(with_worker(temporal_address, body))
    assert done["status"] == "completed"
    assert done["output"] == local.output
    model_ops = [op for op in op_path(list(local.events)) if ir.ops[op].kind == "LLM_WRITE"]
    activities = scheduled_activities(history)
    # one activity per model call's op; START, FORK, FOR_EACH, JOIN and END ran in the workflow
    assert sorted(a.split("-", 1)[1] for a in activities) == sorted(model_ops)
    assert len(activities) == local.usage.calls == 8
    replayer = Replayer(
        workflows=[LatticeRunWorkflow],
        data_converter=data_converter(codec_from_config(TemporalConfig())),  # with_worker's
        workflow_runner=workflow_runner(),
    )
    asyncio.run(replayer.replay_workflow(history))  # raises on a nondeterministic walk
    # the exported folder names branch ops by their place, as a local run folder does
    local_dir = tmp_path / "local"
    Runner(ir, provider=MockProvider.from_script(script), store=RunStore(local_dir)).run(
        inputs, run_id="local"
    )
    names = op_names(tmp_path / rid)
    assert names == op_names(local_dir / "local")
    assert any(name.count(".") == 2 for name in names)  # 0002.1.0001-<op>
    assert show_run(tmp_path / rid).startswith(f"run {rid}: completed")


def test_branches_changing_one_variable_fail_as_a_state_conflict(temporal_address: str) -> None:
    ir = lowered(fan_out(2))
    ops = dict(ir.ops)
    for name in ("b1", "b2"):
        ops[name] = StateOp(
            id=name,
            source_node=name,
            operation="set",
            variable="same",
            value=name,
            next=ops[name].next,
        )
    ir = ir.model_copy(update={"ops": ops})
    script = {"responses": {}, "default": "ok"}
    local = run_locally(ir, script, {"topic": "x"})

    async def body(client: Any, queue: str) -> dict[str, Any]:
        handle = await start_run(
            client,
            ir,
            run_id=run_id(),
            inputs={"topic": "x"},
            provider={"mock_script": script},
            task_queue=queue,
        )
        return await follow(handle)

    done = asyncio.run(with_worker(temporal_address, body))
    assert local.status == done["status"] == "failed"
    assert local.failure is not None
    assert done["failure"]["category"] == local.failure.category == "state_conflict"
    assert done["failure"]["summary"] == local.failure.summary


def question_each() -> dict[str, Any]:
    """A forEach (two items at a time) whose body asks "Keep it?" and ends with the label."""
    doc = each_doc(maxConcurrency=2)
    flow = doc["subAgentFlows"][0]
    flow["nodes"][1] = node(
        "answer",
        "askUserQuestion",
        questionText="Keep it?",
        options=[{"label": "Keep"}, {"label": "Drop"}],
    )
    flow["nodes"][2] = node("e", "end", output="$vars.answer.result.label")
    flow["connections"][1] = conn("answer", "e", "branch-0")
    flow["connections"].append(conn("answer", "e", "branch-1"))
    return doc


def test_a_question_inside_a_for_each_waits_for_its_answer(temporal_address: str) -> None:
    ir = lowered(question_each())
    rid = run_id()

    async def body(client: Any, queue: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        handle = await start_run(
            client, ir, run_id=rid, inputs={"items": ["a", "b", "c"]}, task_queue=queue
        )
        asked = []
        for given in ("Keep", "Drop", "Keep"):
            waiting = await follow(handle)
            assert waiting["status"] == "waiting", waiting
            asked.append(waiting["question"])
            await answer(client, rid, ir, "each__answer", given)
        return asked, await follow(handle)

    asked, done = asyncio.run(with_worker(temporal_address, body))
    assert done["status"] == "completed", done
    assert done["output"] == ["Keep", "Drop", "Keep"]  # in item order, answered in turn
    assert all(q["node_id"] == "each__answer" for q in asked)


def test_a_run_cancelled_while_a_branch_waits_ends_interrupted(temporal_address: str) -> None:
    ir = lowered(question_each())
    rid = run_id()

    async def body(client: Any, queue: str) -> dict[str, Any]:
        handle = await start_run(
            client, ir, run_id=rid, inputs={"items": ["a", "b"]}, task_queue=queue
        )
        assert (await follow(handle))["status"] == "waiting"
        await handle.cancel()
        return await follow(handle)

    done = asyncio.run(with_worker(temporal_address, body))
    assert done["status"] == "interrupted"
    assert done["failure"]["op_id"] == "each"  # the main walk was at the forEach


class Meeting:
    """An OpenAI-compatible answer that holds each of ``calls`` branch requests until
    another one is in flight with it (or no other is still to come; at most ``WAIT``
    seconds), and counts the most in flight at once."""

    def __init__(self, calls: int) -> None:
        self.calls = calls
        self.lock = threading.Condition()
        self.in_flight: set[int] = set()
        self.paired: set[int] = set()
        self.done = 0
        self.most = 0

    def __call__(self, body: dict[str, Any]) -> str:
        if "MERGE" in str(body["messages"]):
            return "merged"
        with self.lock:
            me = self.done + len(self.in_flight) + 1
            self.in_flight.add(me)
            self.most = max(self.most, len(self.in_flight))
            if len(self.in_flight) >= 2:
                self.paired |= self.in_flight
            self.lock.notify_all()
            self.lock.wait_for(
                lambda: me in self.paired or self.done + len(self.in_flight) == self.calls,
                timeout=WAIT,
            )
            # a moment more for a third call to show up, were the bound not held
            self.lock.wait_for(lambda: len(self.in_flight) > 2, timeout=LINGER)
            self.in_flight.discard(me)
            self.done += 1
            self.lock.notify_all()
        return "fine"


@pytest.fixture
def openai_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[Meeting]:
    meeting = Meeting(calls=4)
    with serve(meeting) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url + "/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        yield meeting


def test_branches_call_a_model_at_once_within_max_parallel(
    temporal_address: str, openai_env: Meeting
) -> None:
    ir = lowered(fan_out(4))

    async def body(client: Any, queue: str) -> dict[str, Any]:
        handle = await start_run(
            client,
            ir,
            run_id=run_id(),
            inputs={"topic": "t"},
            provider={"provider_arg": "openai"},
            task_queue=queue,
            limits={"max_steps": 100, "max_visits": 10, "max_parallel": 2},
        )
        return await follow(handle)

    done = asyncio.run(with_worker(temporal_address, body, LatticeConfig()))
    assert done["status"] == "completed", done
    assert openai_env.most == 2  # two branches' calls met at the server, never three
    assert done["usage"]["calls"] == 5

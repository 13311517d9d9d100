"""An op's activity is sent the part of the state it reads (``state_slice.py``): the
slice reads as the whole state does, and a run's history holds a large value its later
ops do not read once, not once per op."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest

from lattice.errors import LatticeRunError
from lattice.ir.models import Case, Condition, LLMWriteOp, StateOp, SwitchOp, ToolCallOp
from lattice.llm.mock import MockProvider
from lattice.lower.compiler import lower_document
from lattice.runs.store import RunStore
from lattice.runtime.runner import Runner
from lattice.runtime.settings import RuntimeSettings
from lattice.runtime.state import StateLimits, StateStore
from tests.builders import chain, node
from tests.durable.helpers import run_locally, with_worker

pytest.importorskip("temporalio")  # the temporal_address fixture says how to install it

from lattice.durable.temporal.client import follow, start_run
from lattice.durable.temporal.state_slice import state_for


def store() -> StateStore:
    return StateStore(
        {"topic": "tea", "blob": "x" * 1000},
        ctx={"run_id": "r1"},
        vars={
            "draft": {"result": "A note.", "attempts": 2},
            "big": {"result": "y" * 1000},
            "name": "plain text",
            "items": [{"a": 1}, {"a": 2}],
            "empty": {},
        },
    )


def llm(*reads: str, variables: dict[str, Any] | None = None) -> LLMWriteOp:
    return LLMWriteOp(
        id="w",
        source_node="w",
        prompt="p",
        reads=list(reads),
        variables=variables or {},
        writes="$vars.w.result",
    )


def read_both(state: StateStore, sliced: dict[str, Any], path: str) -> tuple[Any, Any]:
    """What reading ``path`` gives on the whole state and on the slice (value or error)."""
    part = StateStore.from_snapshot(sliced)
    out = []
    for source in (state, part):
        try:
            out.append(source.read(path))
        except LatticeRunError as exc:
            out.append(("error", exc.message))
    return out[0], out[1]


@pytest.mark.parametrize(
    "path",
    [
        "$vars.draft.result",
        "$vars.draft.missing",  # missing from an object
        "$vars.nobody.result",  # missing at the top
        "$vars.name.result",  # stops at a value that is not an object
        "$vars.items[1].a",  # through a list
        "$vars.items[5]",  # past a list's end
        "$vars.empty",
        "$in.topic",
        "$in",
    ],
)
def test_the_slice_reads_as_the_whole_state_does(path: str) -> None:
    state = store()
    sliced = state_for(llm(path), state, None)
    assert read_both(state, sliced, path) == read_both(state, state.snapshot(), path)


def test_the_slice_holds_what_the_op_reads_and_ctx_only() -> None:
    state = store()
    sliced = state_for(llm("$vars.draft.result", "$vars.draft"), state, None)
    assert sliced == {
        "in": {},
        "vars": {"draft": {"result": "A note.", "attempts": 2}},
        "tmp": {},
        "ctx": {"run_id": "r1"},
    }
    sliced["vars"]["draft"]["result"] = "changed"  # a copy: the run's state is its own
    assert state.vars["draft"]["result"] == "A note."


def test_a_variables_bare_names_and_a_switchs_last_result_are_sent() -> None:
    state = store()
    sliced = state_for(llm(variables={"topic": "{{ topic }}"}), state, None)
    assert sliced["in"] == {"topic": "tea"}
    switch = SwitchOp(
        id="s",
        source_node="s",
        cases=[Case(port="hit", test=Condition(op="matches", value="^A"))],
    )
    assert state_for(switch, state, "$vars.draft.result")["vars"] == {
        "draft": {"result": "A note."}
    }


def test_a_kind_whose_reads_are_not_known_exactly_is_sent_the_whole_state() -> None:
    state = store()
    op = StateOp(id="v", source_node="v", variable="$vars.n", operation="increment")
    assert state_for(op, state, None) == state.snapshot()
    http = ToolCallOp.model_validate(
        {
            "id": "h",
            "source_node": "h",
            "call": {"tool": "http", "method": "GET", "url": "https://example.com/{{ $in.topic }}"},
            "reads": ["$in.topic"],
            "writes": "$vars.h.result",
        }
    )
    assert state_for(http, state, None)["in"] == {"topic": "tea"}


MARKER = "LARGE-VALUE-"
LATER_OPS = ("second", "third", "fourth")


def test_a_large_value_later_ops_do_not_read_is_not_sent_with_them(temporal_address: str) -> None:
    doc = chain(
        node("keep", "variableStore", operation="set", name="big", value=MARKER * 4000),
        node("first", "prompt", prompt="Summarize {{ $vars.big }}."),
        *(node(n, "prompt", prompt=f"Say {n} about {{{{ $in.topic }}}}.") for n in LATER_OPS),
    )
    ir = lower_document(doc).ir
    assert ir is not None
    assert "$vars.big" in ir.ops["first"].reads
    script = {"responses": {n: [f"{n} answer"] for n in ("first", *LATER_OPS)}}
    inputs = {"topic": "tea"}
    local = run_locally(ir, script, inputs)
    assert local.status == "completed"

    async def body(client: Any, queue: str) -> tuple[dict[str, Any], dict[str, int]]:
        handle = await start_run(
            client,
            ir,
            run_id=f"test-{uuid.uuid4().hex[:12]}",
            inputs=inputs,
            provider={"mock_script": script},
            task_queue=queue,
        )
        done = await follow(handle)
        sent: dict[str, int] = {}
        for event in (await handle.fetch_history()).events:
            if event.HasField("activity_task_scheduled_event_attributes"):
                attributes = event.activity_task_scheduled_event_attributes
                request = json.loads(attributes.input.payloads[0].data)
                sent[request["op_id"]] = json.dumps(request["state"]).count(MARKER)
        return done, sent

    done, sent = asyncio.run(with_worker(temporal_address, body))
    assert done["status"] == "completed"
    assert done["output"] == local.output
    assert done["vars"] == local.vars
    assert sent["first"] == 4000  # the op that reads it is sent it
    assert {n: sent[n] for n in LATER_OPS} == dict.fromkeys(LATER_OPS, 0)


def test_the_whole_state_stays_within_the_starting_processs_bound(temporal_address: str) -> None:
    """The worker sees only what an op reads; the workflow, which holds the whole state,
    keeps it within ``max_state_bytes`` of the process that started the run."""
    doc = chain(
        node("keep", "variableStore", operation="set", name="big", value="z" * 3000),
        node("first", "prompt", prompt="Say something about {{ $in.topic }}."),
    )
    ir = lower_document(doc).ir
    assert ir is not None
    script = {"responses": {"first": ["w" * 3000]}}
    settings = RuntimeSettings(state_limits=StateLimits(max_state_bytes=5000))
    local = Runner(
        ir, provider=MockProvider.from_script(script), store=RunStore(None), settings=settings
    ).run({"topic": "tea"})
    assert local.status == "failed" and local.failure is not None

    async def body(client: Any, queue: str) -> dict[str, Any]:
        handle = await start_run(
            client,
            ir,
            run_id=f"test-{uuid.uuid4().hex[:12]}",
            inputs={"topic": "tea"},
            provider={"mock_script": script},
            task_queue=queue,
            settings=settings,
        )
        return await follow(handle)

    done = asyncio.run(with_worker(temporal_address, body))
    assert done["status"] == "failed"
    assert done["failure"]["category"] == local.failure.category
    assert "max_state_bytes" in done["failure"]["summary"]

"""Runs on Temporal's dev server: the same outputs as the local engine, questions answered
by update, the run folder exported, parallel branches with the local engine's semantics."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from lattice.errors import InputError, LatticeUserError
from lattice.lower.compiler import lower_document
from lattice.runs.view import show_run
from tests.builders import approval, conn, node, op_records, workflow
from tests.durable.helpers import example, history_text, op_path, run_locally, with_worker

pytest.importorskip("temporalio")  # the temporal_address fixture says how to install it

from lattice.durable.temporal.client import answer, follow, run_result, start_run
from lattice.durable.temporal.export import export_run

EXAMPLES_WITHOUT_TOOLS = [
    "hello-world",
    "support-triage",
    "content-moderation",
    "brainstorm-ideas",
    "code-review-fix",
    "analyst-panel",
]
"""The shipped examples that call no HTTP or MCP server (analyst-panel: parallel
branches and a forEach)."""


def run_id() -> str:
    return f"test-{uuid.uuid4().hex[:12]}"


@pytest.mark.parametrize("name", EXAMPLES_WITHOUT_TOOLS)
def test_a_shipped_example_gives_the_local_engines_output(temporal_address: str, name: str) -> None:
    ir, script, inputs = example(name)
    local = run_locally(ir, script, inputs)
    assert local.status == "completed"
    seen: list[dict[str, Any]] = []

    async def body(client: Any, queue: str) -> dict[str, Any]:
        handle = await start_run(
            client,
            ir,
            run_id=run_id(),
            inputs=inputs,
            provider={"mock_script": script},
            task_queue=queue,
        )
        return await follow(handle, seen.append)

    outcome = asyncio.run(with_worker(temporal_address, body))
    result = run_result(outcome)
    assert result.status == "completed"
    assert result.output == local.output
    assert result.vars == local.vars
    assert result.usage.calls == local.usage.calls
    assert [e["seq"] for e in seen] == list(range(1, len(seen) + 1))
    # each branch (and the main walk) goes through the same ops with the same events;
    # branches running at once may interleave differently
    assert by_branch(seen) == by_branch(list(local.events))
    if not any("branch" in e for e in seen):
        assert op_path(seen) == op_path(list(local.events))
        assert [e["type"] for e in seen] == [e["type"] for e in local.events]


def by_branch(events: list[dict[str, Any]]) -> dict[str | None, list[tuple[str, Any]]]:
    """Each branch's events (None: the main walk's) as (type, op id), in order."""
    tracks: dict[str | None, list[tuple[str, Any]]] = {}
    for event in events:
        tracks.setdefault(event.get("branch"), []).append((event["type"], event.get("op_id")))
    return tracks


APPROVAL_SCRIPT = {"responses": {"draft": ["A note about tea."], "polish": ["A polished note."]}}


def test_a_question_waits_for_its_answer_sent_as_an_update(temporal_address: str) -> None:
    ir = lower_document(approval()).ir
    assert ir is not None
    inputs = {"topic": "tea"}
    local = run_locally(ir, APPROVAL_SCRIPT, inputs, answers={"approve": "Send"})
    rid = run_id()

    async def body(client: Any, queue: str) -> tuple[dict[str, Any], dict[str, Any]]:
        handle = await start_run(
            client,
            ir,
            run_id=rid,
            inputs=inputs,
            provider={"mock_script": APPROVAL_SCRIPT},
            task_queue=queue,
        )
        waiting = await follow(handle)
        with pytest.raises(InputError, match="Maybe"):
            await answer(client, rid, ir, "approve", "Maybe")  # not an option: not sent
        await answer(client, rid, ir, "approve", "send")
        return waiting, await follow(handle)

    waiting, done = asyncio.run(with_worker(temporal_address, body))
    assert waiting["status"] == "waiting"
    assert waiting["question"]["node_id"] == "approve"
    assert waiting["question"]["details"]["options"] == ["Send", "Discard"]
    halted = run_result(waiting, answer_hint="lattice resume RUN --answer NODE=<answer>")
    assert halted.status == "halted"
    assert halted.failure is not None
    assert halted.failure.recovery_action == f"lattice resume {rid} --answer approve=<answer>"
    assert done["status"] == "completed"
    assert done["output"] == local.output == "A polished note."
    assert done["vars"]["approve"] == {"result": {"label": "Send", "index": 0}}


def test_an_exported_run_is_a_run_folder(temporal_address: str, tmp_path: Path) -> None:
    ir, script, inputs = example("support-triage")
    rid = run_id()
    folder = tmp_path / rid

    async def body(client: Any, queue: str) -> None:
        handle = await start_run(
            client,
            ir,
            run_id=rid,
            inputs=inputs,
            provider={"mock_script": script},
            task_queue=queue,
        )
        await follow(handle)
        history = history_text((await handle.fetch_history()).to_json_dict())
        assert history.count('"irVersion"') == 1  # in the run's start only: ops carry a digest
        await export_run(client, rid, folder)
        with pytest.raises(LatticeUserError, match="exists"):
            await export_run(client, rid, folder)

    asyncio.run(with_worker(temporal_address, body))
    local = run_locally(ir, script, inputs)
    shown = show_run(folder)
    assert shown.startswith(f"run {rid}: completed")
    assert shown.splitlines()[0].endswith("(support-triage)")
    assert "usage: 5 " in shown  # model calls
    assert "output: " + json.dumps(local.output, ensure_ascii=False)[:100] in shown
    assert [r["op_id"] for r in op_records(folder)] == op_path(list(local.events))
    events = [json.loads(line) for line in (folder / "events.jsonl").read_text().splitlines()]
    assert events[0]["type"] == "run_started" and events[-1]["type"] == "run_finished"
    assert json.loads((folder / "state_final.json").read_text())["vars"] == local.vars
    assert json.loads((folder / "execir.json").read_text())["entry"] == ir.entry


def test_importing_lattice_does_not_import_temporalio() -> None:
    code = (
        "import sys, lattice, lattice.cli.main, lattice.cli.run, lattice.runtime.runner; "
        "print('temporalio' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_a_cancelled_run_ends_interrupted(temporal_address: str) -> None:
    ir = lower_document(approval()).ir
    assert ir is not None
    rid = run_id()

    async def body(client: Any, queue: str) -> dict[str, Any]:
        handle = await start_run(
            client,
            ir,
            run_id=rid,
            inputs={"topic": "tea"},
            provider={"mock_script": APPROVAL_SCRIPT},
            task_queue=queue,
        )
        assert (await follow(handle))["status"] == "waiting"
        await handle.cancel()
        return await follow(handle)

    done = asyncio.run(with_worker(temporal_address, body))
    assert done["status"] == "interrupted"
    assert done["failure"]["category"] == "interrupted"
    assert done["failure"]["op_id"] == "approve"
    assert run_result(done).status == "interrupted"


def test_a_run_cancelled_in_the_middle_of_an_op_ends_interrupted(temporal_address: str) -> None:
    ir = lower_document(approval()).ir
    assert ir is not None
    rid = run_id()

    async def body(client: Any, queue: str) -> dict[str, Any]:
        slow = {"mock_script": APPROVAL_SCRIPT, "mock_latency": 60}
        handle = await start_run(
            client, ir, run_id=rid, inputs={"topic": "tea"}, provider=slow, task_queue=queue
        )
        while not await _op_running(handle, "draft"):
            await asyncio.sleep(0.05)
        await handle.cancel()
        return await asyncio.wait_for(follow(handle), 30)

    done = asyncio.run(with_worker(temporal_address, body))
    assert done["status"] == "interrupted"
    assert done["failure"]["op_id"] == "draft"


async def _op_running(handle: Any, op_id: str) -> bool:
    """Whether a worker has started op ``op_id`` of the run (activity ids end in the op id)."""
    from temporalio.api.enums.v1 import PendingActivityState

    description = await handle.describe()
    return any(
        pending.activity_id.endswith(f"-{op_id}")
        and pending.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
        for pending in description.raw_description.pending_activities
    )


def test_a_question_in_a_loop_is_asked_again_at_each_visit(temporal_address: str) -> None:
    doc = workflow(
        [
            node("start", "start"),
            node("count", "variableStore", operation="increment", name="n", value=1),
            node(
                "again",
                "askUserQuestion",
                questionText="Again?",
                options=[{"label": "Yes"}, {"label": "No"}],
            ),
            node("end", "end", output="$vars.n"),
        ],
        [
            conn("start", "count"),
            conn("count", "again"),
            conn("again", "count", "branch-0"),
            conn("again", "end", "branch-1"),
        ],
        id="loop",
    )
    ir = lower_document(doc).ir
    assert ir is not None
    rid = run_id()

    async def body(client: Any, queue: str) -> dict[str, Any]:
        handle = await start_run(client, ir, run_id=rid, inputs={}, task_queue=queue)
        for given in ("Yes", "Yes", "No"):
            waiting = await follow(handle)
            assert waiting["status"] == "waiting", waiting
            await answer(client, rid, ir, "again", given)
        return await follow(handle)

    done = asyncio.run(with_worker(temporal_address, body))
    assert done["status"] == "completed"
    assert done["output"] == 3


def test_a_mock_script_answers_tool_calls_on_a_worker(temporal_address: str) -> None:
    doc = workflow(
        [
            node("start", "start"),
            node("fetch", "httpRequest", method="GET", url="https://api.example.test/items"),
            node("end", "end", output="$vars.fetch.result.body"),
        ],
        [conn("start", "fetch"), conn("fetch", "end")],
        id="tools",
    )
    ir = lower_document(doc).ir
    assert ir is not None
    script = {"responses": {}, "tools": {"fetch": [{"status": 200, "headers": {}, "body": [1]}]}}
    local = run_locally(ir, script, {})

    async def body(client: Any, queue: str) -> dict[str, Any]:
        handle = await start_run(
            client,
            ir,
            run_id=run_id(),
            inputs={},
            provider={"mock_script": script},
            task_queue=queue,
        )
        return await follow(handle)

    done = asyncio.run(with_worker(temporal_address, body))
    assert done["status"] == "completed", done
    assert done["output"] == local.output == [1]

"""Continue-as-new: a run's walk goes on in a new execution of its workflow between two
ops of its main walk, and nothing a user sees (events, op records and their labels,
state, usage, the exported folder) shows the seam. Tests lower the threshold
(``continue_after``) to see seams in a short run."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from lattice.lower.compiler import lower_document
from lattice.runs.view import show_run
from tests.builders import chain, node, op_records
from tests.durable.helpers import op_path, run_locally, with_worker

pytest.importorskip("temporalio")  # the temporal_address fixture says how to install it

from lattice.durable.temporal.client import follow, start_run
from lattice.durable.temporal.export import export_run

STEPS = 8


def long_document() -> dict[str, Any]:
    """Eight model calls, each reading the one before, with a variable counted along."""
    middle = []
    for i in range(1, STEPS + 1):
        before = f" after {{{{ $vars.s{i - 1}.result }}}}" if i > 1 else ""
        middle.append(node(f"s{i}", "prompt", prompt=f"Step {i}{before}."))
        middle.append(node(f"n{i}", "variableStore", operation="increment", name="count"))
    return chain(*middle)


def test_a_run_continued_as_new_shows_no_seam(temporal_address: str, tmp_path: Path) -> None:
    ir = lower_document(long_document()).ir
    assert ir is not None
    script = {"responses": {f"s{i}": [f"answer {i}"] for i in range(1, STEPS + 1)}}
    inputs: dict[str, Any] = {}
    local = run_locally(ir, script, inputs)
    assert local.status == "completed"
    rid = f"can-{uuid.uuid4().hex[:12]}"
    folder = tmp_path / rid

    async def body(client: Any, queue: str) -> tuple[dict[str, Any], dict[str, Any], int, bool]:
        handle = await start_run(
            client,
            ir,
            run_id=rid,
            inputs=inputs,
            provider={"mock_script": script},
            task_queue=queue,
            continue_after=3,
        )
        done = await follow(handle)
        record = await client.get_workflow_handle(rid).query("record")
        executions = [
            execution async for execution in client.list_workflows(f'WorkflowId = "{rid}"')
        ]
        first = client.get_workflow_handle(rid, run_id=handle.first_execution_run_id)
        history = await first.fetch_history()
        continued = history.events[-1].HasField(
            "workflow_execution_continued_as_new_event_attributes"
        )
        await export_run(client, rid, folder)
        return done, record, len(executions), continued

    done, record, executions, continued = asyncio.run(with_worker(temporal_address, body))
    # seen by Temporal: three executions (after 3 and 6 of the 8 calls), the first continued
    assert executions == 3 and continued
    # seen by a user: one run, as the local engine runs it
    assert done["status"] == "completed"
    assert done["output"] == local.output
    assert done["vars"] == local.vars
    assert done["usage"]["requests"] == local.usage.requests == STEPS
    assert done["usage"] == local.usage.to_json()
    events = record["events"]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert [e["type"] for e in events] == [e["type"] for e in local.events]
    assert [e["type"] for e in events].count("run_started") == 1
    assert op_path(events) == op_path(list(local.events))
    labels = [r["seq"] for r in record["ops"]]
    assert labels == list(range(1, len(labels) + 1))
    assert [r["op_id"] for r in op_records(folder)] == op_path(list(local.events))
    shown = show_run(folder)
    assert shown.startswith(f"run {rid}: completed")
    assert f"usage: {STEPS} " in shown
    exported = [json.loads(line) for line in (folder / "events.jsonl").read_text().splitlines()]
    assert exported == events

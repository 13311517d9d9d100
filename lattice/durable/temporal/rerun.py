"""New executions from a run on Temporal's steps (``steps.py``).

Re-running from a step: a new run (a new workflow) that starts at that op with the
state the parent had before it, edited where asked, as a local re-run does
(``lattice.service.rerun``). The parent's workflow answers where its steps stand (its
``rerun_point`` query) and what it was started with (``spec_to_rerun``); it may be
running still only when it is stopped or waiting.

Resuming a failed or interrupted run: a new execution of its workflow (the same run
id) that goes on at the op it ended at, with the state before that op and the run's
events, op records, usage and provider carried over (its ``resume_spec`` query), as a
local resume goes on in the same folder: nothing it recorded is sent again."""

from __future__ import annotations

import asyncio
import contextlib
import copy
from typing import Any

from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowQueryFailedError,
)

from lattice.durable.temporal import DEFAULT_TASK_QUEUE
from lattice.durable.temporal.steps import EDITABLE
from lattice.durable.temporal.workflow import WORKFLOW_NAME
from lattice.errors import ErrorType, InputError, LatticeUserError
from lattice.ir.serialize import ir_from_json
from lattice.llm.disabled import DisabledProvider
from lattice.runs.redaction import Redactor
from lattice.runs.store import RunStore, file_text, new_run_id, refuse_secrets_in
from lattice.runtime.runner import Runner

CLOSING_SECONDS = 60.0
"""How long a run that has its result may take to close its execution (its last workflow
task, and the local activity that traces it)."""
STOPPED = ("completed", "failed", "halted", "waiting", "interrupted")
"""Statuses a run is re-run from (a running run has not stopped at a step yet)."""


async def rerun_point(client: Client, run_id: str, op: str, visit: int | None) -> dict[str, Any]:
    """``{"op", "visit", "visits", "state", "status"}``: the state before that step of run
    ``run_id``; an InputError says why the step is not one to start from."""
    try:
        point: dict[str, Any] = await client.get_workflow_handle(run_id).query(
            "rerun_point", args=[op, visit]
        )
    except WorkflowQueryFailedError as exc:
        raise InputError(str(exc.message)) from None
    return point


async def start_rerun(
    client: Client,
    run_id: str,
    *,
    op: str,
    visit: int | None = None,
    state: dict[str, Any] | None = None,
    provider: dict[str, Any] | None = None,
    task_queue: str = DEFAULT_TASK_QUEUE,
    redact: Redactor | None = None,
) -> tuple[str, dict[str, Any]]:
    """Start a new run from step (``op``, ``visit``) of run ``run_id``, with the state
    before it (its ``in`` and ``vars`` replaced by those of ``state`` where given) and the
    parent's provider unless ``provider`` is given; its id and its ``parent``."""
    point = await rerun_point(client, run_id, op, visit)
    if point["status"] not in STOPPED:
        raise LatticeUserError(
            f"run {run_id} is {point['status']}: a run is re-run from a step once it has stopped",
            error_type=ErrorType.CONFLICT,
        )
    start_state = copy.deepcopy(point["state"])
    for part, value in (state or {}).items():
        if part not in EDITABLE:
            raise InputError(
                f"state.{part}: only {' and '.join(EDITABLE)} can be edited for a re-run"
            )
        if not isinstance(value, dict):
            raise InputError(f"state.{part} must be an object")
        start_state[part] = value
    handle = client.get_workflow_handle(run_id)
    spec: dict[str, Any] = await handle.query("spec_to_rerun")
    ir = ir_from_json(spec["execir"])
    Runner(ir, provider=DisabledProvider(), store=RunStore(None)).validate_inputs(start_state["in"])
    if redact is not None:
        refuse_secrets_in({"the re-run's state": file_text(start_state)}, redact)
    parent = {"run_id": run_id, "op": op, "visit": point["visit"]}
    new_id = new_run_id()
    spec |= {
        "run_id": new_id,
        "inputs": start_state["in"],
        "answers": {},
        "start": {"op": op, "state": start_state, "parent": parent},
    }
    if provider:
        spec["provider"] = provider
    memo = await (await handle.describe()).memo()
    await client.start_workflow(
        WORKFLOW_NAME,
        spec,
        id=new_id,
        task_queue=task_queue,
        result_type=dict,
        memo={**memo, "parent": parent},
    )
    return new_id, parent


async def resume_ended(client: Client, run_id: str) -> None:
    """Start run ``run_id`` (failed or interrupted, its workflow closed) again from the op
    it ended at, as a new execution of its workflow on its task queue; a run that cannot
    be resumed so is a LatticeUserError (``conflict``) that says why."""
    handle = client.get_workflow_handle(run_id)
    try:
        spec: dict[str, Any] = await handle.query("resume_spec")
    except WorkflowQueryFailedError as exc:
        raise LatticeUserError(str(exc.message), error_type=ErrorType.CONFLICT) from None
    description = await handle.describe()
    if description.status == WorkflowExecutionStatus.RUNNING:
        # the run has its result; its execution closes once a worker has traced it
        with contextlib.suppress(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), CLOSING_SECONDS)
    await client.start_workflow(
        WORKFLOW_NAME,
        spec,
        id=run_id,
        task_queue=description.task_queue,
        result_type=dict,
        memo=await description.memo(),
    )

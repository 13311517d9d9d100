"""Start a Lattice run on Temporal, follow it, answer its questions, decide its tool
calls waiting for approval, cancel it."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any

from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.common import WorkflowIDReusePolicy
from temporalio.service import RPCError, RPCStatusCode

from lattice.config import TemporalConfig
from lattice.contracts.report import FailureReport
from lattice.contracts.usage import Usage
from lattice.durable.temporal import DEFAULT_TASK_QUEUE
from lattice.durable.temporal.blobs import external_storage
from lattice.durable.temporal.codec import codec_from_config
from lattice.durable.temporal.converter import data_converter
from lattice.durable.temporal.plan import ActivityOptions, run_spec
from lattice.durable.temporal.workflow import WORKFLOW_NAME
from lattice.errors import ErrorType, InputError, LatticeUserError
from lattice.ir.models import ExecIR
from lattice.runs.redaction import Redactor
from lattice.runs.store import file_text, refuse_secrets_in
from lattice.runtime.results import RunResult
from lattice.runtime.runner import check_answers
from lattice.runtime.settings import RuntimeSettings

FOLLOW_EVERY = 0.2
"""Seconds between two looks at a followed run's progress."""


async def connect(address: str, config: TemporalConfig | None = None) -> Client:
    """A client of the Temporal server at ``address`` (HOST:PORT), with the payload codec
    of ``config`` (``[temporal]``; by default ``LATTICE_TEMPORAL_KEY`` when it is set) and
    its blob store for large payloads (``blobs.py``). A
    server that cannot be reached, or a key that cannot be used, is a LatticeUserError."""
    config = config or TemporalConfig()
    converter = data_converter(codec_from_config(config), external_storage(config))
    try:
        return await Client.connect(address, data_converter=converter)
    except Exception as exc:  # the SDK raises RuntimeError with the gRPC reason
        raise LatticeUserError(
            f"cannot reach Temporal at {address} ({unreachable_reason(exc)}): is a server "
            "running there? (temporal server start-dev --ip 127.0.0.1 --port 7233; "
            "docs/temporal.md)",
            error_type=ErrorType.TEMPORAL_UNREACHABLE,
        ) from exc


def unreachable_reason(exc: BaseException) -> str:
    """The operating system's reason in the SDK's connection error (its Rust transport's
    debug text, ``... message: "Connection refused" ...`` or ``error: "failed to lookup
    address information: ..."``), else the whole error."""
    found = re.search(r'(?:message|error): "([^"]+)"', str(exc))
    return found.group(1) if found else str(exc)


async def check_key(client: Client, run_id: str) -> None:
    """Make sure ``client`` holds the key run ``run_id`` was started with (its first
    history event, decoded here), so that a missing or wrong key is a ``CodecKeyError``
    naming it, not a query the run's worker cannot read. A run that is not there passes:
    the query that follows says so."""
    codec = client.data_converter.payload_codec
    if codec is None:
        return
    try:
        async for event in client.get_workflow_handle(run_id).fetch_history_events(page_size=1):
            started = event.workflow_execution_started_event_attributes
            await codec.decode(list(started.input.payloads))
            return
    except LatticeUserError:
        raise
    except Exception:  # the RPC's error (no such run, no server) comes again with the query
        return


# long: one keyword per thing a run is started with, each documented; the body checks and sends them
async def start_run(
    client: Client,
    ir: ExecIR,
    *,
    run_id: str,
    inputs: dict[str, Any],
    answers: dict[str, Any] | None = None,
    provider: dict[str, Any] | None = None,
    budgets: dict[str, Any] | None = None,
    limits: dict[str, int] | None = None,
    activity: ActivityOptions | None = None,
    task_queue: str = DEFAULT_TASK_QUEUE,
    redact: Redactor | None = None,
    settings: RuntimeSettings | None = None,
    memo: dict[str, Any] | None = None,
    document: dict[str, Any] | None = None,
    continue_after: int | None = None,
    fixtures: dict[str, dict[str, Any]] | None = None,
    trace: bool | None = None,
) -> WorkflowHandle[Any, Any]:
    """Start the run as workflow ``run_id`` on ``task_queue``. ``provider`` is the run's
    provider as ``ProviderSpec.to_meta`` gives it (a mock script inline: the worker that
    runs an op may be on another machine); inputs and answers are checked by the caller.

    Everything given here enters Temporal's history as it is: with ``redact`` (the run's
    redactor), a document, inputs, answers or mock script holding a secret's value is
    refused (``SecretInDocument``) before anything is sent. ``settings`` (the starting
    process's; give workers the same configuration) say which agent tools are refused.
    ``memo`` is what Temporal's visibility shows of the run without asking a worker
    (by default the workflow's id; ``backend.py`` adds the workflow's file name).
    ``document`` is the workflow document ``ir`` was lowered from, kept for the panel's
    canvas (``record`` answers it, as a run folder's ``workflow.json``). ``fixtures`` is
    the table of a run that replays fixtures (``fixtures.py``; ``provider`` then names its
    digest). ``trace``: a worker exports the run's span when it ends (``tracing.py``; by
    default when ``settings`` trace, ``[telemetry]``: give workers the same).
    ``continue_after`` makes the run continue as new after that many activities in one
    execution (besides when Temporal suggests it: tests lower it to see the seam)."""
    settings = settings or RuntimeSettings()
    if trace is None:
        trace = settings.telemetry is not None and settings.telemetry.enabled
    spec = run_spec(
        ir,
        run_id=run_id,
        inputs=inputs,
        answers=dict(answers or {}),
        provider=dict(provider or {}),
        budgets=dict(budgets or {}),
        limits=limits or {"max_steps": 10_000, "max_visits": 1_000},
        activity=activity or ActivityOptions(),
        settings=settings,
        document=document,
        fixtures=fixtures,
    )
    if continue_after:
        spec["continue_after"] = continue_after
    if trace:
        spec["trace"] = True
    if redact is not None:
        refuse_secrets_in(
            {
                name: file_text(spec[key])
                for name, key in (
                    ("execir.json", "execir"),
                    ("workflow.json", "document"),
                    ("input.json", "inputs"),
                    ("the answers", "answers"),
                    ("the mock script", "provider"),
                    ("the fixtures", "fixtures"),
                )
                if key in spec
            },
            redact,
        )
    return await client.start_workflow(
        WORKFLOW_NAME,
        spec,
        id=run_id,
        id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,  # a run id names one run
        task_queue=task_queue,
        result_type=dict,
        memo={"workflow": ir.workflow.id, **(memo or {})},
    )


async def follow(
    handle: WorkflowHandle[Any, Any],
    on_event: Callable[[dict[str, Any]], None] | None = None,
    *,
    until_question: bool = True,
) -> dict[str, Any]:
    """Pass the run's events to ``on_event`` as they come, until it ends (its result) or,
    with ``until_question``, until it waits for an answer (the progress, ``status``
    ``waiting``, with the ``question``) or was stopped (``interrupted``, with the
    ``stopped`` report: ``stops.py``)."""
    await check_key(handle._client, handle.id)
    seen = 0
    while True:
        progress: dict[str, Any] = await handle.query("progress", seen)
        for event in progress["events"]:
            seen = event["seq"]
            if on_event is not None:
                on_event(event)
        if progress["result"] is not None:
            result: dict[str, Any] = progress["result"]
            return result
        if until_question and progress["status"] in ("waiting", "interrupted"):
            return progress
        await asyncio.sleep(FOLLOW_EVERY)


async def answer(client: Client, run_id: str, ir: ExecIR, node_id: str, value: Any) -> None:
    """Answer the question of ASK node ``node_id`` of run ``run_id`` (checked against the
    node's options first: an answer that fits none is an InputError, and is not sent)."""
    check_answers(ir, {node_id: value}, what="answer")
    await client.get_workflow_handle(run_id).execute_update("answer", args=[node_id, value])


async def approve(client: Client, run_id: str, decisions: dict[str, Any]) -> None:
    """Decide tool calls of run ``run_id`` that wait for approval (the workflow's
    ``approve`` update: ``{"<id>" or "*": "allow" | "allow_run" | "deny" | {"decision",
    "reason", "door"}}``). An id no call waits on, or a malformed decision, is an
    InputError, and nothing is decided."""
    try:
        await client.get_workflow_handle(run_id).execute_update("approve", args=[decisions])
    except WorkflowUpdateFailedError as exc:
        cause = exc.cause
        raise InputError(str(getattr(cause, "message", None) or cause or exc)) from None


async def stop(client: Client, run_id: str, door: str) -> None:
    """Ask run ``run_id`` to stop at its next op boundary (the workflow's ``stop`` update;
    ``door`` says who asked: ``lattice runs stop``, ``gateway``). A run that has ended is
    a LatticeUserError."""
    await _update(client, run_id, "stop", door)


async def resume_stopped(client: Client, run_id: str) -> None:
    """Resume run ``run_id`` where it stopped (the workflow's ``resume`` update); a run
    that was not stopped is a LatticeUserError."""
    await _update(client, run_id, "resume")


async def _update(client: Client, run_id: str, name: str, *args: Any) -> None:
    handle = client.get_workflow_handle(run_id)
    try:
        await handle.execute_update(name, args=list(args))
    except WorkflowUpdateFailedError as exc:
        cause = exc.cause
        raise LatticeUserError(
            str(getattr(cause, "message", None) or cause or exc), error_type=ErrorType.CONFLICT
        ) from None
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND and "completed" in exc.message:
            result = await handle.result()
            raise LatticeUserError(
                f"run {run_id} is {result['status']}: it has ended", error_type=ErrorType.CONFLICT
            ) from None
        raise LatticeUserError(
            f"Temporal refused the {name} of run {run_id}: {exc.message}",
            error_type=ErrorType.CONFLICT,
        ) from None


def run_result(
    outcome: dict[str, Any],
    *,
    answer_hint: str = "lattice resume RUN --answer NODE=VALUE",
    resume_hint: str = "lattice resume RUN --temporal HOST:PORT",
) -> RunResult:
    """``follow``'s outcome as the RunResult a local run returns: a run waiting for an
    answer is ``halted``, its failure report says what is asked and how to answer
    (``answer_hint``, with ``RUN`` the run id); a stopped run is ``interrupted``, and says
    how to resume it (``resume_hint``)."""
    if outcome.get("status") == "waiting" and "question" in outcome:
        question = outcome["question"]
        run_id = str(outcome.get("run_id", ""))
        failure = FailureReport(
            phase="run",
            run_id=run_id,
            op_id=question.get("op_id"),
            node_id=question.get("node_id"),
            category=question.get("reason", "waiting_for_answer"),
            summary=question.get("summary", ""),
            details=question.get("details") or {},
            recovery_action=answer_hint.replace("RUN", run_id).replace(
                "NODE", str(question.get("node_id"))
            ),
        )
        usage = Usage.from_json(outcome.get("usage"))
        return RunResult("halted", None, {}, run_id, None, usage, failure)
    if outcome.get("result", 0) is None and outcome.get("stopped"):  # stopped, resumable
        report = dict(outcome["stopped"])
        report["recovery_action"] = resume_hint.replace("RUN", str(outcome["run_id"]))
        usage = Usage.from_json(outcome.get("usage"))
        return RunResult(
            "interrupted", None, {}, outcome["run_id"], None, usage, FailureReport(**report)
        )
    failure_data = outcome.get("failure")
    return RunResult(
        status=outcome["status"],
        output=outcome.get("output"),
        state={"vars": outcome.get("vars") or {}},
        run_id=outcome["run_id"],
        run_dir=None,
        usage=Usage.from_json(outcome.get("usage")),
        failure=FailureReport(**failure_data) if failure_data else None,
        changes=outcome.get("changes") or [],
        without_tools=outcome.get("without_tools") or [],
        dead_end=outcome.get("dead_end"),
    )

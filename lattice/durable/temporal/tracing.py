"""One OpenTelemetry trace per run on Temporal, across workers, retries and resumes.

A local run's trace is made by one process, from its events as they come. On Temporal
a run's ops run on any number of workers, an op may run again on another one (its
worker was lost), and a failed or interrupted run goes on in a new execution of its
workflow (``rerun.py``). So a run's trace ids come from its run id, not from a process:
the trace id, and the span id of each execution's run span (``run_ids``). A worker that
traces (``[telemetry]`` in its configuration) makes an op's spans (the op, its model
attempts, its tool calls) children of that span (``op_listeners``), whichever worker
and attempt it is; every attempt of an op is then in the trace. The run span itself is
made when the execution ends, by the worker that ends it (the ``lattice.trace_run``
local activity, when the run was started with ``trace``: ``trace_run``), with the
execution's start and end; an execution after the first is a child of the first's run
span, so the segments of a resumed run read as one trace.

OpenTelemetry is imported only when the worker traces. This module does not import
``temporalio``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import datetime
from typing import Any

from lattice.runtime.settings import RuntimeSettings

TRACE_ACTIVITY = "lattice.trace_run"


def run_ids(run_id: str, segment: int = 1) -> tuple[int, int]:
    """(trace id, span id) of the run span of execution ``segment`` of run ``run_id``."""
    trace_id = int.from_bytes(hashlib.sha256(f"lattice-trace:{run_id}".encode()).digest()[:16])
    span = hashlib.sha256(f"lattice-run-span:{run_id}:{segment}".encode()).digest()[:8]
    return trace_id or 1, int.from_bytes(span) or 1


class OpSpans:
    """The tracing of one op of a run on this worker: a listener of the op's events that
    makes its spans children of the execution's run span, and says when the op starts
    and ends (the walk in the workflow emits those events, not the worker)."""

    def __init__(self, listeners: list[Callable[[dict[str, Any]], None]], run_id: str) -> None:
        self.listeners = listeners
        self.run_id = run_id

    def __call__(self, event: dict[str, Any]) -> None:
        for listener in self.listeners:
            listener(event)

    def started(self, op_id: str, node_id: str, kind: str) -> None:
        self._said("op_started", op_id, node_id, {"kind": kind})

    def finished(self, op_id: str, node_id: str, *, port: Any = None, error: Any = None) -> None:
        data = {"port": port} if error is None else {"error_type": error}
        self._said("op_finished", op_id, node_id, data)

    def _said(self, kind: str, op_id: str, node_id: str, data: dict[str, Any]) -> None:
        self(
            {"run_id": self.run_id, "type": kind, "op_id": op_id, "node_id": node_id, "data": data}
        )


def op_spans(settings: RuntimeSettings, provider: Any, run_id: str, segment: int) -> OpSpans | None:
    """The tracing of one op of run ``run_id`` on this worker (None when the worker does
    not trace), its spans children of the execution's run span."""
    listeners = settings.run_listeners(provider)
    for listener in listeners:
        adopt = getattr(listener, "adopt", None)
        if adopt is not None:
            adopt(run_id, *run_ids(run_id, segment))
    return OpSpans(listeners, run_id) if listeners else None


def trace_run(settings: RuntimeSettings, ended: dict[str, Any]) -> bool:
    """Export the run span of one execution (``ended``: its ``run_id``, ``segment``,
    ``workflow``, ``started_at`` and ``finished_at`` as ISO times, ``status``, ``usage``,
    ``error_type``); False when this worker does not trace."""
    telemetry = settings.telemetry
    if telemetry is None or not telemetry.enabled:
        return False
    from lattice.telemetry.spans import run_span

    run_id, segment = str(ended["run_id"]), int(ended.get("segment") or 1)
    usage = ended.get("usage") or {}
    workflow = ended.get("workflow")
    return run_span(
        telemetry,
        name=f"invoke_workflow {workflow}" if workflow else "invoke_workflow",
        ids=run_ids(run_id, segment),
        parent=run_ids(run_id, 1) if segment > 1 else None,
        start_ns=_ns(ended["started_at"]),
        end_ns=_ns(ended["finished_at"]),
        attributes={
            "gen_ai.operation.name": "invoke_workflow",
            "gen_ai.workflow.name": workflow,
            "lattice.workflow.id": workflow,
            "lattice.run.id": run_id,
            "lattice.run.status": ended.get("status"),
            "lattice.run.segment": segment if segment > 1 else None,
            "lattice.engine": "temporal",
            "gen_ai.usage.input_tokens": usage.get("input_tokens"),
            "gen_ai.usage.output_tokens": usage.get("output_tokens"),
            "lattice.usage.calls": usage.get("calls"),
        },
        error_type=ended.get("error_type"),
    )


def _ns(moment: str) -> int:
    return int(datetime.fromisoformat(moment.replace("Z", "+00:00")).timestamp() * 1e9)

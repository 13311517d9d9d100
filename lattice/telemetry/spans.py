"""A run's events as OpenTelemetry spans (imported only when tracing is configured).

``TraceListener`` receives the events of every run of a Runner, as they are emitted,
and keeps one span open per run, per op in flight (one per track: the main walk and
each parallel branch) and per model attempt, each started and ended at the moment its
event arrived:

- the run: ``invoke_workflow <workflow>`` (``run_started`` or ``run_resumed`` →
  ``run_finished``, ``run_failed``, ``run_halted``, ``run_interrupted``);
- an op: ``<KIND> <node>`` (``op_started`` → ``op_finished``), a child of the run, or in
  a parallel branch a child of the FORK or FOR_EACH op that started the branch;
- a model attempt: ``chat <model>`` (``llm_request`` → the answer, ``validation_failed``,
  ``retry``, the next attempt or the op's end), a child of its op, with the GenAI
  attributes (``gen_ai.operation.name``, ``gen_ai.provider.name``,
  ``gen_ai.request.model``, ``gen_ai.response.model``, ``gen_ai.usage.input_tokens`` /
  ``output_tokens``, ``gen_ai.response.finish_reasons``, ``error.type``) and Lattice's
  (``lattice.attempt.kind`` initial/retry/repair/escalation, ``lattice.model_class``,
  ``lattice.violations.count``, ``lattice.prompt_hash``, ``lattice.branch``);
- an MCP or HTTP call: ``execute_tool <tool>`` (``tool_call`` → ``tool_result``), and
  each tool call of an agent op (``tool_call_started`` → ``tool_call_finished``, a child
  of its op, with ``gen_ai.tool.name`` and ``gen_ai.tool.call.id``; a turn's parallel
  calls are open at once).

Retries, repairs, escalations and salvaged outputs are also span events on their op.
With ``capture_content`` the listener asks for ``llm_content`` events and puts the
messages (``gen_ai.system_instructions``, ``gen_ai.input.messages``) and the answer
(``gen_ai.output.messages``) on the attempt, masked. A fault in the listener is logged
once and never fails a run.
"""

from __future__ import annotations

import copy
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import (
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    Tracer,
)

from lattice.errors import ErrorType, LatticeUserError, install_hint
from lattice.events import EventKind
from lattice.llm.base import LIVE_PROVIDERS
from lattice.runs.redaction import make_redactor
from lattice.telemetry.settings import TelemetrySettings

log = logging.getLogger("lattice.telemetry")

OTHER_ERROR = "_OTHER"
"""``error.type`` of a failure whose type no event named (the conventions' fallback)."""


_providers: dict[tuple[str, str], Any] = {}
_providers_lock = threading.Lock()


def shared_provider(settings: TelemetrySettings) -> Any:
    """The process's tracer provider for ``settings.traces_url`` and its service name:
    an OTLP/HTTP exporter behind a batch processor, flushed at exit."""
    assert settings.traces_url is not None
    key = (settings.traces_url, settings.service_name)
    with _providers_lock:
        provider = _providers.get(key)
        if provider is None:
            try:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                    OTLPSpanExporter,
                )
                from opentelemetry.sdk.resources import Resource
                from opentelemetry.sdk.trace import TracerProvider
                from opentelemetry.sdk.trace.export import BatchSpanProcessor
            except ImportError as exc:  # pragma: no cover - depends on the install
                raise LatticeUserError(
                    "tracing needs the OpenTelemetry SDK and OTLP exporter: "
                    + install_hint("otel"),
                    error_type=ErrorType.CONFIG_ERROR,
                ) from exc
            provider = TracerProvider(
                resource=Resource.create({"service.name": settings.service_name})
            )
            provider.add_span_processor(
                BatchSpanProcessor(OTLPSpanExporter(endpoint=settings.traces_url))
            )
            _providers[key] = provider
    return provider


def flush_providers(timeout_millis: int = 30_000) -> bool:
    """Export what the shared tracer providers hold (``lattice.telemetry.flush``)."""
    with _providers_lock:
        providers = list(_providers.values())
    return all(provider.force_flush(timeout_millis) for provider in providers)


@dataclass
class _Track:
    """The spans open on one line of execution (the main walk or one branch)."""

    op: Span | None = None
    attempt: Span | None = None
    answered_ns: int | None = None
    """When the attempt's answer arrived (a good attempt ends then)."""
    attempt_failed: bool = False
    tool: Span | None = None
    agent_tools: dict[str, Span] = field(default_factory=dict)
    """An agent op's tool calls in flight, by call id."""

    def fail_attempt(self, error_type: str, description: str | None = None) -> None:
        if self.attempt is not None:
            _error(self.attempt, error_type, description)
            self.attempt_failed = True


@dataclass
class _Run:
    span: Span
    tracks: dict[str | None, _Track] = field(default_factory=dict)
    input_tokens: int = 0
    output_tokens: int = 0
    calls: int = 0

    def track(self, branch: str | None) -> _Track:
        track = self.tracks.get(branch)
        if track is None:
            track = self.tracks[branch] = _Track()
        return track


def _clean(attributes: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in attributes.items() if v is not None}


def _parent_track(branch: str) -> str | None:
    """The track a branch was started from: ``0005.2`` (op 5 of the main walk, branch 2)
    → the main walk (None); ``0005.2.0003.1`` → ``0005.2``."""
    parts = branch.split(".")
    return (".".join(parts[:-2]) or None) if len(parts) > 2 else None


def _error(span: Span, error_type: str, description: str | None = None) -> None:
    span.set_attribute("error.type", error_type)
    span.set_status(Status(StatusCode.ERROR, description or error_type))


# long: one handler per event kind that opens or closes a span, over the spans it keeps open
class TraceListener:
    """Turns the events of runs into spans (``Runner.subscribe(TraceListener(...))``;
    a Runner whose settings have ``telemetry`` subscribes one itself).

    ``provider`` names the run's provider (``gen_ai.provider.name`` of attempts whose
    model has no ``provider:`` prefix); ``workflow`` the workflow (the name of a resumed
    run's span); ``secret_names`` the environment variables whose values are masked in
    captured content (provider API keys always are).
    """

    wants_deltas = False
    """Spans need no streamed pieces: a traced run streams only if someone else asks."""

    def __init__(
        self,
        settings: TelemetrySettings,
        *,
        provider: str = "unknown",
        workflow: str | None = None,
        secret_names: Iterable[str] = (),
    ) -> None:
        self.settings = settings
        self.wants_content = settings.capture_content
        tracer_provider = settings.tracer_provider or shared_provider(settings)
        self._tracer: Tracer = tracer_provider.get_tracer("lattice")
        self._provider = provider
        self._workflow = workflow
        self._redact = make_redactor(tuple(secret_names))
        self._runs: dict[str, _Run] = {}
        self._faulted = False
        self._handlers: dict[str, Callable[[_Run, dict[str, Any], int], None]] = {
            EventKind.OP_STARTED: self._op_started,
            EventKind.OP_FINISHED: self._op_finished,
            EventKind.LLM_REQUEST: self._llm_request,
            EventKind.LLM_RESPONSE: self._llm_response,
            EventKind.LLM_CONTENT: self._llm_content,
            EventKind.VALIDATION_FAILED: self._validation_failed,
            EventKind.RETRY: self._retry,
            EventKind.REPAIR_ATTEMPT: self._repair,
            EventKind.ESCALATED: self._escalated,
            EventKind.OUTPUT_SALVAGED: self._salvaged,
            EventKind.TOOL_CALL: self._tool_call,
            EventKind.TOOL_RESULT: self._tool_result,
            EventKind.TOOL_CALL_STARTED: self._agent_tool_started,
            EventKind.TOOL_CALL_FINISHED: self._agent_tool_finished,
            EventKind.RUN_FINISHED: self._run_ended,
            EventKind.RUN_FAILED: self._run_ended,
            EventKind.RUN_HALTED: self._run_ended,
            EventKind.RUN_INTERRUPTED: self._run_ended,
        }

    def __call__(self, event: dict[str, Any]) -> None:
        try:
            self._handle(event)
        except Exception:  # tracing must never fail a run
            if not self._faulted:
                self._faulted = True
                log.warning(
                    "lattice tracing failed on a %s event", event.get("type"), exc_info=True
                )

    def adopt(self, run_id: str, trace_id: int, span_id: int) -> None:
        """Trace the events of run ``run_id`` that come without its start (an op of a run
        on Temporal, on a worker): their spans are children of the run's span
        (``trace_id``, ``span_id``), which another process exports (``run_span``)."""
        parent = trace.NonRecordingSpan(
            SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(1))
        )
        self._runs[run_id] = _Run(parent)

    @property
    def open_runs(self) -> int:
        """Runs whose span is still open (0 once every run has ended)."""
        return len(self._runs)

    # -- dispatch -----------------------------------------------------------------------

    def _handle(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        now = time.time_ns()
        if kind in (EventKind.RUN_STARTED, EventKind.RUN_RESUMED):
            self._run_started(event, now)
            return
        run = self._runs.get(event["run_id"])
        handler = self._handlers.get(kind)
        if run is not None and handler is not None:
            handler(run, event, now)

    def _context(self, span: Span) -> Any:
        return trace.set_span_in_context(span)

    # -- the run ------------------------------------------------------------------------

    def _run_started(self, event: dict[str, Any], now: int) -> None:
        data = event["data"]
        workflow = data.get("workflow") or self._workflow
        attributes = {
            "gen_ai.operation.name": "invoke_workflow",
            "gen_ai.workflow.name": workflow,
            "lattice.workflow.id": workflow,
            "lattice.run.id": event["run_id"],
        }
        if event["type"] == EventKind.RUN_RESUMED:
            attributes["lattice.run.segment"] = data.get("segment")
            attributes["lattice.run.resumed_after"] = data.get("after")
        span = self._tracer.start_span(
            f"invoke_workflow {workflow}" if workflow else "invoke_workflow",
            kind=SpanKind.INTERNAL,
            attributes=_clean(attributes),
            start_time=now,
        )
        self._runs[event["run_id"]] = _Run(span)

    def _run_ended(self, run: _Run, event: dict[str, Any], now: int) -> None:
        kind, data = event["type"], event["data"]
        status = {
            EventKind.RUN_FINISHED: "completed",
            EventKind.RUN_FAILED: "failed",
            EventKind.RUN_HALTED: "halted",
            EventKind.RUN_INTERRUPTED: "interrupted",
        }[kind]
        for branch, track in sorted(
            run.tracks.items(), key=lambda item: item[0] or "", reverse=True
        ):  # the deepest branches first
            error = (
                data.get("error_type") if kind == EventKind.RUN_FAILED and branch is None else None
            )
            self._close_track(track, now, error_type=error, halted=kind == EventKind.RUN_HALTED)
        span = run.span
        span.set_attribute("lattice.run.status", status)
        span.set_attribute("gen_ai.usage.input_tokens", run.input_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", run.output_tokens)
        span.set_attribute("lattice.usage.calls", run.calls)
        if kind == EventKind.RUN_FAILED:
            error_type = str(data.get("error_type") or OTHER_ERROR)
            where = f"{error_type} at {event.get('node_id')}"
            # the message may quote model output: content, shown only if captured
            message = data.get("message") if self.settings.capture_content else None
            _error(span, error_type, self._redact(f"{where}: {message}") if message else where)
            if event.get("node_id"):
                span.set_attribute("lattice.failed.node.id", event["node_id"])
        elif kind == EventKind.RUN_HALTED:
            span.set_attribute("lattice.halt.reason", str(data.get("reason")))
        elif kind == EventKind.RUN_INTERRUPTED:
            span.set_attribute("lattice.interrupt.reason", str(data.get("reason")))
        else:
            span.set_status(Status(StatusCode.OK))
        span.end(end_time=now)
        self._runs.pop(event["run_id"], None)

    def _close_track(
        self, track: _Track, now: int, *, error_type: str | None, halted: bool = False
    ) -> None:
        """End what is still open on a track when its op ends (or the run does)."""
        if track.tool is not None:
            if error_type:
                _error(track.tool, error_type)
            track.tool.end(end_time=now)
            track.tool = None
        for span in track.agent_tools.values():
            _error(span, error_type or OTHER_ERROR)
            span.end(end_time=now)
        track.agent_tools.clear()
        if track.attempt is not None:
            if track.answered_ns is None and not halted:  # the call itself failed
                track.fail_attempt(error_type or OTHER_ERROR)
            self._end_attempt(track, now)
        if track.op is not None:
            if error_type:
                _error(track.op, error_type)
            if halted:
                track.op.set_attribute("lattice.op.halted", True)
            track.op.end(end_time=now)
            track.op = None

    # -- ops ------------------------------------------------------------------------------

    def _op_started(self, run: _Run, event: dict[str, Any], now: int) -> None:
        branch = event.get("branch")
        parent = run.span
        if branch is not None:
            above = run.tracks.get(_parent_track(branch))
            if above is not None and above.op is not None:
                parent = above.op
        kind = event["data"].get("kind")
        node = event.get("node_id")
        track = run.track(branch)
        track.op = self._tracer.start_span(
            f"{kind} {node}",
            context=self._context(parent),
            kind=SpanKind.INTERNAL,
            attributes=_clean(
                {
                    "lattice.op.id": event.get("op_id"),
                    "lattice.node.id": node,
                    "lattice.op.kind": kind,
                    "lattice.branch": branch,
                }
            ),
            start_time=now,
        )

    def _op_finished(self, run: _Run, event: dict[str, Any], now: int) -> None:
        track = run.track(event.get("branch"))
        data = event["data"]
        error_type = data.get("error_type")
        if track.op is not None and data.get("port"):
            track.op.set_attribute("lattice.op.port", data["port"])
            if data["port"] == "failed":  # the op failed and took its ``failed`` route
                if track.answered_ns is None:
                    track.fail_attempt(OTHER_ERROR)
                track.op.set_status(Status(StatusCode.ERROR, "the op failed (failed route)"))
        self._close_track(track, now, error_type=error_type)

    # -- model attempts -----------------------------------------------------------------

    def _end_attempt(self, track: _Track, now: int) -> None:
        attempt = track.attempt
        if attempt is None:
            return
        answered = track.answered_ns
        attempt.end(end_time=now if track.attempt_failed or answered is None else answered)
        track.attempt = None
        track.answered_ns = None
        track.attempt_failed = False

    def _llm_request(self, run: _Run, event: dict[str, Any], now: int) -> None:
        track = run.track(event.get("branch"))
        self._end_attempt(track, now)
        data = event["data"]
        model = data.get("model")
        provider = self._provider
        if isinstance(model, str):
            prefix, sep, rest = model.partition(":")
            if sep and prefix in LIVE_PROVIDERS:
                provider, model = prefix, rest or None
        parent = track.op or run.span
        track.attempt = self._tracer.start_span(
            f"chat {model}" if model else "chat",
            context=self._context(parent),
            kind=SpanKind.CLIENT,
            attributes=_clean(
                {
                    "gen_ai.operation.name": "chat",
                    "gen_ai.provider.name": provider,
                    "gen_ai.request.model": model,
                    "lattice.model_class": data.get("model_class"),
                    "lattice.attempt.number": data.get("attempt"),
                    "lattice.attempt.kind": data.get("kind"),
                    "lattice.prompt_hash": data.get("prompt_hash"),
                    "lattice.request.chars": data.get("request_chars"),
                    "lattice.node.id": event.get("node_id"),
                    "lattice.op.id": event.get("op_id"),
                    "lattice.branch": event.get("branch"),
                }
            ),
            start_time=now,
        )

    def _llm_response(self, run: _Run, event: dict[str, Any], now: int) -> None:
        data = event["data"]
        run.calls += 1
        run.input_tokens += int(data.get("input_tokens") or 0)
        run.output_tokens += int(data.get("output_tokens") or 0)
        track = run.track(event.get("branch"))
        span = track.attempt
        if span is None:
            return
        track.answered_ns = now
        finish = data.get("finish_reason")
        span.set_attributes(
            _clean(
                {
                    "gen_ai.response.model": data.get("model"),
                    "gen_ai.usage.input_tokens": data.get("input_tokens"),
                    "gen_ai.usage.output_tokens": data.get("output_tokens"),
                    "gen_ai.response.finish_reasons": (str(finish),) if finish else None,
                    "lattice.latency_ms": data.get("latency_ms"),
                }
            )
        )

    def _llm_content(self, run: _Run, event: dict[str, Any], now: int) -> None:
        span = run.track(event.get("branch")).attempt
        if span is None or not self.settings.capture_content:
            return
        data = event["data"]
        redact = self._redact
        if "messages" in data:
            system = [
                {"type": "text", "content": m["content"]}
                for m in data["messages"]
                if m["role"] == "system"
            ]
            messages = [
                {"role": m["role"], "parts": [{"type": "text", "content": m["content"]}]}
                for m in data["messages"]
                if m["role"] != "system"
            ]
            if system:
                span.set_attribute("gen_ai.system_instructions", redact(_json(system)))
            span.set_attribute("gen_ai.input.messages", redact(_json(messages)))
        if "completion" in data:
            output = [
                {
                    "role": "assistant",
                    "parts": [{"type": "text", "content": data["completion"]}],
                    "finish_reason": data.get("finish_reason") or "stop",
                }
            ]
            span.set_attribute("gen_ai.output.messages", redact(_json(output)))

    def _validation_failed(self, run: _Run, event: dict[str, Any], now: int) -> None:
        track = run.track(event.get("branch"))
        span = track.attempt
        if span is None:
            return
        data = event["data"]
        violations = data.get("violations") or []
        span.set_attribute("lattice.violations.count", len(violations))
        detail = None
        if violations:  # the messages may quote the answer: content, shown only if captured
            first = violations[0]
            message = f": {first.get('message')}" if self.settings.capture_content else ""
            detail = self._redact(f"{first.get('pointer')}{message}")
        track.fail_attempt(str(data.get("error_type") or OTHER_ERROR), detail)
        self._end_attempt(track, now)

    def _retry(self, run: _Run, event: dict[str, Any], now: int) -> None:
        track = run.track(event.get("branch"))
        data = event["data"]
        if track.attempt is not None:
            track.fail_attempt(str(data.get("error_type") or OTHER_ERROR))
            self._end_attempt(track, now)
        self._op_event(track, "retry", data, now)

    def _repair(self, run: _Run, event: dict[str, Any], now: int) -> None:
        data = dict(event["data"])
        data["violations"] = len(data.get("violations") or [])
        self._op_event(run.track(event.get("branch")), "repair", data, now)

    def _escalated(self, run: _Run, event: dict[str, Any], now: int) -> None:
        self._op_event(run.track(event.get("branch")), "escalation", event["data"], now)

    def _salvaged(self, run: _Run, event: dict[str, Any], now: int) -> None:
        track = run.track(event.get("branch"))
        if track.attempt is not None:
            track.attempt.set_attribute("lattice.output.salvaged", True)

    def _op_event(self, track: _Track, name: str, data: dict[str, Any], now: int) -> None:
        if track.op is None:
            return
        attributes = {
            f"lattice.{key}": value
            for key, value in data.items()
            if isinstance(value, str | bool | int | float)
        }
        track.op.add_event(name, attributes, timestamp=now)

    # -- tools ----------------------------------------------------------------------------

    def _tool_call(self, run: _Run, event: dict[str, Any], now: int) -> None:
        track = run.track(event.get("branch"))
        data = event["data"]
        name = data.get("name") or data.get("tool")
        track.tool = self._tracer.start_span(
            f"execute_tool {name}",
            context=self._context(track.op or run.span),
            kind=SpanKind.CLIENT if data.get("tool") == "http" else SpanKind.INTERNAL,
            attributes=_clean(
                {
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": name,
                    "lattice.tool.kind": data.get("tool"),
                    "lattice.tool.server": data.get("server"),
                    "http.request.method": data.get("method"),
                    "lattice.branch": event.get("branch"),
                }
            ),
            start_time=now,
        )

    def _tool_result(self, run: _Run, event: dict[str, Any], now: int) -> None:
        track = run.track(event.get("branch"))
        span = track.tool
        if span is None:
            return
        data = event["data"]
        if isinstance(data.get("status"), int):
            span.set_attribute("http.response.status_code", data["status"])
            if data["status"] >= 400:
                _error(span, str(data["status"]))
        if data.get("is_error"):
            _error(span, ErrorType.TOOL_ERROR)
        span.end(end_time=now)
        track.tool = None

    def _agent_tool_started(self, run: _Run, event: dict[str, Any], now: int) -> None:
        track = run.track(event.get("branch"))
        data = event["data"]
        name = data.get("tool")
        track.agent_tools[str(data.get("call_id"))] = self._tracer.start_span(
            f"execute_tool {name}",
            context=self._context(track.op or run.span),
            kind=SpanKind.INTERNAL,
            attributes=_clean(
                {
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": name,
                    "gen_ai.tool.call.id": data.get("call_id"),
                    "lattice.agent.turn": data.get("turn"),
                    "lattice.branch": event.get("branch"),
                }
            ),
            start_time=now,
        )

    def _agent_tool_finished(self, run: _Run, event: dict[str, Any], now: int) -> None:
        track = run.track(event.get("branch"))
        data = event["data"]
        span = track.agent_tools.pop(str(data.get("call_id")), None)
        if span is None:  # a result replayed from the journal: no call ran
            return
        if data.get("changes"):
            span.set_attribute("lattice.tool.changes", tuple(data["changes"]))
        if data.get("is_error"):
            _error(span, ErrorType.TOOL_ERROR)
        span.end(end_time=now)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


class _FixedIds:
    """The ids of one span chosen by its caller (``run_span``): the SDK's ``IdGenerator``
    interface."""

    def __init__(self, trace_id: int, span_id: int) -> None:
        self.trace_id = trace_id
        self.span_id = span_id

    def is_trace_id_random(self) -> bool:
        return False

    def generate_trace_id(self) -> int:
        return self.trace_id

    def generate_span_id(self) -> int:
        return self.span_id


def run_span(
    settings: TelemetrySettings,
    *,
    name: str,
    ids: tuple[int, int],
    parent: tuple[int, int] | None,
    start_ns: int,
    end_ns: int,
    attributes: dict[str, Any],
    error_type: str | None = None,
) -> bool:
    """Export a run's span with the ids ``ids`` (trace id, span id) its ops' spans were
    made children of, on other processes (``TraceListener.adopt``); ``parent`` is the
    span it continues (a resumed run's first execution). False when the tracer provider
    cannot make a span with given ids (not the OpenTelemetry SDK's)."""
    provider = settings.tracer_provider or shared_provider(settings)
    tracer = copy.copy(provider.get_tracer("lattice"))
    if not hasattr(tracer, "id_generator"):
        return False
    tracer.id_generator = _FixedIds(*ids)
    context = None
    if parent is not None:
        context = trace.set_span_in_context(
            trace.NonRecordingSpan(
                SpanContext(parent[0], parent[1], is_remote=True, trace_flags=TraceFlags(1))
            )
        )
    span = tracer.start_span(
        name,
        context=context,
        kind=SpanKind.INTERNAL,
        attributes=_clean(attributes),
        start_time=start_ns,
    )
    if error_type:
        _error(span, error_type)
    else:
        span.set_status(Status(StatusCode.OK))
    span.end(end_time=end_ns)
    return True

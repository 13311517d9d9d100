"""Runs as OpenTelemetry traces, read back from the SDK's in-memory exporter: a span per
run, per op and per model attempt, with the GenAI attributes and Lattice's own."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from lattice.errors import LatticeUserError
from lattice.llm.mock import MockProvider
from lattice.lower import lower
from lattice.runtime import Runner, RunStore
from lattice.runtime.settings import RuntimeSettings
from lattice.telemetry import TelemetrySettings
from lattice.telemetry.spans import TraceListener, _parent_track
from tests.builders import conn, node, workflow
from tests.conftest import EXAMPLES
from tests.runtime.test_parallel import fan_out

SCHEMA = {
    "type": "object",
    "properties": {"greeting": {"type": "string"}},
    "required": ["greeting"],
}


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    yield InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> TracerProvider:
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    return tracer_provider


def traced(provider: TracerProvider, *, capture: bool = False, **settings: Any) -> RuntimeSettings:
    return RuntimeSettings(
        telemetry=TelemetrySettings(tracer_provider=provider, capture_content=capture), **settings
    )


def greeter(**data: Any) -> dict[str, Any]:
    return workflow(
        [
            node("start", "start"),
            node(
                "greet",
                "prompt",
                prompt="Greet {{ $in.name }}",
                outputSchema=SCHEMA,
                modelClass="small",
                **data,
            ),
            node("end", "end", output="$vars.greet.result.greeting"),
        ],
        [conn("start", "greet"), conn("greet", "end")],
    )


def by_name(spans: tuple[ReadableSpan, ...] | list[ReadableSpan]) -> dict[str, ReadableSpan]:
    return {span.name: span for span in spans}


def children(spans: Any, parent: ReadableSpan) -> list[ReadableSpan]:
    kids = [s for s in spans if s.parent is not None and s.parent.span_id == parent.context.span_id]
    return sorted(kids, key=lambda s: s.start_time or 0)


def attempts(spans: Any) -> list[ReadableSpan]:
    found = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "chat"]
    return sorted(found, key=lambda s: s.start_time or 0)


def run_span(spans: Any) -> ReadableSpan:
    (root,) = [s for s in spans if s.parent is None]
    return root


def test_support_triage_is_a_tree_of_run_ops_and_attempts(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    ir = lower(EXAMPLES / "support-triage.json")
    mock = MockProvider.from_file(EXAMPLES / "support-triage.mock.json")
    inputs = json.loads((EXAMPLES / "support-triage.inputs.json").read_text(encoding="utf-8"))
    result = Runner(ir, provider=mock, store=RunStore(None), settings=traced(provider)).run(inputs)
    assert result.status == "completed"

    spans = exporter.get_finished_spans()
    root = run_span(spans)
    assert root.name == "invoke_workflow support-triage"
    assert root.attributes["gen_ai.operation.name"] == "invoke_workflow"
    assert root.attributes["gen_ai.workflow.name"] == "support-triage"
    assert root.attributes["lattice.run.id"] == result.run_id
    assert root.attributes["lattice.run.status"] == "completed"
    assert root.attributes["gen_ai.usage.input_tokens"] == result.usage.input_tokens
    assert root.attributes["gen_ai.usage.output_tokens"] == result.usage.output_tokens
    assert root.status.status_code is StatusCode.OK

    ops = children(spans, root)
    started = [e["node_id"] for e in result.events if e["type"] == "op_started"]
    assert [op.attributes["lattice.node.id"] for op in ops] == started
    assert all(
        op.name == f"{op.attributes['lattice.op.kind']} {op.attributes['lattice.node.id']}"
        for op in ops
    )
    for op in ops:
        assert root.start_time <= op.start_time <= op.end_time <= root.end_time  # type: ignore[operator]

    calls = attempts(spans)
    assert len(calls) == result.usage.calls == 5
    for call in calls:
        (parent,) = [op for op in ops if op.context.span_id == call.parent.span_id]  # type: ignore[union-attr]
        assert parent.attributes["lattice.op.kind"] == "LLM_WRITE"
        assert call.kind is SpanKind.CLIENT
        assert call.attributes["gen_ai.provider.name"] == "mock"
        assert call.attributes["gen_ai.response.model"] == "mock-model"
        assert call.attributes["gen_ai.usage.input_tokens"] > 0
        assert call.attributes["gen_ai.response.finish_reasons"] == ("stop",)
        assert call.attributes["lattice.attempt.kind"] == "initial"
        assert call.attributes["lattice.node.id"] == parent.attributes["lattice.node.id"]
        assert "gen_ai.input.messages" not in call.attributes  # content only when captured
    assert [c.attributes["lattice.node.id"] for c in calls] == [
        "classify",
        "draft-billing",
        "review",
        "draft-billing",
        "review",
    ]


def test_repairs_and_escalations_are_attempts_of_their_kind(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    # each answer wrong in its own way: a repair answered with the same violations ends
    # its class's repairs
    mock = MockProvider({"greet": [{"greeting": n} for n in range(9)]})
    settings = traced(provider, models={"small": "gpt-small", "medium": "anthropic:claude-m"})
    result = Runner(lower(greeter()), provider=mock, store=RunStore(None), settings=settings).run(
        {"name": "Ada"}
    )
    assert result.status == "failed"
    spans = exporter.get_finished_spans()
    calls = attempts(spans)
    assert [c.attributes["lattice.attempt.kind"] for c in calls] == [
        "initial",
        "repair",
        "repair",
        "escalation",
        "repair",
        "repair",
        "escalation",
        "repair",
        "repair",
    ]
    assert [c.attributes["lattice.model_class"] for c in calls] == ["small"] * 3 + [
        "medium"
    ] * 3 + ["large"] * 3
    assert [c.attributes["lattice.attempt.number"] for c in calls] == list(range(1, 10))
    first, fourth = calls[0], calls[3]
    assert first.name == "chat gpt-small"
    assert first.attributes["gen_ai.request.model"] == "gpt-small"
    assert first.attributes["gen_ai.provider.name"] == "mock"
    assert fourth.name == "chat claude-m"  # routed: the provider is the model's prefix
    assert fourth.attributes["gen_ai.provider.name"] == "anthropic"
    for call in calls:
        assert call.attributes["error.type"] == "schema_error"
        assert call.attributes["lattice.violations.count"] == 1
        assert call.status.status_code is StatusCode.ERROR
        assert call.status.description == "/greeting"  # the pointer: no quoted content
    (op,) = [s for s in spans if s.name == "LLM_WRITE greet"]
    assert op.attributes["error.type"] == "schema_error"
    assert [e.name for e in op.events] == ["repair", "repair", "escalation"] * 2 + ["repair"] * 2
    root = run_span(spans)
    assert root.attributes["lattice.run.status"] == "failed"
    assert root.attributes["error.type"] == "schema_error"
    assert root.status.description == "schema_error at greet"
    assert root.attributes["lattice.usage.calls"] == 9


def test_a_retried_call_is_a_failed_attempt_then_a_retry(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    async def no_wait(seconds: float) -> None:
        return None

    mock = MockProvider(
        {"greet": [{"$error": "rate_limit_error", "message": "slow down"}, {"greeting": "Hi"}]}
    )
    result = Runner(
        lower(greeter()),
        provider=mock,
        store=RunStore(None),
        settings=traced(provider, sleep=no_wait),
    ).run({"name": "Ada"})
    assert result.status == "completed"
    first, second = attempts(exporter.get_finished_spans())
    assert first.attributes["error.type"] == "rate_limit_error"
    assert "gen_ai.usage.input_tokens" not in first.attributes  # no answer came
    assert second.attributes["lattice.attempt.kind"] == "retry"
    assert "error.type" not in second.attributes
    assert second.status.status_code is StatusCode.UNSET


def test_ops_in_parallel_branches_hang_under_their_fork(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    mock = MockProvider({"b1": ["one"], "b2": ["two"], "b3": ["three"], "merge": ["all"]})
    result = Runner(
        lower(fan_out(3)), provider=mock, store=RunStore(None), settings=traced(provider)
    ).run({"topic": "tides"})
    assert result.status == "completed"
    spans = exporter.get_finished_spans()
    root = run_span(spans)
    (fork,) = [s for s in spans if s.attributes.get("lattice.op.kind") == "FORK"]
    assert fork.parent.span_id == root.context.span_id  # type: ignore[union-attr]
    branch_ops = children(spans, fork)
    assert sorted(s.attributes["lattice.node.id"] for s in branch_ops) == ["b1", "b2", "b3"]
    branches = {s.attributes["lattice.node.id"]: s.attributes["lattice.branch"] for s in branch_ops}
    assert sorted(branches.values()) == ["0002.1", "0002.2", "0002.3"]
    for op in branch_ops:
        (call,) = children(spans, op)
        assert call.attributes["lattice.branch"] == op.attributes["lattice.branch"]
        assert fork.start_time <= op.start_time <= op.end_time <= fork.end_time  # type: ignore[operator]
    (merge,) = [s for s in spans if s.name == "LLM_WRITE merge"]
    assert merge.parent.span_id == root.context.span_id  # type: ignore[union-attr]
    assert "lattice.branch" not in merge.attributes


def test_the_parent_track_of_a_branch() -> None:
    assert _parent_track("0005.2") is None
    assert _parent_track("0005.2.0003.1") == "0005.2"
    assert _parent_track("0001.1.0002.3.0004.2") == "0001.1.0002.3"


def test_captured_content_is_on_the_attempt_and_masked(
    provider: TracerProvider,
    exporter: InMemorySpanExporter,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-proj-very-secret-9f3a")
    mock = MockProvider({"greet": [{"greeting": "Hi sk-proj-very-secret-9f3a"}]})
    doc = greeter(system="Be brief.")
    result = Runner(
        lower(doc), provider=mock, store=RunStore(None), settings=traced(provider, capture=True)
    ).run({"name": "Ada sk-proj-very-secret-9f3a"})
    assert result.status == "completed"
    (call,) = attempts(exporter.get_finished_spans())
    system = json.loads(call.attributes["gen_ai.system_instructions"])
    assert system[0]["type"] == "text" and system[0]["content"].startswith("Be brief.")
    messages = json.loads(call.attributes["gen_ai.input.messages"])
    assert [m["role"] for m in messages] == ["user"]
    assert "Greet Ada ***" in messages[0]["parts"][0]["content"]
    output = json.loads(call.attributes["gen_ai.output.messages"])
    assert output == [
        {
            "role": "assistant",
            "parts": [{"type": "text", "content": '{"greeting": "Hi ***"}'}],
            "finish_reason": "stop",
        }
    ]
    dumped = json.dumps({k: str(v) for k, v in call.attributes.items()})
    assert "sk-proj-very-secret-9f3a" not in dumped


def test_content_events_are_emitted_only_for_a_listener_that_asks(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    for capture in (False, True):
        mock = MockProvider({"greet": [{"greeting": "Hi"}]})
        runner = Runner(
            lower(greeter()),
            provider=mock,
            store=RunStore(None),
            settings=traced(provider, capture=capture),
        )
        seen: list[dict[str, Any]] = []
        runner.subscribe(seen.append)
        runner.run({"name": "Ada"})
        assert ("llm_content" in [e["type"] for e in seen]) is capture


def test_a_halted_run_ends_its_spans(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    doc = workflow(
        [
            node("start", "start"),
            node(
                "ask",
                "askUserQuestion",
                questionText="Go?",
                options=[{"label": "Yes"}, {"label": "No"}],
            ),
            node("end", "end"),
        ],
        [conn("start", "ask"), conn("ask", "end", "branch-0"), conn("ask", "end", "branch-1")],
    )
    runner = Runner(
        lower(doc), provider=MockProvider({}), store=RunStore(None), settings=traced(provider)
    )
    assert runner.run({}).status == "halted"
    spans = exporter.get_finished_spans()
    root = run_span(spans)
    assert root.attributes["lattice.run.status"] == "halted"
    assert root.attributes["lattice.halt.reason"] == "waiting_for_answer"
    (ask,) = [s for s in spans if s.attributes.get("lattice.node.id") == "ask"]
    assert ask.attributes["lattice.op.halted"] is True
    assert runner._event_listeners[0].open_runs == 0  # type: ignore[attr-defined]


def test_a_resumed_run_is_a_trace_of_its_own(
    provider: TracerProvider, exporter: InMemorySpanExporter, tmp_path: Path
) -> None:
    script = {"greet": [{"$error": "api_key_error", "message": "bad key"}, {"greeting": "Hi"}]}
    first = Runner(
        lower(greeter()),
        provider=MockProvider(script),
        store=RunStore(tmp_path),
        settings=traced(provider),
    ).run({"name": "Ada"})
    assert first.status == "failed"
    assert first.run_dir is not None
    resumed = Runner.resume(  # the script goes on after the failure it scripted
        first.run_dir, provider=MockProvider(script), settings=traced(provider)
    )
    assert resumed.status == "completed"
    roots = [s for s in exporter.get_finished_spans() if s.parent is None]
    assert [r.attributes["lattice.run.status"] for r in roots] == ["failed", "completed"]
    assert roots[1].name == "invoke_workflow wf"
    assert roots[1].attributes["lattice.run.segment"] == 2
    assert roots[1].attributes["lattice.run.resumed_after"] == "failed"
    assert {r.attributes["lattice.run.id"] for r in roots} == {first.run_id}


def test_a_fault_in_tracing_never_fails_a_run(caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        def get_tracer(self, *args: Any, **kwargs: Any) -> Any:
            return self

        def start_span(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("exporter on fire")

    settings = RuntimeSettings(telemetry=TelemetrySettings(tracer_provider=Broken()))
    mock = MockProvider({"greet": [{"greeting": "Hi"}]})
    with caplog.at_level(logging.WARNING, logger="lattice.telemetry"):
        result = Runner(
            lower(greeter()), provider=mock, store=RunStore(None), settings=settings
        ).run({"name": "Ada"})
    assert result.status == "completed"
    assert [r.message for r in caplog.records] == ["lattice tracing failed on a run_started event"]


def test_a_traced_run_does_not_stream(provider: TracerProvider) -> None:
    listener = TraceListener(TelemetrySettings(tracer_provider=provider))
    assert listener.wants_deltas is False
    assert listener.wants_content is False
    runner = Runner(
        lower(greeter()),
        provider=MockProvider({"greet": [{"greeting": "Hi"}]}),
        store=RunStore(None),
        settings=traced(provider),
    )
    captured: list[Any] = []

    class Spy:
        name = "spy"

        async def complete(self, request: Any) -> Any:
            captured.append(request.on_delta)
            return await MockProvider({"greet": [{"greeting": "Hi"}]}).complete(request)

    runner.provider = Spy()
    runner.run({"name": "Ada"})
    assert captured == [None]


def test_no_telemetry_means_no_listener() -> None:
    runner = Runner(lower(greeter()), provider=MockProvider({}), store=RunStore(None))
    assert runner._event_listeners == []


def test_tracing_without_opentelemetry_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "lattice.telemetry.spans", raising=False)
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # as if not installed
    settings = RuntimeSettings(
        telemetry=TelemetrySettings(traces_url="http://127.0.0.1:9/v1/traces")
    )
    with pytest.raises(LatticeUserError, match=r"pip install -e '\.\[otel\]'") as info:
        Runner(lower(greeter()), provider=MockProvider({}), store=RunStore(None), settings=settings)
    assert info.value.error_type == "config_error"

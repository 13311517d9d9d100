"""End to end: ``lattice run`` in a process of its own exports its trace with the OTLP/HTTP
exporter to a local receiver on 127.0.0.1, which decodes the protobuf request
(opentelemetry-proto) and checks the span tree. The test prints the tree of the
support-triage example (``pytest -s`` shows it): run → ops → attempts, with the GenAI
attributes."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from tests.conftest import EXAMPLES, REPO

SHOWN = (
    "gen_ai.operation.name",
    "gen_ai.workflow.name",
    "gen_ai.provider.name",
    "gen_ai.request.model",
    "gen_ai.response.model",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "gen_ai.response.finish_reasons",
    "error.type",
    "lattice.run.status",
    "lattice.op.port",
    "lattice.attempt.kind",
    "lattice.model_class",
    "lattice.violations.count",
    "lattice.branch",
)
"""The attributes the printed tree shows (ids, hashes and times vary from run to run)."""


class Receiver:
    """An OTLP/HTTP trace receiver: ``POST /v1/traces`` with a protobuf body."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.paths: list[str] = []
        self.content_types: list[str] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                receiver.paths.append(self.path)
                receiver.content_types.append(str(self.headers.get("content-type")))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver.requests.append(request)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def spans(self) -> list[dict[str, Any]]:
        """Every span received, as dicts: name, ids, kind, attributes, status, service."""
        out = []
        for request in self.requests:
            for resource_spans in request.resource_spans:
                resource = _attributes(resource_spans.resource.attributes)
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        out.append(
                            {
                                "name": span.name,
                                "trace_id": span.trace_id.hex(),
                                "span_id": span.span_id.hex(),
                                "parent": span.parent_span_id.hex() or None,
                                "kind": span.kind,
                                "start": span.start_time_unix_nano,
                                "end": span.end_time_unix_nano,
                                "attributes": _attributes(span.attributes),
                                "status": span.status.code,
                                "scope": scope_spans.scope.name,
                                "service": resource.get("service.name"),
                            }
                        )
        return out


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, which) if which else None


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


def span_tree(spans: list[dict[str, Any]]) -> str:
    """The spans as an indented tree, children in start order."""
    kids: dict[str | None, list[dict[str, Any]]] = {}
    for span in spans:
        kids.setdefault(span["parent"], []).append(span)
    lines: list[str] = []

    def show(span: dict[str, Any], prefix: str, last: bool, root: bool) -> None:
        attrs = span["attributes"]
        shown = ", ".join(f"{key}={attrs[key]}" for key in SHOWN if key in attrs)
        branch = "" if root else ("└─ " if last else "├─ ")
        lines.append(f"{prefix}{branch}{span['name']}  [{shown}]")
        below = sorted(kids.get(span["span_id"], []), key=lambda s: s["start"])
        inner = prefix if root else prefix + ("   " if last else "│  ")
        for i, child in enumerate(below):
            show(child, inner, i == len(below) - 1, False)

    for root in sorted(kids.get(None, []), key=lambda s: s["start"]):
        show(root, "", True, True)
    return "\n".join(lines)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    server.thread.start()
    try:
        yield server
    finally:
        server.httpd.shutdown()
        server.httpd.server_close()


def _lattice(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "LATTICE_"))}
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"):
        clean.pop(name, None)
    clean.update({"PYTHONPATH": str(REPO), **env})
    return subprocess.run(
        [sys.executable, "-m", "lattice.cli.main", *args],
        cwd=cwd,
        env=clean,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


TRIAGE = [
    "run",
    str(EXAMPLES / "support-triage.json"),
    "--mock",
    str(EXAMPLES / "support-triage.mock.json"),
    "--inputs",
    str(EXAMPLES / "support-triage.inputs.json"),
    "--no-record",
]


def test_lattice_run_exports_the_support_triage_trace(receiver: Receiver, tmp_path: Path) -> None:
    config = tmp_path / "lattice.toml"
    config.write_text(
        f'[telemetry]\notlp_endpoint = "{receiver.url}"\nservice_name = "triage-test"\n',
        encoding="utf-8",
    )
    done = _lattice([*TRIAGE, "--config", str(config)], tmp_path, {})
    assert done.returncode == 0, done.stderr
    assert receiver.paths and set(receiver.paths) == {"/v1/traces"}
    assert set(receiver.content_types) == {"application/x-protobuf"}

    spans = receiver.spans()
    tree = span_tree(spans)
    print("\nspan tree of support-triage (OTLP/HTTP, decoded by the receiver):\n" + tree)

    assert len({s["trace_id"] for s in spans}) == 1  # one run, one trace
    assert {s["service"] for s in spans} == {"triage-test"}
    assert {s["scope"] for s in spans} == {"lattice"}
    (root,) = [s for s in spans if s["parent"] is None]
    assert root["name"] == "invoke_workflow support-triage"
    assert root["attributes"]["lattice.run.status"] == "completed"
    ops = [s for s in spans if s["parent"] == root["span_id"]]
    assert [op["attributes"]["lattice.node.id"] for op in sorted(ops, key=lambda s: s["start"])][
        :3
    ] == ["start", "classify", "init-revisions"]
    by_id = {s["span_id"]: s for s in spans}
    calls = sorted(
        (s for s in spans if s["attributes"].get("gen_ai.operation.name") == "chat"),
        key=lambda s: s["start"],
    )
    assert [by_id[c["parent"]]["attributes"]["lattice.node.id"] for c in calls] == [
        "classify",
        "draft-billing",
        "review",
        "draft-billing",
        "review",
    ]
    for call in calls:
        attrs = call["attributes"]
        assert by_id[call["parent"]]["parent"] == root["span_id"]  # run → op → attempt
        assert call["kind"] == 3  # SPAN_KIND_CLIENT
        assert attrs["gen_ai.provider.name"] == "mock"
        assert attrs["gen_ai.response.model"] == "mock-model"
        assert attrs["gen_ai.usage.input_tokens"] > 0 and attrs["gen_ai.usage.output_tokens"] > 0
        assert attrs["gen_ai.response.finish_reasons"] == ["stop"]
        assert attrs["lattice.attempt.kind"] == "initial"
    total = sum(c["attributes"]["gen_ai.usage.input_tokens"] for c in calls)
    assert root["attributes"]["gen_ai.usage.input_tokens"] == total
    assert "├─ LLM_WRITE classify" in tree and "│  └─ chat  [gen_ai.operation.name=chat" in tree


def test_the_standard_environment_variable_turns_tracing_on(
    receiver: Receiver, tmp_path: Path
) -> None:
    done = _lattice(TRIAGE, tmp_path, {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url + "/"})
    assert done.returncode == 0, done.stderr
    spans = receiver.spans()
    assert {s["service"] for s in spans} == {"lattice"}
    assert [s["name"] for s in spans if s["parent"] is None] == ["invoke_workflow support-triage"]


def test_otel_sdk_disabled_turns_it_off(receiver: Receiver, tmp_path: Path) -> None:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_SDK_DISABLED": "true"}
    done = _lattice(TRIAGE, tmp_path, env)
    assert done.returncode == 0, done.stderr
    assert receiver.requests == []

"""One route set over two backends: what a backend cannot do (a ``Capability`` it does
not list) is refused by the routes in one place, before the request is read, and both
gateways publish the same API document.

The engine backend here is ``TemporalRuns`` at an address where nothing listens: the
refusals are the gateway's own, so no request may reach the engine (one that did would
be a 503, not the status asserted)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lattice.config import LatticeConfig
from lattice.server.app import ServerSettings
from lattice.server.in_thread import serve_in_thread
from tests.server.helpers import steps

pytest.importorskip("temporalio")

from lattice.durable.temporal.backend import TemporalRuns


def unused_address() -> str:
    """A loopback port nothing listens on (bound, then let go)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"


def gateway_over(tmp_path: Path, backend: TemporalRuns) -> ServerSettings:
    flows = tmp_path / "workflows"
    flows.mkdir(exist_ok=True)
    (flows / "answers.jsonl").write_text("", encoding="utf-8")  # fixtures that hold none
    return ServerSettings(
        runs_dir=tmp_path / "runs", workflows_dir=flows, config=LatticeConfig(), backend=backend
    )


@pytest.fixture()
def engine(tmp_path: Path) -> Iterator[httpx.Client]:
    settings = gateway_over(tmp_path, TemporalRuns(unused_address(), task_queue="nowhere"))
    with serve_in_thread(settings) as url, httpx.Client(base_url=url, timeout=30) as client:
        yield client


@pytest.fixture()
def engine_without_capabilities(tmp_path: Path) -> Iterator[httpx.Client]:
    """The gateway over an engine that lists no capability (Temporal's runs can resume,
    re-run and compare: its capabilities are taken away here, as an engine that cannot)."""
    backend = TemporalRuns(unused_address(), task_queue="nowhere")
    backend.capabilities = frozenset()
    settings = gateway_over(tmp_path, backend)
    with serve_in_thread(settings) as url, httpx.Client(base_url=url, timeout=30) as client:
        yield client


def refused(response: httpx.Response, status: int, error: str) -> str:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert body["error"] == error, body
    message: str = body["message"]
    return message


@pytest.mark.parametrize(
    ("method", "path", "body", "what"),
    [
        ("POST", "/v1/runs/r1/resume", None, "resuming"),
        ("POST", "/v1/runs/r1/resume", {"provider": "nonsense"}, "resuming"),
        ("GET", "/v1/runs/r1/rerun", None, "re-running"),  # no ?op=: still the 409
        ("POST", "/v1/runs/r1/rerun", {}, "re-running"),  # no "op": still the 409
        ("GET", "/v1/runs/r1/compare/r2", None, "comparing runs"),
    ],
)
def test_a_missing_capability_is_a_409_whatever_the_request_holds(
    engine_without_capabilities: httpx.Client, method: str, path: str, body: Any, what: str
) -> None:
    response = engine_without_capabilities.request(method, path, json=body)
    message = refused(response, 409, "not_supported")
    assert message.startswith(f"{what} is not available for runs on temporal")


def test_fixtures_are_refused_before_the_run_is_sent(engine: httpx.Client) -> None:
    response = engine.post("/v1/runs", json={"document": steps(1), "fixtures": "answers.jsonl"})
    message = refused(response, 400, "invalid_request")
    assert message == "fixtures are not supported for runs on temporal yet"


def test_both_gateways_publish_the_same_api_document(engine: httpx.Client, tmp_path: Path) -> None:
    local = ServerSettings(runs_dir=tmp_path / "local", config=LatticeConfig())
    with serve_in_thread(local) as url:
        folders = httpx.get(f"{url}/openapi.json", timeout=30).json()
    assert engine.get("/openapi.json").json() == folders

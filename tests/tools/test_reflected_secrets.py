"""A secret a tool answers back never reaches a later op, so no transform can hide it.

A server given a secret (an httpRequest header reading ``$secrets``, an MCP server's
``env``) may send it back, in any form, and a ``dataTransform`` could then reverse it
(or re-encode it) past the masking of what is written. What a tool answers is masked
where it enters the run's state: each document here runs end to end against a real
server on 127.0.0.1 (or a stdio MCP server) with a run folder, reverses every text it
got back, and no file of the folder, no event and nothing of the RunResult holds any
form of the secret, reversed or not.
"""

from __future__ import annotations

import base64
import json
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from lattice.runtime import Runner, RunResult, RunStore
from lattice.runtime.settings import RuntimeSettings
from lattice.tools.http import HttpPolicy
from lattice.tools.mcp import McpServerSpec
from tests.builders import chain, lower_ok, node
from tests.conftest import REPO

SECRET = "sk-proj-Q7mZ4kV9xR2pL8wN3bT6"


class Reflector(ThreadingHTTPServer):
    """A local HTTP server that sends back the token of each request's Authorization
    header, in several forms (as it is, lower-cased, percent-encoded with ``-`` as
    ``%2D``, base64) in its JSON body and a header, and keeps the last one it got:
    ``GET /last`` answers it to a request that carries no secret."""

    daemon_threads = True

    def __init__(self) -> None:
        self.received: list[str] = []
        reflector = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/last":
                    token = reflector.received[-1] if reflector.received else ""
                    body = json.dumps({"last": f"you said {token}"}).encode()
                else:
                    token = (self.headers.get("authorization") or "").removeprefix("Bearer ")
                    reflector.received.append(token)
                    body = json.dumps(
                        {
                            "authorization": self.headers.get("authorization"),
                            "lower": token.lower(),
                            "escaped": token.replace("-", "%2D"),
                            "base64": base64.b64encode(token.encode()).decode(),
                        }
                    ).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("x-echo", f"token={token}")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def reflector() -> Iterator[Reflector]:
    server = Reflector()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def forms(secret: str) -> dict[str, str]:
    """Each form the secret may take, and each of those reversed."""
    found = {
        "as is": secret,
        "lower-cased": secret.lower(),
        "upper-cased": secret.upper(),
        "percent-encoded": quote(secret, safe=""),
        "%2D for -": secret.replace("-", "%2D"),
        "base64": base64.b64encode(secret.encode()).decode(),
    }
    found.update({f"{name}, reversed": form[::-1] for name, form in list(found.items())})
    return found


def leaks(result: RunResult, events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Each (form, place) where a form of SECRET is found: every file of the run folder,
    every event a listener saw, and the RunResult."""
    assert result.run_dir is not None
    texts = {
        str(p.relative_to(result.run_dir)): p.read_text(encoding="utf-8")
        for p in result.run_dir.rglob("*")
        if p.is_file()
    }
    assert {"events.jsonl", "ops.jsonl", "result.json", "state_final.json"} <= set(texts)
    texts["listener events"] = json.dumps(events, ensure_ascii=False)
    texts["RunResult"] = json.dumps(
        [result.to_json(), result.state, result.events], ensure_ascii=False, default=str
    )
    return [
        (name, where)
        for name, form in forms(SECRET).items()
        for where, text in texts.items()
        if form in text
    ]


def run(doc: dict[str, Any], settings: RuntimeSettings, store: Path) -> tuple[RunResult, list]:
    runner = Runner(lower_ok(doc), settings=settings, store=RunStore(store))
    events: list[dict[str, Any]] = []
    runner.subscribe(events.append)
    return runner.run({}), events


REVERSE_ALL = (
    "{auth: reverse(vars.call.result.body.authorization),"
    " lower: reverse(vars.call.result.body.lower),"
    " escaped: reverse(vars.call.result.body.escaped),"
    " b64: reverse(vars.call.result.body.base64),"
    ' header: reverse(vars.call.result.headers."x-echo"),'
    " later: reverse(vars.later.result.body.last)}"
)


def test_a_secret_an_endpoint_echoes_is_masked_before_a_transform_can_reverse_it(
    reflector: Reflector, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("API_TOKEN", SECRET)
    doc = chain(
        node(
            "call",
            "httpRequest",
            method="GET",
            url=f"{reflector.base_url}/echo",
            headers={"Authorization": "Bearer {{ $secrets.API_TOKEN }}"},
        ),
        # no secret in this request: the server gives back what the first one left
        node("later", "httpRequest", method="GET", url=f"{reflector.base_url}/last"),
        node("flip", "dataTransform", expression=REVERSE_ALL),
    )
    doc["nodes"][-1]["data"]["output"] = "{{ $vars.flip.result }}"
    settings = RuntimeSettings(
        http=HttpPolicy(allow_hosts=("127.0.0.1",)), secrets_allow=("API_TOKEN",), gc_pacing=False
    )

    result, events = run(doc, settings, tmp_path)

    assert result.status == "completed", result.failure
    assert reflector.received == [SECRET]  # it was sent, and sent back
    output = dict(result.output)
    assert output.pop("b64").endswith("***")  # the end of the base64 blob, reversed
    assert output == {
        "auth": "*** reraeB",
        "lower": "***",
        "escaped": "***",
        "header": "***=nekot",
        "later": "*** dias uoy",
    }
    assert leaks(result, events) == []


def test_a_secret_an_mcp_server_was_given_is_masked_before_a_transform_can_reverse_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LATTICE_TEST_MCP_TOKEN", SECRET)
    server = McpServerSpec(
        "local",
        command=sys.executable,
        args=(str(REPO / "tests" / "mcp_test_server.py"),),
        env={"SERVICE_TOKEN": "${LATTICE_TEST_MCP_TOKEN}"},
        timeout=30,
    )
    doc = chain(
        node(
            "call",
            "mcp",
            serverId="local",
            toolName="env",
            mode="manualParameterConfig",
            parameterValues={"name": "SERVICE_TOKEN"},
        ),
        node("flip", "dataTransform", expression="reverse(vars.call.result)"),
    )
    doc["nodes"][-1]["data"]["output"] = "{{ $vars.flip.result }}"
    settings = RuntimeSettings(mcp_servers={"local": server}, gc_pacing=False)

    result, events = run(doc, settings, tmp_path)

    assert result.status == "completed", result.failure
    assert result.output == "***"
    assert leaks(result, events) == []

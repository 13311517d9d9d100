"""A ``$secrets`` value is read on the worker and never enters Temporal's history."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from lattice.config import load_config
from lattice.lower.compiler import lower_document
from tests.builders import chain, node
from tests.durable.helpers import history_text, with_worker

pytest.importorskip("temporalio")

from lattice.durable.temporal.client import follow, start_run

SECRET = "s3cr3t-" + uuid.uuid4().hex
NAME = "LATTICE_TEMPORAL_TEST_TOKEN"


@pytest.fixture
def echo() -> Iterator[tuple[str, list[str]]]:
    """A server on 127.0.0.1 that answers with the Authorization header it was sent."""
    seen: list[str] = []

    class Echo(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            auth = self.headers.get("Authorization", "")
            seen.append(auth)
            body = json.dumps({"you_sent": auth}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def test_a_secret_is_sent_by_the_worker_and_kept_out_of_history(
    temporal_address: str,
    echo: tuple[str, list[str]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, seen = echo
    monkeypatch.setenv(NAME, SECRET)
    config_file = tmp_path / "lattice.toml"
    config_file.write_text(
        f'[secrets]\nallow = ["{NAME}"]\n\n[http]\nallow_hosts = ["127.0.0.1"]\n', encoding="utf-8"
    )
    doc = chain(
        node(
            "call",
            "httpRequest",
            method="GET",
            url=f"{url}/who",
            headers={"Authorization": "Bearer {{ $secrets." + NAME + " }}"},
        )
    )
    ir = lower_document(doc).ir
    assert ir is not None
    rid = f"secret-{uuid.uuid4().hex[:10]}"

    async def body(client: Any, queue: str) -> tuple[dict[str, Any], str]:
        handle = await start_run(client, ir, run_id=rid, inputs={}, task_queue=queue)
        outcome = await follow(handle)
        history = await handle.fetch_history()
        return outcome, history_text(history.to_json_dict())

    outcome, history = asyncio.run(with_worker(temporal_address, body, load_config(config_file)))
    assert seen == [f"Bearer {SECRET}"]  # the worker read the secret and sent it
    assert outcome["status"] == "completed"
    assert outcome["vars"]["call"]["result"]["body"] == {"you_sent": "Bearer ***"}
    assert "you_sent" in history  # the history holds the response, masked
    assert SECRET not in history


def test_a_run_whose_document_or_inputs_hold_a_secret_value_is_not_started(
    temporal_address: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lattice.runs.redaction import make_redactor
    from lattice.runs.store import SecretInDocument

    monkeypatch.setenv(NAME, SECRET)
    redact = make_redactor((NAME,))
    leaky = lower_document(chain(node("say", "prompt", prompt=f"The key is {SECRET}"))).ir
    plain = lower_document(
        {**chain(node("say", "prompt", prompt="Say {{ $in.word }}")), "id": "plain"}
    ).ir
    assert leaky is not None and plain is not None
    ids = [f"leak-{uuid.uuid4().hex[:10]}" for _ in range(2)]

    async def body(client: Any, queue: str) -> list[bool]:
        for rid, ir, inputs in ((ids[0], leaky, {}), (ids[1], plain, {"word": SECRET})):
            with pytest.raises(SecretInDocument):
                await start_run(
                    client, ir, run_id=rid, inputs=inputs, task_queue=queue, redact=redact
                )
        started = []
        for rid in ids:
            try:
                await client.get_workflow_handle(rid).describe()
                started.append(True)
            except Exception:
                started.append(False)
        return started

    assert asyncio.run(with_worker(temporal_address, body)) == [False, False]

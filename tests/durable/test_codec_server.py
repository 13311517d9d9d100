"""``lattice codec-server``: Temporal's codec server protocol with the payload codec's keys,
checked by Temporal's own CLI (``temporal workflow show --codec-endpoint``) and from a
browser's point of view (CORS for the web UI's origin only)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from lattice.config import LatticeConfig
from tests.durable.conftest import temporal_binary
from tests.durable.helpers import example, history_text, with_worker

pytest.importorskip("temporalio")

from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, Payloads

from lattice.durable.temporal.client import follow, start_run
from lattice.durable.temporal.codec import LatticeCodec, parse_keys
from lattice.durable.temporal.codec_server import make_codec_server

UI = "http://localhost:8233"


def new_key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


@contextmanager
def codec_server(codec: LatticeCodec, token: str | None = None) -> Iterator[str]:
    server = make_codec_server(codec, port=0, token=token)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def call(
    url: str,
    body: Any = None,
    *,
    method: str = "POST",
    origin: str | None = None,
    **more: str,
) -> tuple[int, dict[str, str], Any]:
    headers = {"Content-Type": "application/json", **({"Origin": origin} if origin else {})}
    headers |= more
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            status, got, raw = answer.status, dict(answer.headers), answer.read()
    except urllib.error.HTTPError as error:
        status, got, raw = error.code, dict(error.headers), error.read()
    return status, got, json.loads(raw) if raw else None


def as_json(*payloads: Payload) -> dict[str, Any]:
    return json_format.MessageToDict(Payloads(payloads=list(payloads)))


def test_it_decodes_and_encodes_and_answers_the_ui_only() -> None:
    key = new_key()
    codec = LatticeCodec(parse_keys(key, "LATTICE_TEMPORAL_KEY"))
    plain = Payload(metadata={"encoding": b"json/plain"}, data=b'{"ticket": "charged twice"}')
    sealed = codec.encode_one(plain)
    with codec_server(codec) as url:
        status, headers, body = call(f"{url}/default/decode", as_json(sealed), origin=UI)
        assert status == 200
        assert json_format.ParseDict(body, Payloads()).payloads == [plain]
        assert headers["Access-Control-Allow-Origin"] == UI
        status, _, body = call(f"{url}/encode", as_json(plain))
        [encoded] = json_format.ParseDict(body, Payloads()).payloads
        assert encoded.metadata["encoding"] == b"binary/encrypted"
        assert codec.decode_one(encoded) == plain
        status, headers, _ = call(f"{url}/decode", method="OPTIONS", origin=UI)
        assert status == 204 and headers["Access-Control-Allow-Origin"] == UI
        assert "X-Namespace" in headers["Access-Control-Allow-Headers"]
        status, headers, _ = call(f"{url}/decode", method="OPTIONS", origin="http://evil.test")
        assert status == 403 and "Access-Control-Allow-Origin" not in headers
        _, headers, _ = call(f"{url}/decode", as_json(sealed), origin="http://evil.test")
        assert "Access-Control-Allow-Origin" not in headers  # the browser hides the answer
        other = LatticeCodec(parse_keys(new_key(), "LATTICE_TEMPORAL_KEY")).encode_one(plain)
        status, _, body = call(f"{url}/decode", as_json(other))
        assert status == 400 and "not among the keys" in body["error"]
        assert call(f"{url}/nothing", {})[0] == 404
        assert call(f"{url}/decode", {"payloads": "no"})[0] == 400


def test_temporals_cli_shows_a_run_decrypted_through_it(
    temporal_address: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    binary = temporal_binary()
    assert binary is not None
    key = new_key()
    monkeypatch.setenv("LATTICE_TEMPORAL_KEY", key)
    ir, script, inputs = example("support-triage")
    rid = f"codec-ui-{uuid.uuid4().hex[:10]}"

    async def body(client: Any, queue: str) -> dict[str, Any]:
        handle = await start_run(
            client,
            ir,
            run_id=rid,
            inputs=inputs,
            provider={"mock_script": script},
            task_queue=queue,
        )
        return await follow(handle)

    assert (
        asyncio.run(with_worker(temporal_address, body, LatticeConfig()))["status"] == "completed"
    )

    def show(*extra: str) -> str:
        done = subprocess.run(
            [
                binary,
                "workflow",
                "show",
                "-w",
                rid,
                "--address",
                temporal_address,
                "-o",
                "json",
                *extra,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return history_text(json.loads(done.stdout))  # payloads' data base64-decoded

    assert "charged twice" not in show()
    with codec_server(LatticeCodec(parse_keys(key, "LATTICE_TEMPORAL_KEY"))) as url:
        shown = show("--codec-endpoint", url)
    assert "charged twice" in shown  # the run's inputs, decrypted by the CLI through it
    assert "Refund of the duplicate charge" in shown  # and its output


def test_the_command_without_a_key_says_which_variable_to_set(tmp_path: Path) -> None:
    env = {
        k: v for k, v in os.environ.items() if k not in ("LATTICE_CONFIG", "LATTICE_TEMPORAL_KEY")
    }
    done = subprocess.run(
        [sys.executable, "-m", "lattice.cli", "codec-server", "--port", "0"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "needs the payload codec's key: set LATTICE_TEMPORAL_KEY" in done.stderr
    assert "Traceback" not in done.stderr


def test_what_a_web_page_or_the_network_sends_is_not_decoded() -> None:
    """A page in the user's browser may post to 127.0.0.1 (no preflight for a simple
    request) or rebind its own name to it: neither is decoded. Off 127.0.0.1 a token is
    needed."""
    key = new_key()
    codec = LatticeCodec(parse_keys(key, "LATTICE_TEMPORAL_KEY"))
    plain = Payload(metadata={"encoding": b"json/plain"}, data=b'{"card": "4111"}')
    sealed = as_json(codec.encode_one(plain))
    with codec_server(codec) as url:
        status, _, body = call(f"{url}/decode", sealed, origin="http://evil.test")
        assert status == 403 and "4111" not in json.dumps(body)
        port = url.rsplit(":", 1)[1]
        status, _, body = call(f"{url}/decode", sealed, Host=f"rebound.evil.test:{port}")
        assert status == 403 and "4111" not in json.dumps(body)
        for host in (f"localhost:{port}", f"127.0.0.1:{port}"):
            assert call(f"{url}/decode", sealed, Host=host)[0] == 200
    with codec_server(codec, token="s3cret-token") as url:
        assert call(f"{url}/decode", sealed)[0] == 401
        assert call(f"{url}/decode", sealed, Authorization="Bearer wrong")[0] == 401
        status, _, body = call(f"{url}/decode", sealed, Authorization="Bearer s3cret-token")
        assert status == 200 and json_format.ParseDict(body, Payloads()).payloads == [plain]
    env = {
        k: v for k, v in os.environ.items() if k not in ("LATTICE_CONFIG", "LATTICE_CODEC_TOKEN")
    }
    refused = subprocess.run(
        [sys.executable, "-m", "lattice.cli", "codec-server", "--host", "0.0.0.0", "--port", "0"],
        env={**env, "LATTICE_TEMPORAL_KEY": key},
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    assert refused.returncode == 2, refused.stderr
    assert "refusing to listen on 0.0.0.0 without a token" in refused.stderr

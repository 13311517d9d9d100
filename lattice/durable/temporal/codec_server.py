"""``lattice codec-server``: Temporal's codec server protocol over the payload codec, so
that Temporal's web UI and its ``temporal`` CLI show a run's payloads decrypted.

The protocol is Temporal's: ``POST /decode`` and ``POST /encode`` (also under a namespace,
``/{namespace}/decode``) take and answer ``{"payloads": [...]}``, Temporal's ``Payloads``
message as protobuf JSON. The web UI calls it from the browser, so the answer carries
CORS headers for the UI's origins (and only for them). Whoever reaches the server reads
every run's payloads in the clear: it listens on 127.0.0.1 unless told otherwise, needs
a token (``Authorization: Bearer``) when told otherwise, and refuses what a web page
could send it from a browser on the same machine: a request from another origin, and
one naming another host (a name rebound to 127.0.0.1).
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf import json_format
from temporalio.api.common.v1 import Payloads

from lattice.durable.temporal.codec import CodecKeyError, LatticeCodec

DEFAULT_PORT = 8081
UI_ORIGINS = ("http://127.0.0.1:8233", "http://localhost:8233")
"""The development server's web UI (``temporal server start-dev``'s default UI port)."""
MAX_BODY_BYTES = 8_000_000
"""A request larger than this is refused (a payload is at most 2 MB in Temporal)."""


def make_codec_server(
    codec: LatticeCodec,
    *,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    origins: Sequence[str] = UI_ORIGINS,
    token: str | None = None,
) -> ThreadingHTTPServer:
    """A codec server on ``host:port`` (``serve_forever()`` it) answering the web UIs of
    ``origins`` too; with ``token``, only requests that carry it."""
    allowed = frozenset(origin.rstrip("/") for origin in origins)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass  # a request log would hold nothing the user needs

        def do_OPTIONS(self) -> None:
            if self._origin() is None:
                self._answer(403, {"error": "origin not allowed"})
                return
            self._answer(204, None)

        def do_POST(self) -> None:
            refused = _refusal(self.headers, allowed, token)
            if refused is not None:
                self._answer(refused[0], {"error": refused[1]})
                return
            action = self.path.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
            if action not in ("encode", "decode"):
                self._answer(404, {"error": f"no route {self.path}; POST /encode or /decode"})
                return
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY_BYTES:
                self._answer(413, {"error": f"a request holds at most {MAX_BODY_BYTES} bytes"})
                return
            try:
                payloads = json_format.Parse(self.rfile.read(length) or b"{}", Payloads())
            except json_format.ParseError as exc:
                self._answer(400, {"error": f"not a Payloads message: {exc}"})
                return
            convert = codec.encode_one if action == "encode" else codec.decode_one
            try:
                done = Payloads(payloads=[convert(payload) for payload in payloads.payloads])
            except CodecKeyError as exc:
                self._answer(400, {"error": exc.message})
                return
            self._answer(200, json_format.MessageToDict(done))

        def _origin(self) -> str | None:
            origin = (self.headers.get("Origin") or "").rstrip("/")
            return origin if origin in allowed else None

        def _answer(self, status: int, body: dict[str, Any] | None) -> None:
            data = b"" if body is None else json.dumps(body).encode()
            self.send_response(status)
            origin = self._origin()
            if origin is not None:
                self.send_header("Access-Control-Allow-Origin", origin)
                self.send_header("Access-Control-Allow-Methods", "POST")
                self.send_header(
                    "Access-Control-Allow-Headers", "Content-Type, X-Namespace, Authorization"
                )
                self.send_header("Access-Control-Allow-Credentials", "true")
                self.send_header("Vary", "Origin")
            if body is not None:
                self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return ThreadingHTTPServer((host, port), Handler)


def _refusal(headers: Any, allowed: frozenset[str], token: str | None) -> tuple[int, str] | None:
    """Why a request is not served (status, message); None when it is."""
    origin = (headers.get("Origin") or "").rstrip("/")
    if origin and origin not in allowed:
        return 403, "origin not allowed"
    if token is not None:
        given = headers.get("Authorization") or ""
        if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            return 401, "give the token: Authorization: Bearer TOKEN"
    elif not _local_host(headers.get("Host") or ""):
        return 403, "only 127.0.0.1 or localhost is served without a token"
    return None


def _local_host(header: str) -> bool:
    """Whether a Host header names this machine's loopback (not a name a web page had
    rebound to 127.0.0.1)."""
    name = header.rsplit(":", 1)[0] if not header.endswith("]") else header
    return name.strip("[]").lower() in ("127.0.0.1", "localhost", "::1")

"""A fake OpenAI- and Anthropic-compatible HTTP server on 127.0.0.1: point a provider's
``base_url`` at it to run workflows, tests and benchmarks against a real HTTP API
without a model (docs/testing.md).

It implements ``POST /v1/chat/completions`` (OpenAI) and ``POST /v1/messages`` (Anthropic),
records every request (path, headers, JSON body) and answers with the text that
``answer(body)`` returns for the request, or with tool calls when it returns a ``ToolTurn``
(OpenAI's ``tool_calls``, Anthropic's ``tool_use`` blocks). ``failures`` (a list of ``(status, JSON body,
headers)``) makes the next calls fail, one item per call; ``fail_with`` makes every call fail.

A request with ``"stream": true`` is answered as the API streams: server-sent events
(OpenAI's chat-completion chunks ending in ``data: [DONE]``, or Anthropic's
``message_start`` … ``message_stop``), the text in pieces of ``piece_chars`` characters.
``cuts`` (a list of ``(pieces, style)``) cuts the next streams short, one item per
streamed call, after that many pieces of text: ``"chunked"`` stops in the middle of a
chunked body (the client sees a broken connection), ``"eof"`` closes a body that has no
declared length (the stream just ends, without its closing events). ``gate``, when
set, is waited for (5 s at most) after the first piece: a test can hold the answer until
its listener has seen that piece.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Answer = Callable[[dict[str, Any]], "str | ToolTurn"]


@dataclass
class ToolTurn:
    """An answer that calls tools: ``calls`` are ``(id, name, arguments JSON text)``; in a
    stream the arguments come in pieces of ``piece_chars`` like text (so ``cuts`` can cut a
    stream in the middle of a call's arguments)."""

    calls: list[tuple[str, str, str]]
    text: str = ""


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]

    def user_text(self) -> str:
        return "\n".join(
            m["content"] if isinstance(m["content"], str) else json.dumps(m["content"])
            for m in self.body.get("messages", [])
            if m.get("role") == "user"
        )


UNPARSABLE = "$unparsable"


def _input(arguments: str) -> Any:
    """A tool_use block's input; arguments that are no JSON are kept under UNPARSABLE and
    streamed as they are (what a model cut short by max_tokens sends)."""
    try:
        return json.loads(arguments)
    except ValueError:
        return {UNPARSABLE: arguments}


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


class _QuietServer(ThreadingHTTPServer):
    """Says nothing when a client goes away mid-answer (a killed process)."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class FakeLLMServer:
    """Start with ``serve()``; ``base_url`` is ``http://127.0.0.1:<port>``."""

    # long: its request handler class is defined here, over this server's script and counters
    def __init__(self, answer: Answer, *, keep_alive: bool = False, latency: float = 0.0) -> None:  # noqa: C901
        self.answer = answer
        self.keep_alive = keep_alive
        self.latency = latency
        """Seconds each answer waits before it is sent."""
        self.received: list[Received] = []
        self.replies: list[dict[str, Any]] = []  # every successful answer, in order
        self.failures: list[tuple[int, dict[str, Any], dict[str, str]]] = []
        self.fail_with: tuple[int, dict[str, Any], dict[str, str]] | None = None
        self.piece_chars = 8
        self.cuts: list[tuple[int, str]] = []
        self.gate: threading.Event | None = None
        self.gate_was_open: bool | None = None
        """After a gated stream: whether the gate opened before the rest was sent."""
        self.open_connections = 0  # client connections the server still holds
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def setup(self) -> None:
                super().setup()
                with server._lock:
                    server.open_connections += 1

            def finish(self) -> None:
                with server._lock:
                    server.open_connections -= 1
                super().finish()

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    body = {}
                path = self.path.split("?", 1)[0]
                with server._lock:
                    seen = {k.lower(): v for k, v in self.headers.items()}
                    server.received.append(Received(path, seen, body))
                    failure = server.failures.pop(0) if server.failures else server.fail_with
                if server.latency:
                    time.sleep(server.latency)
                if failure is not None:
                    status, payload, headers = failure
                    self._send(status, payload, headers)
                elif body.get("stream") and path in ("/v1/chat/completions", "/v1/messages"):
                    with server._lock:
                        cut = server.cuts.pop(0) if server.cuts else None
                    if path == "/v1/messages":
                        events = server._anthropic_events(body)
                    else:
                        events = server._openai_events(body)
                    self._send_stream(events, cut)
                elif path == "/v1/chat/completions":
                    self._send(200, server._openai(body))
                elif path == "/v1/messages":
                    self._send(200, server._anthropic(body))
                else:
                    self._send(404, {"error": {"message": f"no route {path}"}})

            def _send(
                self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None
            ) -> None:
                data = json.dumps(payload).encode("utf-8")
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                if not server.keep_alive:
                    # one request per connection: a client that never closes its pool
                    # (the SDK adapters do not) leaves no open socket behind
                    self.send_header("connection", "close")
                    self.close_connection = True
                self.end_headers()
                self.wfile.write(data)

            def _send_stream(
                self, events: list[tuple[str | None, Any, bool]], cut: tuple[int, str] | None
            ) -> None:
                """Server-sent events; each item is (event name, data, is a piece of text)."""
                style = cut[1] if cut else "chunked"
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                if style == "chunked":
                    self.send_header("transfer-encoding", "chunked")
                self.send_header("connection", "close")
                self.close_connection = True
                self.end_headers()
                pieces = 0
                for name, data, is_piece in events:
                    if cut is not None and is_piece and pieces == cut[0]:
                        self.wfile.flush()
                        return  # cut: the connection closes with the body unfinished
                    text = data if isinstance(data, str) else json.dumps(data)
                    frame = (f"event: {name}\n" if name else "") + f"data: {text}\n\n"
                    raw = frame.encode("utf-8")
                    if style == "chunked":
                        raw = f"{len(raw):x}\r\n".encode() + raw + b"\r\n"
                    self.wfile.write(raw)
                    self.wfile.flush()
                    if is_piece:
                        pieces += 1
                        if pieces == 1 and server.gate is not None:
                            server.gate_was_open = server.gate.wait(5)
                if style == "chunked":
                    self.wfile.write(b"0\r\n\r\n")

        self._httpd = _QuietServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_port}"

    def _turn(self, body: dict[str, Any]) -> ToolTurn:
        answer = self.answer(body)
        return answer if isinstance(answer, ToolTurn) else ToolTurn([], answer)

    def _openai(self, body: dict[str, Any]) -> dict[str, Any]:
        turn = self._turn(body)
        text = turn.text
        output = text + "".join(arguments for _, _, arguments in turn.calls)
        prompt = json.dumps(body.get("messages", []))
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if turn.calls:
            message["content"] = text or None
            message["tool_calls"] = [
                {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
                for cid, name, args in turn.calls
            ]
        reply = {
            "id": f"chatcmpl-{len(self.received)}",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": body.get("model", "unknown"),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if turn.calls else "stop",
                }
            ],
            "usage": {
                "prompt_tokens": _tokens(prompt),
                "completion_tokens": _tokens(output),
                "total_tokens": _tokens(prompt) + _tokens(output),
            },
        }
        self.replies.append(reply)
        return reply

    def _anthropic(self, body: dict[str, Any]) -> dict[str, Any]:
        turn = self._turn(body)
        text = turn.text
        output = text + "".join(arguments for _, _, arguments in turn.calls)
        prompt = json.dumps(body.get("messages", [])) + str(body.get("system", ""))
        content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        content += [
            {"type": "tool_use", "id": cid, "name": name, "input": _input(args)}
            for cid, name, args in turn.calls
        ]
        reply = {
            "id": f"msg_{len(self.received)}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "unknown"),
            "content": content or [{"type": "text", "text": ""}],
            "stop_reason": "tool_use" if turn.calls else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": _tokens(prompt), "output_tokens": _tokens(output)},
        }
        self.replies.append(reply)
        return reply

    def _pieces(self, text: str) -> list[str]:
        size = self.piece_chars
        return [text[i : i + size] for i in range(0, len(text), size)] or [""]

    def _openai_events(self, body: dict[str, Any]) -> list[tuple[str | None, Any, bool]]:
        reply = self._openai(body)
        message = reply["choices"][0]["message"]
        text = message["content"] or ""

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {
                "id": reply["id"],
                "object": "chat.completion.chunk",
                "created": reply["created"],
                "model": reply["model"],
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }

        events: list[tuple[str | None, Any, bool]] = [
            (None, chunk({"role": "assistant", "content": ""}), False)
        ]
        if text or not message.get("tool_calls"):
            events += [(None, chunk({"content": piece}), True) for piece in self._pieces(text)]
        for index, call in enumerate(message.get("tool_calls", [])):
            head = {"index": index, "id": call["id"], "type": "function"}
            head["function"] = {"name": call["function"]["name"], "arguments": ""}
            events.append((None, chunk({"tool_calls": [head]}), False))
            events += [
                (
                    None,
                    chunk({"tool_calls": [{"index": index, "function": {"arguments": p}}]}),
                    True,
                )
                for p in self._pieces(call["function"]["arguments"])
            ]
        events.append((None, chunk({}, reply["choices"][0]["finish_reason"]), False))
        if (body.get("stream_options") or {}).get("include_usage"):
            usage = {**chunk({}), "choices": [], "usage": reply["usage"]}
            events.append((None, usage, False))
        events.append((None, "[DONE]", False))
        return events

    def _anthropic_events(self, body: dict[str, Any]) -> list[tuple[str | None, Any, bool]]:
        reply = self._anthropic(body)
        start = {**reply, "content": [], "stop_reason": None}
        start["usage"] = {"input_tokens": reply["usage"]["input_tokens"], "output_tokens": 1}
        events: list[tuple[str | None, Any, bool]] = [
            ("message_start", {"type": "message_start", "message": start}, False),
            ("ping", {"type": "ping"}, False),
        ]
        for index, block in enumerate(reply["content"]):
            opening: dict[str, Any]
            if block["type"] == "text":
                opening = {"type": "text", "text": ""}
                deltas = [{"type": "text_delta", "text": p} for p in self._pieces(block["text"])]
            else:
                opening = {**block, "input": {}}
                arguments = block["input"].get(UNPARSABLE) or json.dumps(block["input"])
                deltas = [
                    {"type": "input_json_delta", "partial_json": p} for p in self._pieces(arguments)
                ]
            events.append(
                (
                    "content_block_start",
                    {"type": "content_block_start", "index": index, "content_block": opening},
                    False,
                )
            )
            events += [
                (
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": delta},
                    True,
                )
                for delta in deltas
            ]
            events.append(
                (
                    "content_block_stop",
                    {"type": "content_block_stop", "index": index},
                    False,
                )
            )
        events += [
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": reply["stop_reason"], "stop_sequence": None},
                    "usage": {"output_tokens": reply["usage"]["output_tokens"]},
                },
                False,
            ),
            ("message_stop", {"type": "message_stop"}, False),
        ]
        return events

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._httpd.server_close()


@contextmanager
def serve(
    answer: Answer, *, keep_alive: bool = False, latency: float = 0.0
) -> Iterator[FakeLLMServer]:
    """A started ``FakeLLMServer`` answering with ``answer``, stopped when the block ends."""
    server = FakeLLMServer(answer, keep_alive=keep_alive, latency=latency)
    server.start()
    try:
        yield server
    finally:
        server.stop()

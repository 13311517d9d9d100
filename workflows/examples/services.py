"""Local stand-ins for the HTTP services the examples call (standard library only).

    python workflows/examples/services.py                     # serve on 127.0.0.1:8765 until Ctrl-C
    python workflows/examples/services.py -- lattice run ...  # serve, run the command, stop

With a command after ``--`` the services start, the command runs, the services stop, and
the exit code is the command's. ``--port N`` picks another port (``--port 0``: any free
one); ``{url}`` and ``{port}`` in the command are replaced by where the services listen,
so ``--input github_api={url}/github`` follows the port. They listen on 127.0.0.1 only and
log one line per request to stderr (``--quiet``: none).

Routes (the example that calls each in brackets):

- ``GET  /members/<id>``: the team directory ``{name, timezone, working_hours}`` (world-clock)
- ``GET  /tasks/api/v1/teams/<team>/tasks``: a task tracker, ``{team, items}`` (standup-digest)
- ``GET  /github/repos/<owner>/<repo>/releases/latest``: GitHub's releases API, one release
  per known repository (release-announcement)
- ``POST /chat/api/channels/<channel>/messages``: a team chat; ``{"text"}`` is required,
  answers 201 with the stored message (release-announcement)
- ``POST /it/api/v2/provisioning/requests``: an IT provisioning API; ``{"employee": {"name",
  "role", "startDate"}, "accounts": [...]}`` is required, answers 202 with a queued request
  (employee-onboarding)

Unknown paths and ids get 404, malformed bodies 400, each with a JSON ``{"error"}``. The
examples' ``*.inputs.json`` point their base URLs here (``http://127.0.0.1:8765/github``,
…) and their ``*.lattice.toml`` let httpRequest reach 127.0.0.1, which it refuses by
default; against the real services, pass their URLs instead (``--input
github_api=https://api.github.com``).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

DEFAULT_PORT = 8765
NOT_JSON = object()

MEMBERS = {
    "ana": {"name": "Ana", "timezone": "Europe/Lisbon", "working_hours": {"start": 9, "end": 18}},
    "kenji": {"name": "Kenji", "timezone": "Asia/Tokyo", "working_hours": {"start": 10, "end": 19}},
    "maya": {
        "name": "Maya",
        "timezone": "America/Denver",
        "working_hours": {"start": 8, "end": 16},
    },
}

TASKS = {
    "platform": [
        {"title": "Rotate staging TLS certificates", "done": True, "owner": "maya"},
        {"title": "Upgrade Postgres to 16.3", "done": True, "owner": "li"},
        {"title": "Migrate CI runners to arm64", "done": False, "owner": "sam", "blocked": True},
        {"title": "Write runbook for failover", "done": False, "owner": "maya", "blocked": False},
    ],
}

RELEASES = {
    "pallets/flask": {
        "tag_name": "3.1.1",
        "name": "3.1.1",
        "body": (
            "- Fix signing key selection order when key rotation is enabled via "
            "SECRET_KEY_FALLBACKS.\n- Remove the deprecated `FLASK_ENV` alias."
        ),
        "html_url": "https://github.com/pallets/flask/releases/tag/3.1.1",
        "published_at": "2025-05-13T15:41:32Z",
        "draft": False,
        "prerelease": False,
    },
}


class Services(ThreadingHTTPServer):
    """The HTTP server; ``received`` lists every request answered, in order, as
    ``{"method", "path", "query", "body", "status"}`` (for tests)."""

    daemon_threads = True

    def __init__(self, port: int, *, quiet: bool = False) -> None:
        super().__init__(("127.0.0.1", port), Handler)
        self.quiet = quiet
        self.received: list[dict[str, Any]] = []
        self.messages: dict[str, list[dict[str, Any]]] = {}
        self.provisioning: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class Handler(BaseHTTPRequestHandler):
    server: Services

    def do_GET(self) -> None:  # the http.server API
        self._answer("GET")

    def do_POST(self) -> None:
        self._answer("POST")

    def _answer(self, method: str) -> None:
        parts = urlsplit(self.path)
        path = unquote(parts.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = NOT_JSON  # the POST routes answer 400
        with self.server.lock:
            status, answer = route(self.server, method, path, body)
            self.server.received.append(
                {
                    "method": method,
                    "path": path,
                    "query": parts.query,
                    "body": None if body is NOT_JSON else body,
                    "status": status,
                }
            )
        if not self.server.quiet:
            # logged before the answer goes out, in one write: the client's next request is
            # served on another thread, and its line must not land inside this one
            sys.stderr.write(f"services: {method} {self.path} -> {status}\n")
            sys.stderr.flush()
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:  # one line per request above
        return


def route(server: Services, method: str, path: str, body: Any) -> tuple[int, Any]:
    """(status, JSON answer) for one request; called under the server's lock."""
    if method == "GET" and (m := re.fullmatch(r"/members/([^/]+)", path)):
        return found(MEMBERS.get(m[1]), f"no such member: {m[1]}")
    if method == "GET" and (m := re.fullmatch(r"/tasks/api/v1/teams/([^/]+)/tasks", path)):
        items = TASKS.get(m[1])
        return found(None if items is None else {"team": m[1], "items": items}, "no such team")
    if method == "GET" and (
        m := re.fullmatch(r"/github/repos/([^/]+/[^/]+)/releases/latest", path)
    ):
        release = RELEASES.get(m[1])
        return (200, release) if release else (404, {"message": "Not Found"})
    if method == "POST" and (m := re.fullmatch(r"/chat/api/channels/([^/]+)/messages", path)):
        if not isinstance(body, dict) or not isinstance(body.get("text"), str) or not body["text"]:
            return 400, {"error": 'a message is a JSON object with a non-empty "text"'}
        channel = server.messages.setdefault(m[1], [])
        message = {"id": f"msg-{len(channel) + 1:04d}", "channel": m[1], **body}
        channel.append(message)
        return 201, message
    if method == "POST" and path == "/it/api/v2/provisioning/requests":
        problem = provisioning_problem(body)
        if problem:
            return 400, {"error": problem}
        request = {
            "id": f"PRV-{1001 + len(server.provisioning)}",
            "status": "queued",
            "employee": body["employee"]["name"],
            "accounts": body["accounts"],
            "ready_by": body["employee"]["startDate"],
        }
        server.provisioning.append(request)
        return 202, request
    return 404, {"error": f"no route for {method} {path}"}


def found(value: Any, missing: str) -> tuple[int, Any]:
    return (200, value) if value is not None else (404, {"error": missing})


def provisioning_problem(body: Any) -> str | None:
    if not isinstance(body, dict):
        return "the body is a JSON object"
    employee = body.get("employee")
    if not isinstance(employee, dict) or not all(
        isinstance(employee.get(k), str) and employee[k] for k in ("name", "role", "startDate")
    ):
        return "employee needs name, role and startDate"
    accounts = body.get("accounts")
    if not isinstance(accounts, list) or not accounts:
        return "accounts is a non-empty list"
    return None


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    command: list[str] = []
    if "--" in args:
        split = args.index("--")
        args, command = args[:split], args[split + 1 :]
    parser = argparse.ArgumentParser(
        prog="services.py",
        description="Local stand-ins for the services the examples call; "
        "with '-- COMMAND', serve while COMMAND runs.",
    )
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="default 8765; 0: any")
    parser.add_argument("--quiet", action="store_true", help="no line per request")
    options = parser.parse_args(args)
    try:
        server = Services(options.port, quiet=options.quiet)
    except OSError as exc:
        print(
            f"services.py: cannot listen on 127.0.0.1:{options.port} ({exc.strerror}); "
            "if the services already run there, run the command alone, "
            "else choose --port 0 and pass {url} to the command",
            file=sys.stderr,
        )
        return 2
    if not command:
        print(f"example services on {server.url} (Ctrl-C stops them)", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
        return 0
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    command = [a.replace("{url}", server.url).replace("{port}", str(server.port)) for a in command]
    try:
        process = subprocess.Popen(command)
    except FileNotFoundError:
        server.shutdown()
        server.server_close()
        print(f"services.py: command not found: {command[0]}", file=sys.stderr)
        return 127
    try:
        return process.wait()
    except KeyboardInterrupt:  # the command got the same Ctrl-C: let it finish and report
        try:
            return process.wait(timeout=10)
        except (KeyboardInterrupt, subprocess.TimeoutExpired):
            process.kill()
            process.wait()
            return 130
    finally:
        server.shutdown()
        server.server_close()


if __name__ == "__main__":
    sys.exit(main())

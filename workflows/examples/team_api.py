"""A tiny local team API for the world-clock example (standard library only).

    python workflows/examples/team_api.py [PORT]     # default 8765, 127.0.0.1 only

GET /members/<id> returns ``{"name", "timezone", "working_hours": {"start", "end"}}``;
unknown ids get 404.
"""

from __future__ import annotations

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MEMBERS = {
    "ana": {"name": "Ana", "timezone": "Europe/Lisbon", "working_hours": {"start": 9, "end": 18}},
    "kenji": {"name": "Kenji", "timezone": "Asia/Tokyo", "working_hours": {"start": 10, "end": 19}},
    "maya": {"name": "Maya", "timezone": "America/Denver", "working_hours": {"start": 8, "end": 16}},
}


class TeamApi(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (the http.server API)
        prefix = "/members/"
        member = MEMBERS.get(self.path[len(prefix) :]) if self.path.startswith(prefix) else None
        status = 200 if member else 404
        body = json.dumps(member or {"error": f"no such member: {self.path}"}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # quiet
        return


def make_server(port: int = 8765) -> ThreadingHTTPServer:
    return ThreadingHTTPServer(("127.0.0.1", port), TeamApi)


if __name__ == "__main__":
    server = make_server(int(sys.argv[1]) if len(sys.argv) > 1 else 8765)
    print(f"team API on http://127.0.0.1:{server.server_port}/members/<id>", flush=True)
    server.serve_forever()

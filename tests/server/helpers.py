"""Running ``lattice serve`` for tests as a subprocess (to kill it; in a thread of the
test process: ``lattice.server.in_thread``), and reading its Server-Sent Events with
httpx."""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.builders import conn, node, workflow
from tests.conftest import REPO

TIMEOUT = 20.0


@dataclass
class ServerProcess:
    """``lattice serve`` as a child process."""

    process: subprocess.Popen[str]
    url: str
    stderr_lines: list[str] = field(default_factory=list)

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(TIMEOUT)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(TIMEOUT)
            except subprocess.TimeoutExpired:
                self.kill()


@contextmanager
def serve_in_process(
    *args: str | Path, env: dict[str, str] | None = None
) -> Iterator[ServerProcess]:
    """``lattice serve --port 0 ARGS`` in a child process; yields it once it listens."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from lattice.cli import main; raise SystemExit(main())",
            "serve",
            "--port",
            "0",
            *map(str, args),
        ],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    assert process.stderr is not None
    lines: list[str] = []
    deadline = time.monotonic() + TIMEOUT
    url = None
    while url is None:
        line = process.stderr.readline()
        if not line:
            process.wait(TIMEOUT)
            raise AssertionError("lattice serve stopped:\n" + "".join(lines))
        lines.append(line)
        found = re.search(r"serving on (http://\S+) ", line)
        if found:
            url = found.group(1)
        assert time.monotonic() < deadline, "lattice serve did not start"
    server = ServerProcess(process, url, lines)
    drain = threading.Thread(target=lambda: lines.extend(process.stderr or ()), daemon=True)
    drain.start()
    try:
        yield server
    finally:
        server.stop()
        drain.join(TIMEOUT)
        process.stderr.close()


@dataclass
class Message:
    """One SSE message."""

    id: int | None
    event: str
    data: Any
    comments: list[str] = field(default_factory=list)


def read_sse(response: httpx.Response) -> Iterator[Message]:
    """The messages of an SSE response, as they come."""
    fields: dict[str, str] = {}
    comments: list[str] = []
    for line in response.iter_lines():
        if line == "":
            if "data" in fields or "event" in fields:
                raw = fields.get("data", "")
                yield Message(
                    int(fields["id"]) if "id" in fields else None,
                    fields.get("event", "message"),
                    json.loads(raw) if raw else None,
                    comments,
                )
            fields, comments = {}, []
            continue
        if line.startswith(":"):
            comments.append(line[1:].strip())
            continue
        name, _, value = line.partition(":")
        fields[name] = value[1:] if value.startswith(" ") else value


def follow(
    client: httpx.Client,
    run_id: str,
    *,
    last_event_id: int | None = None,
    limit: int | None = None,
    params: dict[str, Any] | None = None,
) -> tuple[list[dict[str, Any]], str | None]:
    """Every event of a run after ``last_event_id`` until the stream ends (or ``limit``
    events), and the status of its ``end`` message (None when stopped early)."""
    headers = {"Last-Event-ID": str(last_event_id)} if last_event_id is not None else {}
    events: list[dict[str, Any]] = []
    with client.stream(
        "GET", f"/v1/runs/{run_id}/events", headers=headers, params=params, timeout=TIMEOUT
    ) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        for message in read_sse(response):
            if message.event == "end":
                return events, message.data["status"]
            assert message.id == message.data["seq"]
            events.append(message.data)
            if limit is not None and len(events) >= limit:
                return events, None
    raise AssertionError("the stream closed without an end message")


def wait_for_status(
    client: httpx.Client, run_id: str, statuses: tuple[str, ...], timeout: float = TIMEOUT
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        run = client.get(f"/v1/runs/{run_id}").json()
        if run["status"] in statuses:
            return run
        assert time.monotonic() < deadline, f"run {run_id} stayed {run['status']}"
        time.sleep(0.02)


def file_events(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (folder / "events.jsonl").read_text().splitlines()]


def steps(count: int, *, prefix: str = "s") -> dict[str, Any]:
    """``start → s0 → … → s<count-1> → end``, each an LLM prompt."""
    ids = [f"{prefix}{i}" for i in range(count)]
    nodes = [node("start", "start"), *(node(i, "prompt", prompt=f"step {i}") for i in ids)]
    nodes.append(node("end", "end"))
    chain_ids = ["start", *ids, "end"]
    return workflow(
        nodes,
        [conn(a, b) for a, b in itertools.pairwise(chain_ids)],
        id=f"steps-{count}",
    )


def script(count: int, *, prefix: str = "s", given: int | None = None) -> dict[str, Any]:
    """A mock script answering the first ``given`` (default all) steps of ``steps(count)``."""
    given = count if given is None else given
    return {
        "responses": {f"{prefix}{i}": ([f"answer {i}"] if i < given else []) for i in range(count)}
    }


APPROVAL_SCRIPT = {"responses": {"draft": ["a rough note"], "polish": ["a polished note"]}}

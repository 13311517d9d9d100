"""The gateway in a thread of the calling process: for tests, benchmarks and notebooks
that drive ``lattice serve`` over HTTP without starting a process for it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn

from lattice.server.app import ServerSettings, create_app
from lattice.server.main import LatticeServer

START_SECONDS = 20.0
"""How long the server may take to listen, and to stop, at most."""


@contextmanager
def serve_in_thread(settings: ServerSettings, *, seconds: float = START_SECONDS) -> Iterator[str]:
    """Serve ``settings`` on 127.0.0.1 (an ephemeral port) in a daemon thread; yield its
    URL once it listens, and stop it (its runs end ``interrupted``) when the block ends.
    A server that stops while starting, or does not listen within ``seconds``, is a
    RuntimeError."""
    app = create_app(settings)
    server = LatticeServer(
        uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on"),
        manager=app.state.manager,
    )
    thread = threading.Thread(target=server.run, name="lattice-serve", daemon=True)
    thread.start()
    deadline = time.monotonic() + seconds
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("the server stopped while starting (its log says why)")
        if time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"the server did not listen within {seconds:g} s")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.should_exit = True
        thread.join(seconds)

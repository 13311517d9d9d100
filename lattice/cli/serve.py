"""``lattice serve``: the HTTP gateway (``lattice.server``), when its extra is installed."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager

from lattice.errors import LatticeUserError, install_hint

SERVER_PACKAGES = ("fastapi", "uvicorn", "starlette", "anyio", "h11")


@contextmanager
def server_packages(command: str) -> Iterator[None]:
    """Imports of the server's modules: a server package that is not installed is a
    LatticeUserError saying that ``command`` needs it and how to install it."""
    try:
        yield
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] in SERVER_PACKAGES:
            raise LatticeUserError(
                f"{command} needs FastAPI and uvicorn ({exc.name} is missing): "
                + install_hint("server")
            ) from exc
        raise


def serve(args: argparse.Namespace) -> int:
    with server_packages("lattice serve"):
        from lattice.server.main import serve as run_server
    return run_server(args)

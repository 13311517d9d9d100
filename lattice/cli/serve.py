"""``lattice serve``: the HTTP gateway (``lattice.server``), when its extra is installed."""

from __future__ import annotations

import argparse

from lattice.errors import LatticeUserError, install_hint

SERVER_PACKAGES = ("fastapi", "uvicorn", "starlette", "anyio", "h11")


def serve(args: argparse.Namespace) -> int:
    try:
        from lattice.server.main import serve as run_server
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] in SERVER_PACKAGES:
            raise LatticeUserError(
                f"lattice serve needs FastAPI and uvicorn ({exc.name} is missing): "
                + install_hint("server")
            ) from exc
        raise
    return run_server(args)

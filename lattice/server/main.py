"""``lattice serve``: run the HTTP gateway with uvicorn.

It listens on 127.0.0.1 unless told otherwise; on any other address it needs a bearer
token (``--token`` or ``$LATTICE_SERVER_TOKEN``). Stopping it (Ctrl-C, SIGTERM) stops
the runs it is running at once: each ends ``interrupted``, resumable by the next server
or by ``lattice resume``.
"""

from __future__ import annotations

import argparse
import errno
import ipaddress
import logging
import os
import socket
import sys
from collections.abc import Callable
from pathlib import Path

import uvicorn

from lattice.config import load_config, with_agent_grants
from lattice.errors import LatticeUserError
from lattice.server.app import ServerSettings, create_app
from lattice.server.manager import RunManager
from lattice.service.backend import RunBackend

TOKEN_VARIABLE = "LATTICE_SERVER_TOKEN"


def is_loopback(host: str) -> bool:
    """Whether ``host`` is an address only this machine can reach."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_token(token: str, where: str) -> None:
    """Refuse a token that no ``Authorization: Bearer`` header can carry: blank, with
    whitespace around it (a header's value is trimmed), or with characters other than
    printable ASCII."""
    if not token.strip():
        raise LatticeUserError(
            f"{where} is blank: a server whose token is blank could be used by no one; "
            "give a token of printable characters (or none, to listen on 127.0.0.1 only)"
        )
    if token != token.strip():
        raise LatticeUserError(
            f"{where} starts or ends with whitespace, which no client can send (headers "
            "are trimmed); give the token without it"
        )
    if not all(" " < char <= "~" for char in token):
        raise LatticeUserError(
            f"{where} has a character a header cannot carry as it is (a space, a control "
            "character or non-ASCII text); use printable ASCII characters only"
        )


def settings_from_args(args: argparse.Namespace) -> ServerSettings:
    """The server's settings; a non-loopback address without a token is refused, and so
    is a token no client could send."""
    token = args.token if args.token is not None else os.environ.get(TOKEN_VARIABLE) or None
    if token is not None:
        check_token(token, "--token" if args.token is not None else f"${TOKEN_VARIABLE}")
    if not is_loopback(args.host) and not token:
        raise LatticeUserError(
            f"refusing to listen on {args.host} without a token: anyone who can reach it "
            f"could run workflows; give --token TOKEN or set ${TOKEN_VARIABLE} "
            "(or listen on 127.0.0.1)"
        )
    workflows = Path(args.workflows) if args.workflows else None
    if workflows is not None and not workflows.is_dir():
        raise LatticeUserError(f"--workflows {args.workflows}: not a directory")
    runs_dir = Path(args.runs_dir)
    if runs_dir.exists() and not runs_dir.is_dir():
        raise LatticeUserError(f"--runs-dir {args.runs_dir}: not a directory")
    return ServerSettings(
        backend=backend_from_args(args),
        runs_dir=runs_dir,
        workflows_dir=workflows,
        config=with_agent_grants(
            load_config(args.config),
            workspace=args.workspace,
            allow=args.allow,
            mcp_servers=args.allow_mcp,
            patch_only=args.patch_only,
        ),
        config_path=str(Path(args.config).resolve()) if args.config else None,
        token=token,
        max_body_bytes=args.max_body_bytes,
        max_active_runs=args.max_active_runs,
    )


def backend_from_args(args: argparse.Namespace) -> RunBackend | None:
    """Where the runs live: None for run folders under ``--runs-dir`` (the default);
    Temporal with ``--engine temporal --temporal HOST:PORT`` (the temporal extra)."""
    if getattr(args, "engine", "local") != "temporal":
        return None
    if not args.temporal:
        raise LatticeUserError(
            "--engine temporal needs --temporal HOST:PORT (the server's address)"
        )
    from lattice.durable.temporal.backend import TemporalRuns  # the temporal extra, only here

    return TemporalRuns(
        args.temporal, task_queue=args.task_queue, config=load_config(args.config).temporal
    )


def serve(args: argparse.Namespace) -> int:
    """The ``lattice serve`` command."""
    return run_server(
        settings_from_args(args), host=args.host, port=args.port, log_level=args.log_level
    )


def run_server(
    settings: ServerSettings,
    *,
    host: str,
    port: int,
    log_level: str = "warning",
    on_started: Callable[[str], None] | None = None,
) -> int:
    """Serve ``settings`` until stopped (Ctrl-C, SIGTERM); 2 when it could not start.

    The address is bound first, so that a port already in use is a user's error that
    says so (``LatticeUserError``), not uvicorn's log line."""
    sock = listen_socket(host, port)
    app = create_app(settings)
    logging.basicConfig(
        level=log_level.upper(), format="lattice serve: %(levelname)s %(name)s: %(message)s"
    )
    server = LatticeServer(
        uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level=log_level,
            access_log=log_level in ("info", "debug"),
            timeout_graceful_shutdown=5,
            server_header=False,
        ),
        manager=app.state.manager,
        backend=settings.backend,
        announce=True,
        on_started=on_started,
    )
    server.run(sockets=[sock])
    return 0 if server.started else 2


def listen_socket(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (as uvicorn binds it); a port that is taken or
    not allowed is refused with what to do instead."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    except socket.gaierror as exc:
        raise LatticeUserError(f"--host {host}: not an address this machine has ({exc})") from exc
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise LatticeUserError(
                f"port {port} on {host} is taken (another lattice serve, or another "
                f"program): choose another with --port N (--port 0: any free port)"
            ) from exc
        raise LatticeUserError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    sock.set_inheritable(True)
    return sock


class LatticeServer(uvicorn.Server):
    """uvicorn's Server that stops the runs first when it shuts down (so that streams of
    their events end and the shutdown does not wait for them), and says where it
    listens once it does."""

    def __init__(
        self,
        config: uvicorn.Config,
        *,
        manager: RunManager,
        backend: RunBackend | None = None,
        announce: bool = False,
        on_started: Callable[[str], None] | None = None,
    ) -> None:
        super().__init__(config)
        self.manager = manager
        self.backend = backend
        self.announce = announce
        self.on_started = on_started
        """Called with the server's URL once it listens (``lattice runs open``)."""
        self.port: int | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if not self.started:
            return
        for server in self.servers:
            for sock in server.sockets:
                self.port = sock.getsockname()[1]
                break
        where = f"http://{self.config.host}:{self.port}"
        if self.on_started is not None:
            self.on_started(where)
        if self.announce:
            runs = (
                f"runs on {self.backend.where()}"
                if self.backend is not None
                else f"runs in {self.manager.runs_dir}"
            )
            print(
                f"lattice: serving on {where} ({runs}; API docs at {where}/docs)",
                file=sys.stderr,
                flush=True,
            )

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await self.manager.shutdown()
        await super().shutdown(sockets)

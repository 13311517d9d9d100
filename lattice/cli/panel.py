"""``lattice runs open RUN``: a run in the execution panel of ``lattice serve``.

A server on ``--port`` of this machine that sees the run (``GET /v1/runs/<id>``
answers) is used as it is; otherwise one is started here, over the run's runs folder
(with ``--temporal HOST:PORT``: over the runs on Temporal, RUN being a run id), and
serves until Ctrl-C. The run's URL is printed on stdout and opened in a browser
(Python's ``webbrowser``: ``$BROWSER`` chooses it; ``--no-browser`` leaves it closed).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import quote

from lattice.cli.common import note
from lattice.cli.serve import server_packages
from lattice.errors import InputError, LatticeUserError

HOST = "127.0.0.1"
TOKEN_VARIABLE = "LATTICE_SERVER_TOKEN"
PROBE_SECONDS = 2.0


def run_folder(run: str, runs_dir: str) -> Path:
    """The folder of ``run``: a run folder's path, or a run id under ``runs_dir``."""
    folder = Path(run)
    if not folder.is_dir() and "/" not in run and (Path(runs_dir) / run).is_dir():
        folder = Path(runs_dir) / run
    if not folder.is_dir():
        raise InputError(f"no run folder {run} (and no run {run!r} under {runs_dir}/)")
    return folder


def run_url(base: str, run_id: str) -> str:
    return f"{base}/#/runs/{quote(run_id, safe='')}"


def serves(base: str, run_id: str, token: str | None) -> bool:
    """Whether the server at ``base`` answers for run ``run_id``."""
    request = urllib.request.Request(f"{base}/v1/runs/{quote(run_id, safe='')}")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=PROBE_SECONDS) as response:
            body = json.loads(response.read().decode("utf-8"))
    except (OSError, urllib.error.URLError, ValueError):
        return False
    return isinstance(body, dict) and body.get("run_id") == run_id


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def show(url: str, browser: bool) -> None:
    """Print the URL (stdout) and open it in a browser."""
    print(url, flush=True)
    if browser:
        import webbrowser

        if not webbrowser.open(url):
            note("no browser could be opened; open the URL above yourself")


def open_run(args: argparse.Namespace) -> int:
    """The ``lattice runs open`` command."""
    if not args.run_dir:
        raise LatticeUserError("lattice runs open RUN (a run folder or a run id)")
    backend = None
    if args.temporal:
        from lattice.cli.temporal import gateway_backend  # the temporal extra, only here

        run_id, backend = str(args.run_dir), gateway_backend(args.temporal, str(args.run_dir))
        folder = Path(args.runs_dir).resolve() / run_id  # no folder: the runs are on Temporal
    else:
        folder = run_folder(args.run_dir, args.runs_dir).resolve()
        if not (folder / "checkpoint.json").is_file() and not (folder / "events.jsonl").is_file():
            raise InputError(f"{folder} is not a run folder (it has no checkpoint.json)")
        run_id = folder.name
    token = os.environ.get(TOKEN_VARIABLE) or None
    browser = not args.no_browser
    if args.port:
        base = f"http://{HOST}:{args.port}"
        if serves(base, run_id, token):
            show(run_url(base, run_id), browser)
            return 0
    port = args.port if args.port and port_is_free(args.port) else 0
    if args.port and not port:
        note(f"port {args.port} is taken by a server that does not see this run; using another")
    with server_packages("lattice runs open"):
        from lattice.config import load_config
        from lattice.server.app import ServerSettings
        from lattice.server.main import run_server
    workflows = Path(args.workflows) if args.workflows else None
    if workflows is not None and not workflows.is_dir():
        raise LatticeUserError(f"--workflows {args.workflows}: not a directory")
    settings = ServerSettings(
        runs_dir=folder.parent,
        workflows_dir=workflows,
        config=load_config(None),
        token=token,
        backend=backend,
    )

    def started(base: str) -> None:
        show(run_url(base, run_id), browser)
        note("serving the panel here until Ctrl-C")

    code = run_server(settings, host=HOST, port=port, on_started=started)
    sys.stdout.flush()
    return code

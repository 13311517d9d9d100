"""``lattice runs open RUN``: the run's URL on a server that sees it, or on one the
command starts over the run's folder."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from lattice.cli import main
from lattice.server.app import ServerSettings
from lattice.server.in_thread import serve_in_thread
from tests.conftest import EXAMPLES, REPO
from tests.server.helpers import TIMEOUT


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    runs = tmp_path_factory.mktemp("open") / "runs"
    code = main(
        [
            "run",
            str(EXAMPLES / "hello-world.json"),
            "--mock",
            str(EXAMPLES / "hello-world.mock.json"),
            "--input",
            "name=Ada",
            "--runs-dir",
            str(runs),
        ]
    )
    assert code == 0
    (folder,) = runs.iterdir()
    return folder


@pytest.fixture(scope="module")
def server(run_folder: Path) -> Iterator[str]:
    with serve_in_thread(ServerSettings(runs_dir=run_folder.parent)) as url:
        yield url


def port_of(url: str) -> str:
    return url.rsplit(":", 1)[1]


def test_a_server_that_sees_the_run_is_used(
    server: str,
    run_folder: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    opened: list[str] = []
    monkeypatch.setattr("webbrowser.open", lambda url: opened.append(url) or True)
    assert main(["runs", "open", str(run_folder), "--port", port_of(server)]) == 0
    url = f"{server}/#/runs/{run_folder.name}"
    assert capsys.readouterr().out == f"{url}\n"
    assert opened == [url]
    # by run id, and without a browser
    args = ["runs", "open", run_folder.name, "--runs-dir", str(run_folder.parent)]
    assert main([*args, "--port", port_of(server), "--no-browser"]) == 0
    assert capsys.readouterr().out == f"{url}\n"
    assert opened == [url]


def test_a_folder_that_is_not_a_run_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["runs", "open", str(tmp_path / "nothing"), "--no-browser"]) == 2
    assert "no run folder" in capsys.readouterr().err
    assert main(["runs", "open", str(tmp_path), "--no-browser"]) == 2
    assert "not a run folder" in capsys.readouterr().err
    assert main(["runs", "open"]) == 2


@pytest.fixture(scope="module")
def stranger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server over another runs folder: it does not see the run."""
    runs = tmp_path_factory.mktemp("stranger") / "runs"
    with serve_in_thread(ServerSettings(runs_dir=runs)) as url:
        yield url


@pytest.mark.parametrize("taken", [False, True], ids=["port-0", "port-of-another-server"])
@pytest.mark.usefixtures("default_ctrl_c")
def test_without_a_server_one_is_started_over_the_run_s_folder(
    run_folder: Path, stranger: str, tmp_path: Path, taken: bool
) -> None:
    """A server of its own, which serves the page and the run until it is stopped; the
    browser ($BROWSER) gets the URL."""
    seen = tmp_path / "browser.txt"
    recorder = tmp_path / "browser.py"
    recorder.write_text(
        f"import sys, pathlib\npathlib.Path({str(seen)!r}).write_text(sys.argv[1])\n"
    )
    port = port_of(stranger) if taken else "0"
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from lattice.cli import main; raise SystemExit(main())",
            "runs",
            "open",
            str(run_folder),
            "--port",
            port,
        ],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "BROWSER": f"{sys.executable} {recorder} %s"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline().strip()
        assert re.fullmatch(rf"http://127\.0\.0\.1:\d+/#/runs/{run_folder.name}", line), line
        base = line.split("/#/")[0]
        assert base != stranger
        with httpx.Client(base_url=base, timeout=TIMEOUT) as client:
            assert "panel/js/main.js" in client.get("/").text
            assert client.get(f"/v1/runs/{run_folder.name}").json()["status"] == "completed"
        deadline = time.monotonic() + TIMEOUT
        while not (seen.exists() and seen.read_text() == line):
            assert time.monotonic() < deadline, "the browser was not opened"
            time.sleep(0.05)
    finally:
        process.send_signal(signal.SIGINT)  # Ctrl-C
        _, err = process.communicate(timeout=TIMEOUT)
    assert process.returncode == 130, err
    assert "until Ctrl-C" in err
    assert ("is taken by a server that does not see this run" in err) == taken


def test_help_stays_light() -> None:
    """``lattice runs --help`` imports neither the server nor the browser module."""
    code = (
        "import sys; from lattice.cli.parser import build_parser\n"
        "try:\n    build_parser().parse_args(['runs', '--help'])\nexcept SystemExit: pass\n"
        "bad = [m for m in ('webbrowser', 'fastapi', 'uvicorn', 'lattice.server') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    assert "open" in done.stdout

"""The bearer token, and the rules ``lattice serve`` starts under."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from lattice.cli import main
from lattice.cli.parser import build_parser
from lattice.errors import LatticeUserError
from lattice.server.app import ServerSettings
from lattice.server.in_thread import serve_in_thread
from lattice.server.main import is_loopback, settings_from_args
from tests.conftest import REPO
from tests.server.helpers import TIMEOUT, script, steps, wait_for_status

TOKEN = "s3cret-token-for-tests"


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    runs = tmp_path_factory.mktemp("token") / "runs"
    with serve_in_thread(ServerSettings(runs_dir=runs, token=TOKEN)) as url:
        yield url


def test_every_route_but_healthz_needs_the_token(base_url: str) -> None:
    with httpx.Client(base_url=base_url, timeout=TIMEOUT) as anonymous:
        assert anonymous.get("/healthz").status_code == 200
        for method, path in [
            ("GET", "/v1/runs"),
            ("POST", "/v1/runs"),
            ("GET", "/v1/runs/x/events"),
            ("GET", "/v1/workflows"),
            ("POST", "/v1/check"),
            ("GET", "/docs"),
            ("GET", "/openapi.json"),
        ]:
            response = anonymous.request(method, path)
            assert response.status_code == 401, (method, path)
            assert response.json()["error"] == "missing_token"
            assert response.headers["www-authenticate"] == "Bearer"
        # the docs page's script and style hold no run data
        assert anonymous.get("/docs/assets/swagger-ui.css").status_code == 200
        for wrong in (
            f"Bearer {TOKEN}x",
            f"Bearer {TOKEN[:-1]}",
            TOKEN,
            f"Basic {TOKEN}",
            f"Bearerx {TOKEN}",
        ):
            response = anonymous.get("/v1/runs", headers={"Authorization": wrong})
            assert response.status_code == 401
            assert response.json()["error"] == "invalid_token"
        for right in (f"bearer {TOKEN}", f"BEARER {TOKEN}"):  # the scheme is case-insensitive
            response = anonymous.get("/v1/runs", headers={"Authorization": right})
            assert response.status_code == 200, right


def test_with_the_token_everything_works(base_url: str) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=base_url, headers=headers, timeout=TIMEOUT) as client:
        assert client.get("/v1/runs").json() == {"runs": [], "next": None}
        assert client.get("/openapi.json").json()["info"]["title"] == "Lattice"
        assert client.get("/docs").status_code == 200
        started = client.post("/v1/runs", json={"document": steps(2), "mock_script": script(2)})
        assert started.status_code == 202, started.text
        run_id = started.json()["run_id"]
        assert wait_for_status(client, run_id, ("completed",))["output"] == "answer 1"
        # a token sent before the body: a refused request costs no body read
        assert client.post("/v1/check", json={"document": steps(1)}).status_code == 200


def args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["serve", *argv])


def test_any_other_address_needs_a_token(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("LATTICE_SERVER_TOKEN", raising=False)
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.4")
    assert not is_loopback("example.com")
    with pytest.raises(LatticeUserError, match="without a token"):
        settings_from_args(args("--host", "0.0.0.0"))
    assert main(["serve", "--host", "0.0.0.0", "--port", "0"]) == 2
    assert "without a token" in capsys.readouterr().err
    assert settings_from_args(args("--host", "0.0.0.0", "--token", "t")).token == "t"
    monkeypatch.setenv("LATTICE_SERVER_TOKEN", "from-env")
    assert settings_from_args(args("--host", "0.0.0.0")).token == "from-env"
    assert settings_from_args(args()).token == "from-env", "a token set applies on 127.0.0.1 too"


@pytest.mark.parametrize(
    ("token", "says"),
    [
        (" ", "is blank"),
        ("", "is blank"),
        ("\t\n", "is blank"),
        (" s3cret", "whitespace"),
        ("s3cret\n", "whitespace"),
        ("s3 cret", "printable ASCII"),
        ("s3crét", "printable ASCII"),
    ],
)
def test_a_token_no_client_could_send_is_refused_at_start(
    token: str, says: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("LATTICE_SERVER_TOKEN", raising=False)
    with pytest.raises(LatticeUserError, match=says):  # before anything listens
        settings_from_args(args("--token", token))
    assert main(["serve", "--port", "0", "--token", token]) == 2
    err = capsys.readouterr().err
    assert "--token" in err and says in err
    assert err.startswith("lattice: error") and "Traceback" not in err
    if token:  # an empty variable is one that is not set
        monkeypatch.setenv("LATTICE_SERVER_TOKEN", token)
        with pytest.raises(LatticeUserError, match="LATTICE_SERVER_TOKEN"):
            settings_from_args(args("--host", "0.0.0.0"))


def test_serve_options_are_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--workflows", str(tmp_path / "missing")]) == 2
    assert "not a directory" in capsys.readouterr().err
    (tmp_path / "file").write_text("")
    assert main(["serve", "--runs-dir", str(tmp_path / "file")]) == 2
    assert "not a directory" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--port", "70000"])
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--max-active-runs", "0"])


def test_a_port_in_use_is_said_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not uvicorn's raw error and exit 3 (which the CLI uses for "halted")."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(["serve", "--port", str(port), "--runs-dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"port {port} on 127.0.0.1 is taken" in err
    assert "--port" in err
    assert "Errno" not in err


def test_help_imports_no_server_package() -> None:
    probe = (
        "import sys, json\n"
        "from lattice.cli.parser import build_parser\n"
        "build_parser().format_help()\n"
        "print(json.dumps(sorted(m for m in ('fastapi', 'uvicorn', 'starlette', 'lattice.server')"
        " if m in sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert json.loads(out.stdout) == []


def test_the_servers_log_masks_secret_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    from lattice.server.app import ServerSettings, create_app

    secret = "sk-live-0123456789"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    create_app(ServerSettings(runs_dir=tmp_path / "runs"))
    try:
        raise RuntimeError(f"the provider refused {secret}")
    except RuntimeError:
        with caplog.at_level(logging.ERROR):
            logging.getLogger("lattice.server").exception("run %s failed with %s", "r1", secret)
    (record,) = [r for r in caplog.records if r.name == "lattice.server"]
    assert record.getMessage() == "run r1 failed with ***"
    assert record.exc_text is not None and "the provider refused ***" in record.exc_text
    assert secret not in caplog.text


def test_the_api_takes_every_provider_lattice_run_takes() -> None:
    from typing import get_args

    from lattice.server.bodies import ProviderOptions
    from lattice.service.providers import PROVIDER_NAMES

    (choices, _none) = get_args(ProviderOptions.model_fields["provider"].annotation)
    assert set(get_args(choices)) == set(PROVIDER_NAMES)


def test_without_a_token_a_rebound_host_or_a_foreign_origin_is_refused(tmp_path: Path) -> None:
    """A gateway without a token trusts whoever reaches loopback; a web page whose name
    was rebound to 127.0.0.1 reaches it too, with its own name as Host (and Origin).
    Every route, the approvals' included, refuses such a request, not only ``/mcp``."""
    with (
        serve_in_thread(ServerSettings(runs_dir=tmp_path / "runs")) as url,
        httpx.Client(base_url=url, timeout=TIMEOUT) as client,
    ):
        assert client.get("/v1/runs").status_code == 200
        port = url.rsplit(":", 1)[1]
        for host in (f"localhost:{port}", f"[::1]:{port}", "127.0.0.1"):
            assert client.get("/v1/runs", headers={"Host": host}).status_code == 200, host
        rebound = client.get("/v1/runs", headers={"Host": f"evil.example:{port}"})
        assert rebound.status_code == 421
        assert rebound.json()["error"] == "misdirected_request"
        started = client.post(
            "/v1/runs", headers={"Host": f"evil.example:{port}"}, json={"workflow": steps(1)}
        )
        assert started.status_code == 421
        for origin in ("http://evil.example", "null", f"http://127.0.0.1.evil.example:{port}"):
            foreign = client.get("/v1/runs", headers={"Origin": origin})
            assert foreign.status_code == 403, origin
            assert foreign.json()["error"] == "forbidden_origin"
        assert client.get("/v1/runs", headers={"Origin": url}).status_code == 200
        assert client.get("/healthz", headers={"Host": "evil.example"}).status_code == 200

"""A secret sent in a request never comes back into a run's records in another form.

A value inserted into a URL's host comes back lower-cased (and IDNA-encoded when it has
non-ASCII letters), into its path or query percent-encoded, into its password inside the
base64 of a basic-auth header. Each document runs end to end with ``lattice run``
against a local server that echoes what it received (its host name resolves to that
server, or fails to resolve); the test checks that each form went out in the request,
then that no file of the run folder, stdout or stderr holds any form, nor any answer
of ``lattice serve`` about the run.
"""

from __future__ import annotations

import base64
import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import httpx
import idna
import pytest

from lattice.cli import main
from lattice.config import HttpConfig, LatticeConfig, RuntimeConfig, SecretsConfig
from lattice.server.app import ServerSettings
from lattice.server.in_thread import serve_in_thread
from tests.builders import chain, node
from tests.server.helpers import TIMEOUT, follow


class Echo:
    """A local HTTP server answering what it received (path, Host, Authorization) as
    JSON: 200, or 404 for a path starting with ``/fail``."""

    def __init__(self) -> None:
        self.responses: list[str] = []
        echo = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = json.dumps(
                    {
                        "path": self.path,
                        "host": self.headers.get("host"),
                        "authorization": self.headers.get("authorization"),
                    }
                ).encode()
                echo.responses.append(body.decode())
                self.send_response(404 if self.path.startswith("/fail") else 200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]


@pytest.fixture
def echo() -> Iterator[Echo]:
    server = Echo()
    thread = threading.Thread(target=server.server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.server.shutdown()
    server.server.server_close()


REAL_GETADDRINFO = socket.getaddrinfo


def resolving(port: int, *, fail: bool) -> Any:
    """A ``getaddrinfo`` under which every ``.invalid`` name is the echo server (or
    cannot be resolved); other names as usual."""

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(host, str) and host.endswith(".invalid"):
            if fail:
                raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]
        return REAL_GETADDRINFO(host, *args, **kwargs)

    return getaddrinfo


def forms(value: str, *, user: str = "user") -> dict[str, str]:
    """Each form ``value`` can take on its way out, by name."""
    found = {
        "as is": value,
        "lower-cased": value.lower(),
        "upper-cased": value.upper(),
        "percent-encoded": quote(value, safe=""),
        "percent-encoded, lower-cased": quote(value, safe="").lower(),
        "percent-encoded, / kept": quote(value, safe="/"),
        "percent-encoded, lower-case hex": quote(value, safe="").replace("%2B", "%2b"),
        "form-encoded": quote_plus(value),
        "JSON-escaped": json.dumps(value)[1:-1],
    }
    host = value.split("//")[-1].split(":")[0].split(".")[0]  # a URL's first label
    if not host.isascii():
        found["IDNA"] = idna.encode(host.lower(), uts46=True).decode()
    # in basic auth: the base64 of "user:value", less the characters that also hold
    # bits of "user:" or of the padding
    prefix = len(user) + 1
    encoded = base64.b64encode(f"{user}:{value}".encode()).decode()
    found["base64 (basic auth)"] = encoded[(8 * prefix + 5) // 6 : 8 * (prefix + len(value)) // 6]
    return found


HOST_SECRET = "SeCrEt-HoSt-42x"
IDNA_SECRET = "Sécret-Hôst-42x"
IDNA_URL_SECRET = "http://Sécret-Hôst-42x.invalid:{port}"
PATH_SECRET = "Wd9+pa/s=s x!"

CASES = {
    # name: (secret, url, query, does the name resolve, went out as)
    "host, unresolved": (HOST_SECRET, "http://{{ $secrets.S }}.invalid:{port}/x", {}, False, []),
    "host, echoed": (
        HOST_SECRET,
        "http://{{ $secrets.S }}.invalid:{port}/x",
        {},
        True,
        ["lower-cased"],
    ),
    "host, echoed in an error": (
        HOST_SECRET,
        "http://{{ $secrets.S }}.invalid:{port}/fail",
        {},
        True,
        ["lower-cased"],
    ),
    "non-ASCII host, unresolved": (
        IDNA_SECRET,
        "http://{{ $secrets.S }}.invalid:{port}/x",
        {},
        False,
        [],
    ),
    "non-ASCII host, echoed": (
        IDNA_SECRET,
        "http://{{ $secrets.S }}.invalid:{port}/fail",
        {},
        True,
        ["percent-encoded, lower-cased"],
    ),
    "a URL with a non-ASCII host, unresolved": (
        IDNA_URL_SECRET,
        "{{ $secrets.S }}/x",
        {},
        False,
        [],
    ),
    "a URL with a non-ASCII host, echoed": (
        IDNA_URL_SECRET,
        "{{ $secrets.S }}/fail",
        {},
        True,
        ["IDNA"],
    ),
    "path, echoed": (
        PATH_SECRET,
        "http://127.0.0.1:{port}/x/{{ $secrets.S }}",
        {},
        True,
        ["percent-encoded, / kept"],
    ),
    "path, echoed in an error": (
        PATH_SECRET,
        "http://127.0.0.1:{port}/fail/{{ $secrets.S }}",
        {},
        True,
        ["percent-encoded, / kept"],
    ),
    "query, echoed": (
        PATH_SECRET,
        "http://127.0.0.1:{port}/x",
        {"k": "{{ $secrets.S }}"},
        True,
        ["form-encoded"],
    ),
    "basic auth, echoed": (
        PATH_SECRET,
        "http://user:{{ $secrets.S }}@127.0.0.1:{port}/x",
        {},
        True,
        ["base64 (basic auth)"],
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_no_form_of_a_secret_reaches_the_run_folder_or_the_terminal(
    case: str,
    echo: Echo,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    secret, url, query, resolves, sent_as = CASES[case]
    secret = secret.replace("{port}", str(echo.port))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("S", secret)
    monkeypatch.setattr(socket, "getaddrinfo", resolving(echo.port, fail=not resolves))
    config = tmp_path / "lattice.toml"
    config.write_text(
        '[secrets]\nallow = ["S"]\n[http]\nallow_private = true\n[runtime]\nmax_retries = 0\n',
        encoding="utf-8",
    )
    monkeypatch.setenv("LATTICE_CONFIG", str(config))
    request = node("call", "httpRequest", url=url.replace("{port}", str(echo.port)), method="GET")
    if query:
        request["data"]["query"] = query
    doc = chain(request)
    doc["nodes"][-1]["data"]["output"] = "$vars.call.result"
    (tmp_path / "flow.json").write_text(json.dumps(doc), encoding="utf-8")

    code = main(["run", "flow.json", "--runs-dir", "runs", "--json"])
    out, err = capsys.readouterr()

    assert "Traceback" not in err
    assert code == (0 if resolves and "fail" not in url else 1), err
    every = forms(secret)
    for name in sent_as:  # the form went out, and the server sent it back
        assert any(every[name] in response for response in echo.responses), name
    (folder,) = (tmp_path / "runs").iterdir()
    texts = {"stdout": out, "stderr": err}
    texts.update({str(p): p.read_text(encoding="utf-8") for p in folder.rglob("*") if p.is_file()})
    assert len(texts) >= 8
    leaks = [
        (name, where)
        for name, form in every.items()
        for where, text in texts.items()
        if form in text
    ]
    assert leaks == []
    assert "***" in err + out or "{{ $secrets.S }}" in err


@pytest.mark.parametrize("case", list(CASES))
def test_no_form_of_a_secret_reaches_a_response_of_the_server(
    case: str, echo: Echo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same documents sent to ``lattice serve``: its answers about the run (events,
    status, result) and the run folder hold no form of the secret."""
    secret, url, query, resolves, sent_as = CASES[case]
    secret = secret.replace("{port}", str(echo.port))
    monkeypatch.setenv("S", secret)
    monkeypatch.setattr(socket, "getaddrinfo", resolving(echo.port, fail=not resolves))
    request = node("call", "httpRequest", url=url.replace("{port}", str(echo.port)), method="GET")
    if query:
        request["data"]["query"] = query
    doc = chain(request)
    doc["nodes"][-1]["data"]["output"] = "$vars.call.result"
    settings = ServerSettings(
        runs_dir=tmp_path / "runs",
        workflows_dir=tmp_path / "workflows",
        config=LatticeConfig(
            secrets=SecretsConfig(allow=["S"]),
            http=HttpConfig(allow_private=True),
            runtime=RuntimeConfig(max_retries=0),
        ),
    )
    with serve_in_thread(settings) as base, httpx.Client(base_url=base, timeout=TIMEOUT) as client:
        started = client.post("/v1/runs", json={"document": doc})
        assert started.status_code == 202, started.text
        run_id = started.json()["run_id"]
        events, status = follow(client, run_id)
        assert status == ("completed" if resolves and "fail" not in url else "failed")
        texts = {
            "events": json.dumps(events, ensure_ascii=False),
            "run": client.get(f"/v1/runs/{run_id}").text,
            "runs": client.get("/v1/runs").text,
        }
    every = forms(secret)
    for name in sent_as:
        assert any(every[name] in response for response in echo.responses), name
    folder = tmp_path / "runs" / run_id
    texts.update({str(p): p.read_text(encoding="utf-8") for p in folder.rglob("*") if p.is_file()})
    leaks = [
        (name, where)
        for name, form in every.items()
        for where, text in texts.items()
        if form in text
    ]
    assert leaks == []

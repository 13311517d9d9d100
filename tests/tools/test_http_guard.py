"""httpRequest's destination rules and URL templates, through whole workflow runs.

Most tests here use no injected transport: requests go through the guarded transport to a
real ``ThreadingHTTPServer`` on 127.0.0.1 (and ::1 when the machine has IPv6) that counts
every request it receives, so a refused request is one the server never saw. Host names
that are not numeric are served by a fake resolver (``socket.getaddrinfo`` patched); any
other name is resolved numerically only, so nothing reaches DNS.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import socket
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from lattice.contracts.policies import RetrySettings
from lattice.runtime import Runner, RunResult, RunStore
from lattice.runtime.settings import RuntimeSettings
from lattice.tools.guarded import GuardedTransport
from lattice.tools.http import HttpPolicy
from lattice.tools.netguard import HostRules
from tests.builders import chain, lower_ok
from tests.conftest import _real_getaddrinfo
from tests.tools.test_http import (
    API,
    FakeSleep,
    Harness,
    assert_failed,
    echo,
    fail_with,
    http_node,
    respond,
    script,
)

# -- a server that counts what reaches it ---------------------------------------------------


@dataclass
class Seen:
    method: str
    path: str
    host: str | None
    headers: dict[str, str]


class CountingServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], seen: list[Seen], family: int) -> None:
        self.address_family = family
        self.seen = seen
        super().__init__(address, CountingHandler)


class CountingHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: CountingServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.server.seen.append(
            Seen(self.command, self.path, self.headers.get("Host"), dict(self.headers))
        )
        if self.path.startswith("/redirect"):
            self.send_response(302)
            self.send_header("Location", "http://169.254.169.254/latest/meta-data/")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data = json.dumps({"path": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.wfile.write(data)


@dataclass
class Local:
    """Servers on 127.0.0.1 and (when possible) on ::1, on the same port, sharing ``seen``."""

    port: int
    ipv6: bool
    seen: list[Seen] = field(default_factory=list)

    def url(self, host: str, path: str = "/x") -> str:
        return f"http://{host}:{self.port}{path}"


def _serve(server: ThreadingHTTPServer) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01})
    thread.start()
    return thread


@pytest.fixture
def local(monkeypatch: pytest.MonkeyPatch) -> Iterator[Local]:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    seen: list[Seen] = []
    servers = [CountingServer(("127.0.0.1", 0), seen, socket.AF_INET)]
    port = servers[0].server_address[1]
    with contextlib.suppress(OSError):  # no IPv6 here, or the port is taken on ::1
        servers.append(CountingServer(("::1", port), seen, socket.AF_INET6))
    threads = [_serve(server) for server in servers]
    try:
        yield Local(port=port, ipv6=len(servers) == 2, seen=seen)
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()
        for thread in threads:
            thread.join(timeout=5)


FAKE_DNS: dict[str, list[str]] = {
    "intranet.test": ["127.0.0.1"],
    "rebind.test": ["93.184.216.34", "127.0.0.1"],
    "metadata.test": ["169.254.169.254"],
    "mapped.test": ["::ffff:127.0.0.1"],
}


@pytest.fixture
def dns(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Resolve FAKE_DNS names; ``localhost`` as usual; anything else numerically only (the
    numeric spellings ``2130706433``, ``127.1``, ... resolve as the C library reads them).
    Returns the names looked up."""
    looked_up: list[str] = []

    def getaddrinfo(
        host: Any, port: Any, family: int = 0, type: int = 0, proto: int = 0, flags: int = 0
    ) -> list[Any]:
        name = host.decode() if isinstance(host, bytes) else host
        looked_up.append(name)
        if name in FAKE_DNS:
            return [
                (socket.AF_INET6, socket.SOCK_STREAM, 6, "", (address, port, 0, 0))
                if ":" in address
                else (socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))
                for address in FAKE_DNS[name]
            ]
        if name != "localhost":
            flags |= socket.AI_NUMERICHOST
        return _real_getaddrinfo(host, port, family, type, proto, flags)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return looked_up


def run(
    url: str,
    *,
    headers: dict[str, str] | None = None,
    inputs: dict[str, Any] | None = None,
    sleep: FakeSleep | None = None,
    retry: RetrySettings | None = None,
    **policy: Any,
) -> RunResult:
    """One httpRequest GET through the run's own (guarded) transport."""
    settings = RuntimeSettings(
        http=HttpPolicy(**policy),
        sleep=sleep or FakeSleep(),
        retry=retry or RetrySettings(jitter=0.0),
        gc_pacing=False,
    )
    doc = chain(http_node(url=url, headers=headers or {}, timeoutMs=5000))
    return Runner(lower_ok(doc), settings=settings, store=RunStore(None)).run(inputs or {})


def assert_refused(result: RunResult, sleep: FakeSleep, *words: str) -> str:
    report = assert_failed(result, "tool_error")
    summary: str = report["summary"]
    for word in words:
        assert word in summary, summary
    assert sleep.delays == []  # not retried
    return summary


# -- every spelling of "this machine" -------------------------------------------------------

LOOPBACK_SPELLINGS = [
    "127.0.0.1",
    "localhost",
    "LOCALHOST",
    "127.0.0.1.",
    "2130706433",
    "0x7f000001",
    "0X7F000001",
    "127.1",
    "0x7f.1",
    "017700000001",
    "127\u30020\u30020\u30021",  # ideographic full stops
    "127\uff0e0\uff0e0\uff0e1",  # fullwidth full stops
    "[::1]",
    "[::ffff:127.0.0.1]",
    "[::ffff:7f00:1]",
    "[::127.0.0.1]",
    "[64:ff9b::127.0.0.1]",
    "[0:0:0:0:0:ffff:127.0.0.1]",
    "intranet.test",
    "rebind.test",
    "mapped.test",
]


@pytest.mark.parametrize("host", LOOPBACK_SPELLINGS)
def test_loopback_is_refused_by_default_however_it_is_spelled(
    local: Local, dns: list[str], host: str
) -> None:
    sleep = FakeSleep()
    result = run(local.url(host), sleep=sleep)

    assert_refused(result, sleep, "loopback", "allow_private")
    assert local.seen == []


@pytest.mark.parametrize("host", ["0", "0.0.0.0", "[::]", "0x0"])
def test_the_unspecified_address_is_refused_even_with_allow_private(
    local: Local, dns: list[str], host: str
) -> None:
    sleep = FakeSleep()
    result = run(local.url(host), sleep=sleep, allow_private=True)

    assert_refused(result, sleep, "unspecified")
    assert local.seen == []


@pytest.mark.parametrize("host", LOOPBACK_SPELLINGS)
def test_deny_hosts_matches_every_spelling_of_a_denied_address(
    local: Local, dns: list[str], host: str
) -> None:
    # The configuration of the original report: 127.0.0.1, localhost and ::1 denied.
    # allow_private opens the private ranges, so only deny_hosts stands in the way.
    sleep = FakeSleep()
    result = run(
        local.url(host),
        sleep=sleep,
        allow_private=True,
        deny_hosts=("127.0.0.1", "localhost", "::1"),
    )

    assert_refused(result, sleep, "deny_hosts")
    assert local.seen == []


REACHABLE_SPELLINGS = [
    # what each spelling reaches when allowed: proof that the refusals above are not vacuous
    ("127.0.0.1", "127.0.0.1"),
    ("localhost", "localhost"),
    ("2130706433", "2130706433"),
    ("0x7f000001", "0x7f000001"),
    ("127.1", "127.1"),
    ("017700000001", "017700000001"),
    ("127\u30020\u30020\u30021", "127.0.0.1"),
    ("intranet.test", "intranet.test"),
]


@pytest.mark.parametrize(("host", "host_header"), REACHABLE_SPELLINGS)
def test_allow_private_lets_every_spelling_through(
    local: Local, dns: list[str], host: str, host_header: str
) -> None:
    result = run(local.url(host), allow_private=True)

    assert result.status == "completed", result.failure
    [seen] = local.seen
    assert seen.host == f"{host_header}:{local.port}"  # the Host header is the URL's host


def test_ipv6_loopback_is_reached_when_allowed(local: Local, dns: list[str]) -> None:
    if not local.ipv6:
        pytest.skip("no IPv6 loopback here")
    result = run(local.url("[::1]"), allow_hosts=("::1",))

    assert result.status == "completed", result.failure
    assert [seen.host for seen in local.seen] == [f"[::1]:{local.port}"]


# -- allow_hosts and deny_hosts -------------------------------------------------------------


def test_an_allow_hosts_name_reaches_its_private_address_with_the_name_in_host(
    local: Local, dns: list[str]
) -> None:
    result = run(local.url("intranet.test", "/members/ana"), allow_hosts=("intranet.test",))

    assert result.status == "completed", result.failure
    assert result.output["body"] == {"path": "/members/ana"}
    [seen] = local.seen
    assert seen.host == f"intranet.test:{local.port}"
    assert "intranet.test" in dns  # resolved by the guard, then connected by address


def test_an_allowed_address_does_not_open_other_names_for_it(local: Local, dns: list[str]) -> None:
    sleep = FakeSleep()
    allowed = run(local.url("127.0.0.1"), allow_hosts=("127.0.0.1",))
    other = run(local.url("localhost"), sleep=sleep, allow_hosts=("127.0.0.1",))

    assert allowed.status == "completed", allowed.failure
    assert_refused(other, sleep, "not in [http] allow_hosts")
    assert len(local.seen) == 1


def test_a_glob_in_allow_hosts_does_not_open_private_addresses(
    local: Local, dns: list[str]
) -> None:
    sleep = FakeSleep()
    result = run(local.url("intranet.test"), sleep=sleep, allow_hosts=("*.test",))

    assert_refused(result, sleep, "'intranet.test' resolves to 127.0.0.1", "loopback")
    assert local.seen == []


def test_a_network_in_allow_hosts_opens_its_addresses(local: Local, dns: list[str]) -> None:
    result = run(local.url("127.0.0.1"), allow_hosts=("127.0.0.0/8",))

    assert result.status == "completed", result.failure
    assert len(local.seen) == 1


def test_deny_hosts_matches_the_resolved_address_and_wins(local: Local, dns: list[str]) -> None:
    sleep = FakeSleep()
    result = run(
        local.url("intranet.test"),
        sleep=sleep,
        allow_hosts=("intranet.test",),
        deny_hosts=("127.0.0.0/8",),
    )

    assert_refused(result, sleep, "resolves to 127.0.0.1", "deny_hosts ('127.0.0.0/8')")
    assert local.seen == []


def test_a_name_with_one_inside_address_is_refused(local: Local, dns: list[str]) -> None:
    sleep = FakeSleep()
    result = run(local.url("rebind.test"), sleep=sleep)

    assert_refused(result, sleep, "'rebind.test' resolves to 127.0.0.1")
    assert local.seen == []


# -- metadata -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "host",
    [
        "169.254.169.254",
        "metadata.test",
        "[::ffff:169.254.169.254]",
        "[::ffff:a9fe:a9fe]",
        "2852039166",
        "[fd00:ec2::254]",
        "100.100.100.200",
    ],
)
def test_metadata_addresses_are_refused_even_with_allow_private(
    local: Local, dns: list[str], host: str
) -> None:
    sleep = FakeSleep()
    result = run(
        f"http://{host}/latest/meta-data/",
        sleep=sleep,
        allow_private=True,
        allow_hosts=("*", "metadata.test", "169.254.0.0/16"),
    )

    assert_refused(result, sleep, "cloud metadata", "lists the address itself")


def test_a_metadata_address_listed_in_allow_hosts_is_reached() -> None:
    harness = Harness()
    api = script(harness, respond(200, json={"instance": "i-1"}))
    result = harness.run(
        chain(http_node(url="http://169.254.169.254/latest/meta-data/")),
        allow_hosts=("169.254.169.254",),
    )

    assert result.status == "completed", result.failure
    assert len(api.requests) == 1


def test_a_redirect_to_metadata_is_returned_not_followed(local: Local, dns: list[str]) -> None:
    result = run(local.url("127.0.0.1", "/redirect"), allow_hosts=("127.0.0.1",))

    assert result.status == "completed", result.failure
    assert result.output["status"] == 302
    assert result.output["headers"]["location"].startswith("http://169.254.169.254/")
    assert [seen.path for seen in local.seen] == ["/redirect"]


def test_proxies_from_the_environment_are_not_used(
    local: Local, dns: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A proxy would resolve and connect itself, out of the guard's reach.
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("ALL_PROXY", "http://127.0.0.1:9")
    result = run(local.url("127.0.0.1"), allow_hosts=("127.0.0.1",))

    assert result.status == "completed", result.failure
    assert len(local.seen) == 1


# -- requests that cannot be sent fail at once ----------------------------------------------


@pytest.mark.parametrize(
    "value",
    ["a\r\nX-Injected: 1", "a\nX-Injected: 1", "a\rb", "a\x00b"],
    ids=["crlf", "lf", "cr", "nul"],
)
def test_a_header_value_with_a_line_break_fails_at_once(
    local: Local, dns: list[str], value: str
) -> None:
    sleep = FakeSleep()
    result = run(
        local.url("127.0.0.1"),
        headers={"X-Note": "{{ $in.note }}"},
        inputs={"note": value},
        sleep=sleep,
        allow_hosts=("127.0.0.1",),
    )

    summary = assert_refused(result, sleep, "X-Note", "line break")
    assert "Injected" not in summary  # the value is not echoed (it may be a secret)
    assert local.seen == []


def test_a_bad_header_name_fails_at_once(local: Local, dns: list[str]) -> None:
    sleep = FakeSleep()
    result = run(
        local.url("127.0.0.1"),
        headers={"X Note": "1"},
        sleep=sleep,
        allow_hosts=("127.0.0.1",),
    )

    assert_refused(result, sleep, "not a valid HTTP header name")
    assert local.seen == []


@pytest.mark.parametrize(
    "url",
    [
        "http://[::1/x",
        "http://127.0.0.1:99999/x",
        "http:///x",
        "mailto:ops@example.com",
        "http://0177.0.0.1/x",  # httpx itself refuses a dotted form with a 4-digit part
    ],
    ids=["bracket", "port", "no-host", "not-http", "octal-dotted"],
)
def test_a_malformed_url_fails_at_once(local: Local, dns: list[str], url: str) -> None:
    sleep = FakeSleep()
    result = run(url, sleep=sleep, allow_private=True)

    assert_failed(result, "tool_error")
    assert sleep.delays == []
    assert local.seen == []


def test_retries_count_every_failure_of_a_call_in_total() -> None:
    harness = Harness()
    api = script(
        harness,
        fail_with(httpx.ReadTimeout),
        respond(503, text="busy"),
        fail_with(httpx.ConnectError),
        respond(429, text="slow down"),
        respond(200, json={"never": "reached"}),
    )
    result = harness.run(chain(http_node()), retry=RetrySettings(max_retries=3, jitter=0.0))

    report = assert_failed(result, "http_error")
    assert report["details"]["status"] == 429
    assert report["details"]["retries"] == 3
    assert len(api.requests) == 4  # the first try and 3 retries, whatever failed
    assert harness.sleep.delays == [1.0, 2.0, 4.0]


# -- URL templates --------------------------------------------------------------------------


def url_run(url: str, inputs: dict[str, Any], **policy: Any) -> tuple[RunResult, Harness]:
    harness = Harness()
    script(harness, echo)
    return harness.run(chain(http_node(url=url)), inputs, **policy), harness


def test_a_path_value_keeps_its_slashes() -> None:
    result, harness = url_run(f"{API}/repos/{{{{ $in.repo }}}}/releases", {"repo": "pallets/flask"})

    assert result.status == "completed", result.failure
    [request] = harness.api.requests
    assert request.url.raw_path == b"/repos/pallets/flask/releases"


def test_a_path_value_has_its_other_reserved_characters_encoded() -> None:
    result, harness = url_run(f"{API}/files/{{{{ $in.name }}}}", {"name": "a b?c#d&e=f%g;h+i@j"})

    assert result.status == "completed", result.failure
    [request] = harness.api.requests
    assert request.url.raw_path == b"/files/a%20b%3Fc%23d%26e%3Df%25g%3Bh%2Bi%40j"
    assert request.url.params == httpx.QueryParams()
    assert result.output["body"]["path"] == "/files/a b?c#d&e=f%g;h+i@j"


@pytest.mark.parametrize(
    "name",
    ["..", ".", "../admin", "a/../../admin", "a/./b", "a/.."],
)
def test_a_path_value_cannot_make_dot_segments(name: str) -> None:
    result, harness = url_run(f"{API}/users/{{{{ $in.name }}}}/files", {"name": name})

    report = assert_failed(result, "tool_error")
    assert ". or .. segments" in report["summary"]
    assert harness.api.requests == []
    assert harness.sleep.delays == []


@pytest.mark.parametrize(
    ("name", "raw_path"),
    [
        ("...", b"/users/.../files"),
        ("..a", b"/users/..a/files"),
        (".hidden", b"/users/.hidden/files"),
        ("%2e%2e", b"/users/%252e%252e/files"),  # a literal %: encoded, not a dot
    ],
)
def test_dots_that_are_not_whole_segments_are_fine(name: str, raw_path: bytes) -> None:
    result, harness = url_run(f"{API}/users/{{{{ $in.name }}}}/files", {"name": name})

    assert result.status == "completed", result.failure
    assert harness.api.requests[0].url.raw_path == raw_path


def test_query_values_are_encoded_whole() -> None:
    result, harness = url_run(
        f"{API}/search?q={{{{ $in.q }}}}&path={{{{ $in.path }}}}&lang=en",
        {"q": "a&b=c#d e+f", "path": "x/y"},
    )

    assert result.status == "completed", result.failure
    [request] = harness.api.requests
    assert dict(request.url.params) == {"q": "a&b=c#d e+f", "path": "x/y", "lang": "en"}
    assert b"path=x%2Fy" in request.url.raw_path


@pytest.mark.parametrize(
    ("base", "expected"),
    [
        ("https://api.test", b"/items/7"),
        ("https://api.test/v2", b"/v2/items/7"),
        ("https://api.test/v2/", b"/v2/items/7"),
        ("  https://api.test/v2  ", b"/v2/items/7"),
    ],
)
def test_a_leading_template_is_a_base_url(base: str, expected: bytes) -> None:
    result, harness = url_run("{{ $in.base }}/items/{{ $in.id }}", {"base": base, "id": 7})

    assert result.status == "completed", result.failure
    [request] = harness.api.requests
    assert request.url.host == "api.test"
    assert request.url.raw_path == expected


def test_a_whole_url_from_an_input_keeps_its_query() -> None:
    result, harness = url_run("{{ $in.url }}", {"url": "https://api.test/x?page=2&q=a%20b"})

    assert result.status == "completed", result.failure
    assert dict(harness.api.requests[0].url.params) == {"page": "2", "q": "a b"}


@pytest.mark.parametrize(
    ("base", "problem"),
    [
        ("api.test", "absolute http(s) URL"),
        ("/items", "absolute http(s) URL"),
        ("ftp://api.test", "absolute http(s) URL"),
        ("javascript:alert(1)", "absolute http(s) URL"),
        ("https://", "absolute http(s) URL"),
        ("https://api.test/x?y=1", "query string or fragment"),
        ("https://api.test/x#top", "query string or fragment"),
        ("https://api.test/a/../admin", ". or .. segments"),
    ],
)
def test_a_bad_base_url_is_a_tool_error(base: str, problem: str) -> None:
    result, harness = url_run("{{ $in.base }}/items/{{ $in.id }}", {"base": base, "id": 7})

    report = assert_failed(result, "tool_error")
    assert problem in report["summary"]
    assert harness.api.requests == []


def test_a_base_url_is_held_to_the_host_rules() -> None:
    result, harness = url_run(
        "{{ $in.base }}/latest/meta-data", {"base": "http://169.254.169.254"}, allow_private=True
    )

    report = assert_failed(result, "tool_error")
    assert "cloud metadata" in report["summary"]
    assert harness.api.requests == []


def test_a_value_in_the_host_cannot_change_the_host() -> None:
    result, harness = url_run(
        "https://{{ $in.tenant }}.api.test/x",
        {"tenant": "evil.test/x?y=#"},
        allow_hosts=("*.api.test",),
    )

    assert result.status == "completed", result.failure
    [request] = harness.api.requests
    assert request.url.host.endswith(".api.test")  # the value stayed inside the host name
    assert request.url.path == "/x"
    assert request.url.params == httpx.QueryParams()


def test_a_base_url_from_an_input_reaches_a_local_server(local: Local, dns: list[str]) -> None:
    result = run(
        "{{ $in.base }}/items/{{ $in.id }}",
        inputs={"base": f"http://127.0.0.1:{local.port}", "id": "a/b c"},
        allow_hosts=("127.0.0.1",),
    )

    assert result.status == "completed", result.failure
    assert [seen.path for seen in local.seen] == ["/items/a/b%20c"]


# -- TLS: certificate and SNI are the host name's -------------------------------------------


def make_certificate(tmp_path: Path, name: str) -> tuple[Path, Path, str]:
    """A self-signed certificate for ``name`` (cert file, key file, PEM text)."""
    pytest.importorskip("cryptography")
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    pem = cert.public_bytes(serialization.Encoding.PEM).decode()
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_text(pem, encoding="utf-8")
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file, pem


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[CountingServer, list[str | None], str]]:
    """An HTTPS server on 127.0.0.1 with a certificate for ``intranet.test``; yields it, the
    SNI names it was sent, and the certificate (PEM)."""
    cert_file, key_file, pem = make_certificate(tmp_path, "intranet.test")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    sni: list[str | None] = []

    def remember(_socket: Any, name: str | None, _context: ssl.SSLContext) -> None:
        sni.append(name)

    context.sni_callback = remember
    server = CountingServer(("127.0.0.1", 0), [], socket.AF_INET)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = _serve(server)
    try:
        yield server, sni, pem
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_tls_verifies_and_sends_sni_for_the_host_name_while_connecting_by_address(
    tls_server: tuple[CountingServer, list[str | None], str], dns: list[str]
) -> None:
    server, sni, pem = tls_server
    port = server.server_address[1]
    rules = HostRules(["intranet.test"])
    trust = ssl.create_default_context(cadata=pem)
    settings = RuntimeSettings(
        http=HttpPolicy(transport=GuardedTransport(rules, verify=trust)),
        sleep=FakeSleep(),
        retry=RetrySettings(max_retries=0),
        gc_pacing=False,
    )
    doc = chain(http_node(url=f"https://intranet.test:{port}/secure"))
    result = Runner(lower_ok(doc), settings=settings, store=RunStore(None)).run({})

    assert result.status == "completed", result.failure
    assert sni == ["intranet.test"]
    assert [(seen.path, seen.host) for seen in server.seen] == [
        ("/secure", f"intranet.test:{port}")
    ]

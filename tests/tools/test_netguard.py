"""lattice.tools.netguard on its own: address classes, host entries, the rules' decisions,
the backend's resolve-check-connect order, and the ``[http]`` configuration keys.

Whole runs against real servers on 127.0.0.1 are in ``test_http_guard.py``.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import anyio
import httpcore
import pytest

from lattice.config import load_config
from lattice.errors import LatticeUserError
from lattice.runtime.settings import settings_from_config
from lattice.tools.guarded import GuardedBackend, GuardedTransport
from lattice.tools.netguard import (
    METADATA_ADDRESSES,
    DestinationRefused,
    HostRules,
    address_class,
    embedded_ipv4,
    literal_address,
    parse_entry,
)

ip = ipaddress.ip_address

# -- address classes ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("127.255.0.9", "loopback"),
        ("::1", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("172.31.255.255", "private"),
        ("192.168.1.1", "private"),
        ("fc00::1", "private"),
        ("fd12:3456::1", "private"),
        ("169.254.1.1", "link-local"),
        ("fe80::1", "link-local"),
        ("224.0.0.1", "multicast"),
        ("239.1.1.1", "multicast"),
        ("ff02::1", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("0.1.2.3", "unspecified"),
        ("::", "unspecified"),
        ("100.64.0.1", "shared (carrier-grade NAT)"),
        ("192.0.2.1", "documentation"),
        ("2001:db8::1", "documentation"),
        ("198.18.0.1", "benchmarking"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "reserved"),
        ("fec0::1", "site-local"),
        ("169.254.169.254", "cloud metadata"),
        ("fd00:ec2::254", "cloud metadata"),
        ("100.100.100.200", "cloud metadata"),
        ("168.63.129.16", "cloud metadata"),
        # IPv4 inside IPv6 counts as the IPv4 address
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:10.0.0.1", "private"),
        ("::ffff:169.254.169.254", "cloud metadata"),
        ("::127.0.0.1", "loopback"),
        ("64:ff9b::7f00:1", "loopback"),
        ("64:ff9b::a9fe:a9fe", "cloud metadata"),
        ("2002:7f00:1::", "loopback"),
        ("2002:c0a8:101::1", "private"),
        # public
        ("93.184.216.34", None),
        ("8.8.8.8", None),
        ("2606:4700::1111", None),
        ("::ffff:8.8.8.8", None),
        ("64:ff9b::808:808", None),  # NAT64 of a public address (IPv6-only networks)
        ("2002:808:808::1", None),
    ],
)
def test_address_class(address: str, kind: str | None) -> None:
    assert address_class(ip(address)) == kind


def test_every_metadata_address_is_refused_as_metadata() -> None:
    assert {address_class(a) for a in METADATA_ADDRESSES} == {"cloud metadata"}


@pytest.mark.parametrize(
    ("address", "inner"),
    [
        ("::ffff:127.0.0.1", "127.0.0.1"),
        ("::127.0.0.1", "127.0.0.1"),
        ("64:ff9b::7f00:1", "127.0.0.1"),
        ("2002:a00:1::", "10.0.0.1"),
        ("::1", None),
        ("::", None),
        ("2606:4700::1111", None),
        ("127.0.0.1", None),
    ],
)
def test_embedded_ipv4(address: str, inner: str | None) -> None:
    found = embedded_ipv4(ip(address))
    assert (str(found) if found else None) == inner


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("0X7F000001", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("0x7f.1", "127.0.0.1"),
        ("017700000001", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("0", "0.0.0.0"),
        ("[::1]", "::1"),
        ("::ffff:127.0.0.1", "::ffff:7f00:1"),
        ("example.com", None),
        ("123abc", None),
        ("1.2.3.4.5", None),
        ("deadbeef", None),
    ],
)
def test_literal_address_reads_the_numeric_forms_resolvers_accept(
    host: str, address: str | None
) -> None:
    found = literal_address(host)
    assert (str(found) if found else None) == address


# -- entries --------------------------------------------------------------------------------


def test_entries_are_names_globs_addresses_or_networks() -> None:
    assert parse_entry("API.Example.com.").pattern == "api.example.com"
    assert parse_entry("api.example.com").exact
    assert not parse_entry("*.example.com").exact
    assert parse_entry("127.0.0.1").address == ip("127.0.0.1")
    assert parse_entry("127.0.0.1").exact
    assert parse_entry("[::1]").address == ip("::1")
    assert parse_entry("10.0.0.0/8").network == ipaddress.ip_network("10.0.0.0/8")
    assert not parse_entry("10.0.0.0/8").exact
    assert parse_entry("bücher.example").pattern == "xn--bcher-kva.example"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "empty"),
        ("https://api.example.com", "URL"),
        ("10.0.0.0/33", "network"),
        ("localhost:8000", "port"),
    ],
)
def test_bad_entries_say_what_is_wrong(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_entry(text)


# -- decisions ------------------------------------------------------------------------------


def refusal(rules: HostRules, host: str, *addresses: str) -> str | None:
    """The refusal message for ``host`` resolving to ``addresses`` (None: allowed)."""
    try:
        rules.check_name(host)
        rules.check_addresses(host, [ip(a) for a in addresses])
    except DestinationRefused as exc:
        return str(exc)
    return None


def test_by_default_public_addresses_pass_and_the_rest_is_refused() -> None:
    rules = HostRules()
    assert refusal(rules, "example.com", "93.184.216.34") is None
    assert "loopback" in (refusal(rules, "intranet.test", "127.0.0.1") or "")
    assert "private" in (refusal(rules, "db.test", "10.0.0.7") or "")
    assert "cloud metadata" in (refusal(rules, "169.254.169.254", "169.254.169.254") or "")


def test_one_refused_address_refuses_the_host() -> None:
    message = refusal(HostRules(), "rebind.test", "93.184.216.34", "127.0.0.1")
    assert message is not None
    assert "'rebind.test' resolves to 127.0.0.1" in message


def test_an_exact_allow_entry_opens_that_host_only() -> None:
    rules = HostRules(["localhost", "127.0.0.1", "intranet.test", "10.0.0.0/8", "*.corp.test"])
    assert refusal(rules, "localhost", "127.0.0.1", "::1") is None
    assert refusal(rules, "127.0.0.1", "127.0.0.1") is None
    assert refusal(rules, "intranet.test", "127.0.0.1") is None
    assert refusal(rules, "10.2.3.4", "10.2.3.4") is None  # the network names it
    # a glob lets a name through allow_hosts, but not to a private address
    assert refusal(rules, "eu.corp.test", "93.184.216.34") is None
    assert "private" in (refusal(rules, "db.corp.test", "192.168.0.7") or "")
    # ... unless the address is in a network that allow_hosts lists
    assert refusal(rules, "db.corp.test", "10.0.0.7") is None


def test_an_allowed_address_is_allowed_however_it_is_spelled_and_nothing_else() -> None:
    rules = HostRules(["127.0.0.1"])
    for spelling in ("127.0.0.1", "2130706433", "127.1", "0x7f000001", "::ffff:127.0.0.1"):
        assert refusal(rules, spelling) is None, spelling
    assert "not in [http] allow_hosts" in (refusal(rules, "localhost", "127.0.0.1") or "")
    assert "not in [http] allow_hosts" in (refusal(rules, "127.0.0.2") or "")
    assert "not in [http] allow_hosts" in (refusal(rules, "::1") or "")


def test_allow_private_opens_every_non_public_address_but_metadata() -> None:
    rules = HostRules(allow_private=True)
    for address in ("127.0.0.1", "::1", "10.0.0.1", "192.168.1.1", "fe80::1", "fd12::1"):
        assert refusal(rules, "internal.test", address) is None, address
    for address in ("169.254.169.254", "::ffff:169.254.169.254", "fd00:ec2::254"):
        message = refusal(rules, "metadata.test", address)
        assert message is not None
        assert "cloud metadata" in message
    assert "unspecified" in (refusal(rules, "0", "0.0.0.0") or "")


def test_metadata_is_reached_only_when_its_address_is_listed() -> None:
    by_name = HostRules(["metadata.google.internal", "169.254.0.0/16"], allow_private=True)
    assert refusal(by_name, "metadata.google.internal", "169.254.169.254") is not None
    by_address = HostRules(["169.254.169.254", "metadata.google.internal"])
    assert refusal(by_address, "169.254.169.254", "169.254.169.254") is None
    assert refusal(by_address, "metadata.google.internal", "169.254.169.254") is None


def test_deny_entries_match_names_addresses_and_networks_and_win() -> None:
    rules = HostRules(
        ["*"], ["*.internal", "127.0.0.1", "::1", "10.0.0.0/8", "192.168.*"], allow_private=True
    )
    assert "deny_hosts ('*.internal')" in (refusal(rules, "db.internal", "93.184.216.34") or "")
    assert "deny_hosts ('127.0.0.1')" in (refusal(rules, "intranet.test", "127.0.0.1") or "")
    assert "deny_hosts ('127.0.0.1')" in (refusal(rules, "2130706433") or "")
    assert "deny_hosts ('127.0.0.1')" in (refusal(rules, "::ffff:127.0.0.1") or "")
    assert "deny_hosts ('::1')" in (refusal(rules, "localhost", "::1") or "")
    assert "deny_hosts ('10.0.0.0/8')" in (refusal(rules, "db.test", "10.9.9.9") or "")
    assert "deny_hosts ('192.168.*')" in (refusal(rules, "nas.test", "192.168.0.5") or "")
    assert refusal(rules, "intranet.test", "172.16.0.1") is None


# -- the backend ----------------------------------------------------------------------------


class RecordingBackend(httpcore.AsyncNetworkBackend):
    """Records where it was asked to connect and fails (no socket is ever opened)."""

    def __init__(self) -> None:
        self.connected: list[str] = []

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        self.connected.append(host)
        raise httpcore.ConnectError(f"no network in tests ({host})")

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Any = None
    ) -> httpcore.AsyncNetworkStream:
        raise AssertionError("not used")

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)


@pytest.fixture
def rebinding_dns(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """``flip.test`` resolves to a public address, then to 127.0.0.1, then public again, …;
    returns the names looked up."""
    looked_up: list[str] = []

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> list[Any]:
        looked_up.append(host)
        address = "93.184.216.34" if len(looked_up) % 2 else "127.0.0.1"
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return looked_up


def test_the_backend_connects_to_the_address_it_checked_not_to_the_name(
    rebinding_dns: list[str],
) -> None:
    inner = RecordingBackend()
    backend = GuardedBackend(HostRules(), inner)

    async def connect() -> None:
        with pytest.raises(httpcore.ConnectError):
            await backend.connect_tcp("flip.test", 443, timeout=5)

    anyio.run(connect)
    # one lookup, and the connection goes to its (public) answer: a second lookup that
    # would now say 127.0.0.1 never happens
    assert rebinding_dns == ["flip.test"]
    assert inner.connected == ["93.184.216.34"]

    async def connect_again() -> None:
        with pytest.raises(DestinationRefused, match="loopback"):
            await backend.connect_tcp("flip.test", 443, timeout=5)

    anyio.run(connect_again)  # the next lookup answers 127.0.0.1: refused, not connected
    assert inner.connected == ["93.184.216.34"]


def test_the_backend_tries_each_checked_address_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = [
        (socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("2606:4700::1111", 80, 0, 0)),
        (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", 80)),
        (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", 80)),
    ]
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: answers)
    inner = RecordingBackend()

    async def connect() -> None:
        with pytest.raises(httpcore.ConnectError):
            await GuardedBackend(HostRules(), inner).connect_tcp("dual.test", 80, timeout=5)

    anyio.run(connect)
    assert inner.connected == ["2606:4700::1111", "93.184.216.34"]


def test_a_name_that_does_not_resolve_is_a_connect_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def getaddrinfo(*args: Any, **kwargs: Any) -> list[Any]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)

    async def connect() -> None:
        with pytest.raises(httpcore.ConnectError, match=r"cannot resolve 'nowhere\.test'"):
            await GuardedBackend(HostRules(), RecordingBackend()).connect_tcp("nowhere.test", 80)

    anyio.run(connect)


def test_the_backend_never_opens_unix_sockets() -> None:
    async def connect() -> None:
        with pytest.raises(DestinationRefused):
            await GuardedBackend(HostRules()).connect_unix_socket("/var/run/docker.sock")

    anyio.run(connect)


# -- configuration --------------------------------------------------------------------------


def test_http_config_reaches_the_policy(tmp_path: Path) -> None:
    path = tmp_path / "lattice.toml"
    path.write_text(
        '[http]\nallow_hosts = ["127.0.0.1", "10.0.0.0/8", "*.example.com"]\n'
        'deny_hosts = ["169.254.0.0/16"]\nallow_private = true\n',
        encoding="utf-8",
    )
    policy = settings_from_config(load_config(path)).http
    assert policy.allow_private is True
    assert policy.allow_hosts == ("127.0.0.1", "10.0.0.0/8", "*.example.com")
    assert policy.deny_hosts == ("169.254.0.0/16",)
    assert policy.rules.allow_private


def test_allow_private_is_off_by_default(tmp_path: Path) -> None:
    path = tmp_path / "lattice.toml"
    path.write_text("[http]\nallow_hosts = []\n", encoding="utf-8")
    assert settings_from_config(load_config(path)).http.allow_private is False


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ("https://api.example.com", "is a URL"),
        ("10.0.0.0/33", "not an IP network"),
        ("localhost:8000", "without a port"),
        ("", "empty"),
    ],
)
def test_a_bad_host_entry_is_a_config_error_naming_the_key(
    tmp_path: Path, entry: str, problem: str
) -> None:
    path = tmp_path / "lattice.toml"
    path.write_text(f'[http]\ndeny_hosts = ["{entry}"]\n', encoding="utf-8")
    with pytest.raises(LatticeUserError) as caught:
        load_config(path)
    assert "http.deny_hosts" in str(caught.value)
    assert problem in str(caught.value)


def test_the_documented_recipe_public_internet_plus_one_local_service() -> None:
    rules = HostRules(["*", "127.0.0.1"])  # docs/tools.md
    assert refusal(rules, "api.github.com", "140.82.112.6") is None
    assert refusal(rules, "127.0.0.1", "127.0.0.1") is None
    # the address is what is allowed, whatever name leads there; other addresses are not
    assert refusal(rules, "localhost", "127.0.0.1") is None
    assert "loopback" in (refusal(rules, "localhost", "127.0.0.1", "::1") or "")
    assert "loopback" in (refusal(rules, "other.test", "127.0.0.2") or "")
    assert "private" in (refusal(rules, "nas.test", "192.168.0.5") or "")


def test_the_guarded_transport_sends_through_the_guarded_backend() -> None:
    transport = GuardedTransport(HostRules())
    pool = transport._pool
    assert isinstance(pool, httpcore.AsyncConnectionPool)
    assert isinstance(pool._network_backend, GuardedBackend)

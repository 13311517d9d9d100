"""Where an httpRequest may connect: the ``[http]`` host rules and the resolved-address check.

A document decides the URLs it calls, so by default it may only reach the public internet:
every address a host resolves to is classified (:func:`address_class`) and loopback,
private, link-local, multicast, unspecified, reserved and other non-global addresses are
refused, as are cloud metadata endpoints (:data:`METADATA_ADDRESSES`). IPv4 addresses
inside IPv6 ones (IPv4-mapped ``::ffff:a.b.c.d``, IPv4-compatible, NAT64 ``64:ff9b::/96``,
6to4) count as the IPv4 address they carry.

The check runs where the connection is made: ``GuardedBackend`` (in
:mod:`lattice.tools.guarded`, with the httpx transport built on it), an httpcore network
backend, resolves the host name itself, checks every address it gets, and connects to one
of those checked addresses (never to the name), so numeric spellings (``2130706433``,
``0x7f000001``, ``127.1``), Unicode dots, names that resolve inside and DNS rebinding
between check and connect are all caught. TLS still verifies (and sends SNI for) the host
name, and the ``Host`` header is the URL's.

Rules (:class:`HostRules`), from ``[http]`` in ``lattice.toml``:

- ``deny_hosts``: host names (globs such as ``*.internal``), IP addresses or networks
  (``10.0.0.0/8``); they match the URL's host and every address it resolves to. Deny wins.
- ``allow_hosts``: when not empty, the URL's host must match one entry (a glob, or an
  address or network containing an IP written in the URL). An entry naming a host exactly
  (no wildcard), an address or a network also lets that host reach non-public addresses.
- ``allow_private = true``: every non-public address is allowed.
- Metadata addresses and the unspecified addresses (``0.0.0.0``, ``::``) stay refused
  unless ``allow_hosts`` lists the address itself.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import re
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

METADATA_ADDRESSES: frozenset[IPAddress] = frozenset(
    ipaddress.ip_address(text)
    for text in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean, Oracle, Hetzner, ...
        "169.254.170.2",  # AWS ECS task metadata and credentials
        "169.254.170.23",  # AWS EKS Pod Identity agent
        "169.254.0.23",  # Tencent Cloud
        "169.254.42.42",  # Scaleway
        "100.100.100.200",  # Alibaba Cloud
        "168.63.129.16",  # Azure WireServer (a public address)
        "192.0.0.192",  # Oracle Cloud (legacy)
        "fd00:ec2::254",  # AWS IMDS over IPv6
        "fd00:ec2::23",  # AWS EKS Pod Identity agent over IPv6
    )
)
"""Cloud metadata and credential endpoints: refused even with ``allow_private``."""

_NON_PUBLIC: tuple[tuple[IPNetwork, str], ...] = tuple(
    (ipaddress.ip_network(net), label)
    for net, label in (
        ("0.0.0.0/8", "unspecified"),
        ("10.0.0.0/8", "private"),
        ("100.64.0.0/10", "shared (carrier-grade NAT)"),
        ("127.0.0.0/8", "loopback"),
        ("169.254.0.0/16", "link-local"),
        ("172.16.0.0/12", "private"),
        ("192.0.0.0/24", "reserved"),
        ("192.0.2.0/24", "documentation"),
        ("192.88.99.0/24", "reserved"),
        ("192.168.0.0/16", "private"),
        ("198.18.0.0/15", "benchmarking"),
        ("198.51.100.0/24", "documentation"),
        ("203.0.113.0/24", "documentation"),
        ("224.0.0.0/4", "multicast"),
        ("240.0.0.0/4", "reserved"),
        ("::/128", "unspecified"),
        ("::1/128", "loopback"),
        ("64:ff9b:1::/48", "private (local-use NAT64)"),
        ("100::/64", "reserved"),
        ("2001::/23", "reserved"),
        ("2001:db8::/32", "documentation"),
        ("fc00::/7", "private"),
        ("fe80::/10", "link-local"),
        ("fec0::/10", "site-local"),
        ("ff00::/8", "multicast"),
    )
)
_ONLY_BY_ADDRESS = frozenset({"cloud metadata", "unspecified"})
"""Kinds that ``allow_private`` and host names do not open: only the address itself does
(0.0.0.0 and :: reach the local machine)."""
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_COMPAT = ipaddress.IPv6Network("::/96")
_LEGACY_NUMERIC = re.compile(r"[0-9][0-9a-fA-FxX.]*")
_WILDCARDS = frozenset("*?[")


class DestinationRefused(Exception):
    """A host or address that the rules refuse; raised before any connection to it."""

    def __init__(self, message: str, *, host: str, address: str | None = None) -> None:
        super().__init__(message)
        self.host = host
        self.address = address


def embedded_ipv4(ip: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, NAT64, compatible, 6to4), if any."""
    if isinstance(ip, ipaddress.IPv4Address):
        return None
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in _NAT64 or (ip in _COMPAT and int(ip) > 1):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip.sixtofour


def address_class(ip: IPAddress) -> str | None:
    """Why ``ip`` is not a public address ("loopback", "private", "cloud metadata", ...),
    or None when it is one."""
    if ip in METADATA_ADDRESSES:
        return "cloud metadata"
    if isinstance(ip, ipaddress.IPv6Address):
        inner = embedded_ipv4(ip)
        if inner is not None:
            kind = address_class(inner)
            # Mapped and NAT64 addresses reach exactly the IPv4 address they carry; the
            # others are refused for their IPv4 address or else judged as IPv6.
            if kind is not None or ip.ipv4_mapped is not None or ip in _NAT64:
                return kind
    for network, label in _NON_PUBLIC:
        if ip in network:
            return label
    if ip.is_multicast:
        return "multicast"
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_private or ip.is_reserved or not ip.is_global:
        return "reserved"
    return None


def literal_address(host: str) -> IPAddress | None:
    """The address ``host`` spells, if it is one: an IP literal (``[::1]``, ``127.0.0.1``)
    or a legacy numeric IPv4 form that resolvers accept (``2130706433``, ``0x7f.1``)."""
    text = host.strip("[]")
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        pass
    if _LEGACY_NUMERIC.fullmatch(text):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(text))
        except OSError:
            return None
    return None


def normalize_host(host: str) -> str:
    """``host`` as the rules compare it: lower case, no brackets, no trailing dot."""
    return host.strip().lower().strip("[]").rstrip(".")


@dataclass(frozen=True)
class HostEntry:
    """One ``allow_hosts`` / ``deny_hosts`` entry: a host pattern, an address or a network."""

    text: str
    pattern: str | None = None
    """A host name or glob, lower case, IDNA-encoded."""
    address: IPAddress | None = None
    network: IPNetwork | None = None

    @property
    def exact(self) -> bool:
        """Names one host (no wildcard) or one address."""
        if self.pattern is not None:
            return not _WILDCARDS & set(self.pattern)
        return self.address is not None

    def matches_name(self, host: str) -> bool:
        return self.pattern is not None and fnmatch.fnmatchcase(host, self.pattern)

    def matches_address(self, ip: IPAddress) -> bool:
        if self.address is not None:
            return ip == self.address
        if self.network is not None:
            return ip in self.network
        return self.pattern is not None and fnmatch.fnmatchcase(str(ip), self.pattern)


def parse_entry(text: str) -> HostEntry:
    """An entry of ``allow_hosts`` / ``deny_hosts``; ValueError says what is wrong with it."""
    value = normalize_host(text)
    if not value:
        raise ValueError("an empty host entry")
    if "://" in value:
        raise ValueError(f"{text!r} is a URL: write the host name alone")
    if "/" in value:
        try:
            return HostEntry(text, network=ipaddress.ip_network(value, strict=False))
        except ValueError:
            raise ValueError(f"{text!r} is not an IP network such as 10.0.0.0/8") from None
    try:
        return HostEntry(text, address=ipaddress.ip_address(value))
    except ValueError:
        pass
    if ":" in value:
        raise ValueError(f"{text!r}: write the host without a port")
    if not value.isascii():
        value = ".".join(_idna_label(label) for label in value.split("."))
    return HostEntry(text, pattern=value)


def _idna_label(label: str) -> str:
    if label.isascii():
        return label
    import idna  # only for a non-ASCII name in the rules

    try:
        return idna.encode(label, uts46=True).decode("ascii")
    except idna.IDNAError as exc:
        raise ValueError(f"{label!r} is not a valid host name label: {exc}") from None


class HostRules:
    """``allow_hosts`` / ``deny_hosts`` / ``allow_private``, parsed once."""

    def __init__(
        self,
        allow_hosts: Iterable[str] = (),
        deny_hosts: Iterable[str] = (),
        *,
        allow_private: bool = False,
    ) -> None:
        self.allow = tuple(parse_entry(text) for text in allow_hosts)
        self.deny = tuple(parse_entry(text) for text in deny_hosts)
        self.allow_private = allow_private

    def check_name(self, host: str) -> None:
        """The checks that need no resolution: deny and allow entries against the host as
        written, and the address check when the host spells an address."""
        name = normalize_host(host)
        literal = literal_address(name)
        addresses = _with_embedded(literal) if literal is not None else ()
        for entry in self.deny:
            if entry.matches_name(name) or any(entry.matches_address(ip) for ip in addresses):
                raise DestinationRefused(
                    f"host {name!r} is denied by [http] deny_hosts ({entry.text!r})", host=name
                )
        if self.allow and not any(
            entry.matches_name(name)
            or (entry.pattern is None and any(entry.matches_address(ip) for ip in addresses))
            for entry in self.allow
        ):
            raise DestinationRefused(f"host {name!r} is not in [http] allow_hosts", host=name)
        if literal is not None:
            self.check_address(name, literal)

    def check_address(self, host: str, ip: IPAddress) -> None:
        """Whether ``host`` may be reached at ``ip`` (one of its resolved addresses)."""
        name = normalize_host(host)
        addresses = _with_embedded(ip)
        subject = _subject(name, ip)
        for entry in self.deny:
            if any(entry.matches_address(x) for x in addresses):
                raise DestinationRefused(
                    f"{subject} is denied by [http] deny_hosts ({entry.text!r})",
                    host=name,
                    address=str(ip),
                )
        kind = address_class(ip)
        if kind is None:
            return
        named = any(entry.address in addresses for entry in self.allow)
        if kind in _ONLY_BY_ADDRESS:
            if named:
                return
            raise DestinationRefused(
                f"{subject} is {_article(kind)} {kind} address: refused unless [http] "
                f'allow_hosts lists the address itself ("{ip}")',
                host=name,
                address=str(ip),
            )
        if (
            self.allow_private
            or named
            or any(
                entry.network is not None and any(x in entry.network for x in addresses)
                for entry in self.allow
            )
            or any(entry.exact and entry.matches_name(name) for entry in self.allow)
        ):
            return
        raise DestinationRefused(
            f"{subject} is {_article(kind)} {kind} address: only public addresses are reached unless "
            f'[http] allow_hosts names the host (allow_hosts = ["{name}"]) or allow_private = true',
            host=name,
            address=str(ip),
        )

    def check_addresses(self, host: str, addresses: Sequence[IPAddress]) -> None:
        """Every address must pass: one refused address refuses the host."""
        for ip in addresses:
            self.check_address(host, ip)


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def _with_embedded(ip: IPAddress) -> tuple[IPAddress, ...]:
    inner = embedded_ipv4(ip)
    return (ip,) if inner is None else (ip, inner)


def _subject(name: str, ip: IPAddress) -> str:
    """``host 127.0.0.1`` or ``host 'intranet.test' resolves to 10.0.0.7, which``."""
    inner = embedded_ipv4(ip)
    try:
        spelled = ipaddress.ip_address(name) == ip  # an IP literal, spelled any way
    except ValueError:
        spelled = False
    shown = name if spelled else str(ip)
    if inner is not None:
        shown += f" (IPv4 {inner})"
    if spelled:
        return f"host {shown}"
    return f"host {name!r} resolves to {shown}, which"

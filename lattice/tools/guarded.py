"""The connection side of the network guard: an httpcore backend and an httpx transport
that connect only to addresses :class:`~lattice.tools.netguard.HostRules` allow.

Kept apart from the rules because it needs httpx, httpcore and anyio, which
:mod:`lattice.tools.http` imports only when a run makes its first request (the rules
are checked when the configuration is read).
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
from collections.abc import Iterable

import anyio
import anyio.to_thread
import httpcore
import httpx

from lattice.tools.netguard import DestinationRefused, HostRules, IPAddress


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """An httpcore network backend that connects only to addresses the rules allow.

    ``connect_tcp`` resolves the host, checks every address (one refused address refuses
    the connection, raising :class:`DestinationRefused`), then connects to the checked
    addresses in the resolver's order until one answers. Connection pooling is per host
    name, so a reused connection is one that was checked when it was opened.
    """

    def __init__(self, rules: HostRules, inner: httpcore.AsyncNetworkBackend | None = None):
        self.rules = rules
        self.inner = inner if inner is not None else httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        self.rules.check_name(host)
        deadline = None if timeout is None else anyio.current_time() + timeout
        addresses = await self.resolve(host, port, timeout)
        self.rules.check_addresses(host, addresses)
        failure: Exception | None = None
        for ip in addresses:
            left = None if deadline is None else max(deadline - anyio.current_time(), 0.0)
            try:
                return await self.inner.connect_tcp(
                    str(ip),
                    port,
                    timeout=left,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
        assert failure is not None  # resolve() returns at least one address
        raise failure

    async def resolve(self, host: str, port: int, timeout: float | None) -> list[IPAddress]:
        """The addresses of ``host``, in the resolver's order, without duplicates."""
        try:
            with anyio.fail_after(timeout):
                # The system resolver in a worker thread, as asyncio's getaddrinfo does;
                # ``host`` is already ASCII (httpx IDNA-encodes it).
                found = await anyio.to_thread.run_sync(
                    socket.getaddrinfo, host, port, 0, socket.SOCK_STREAM, abandon_on_cancel=True
                )
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(f"resolving {host!r} timed out") from exc
        except (OSError, UnicodeError) as exc:
            raise httpcore.ConnectError(f"cannot resolve {host!r}: {exc}") from exc
        addresses: dict[IPAddress, None] = {}
        for _family, _type, _proto, _name, sockaddr in found:
            addresses[ipaddress.ip_address(sockaddr[0])] = None
        if not addresses:
            raise httpcore.ConnectError(f"{host!r} resolves to no address")
        return list(addresses)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise DestinationRefused("Unix sockets are not reachable from httpRequest", host=path)

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


class GuardedTransport(httpx.AsyncHTTPTransport):
    """httpx's own transport (no proxies) whose connections go through :class:`GuardedBackend`.

    Proxies from the environment are not used: a proxy would resolve and connect for us,
    out of reach of the address check.
    """

    def __init__(
        self,
        rules: HostRules,
        *,
        verify: ssl.SSLContext | bool = True,
        limits: httpx.Limits | None = None,
        backend: httpcore.AsyncNetworkBackend | None = None,
    ) -> None:
        context = httpx.create_ssl_context(verify=verify)
        limits = limits or httpx.Limits()
        super().__init__(verify=context, limits=limits)
        # httpx 0.28's AsyncHTTPTransport takes no network backend; its requests all go
        # through ``self._pool``, so build that pool again with ours. Should a later httpx
        # keep its pool elsewhere, fail here rather than send requests unguarded.
        if not isinstance(getattr(self, "_pool", None), httpcore.AsyncConnectionPool):
            raise RuntimeError(
                f"httpx {httpx.__version__}: AsyncHTTPTransport keeps no connection pool in "
                "_pool, so httpRequest cannot guard its connections"
            )
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=context,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=GuardedBackend(rules, backend),
        )

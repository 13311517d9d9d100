"""The guard in front of every route of ``lattice serve`` (pure ASGI): the bearer token,
the body size limit, and, without a token, loopback names only."""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Callable, Mapping
from typing import Any

from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lattice.server.api_docs import is_docs_asset
from lattice.server.panel_api import is_public
from lattice.server.services import is_webhook


def _public(path: str) -> bool:
    """Files that hold no run data: the panel's page and files, the API docs' assets."""
    return is_public(path) or is_docs_asset(path)


def _loopback_name(host: str) -> bool:
    """Whether ``host`` (a Host header's name, or an Origin's, without the port) names
    this machine's loopback: ``localhost``, ``127.0.0.0/8``, ``[::1]``."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.removeprefix("[").removesuffix("]")).is_loopback
    except ValueError:
        return False


def _host_name(authority: str) -> str:
    """The name of ``host[:port]`` (``[v6]:port`` keeps its brackets' content)."""
    if authority.startswith("["):
        return authority.partition("]")[0] + "]"
    return authority.rpartition(":")[0] if ":" in authority else authority


def _foreign(headers: Mapping[bytes, bytes]) -> tuple[int, str, str] | None:
    """Why a request to a gateway without a token is refused: its Host or Origin is not
    loopback (a web page whose name was rebound to 127.0.0.1), else None."""
    host = headers.get(b"host", b"").decode("latin-1").strip()
    if not _loopback_name(_host_name(host)):
        return 421, "misdirected_request", f"this server answers loopback names only, not {host!r}"
    origin = headers.get(b"origin")
    if origin is not None:
        text = origin.decode("latin-1").strip()
        scheme, sep, rest = text.partition("://")
        if (
            not sep
            or scheme.lower() not in ("http", "https")
            or not _loopback_name(_host_name(rest.partition("/")[0]))
        ):
            return 403, "forbidden_origin", f"requests from {text!r} are refused"
    return None


class Guard:
    """Pure ASGI, in front of everything: the bearer token (every route but ``/healthz``,
    the panel's page and static files and the API docs' assets, which hold no run data,
    and the webhooks, which check their own HMAC signature: a sender such as GitHub
    cannot send a bearer token) and the body size limit (413 before the body is read past the limit).
    Without a token, a request whose Host or Origin is not a loopback name is refused
    (``421``/``403``; the webhooks and ``/healthz`` excepted): loopback is then the only
    lock, and a web page whose name was rebound to 127.0.0.1 must not pick it."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str | None,
        max_body: int,
        respond: Callable[[int, dict[str, Any], Mapping[str, str]], Response],
    ) -> None:
        self.app = app
        self.expected = token.encode() if token else None
        self.max_body = max_body
        self.respond = respond

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":  # no route takes one; refused before any route runs
            await receive()  # websocket.connect
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        foreign = (
            _foreign(headers)
            if self.expected is None
            and scope["path"] != "/healthz"
            and not (scope["method"] == "POST" and is_webhook(scope["path"]))
            else None
        )
        if foreign is not None:
            status, error, said = foreign
            await self.respond(status, {"error": error, "message": said}, {})(scope, receive, send)
            return
        if (
            self.expected is not None
            and scope["path"] != "/healthz"
            and not (scope["method"] in ("GET", "HEAD") and _public(scope["path"]))
            and not (scope["method"] == "POST" and is_webhook(scope["path"]))
        ):
            given = headers.get(b"authorization", b"")
            scheme, _, credentials = given.partition(b" ")
            # the scheme is case-insensitive (RFC 9110); the token is compared in constant time
            if scheme.lower() != b"bearer" or not hmac.compare_digest(
                credentials.strip(), self.expected
            ):
                error = "missing_token" if not given else "invalid_token"
                await self.respond(
                    401,
                    {"error": error, "message": "this server needs Authorization: Bearer <token>"},
                    {"WWW-Authenticate": "Bearer"},
                )(scope, receive, send)
                return
        if scope["method"] in ("POST", "PUT", "PATCH"):
            length = headers.get(b"content-length")
            if length is not None and (not length.isdigit() or int(length) > self.max_body):
                await self._too_large(scope, receive, send)
                return
            chunks: list[bytes] = []
            size = 0
            more = True
            while more:
                message = await receive()
                if message["type"] != "http.request":
                    break
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > self.max_body:
                    await self._too_large(scope, receive, send)
                    return
                chunks.append(chunk)
                more = message.get("more_body", False)
            body = b"".join(chunks)
            replayed = False

            async def replay() -> Message:
                nonlocal replayed
                if not replayed:
                    replayed = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()

            await self.app(scope, replay, send)
            return
        await self.app(scope, receive, send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.respond(
            413,
            {
                "error": "body_too_large",
                "message": f"the request body is over the limit of {self.max_body} bytes",
            },
            {"Connection": "close"},
        )(scope, receive, send)

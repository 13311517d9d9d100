"""Let respx mock the ``httpx2`` transport that the openai (3.x) and anthropic (2.x) SDKs use.

respx 0.23 patches ``httpx`` only; the SDKs moved to its successor ``httpx2``. Importing
this module registers a respx mocker named ``"httpx2"``, so a test writes::

    with respx.mock(base_url="https://api.openai.com/v1", using="httpx2") as router:
        route = router.post("/chat/completions").respond(200, json={...})

and keeps everything respx offers (routes, ``call_count``, ``calls.last.request``,
``side_effect``). Each ``httpx2`` request is turned into an ``httpx`` request for the
routers; the ``httpx`` response comes back as an ``httpx2`` response, and an ``httpx``
transport error raised by a side effect (``httpx.ReadTimeout``, ``httpx.ConnectError`` …)
is raised as the ``httpx2`` error of the same name, which is what the SDKs catch.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import httpx
import httpx2
from respx.mocks import Mocker

USING = "httpx2"


def _to_httpx(request: httpx2.Request) -> httpx.Request:
    return httpx.Request(
        request.method,
        str(request.url),
        headers=list(request.headers.multi_items()),
        content=request.content,
    )


def _to_httpx2(response: httpx.Response) -> httpx2.Response:
    return httpx2.Response(
        response.status_code,
        headers=list(response.headers.multi_items()),
        content=response.content,
    )


def _to_httpx2_error(exc: httpx.HTTPError) -> Exception:
    kind = getattr(httpx2, type(exc).__name__, None)
    if not (isinstance(kind, type) and issubclass(kind, httpx2.TransportError)):
        kind = httpx2.TransportError
    return kind(str(exc))


class HTTPX2Mocker(Mocker):
    """A respx mocker for ``httpx2`` clients: every request goes to the active respx routers."""

    name = USING
    targets = ["httpx2._client.Client", "httpx2._client.AsyncClient"]  # noqa: RUF012
    target_methods = ["_transport_for_url"]  # noqa: RUF012

    @classmethod
    def mock(cls, spec: Callable[..., Any]) -> Callable[..., Any]:
        def _transport_for_url(self: Any, *args: Any, **kwargs: Any) -> httpx2.MockTransport:
            if inspect.iscoroutinefunction(self.request):

                async def handle_async(request: httpx2.Request) -> httpx2.Response:
                    try:
                        response = await cls.async_handler(_to_httpx(request))
                    except httpx.TransportError as exc:
                        raise _to_httpx2_error(exc) from exc
                    await response.aread()
                    return _to_httpx2(response)

                return httpx2.MockTransport(handle_async)

            def handle(request: httpx2.Request) -> httpx2.Response:
                try:
                    response = cls.handler(_to_httpx(request))
                except httpx.TransportError as exc:
                    raise _to_httpx2_error(exc) from exc
                response.read()
                return _to_httpx2(response)

            return httpx2.MockTransport(handle)

        return _transport_for_url

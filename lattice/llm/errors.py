"""Helpers shared by the SDK adapters for mapping errors at the boundary."""

from __future__ import annotations

import asyncio
import email.utils
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from lattice.errors import LatticeRunError


def retry_after_seconds(headers: Mapping[str, str] | None) -> float | None:
    """Seconds from ``retry-after-ms`` / ``Retry-After`` (seconds or an HTTP date), if present."""
    if not headers:
        return None
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return float(millis) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        parsed = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None  # unparsable: fall back to the policy's own backoff
    return max(0.0, parsed.timestamp() - time.time())


class LoopLocalClients:
    """One SDK client per event loop: async HTTP clients cannot move between loops, and each
    ``Runner.run`` call runs its own loop."""

    def __init__(self, factory: Callable[[], Any]) -> None:
        self._factory = factory
        self._by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = (
            weakref.WeakKeyDictionary()
        )

    def get(self) -> Any:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return self._factory()
        client = self._by_loop.get(loop)
        if client is None:
            client = self._by_loop[loop] = self._factory()
        return client

    async def aclose_current(self) -> None:
        """Close the running loop's client, if one was made (its connections die with the loop)."""
        client = self._by_loop.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.close()


def provider_error(
    error_type: str, message: str, exc: Exception, node_id: str | None, **details: Any
) -> LatticeRunError:
    """A LatticeRunError carrying the SDK exception's class name; chain it with ``from exc``."""
    clean = {k: v for k, v in details.items() if v is not None}
    return LatticeRunError(
        message,
        error_type=error_type,
        node_id=node_id,
        details={"sdk_error": type(exc).__name__, **clean},
    )

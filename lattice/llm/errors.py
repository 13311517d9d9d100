"""Helpers shared by the SDK adapters for mapping errors at the boundary."""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import ModuleType
from typing import Any

from lattice.errors import ErrorType, LatticeRunError
from lattice.masking import scrub


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
    import email.utils  # an HTTP date is rare; the email package costs an import

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


def map_sdk_error(
    sdk: ModuleType,
    exc: Exception,
    *,
    where: str,
    key_variable: str,
    is_context_length: Callable[[Exception], bool],
    node_id: str | None,
) -> LatticeRunError:
    """Translate an exception of the ``openai`` or ``anthropic`` SDK (both share these
    class names) into a LatticeRunError, most specific first."""
    if isinstance(exc, sdk.APITimeoutError):
        return provider_error(ErrorType.TIMEOUT_ERROR, f"{where} timed out", exc, node_id)
    if isinstance(exc, sdk.APIConnectionError):
        return provider_error(
            ErrorType.PROVIDER_ERROR, f"{where}: cannot connect ({exc})", exc, node_id
        )
    if isinstance(exc, sdk.RateLimitError):
        return provider_error(
            ErrorType.RATE_LIMIT_ERROR,
            f"{where} rate limit: {exc.message}",
            exc,
            node_id,
            retry_after=retry_after_seconds(exc.response.headers),
        )
    if isinstance(exc, sdk.AuthenticationError | sdk.PermissionDeniedError):
        return provider_error(
            ErrorType.API_KEY_ERROR,
            f"{where} refused the credentials ({exc.status_code}); check {key_variable}",
            exc,
            node_id,
        )
    if isinstance(exc, sdk.APIStatusError):
        body = str(exc.message)
        if is_context_length(exc):
            return provider_error(
                ErrorType.CONTEXT_LENGTH_ERROR,
                f"{where}: the prompt is too long: {body}",
                exc,
                node_id,
            )
        if exc.status_code >= 500:
            return provider_error(
                ErrorType.PROVIDER_ERROR,
                f"{where} server error {exc.status_code}: {body}",
                exc,
                node_id,
            )
        return provider_error(
            ErrorType.INVALID_REQUEST,
            f"{where} rejected the request ({exc.status_code}): {body}",
            exc,
            node_id,
            status=exc.status_code,
        )
    return provider_error(
        ErrorType.PROVIDER_ERROR, f"{where}: {type(exc).__name__}: {exc}", exc, node_id
    )


def without_keys(exc: BaseException, keys: Iterable[str]) -> BaseException | None:
    """None when neither ``exc`` nor an exception it was raised from quotes one of
    ``keys`` (API keys); else what to raise ``from None`` in its place (the exceptions it
    was raised from are dropped, since their text quotes a key): a LatticeRunError with
    the keys taken out of its message and details, and for another exception an
    ``internal_error`` with its cleaned text."""
    keys = [k for k in keys if k]
    if not keys or not any(scrub(text, keys) != text for text in _chain_texts(exc)):
        return None
    if isinstance(exc, LatticeRunError):
        exc.message = scrub(exc.message, keys)
        exc.args = (exc.message, *exc.args[1:])
        exc.details = _scrubbed(exc.details, keys)
        return exc
    return LatticeRunError(
        f"{type(exc).__name__}: {scrub(str(exc), keys)}", error_type=ErrorType.INTERNAL_ERROR
    )


def _chain_texts(exc: BaseException) -> Iterator[str]:
    """The texts of ``exc`` and of the exceptions it was raised from or during."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield str(current)
        yield repr(current.args)
        if isinstance(current, LatticeRunError):
            yield repr(current.details)
        current = current.__cause__ or current.__context__


def _scrubbed(value: Any, keys: list[str]) -> Any:
    if isinstance(value, str):
        return scrub(value, keys)
    if isinstance(value, dict):
        return {k: _scrubbed(v, keys) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_scrubbed(v, keys) for v in value]
    return value

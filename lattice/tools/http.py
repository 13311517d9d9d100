"""httpRequest TOOL_CALLs over httpx: one pooled AsyncClient per run, closed when the run ends.

URL templates: a value inserted into the path is percent-encoded except for ``/`` and may
not make a ``.`` or ``..`` segment; a value in the query string (or anywhere else) is
percent-encoded whole; a template that STARTS the URL (``{{ $in.base }}/items``) is
inserted as it is and must yield an absolute http(s) URL. Query, headers and JSON body
are rendered from templates; header values may not hold line breaks.

Where requests may go is decided by :mod:`lattice.tools.netguard`: the URL's host is
checked against ``[http] allow_hosts`` / ``deny_hosts`` before anything is sent, and the
connection itself is made by a network backend that resolves the host, refuses
non-public addresses unless allowed, and connects only to addresses it checked.

Responses bigger than the cap are refused; requests ask for no content encoding (unless
the node sets Accept-Encoding), and a gzip or deflate body is inflated only as far as the
cap allows, so the cap bounds the decoded body (other encodings are refused). Status
>= 400 is an ``http_error`` (status + body excerpt); 429, 5xx, timeouts and connection
errors are retried with backoff (Retry-After honoured) before failing, at most
``max_retries`` times in all per call.
Refused destinations and requests that cannot be built fail at once (``tool_error``).
The timeout (``timeoutMs``, else the policy's default) is a deadline for each attempt as
a whole: connecting, sending and reading the whole body.

httpx (with the guarded transport of :mod:`lattice.tools.guarded`), the host rules and
jsonschema are imported when a run first needs them (lazy imports of heavy modules, so that importing
the runtime stays fast: httpx alone, which pulls in rich and click, cost about 95 ms).
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote, urlsplit

from lattice.contracts.policies import RetrySettings
from lattice.errors import LatticeRunError
from lattice.ir.templates import Ref, ValueTemplate, is_secret, parse_template, to_text
from lattice.llm.errors import retry_after_seconds
from lattice.masking import find, forms_pattern, replace
from lattice.schemas import schema_errors, schema_validator, uses_patterns
from lattice.text import unicode_value

if TYPE_CHECKING:
    import httpx
    from jsonschema.protocols import Validator

    from lattice.ir.models import ToolCallOp
    from lattice.tools.netguard import DestinationRefused, HostRules

RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})


@dataclass(frozen=True)
class HttpPolicy:
    """Where requests may go and how much they may bring back.

    By default only public addresses are reached; ``allow_hosts`` entries that name a host
    or address exactly (or a network) and ``allow_private`` open non-public ones (see
    :mod:`lattice.tools.netguard`). An entry that is not a host, address or network raises
    ValueError here.
    """

    allow_hosts: Sequence[str] = ()
    deny_hosts: Sequence[str] = ()
    allow_private: bool = False
    max_response_bytes: int = 5_000_000
    default_timeout_s: float = 30.0
    transport: httpx.AsyncBaseTransport | None = field(default=None, compare=False)
    """Injectable transport (``httpx.MockTransport`` in tests). It replaces the guarded
    one, so only the checks on the URL itself (:meth:`check_host`) apply."""

    def __post_init__(self) -> None:
        if self.allow_hosts or self.deny_hosts:
            _ = self.rules  # entries are checked now, not at the first request

    @functools.cached_property
    def rules(self) -> HostRules:
        """The parsed rules (made on first use, or when the policy is made if it lists hosts)."""
        from lattice.tools.netguard import HostRules

        return HostRules(self.allow_hosts, self.deny_hosts, allow_private=self.allow_private)

    def check_host(self, url: str, shown: str | None = None) -> None:
        """Refuse, before anything is sent, a URL that is not absolute http(s) or whose host
        (or the address it spells) the rules refuse; resolved addresses are checked when
        connecting. Messages name ``shown`` (the URL with its secrets left as
        ``{{ $secrets.NAME }}``) when given."""
        import httpx

        shown = url if shown is None else shown
        try:
            parsed = httpx.URL(url)
        except httpx.InvalidURL as exc:
            raise LatticeRunError(
                f"{_safe_url(shown)} cannot be sent: {exc}", error_type="tool_error"
            ) from exc
        host = parsed.raw_host.decode("ascii")
        if parsed.scheme not in ("http", "https") or not host:
            raise LatticeRunError(
                f"not an absolute http(s) URL: {_safe_url(shown)!r}", error_type="tool_error"
            )
        if parsed.port is not None and not 0 < parsed.port < 65536:
            raise LatticeRunError(
                f"{_safe_url(shown)} cannot be sent: port {parsed.port} is out of range",
                error_type="tool_error",
            )
        from lattice.tools.netguard import DestinationRefused

        try:
            self.rules.check_name(host)
        except DestinationRefused as exc:
            raise _refused(exc) from exc

    def transport_for_run(self) -> httpx.AsyncBaseTransport:
        """The injected transport, else a guarded one (a new pool for every run)."""
        if self.transport is not None:
            return self.transport
        from lattice.tools.guarded import GuardedTransport

        return GuardedTransport(self.rules)


def _refused(exc: DestinationRefused) -> LatticeRunError:
    details: dict[str, Any] = {"host": exc.host}
    if exc.address is not None:
        details["address"] = exc.address
    return LatticeRunError(str(exc), error_type="tool_error", details=details)


class HttpClientPool:
    """The run's one ``httpx.AsyncClient``, created on first use."""

    def __init__(self, policy: HttpPolicy) -> None:
        self.policy = policy
        self._client: httpx.AsyncClient | None = None

    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            import httpx

            # Redirects are not followed: a Location header is the server's choice of
            # destination, and it is returned to the document as part of the result.
            self._client = httpx.AsyncClient(
                transport=self.policy.transport_for_run(), follow_redirects=False
            )
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def _excerpt(text: str, limit: int = 500) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


class UrlTemplate:
    """A URL template and the rules for the values it inserts.

    Where a value lands decides how it is written: in the path it is percent-encoded
    except for ``/`` (``pallets/flask`` stays two segments); in the query string, the
    fragment or the host it is percent-encoded whole. A value that starts the URL is
    inserted as it is and must be an absolute http(s) URL (a base URL from an input); one
    ``/`` is dropped where a base ending in ``/`` meets a path starting with one. The
    rendered path may not have ``.`` or ``..`` segments.

    Error messages never quote a value read from ``$secrets``: :meth:`render` also returns
    the URL as it may be shown, with each secret left as ``{{ $secrets.NAME }}``.
    """

    def __init__(self, source: str) -> None:
        self.template = parse_template(source)
        parts = self.template.parts
        first = next((i for i, p in enumerate(parts) if not _blank(p)), None)
        self.base_index = first if first is not None and not isinstance(parts[first], str) else None

    def render(self, resolve: Callable[[Ref], Any]) -> tuple[str, str]:
        """The URL, and the URL as it may be shown (in error messages): the same, except
        that each value read from ``$secrets`` is left as its ``{{ $secrets.NAME }}``."""
        parts = self.template.parts
        base = self.base_index
        out = shown = ""
        for index in range(base or 0, len(parts)):  # blanks before a base URL are dropped
            part = parts[index]
            if isinstance(part, str):
                if base is not None and index == base + 1 and out.endswith("/"):
                    part = part.removeprefix("/")
                    if not shown.endswith("/"):
                        shown += "/"
                out += part
                shown += part
                continue
            if index == base:
                value = self._base(to_text(resolve(part)), part, followed=index + 1 < len(parts))
            else:
                safe = "/" if _component(out) == "path" else ""
                value = quote(to_text(resolve(part)), safe=safe)
            out += value
            shown += f"{{{{ {part.text} }}}}" if is_secret(part) else value
        _check_path(out, shown)
        return out, shown

    def _base(self, value: str, ref: Ref, *, followed: bool) -> str:
        value = value.strip()
        try:
            parts = urlsplit(value)
        except ValueError:
            parts = None
        # A secret's value is never quoted: the message may be stored and sent on.
        shown = "(a secret: not shown)" if is_secret(ref) else repr(_excerpt(value, 80))
        if parts is None or parts.scheme.lower() not in ("http", "https") or not parts.netloc:
            raise LatticeRunError(
                f"the URL starts with {{{{ {ref.text} }}}}, so that value must be an absolute "
                f"http(s) URL; it is {shown}",
                error_type="tool_error",
                details={"ref": ref.text},
            )
        if followed and (parts.query or parts.fragment or value.endswith(("?", "#"))):
            raise LatticeRunError(
                f"{{{{ {ref.text} }}}} starts the URL and more follows it, so it may not have "
                f"a query string or fragment: {shown}",
                error_type="tool_error",
                details={"ref": ref.text},
            )
        return value


def _blank(part: str | Ref) -> bool:
    return isinstance(part, str) and not part.strip()


def _component(prefix: str) -> str:
    """Which part of the URL text written so far ends in: path, query, fragment or other
    (scheme or host). Inserted values cannot add ``?`` or ``#``, so the prefix tells."""
    start = prefix.find("://")
    if start < 0:
        return "other"
    rest = prefix[start + 3 :]
    if "#" in rest:
        return "fragment"
    if "?" in rest:
        return "query"
    return "path" if "/" in rest else "other"


def _url_path(url: str) -> str | None:
    start = url.find("://")
    rest = url[start + 3 :] if start >= 0 else url
    slash = rest.find("/")
    if slash < 0:
        return None
    return re.split(r"[?#]", rest[slash:], maxsplit=1)[0]


def _check_path(url: str, shown: str) -> None:
    """Refuse a ``.`` or ``..`` segment in ``url``'s path; the message quotes the path of
    ``shown`` (secrets left as their references), never ``url``'s."""
    path = _url_path(url)
    if path is None:
        return
    for segment in path.split("/"):
        if unquote(segment) in (".", ".."):
            named = _url_path(shown) or ""
            raise LatticeRunError(
                f"the URL path {_excerpt(named, 120)!r} has a {unquote(segment)!r} segment; "
                "URL paths may not contain . or .. segments",
                error_type="tool_error",
            )


def _check_headers(headers: dict[str, str]) -> None:
    for name, value in headers.items():
        if not _HEADER_NAME.fullmatch(name):
            raise LatticeRunError(
                f"header name {name!r} is not a valid HTTP header name",
                error_type="tool_error",
                details={"header": name},
            )
        if any(c in value for c in "\r\n\0"):
            raise LatticeRunError(  # the value itself is not shown: it may be a secret
                f"the value of header {name!r} contains a line break or NUL (CR, LF or NUL), "
                "which could smuggle extra headers; refused",
                error_type="tool_error",
                details={"header": name},
            )


class HttpExecutor:
    """Compiled once per op: URL, header, query and body templates and the output validator."""

    def __init__(
        self,
        op: ToolCallOp,
        retry: RetrySettings,
        sleep: Callable[[float], Any],
        *,
        formats: bool = True,
    ) -> None:
        assert op.call.tool == "http"
        self.op = op
        self.call = op.call
        self.url = UrlTemplate(self.call.url)
        self.headers = {k: ValueTemplate(v) for k, v in self.call.headers.items()}
        self.query = ValueTemplate(self.call.query)
        self.body = ValueTemplate(self.call.body) if self.call.body is not None else None
        self.validator: Validator | None = None
        self.slow_checks = uses_patterns(op.output_schema)
        if op.output_schema:
            self.validator = schema_validator(op.output_schema, formats=formats)
        self.retry = retry
        self.sleep = sleep

    def render(self, resolve: Callable[[Ref], Any]) -> tuple[dict[str, Any], str]:
        """The request's arguments for httpx, and its URL as error messages may show it."""
        url, shown = self.url.render(resolve)
        headers = {k: to_text(t.render(resolve)) for k, t in self.headers.items()}
        _check_headers(headers)
        if not any(name.lower() == "accept-encoding" for name in headers):
            headers["Accept-Encoding"] = "identity"  # a compressed body is decoded, and capped
        query = {k: to_text(v) for k, v in (self.query.render(resolve) or {}).items()}
        request: dict[str, Any] = {
            "method": self.call.method,
            "url": url,
            "headers": headers,
            "params": query,
        }
        if self.body is not None:
            body = self.body.render(resolve)
            if isinstance(body, str):
                request["content"] = body.encode("utf-8")
            else:
                request["json"] = body
        return request, shown

    async def run(self, resolve: Callable[[Ref], Any], pool: HttpClientPool) -> dict[str, Any]:
        """Send the request (retrying what may be retried) and return status, headers and
        body. A failure's message and details never hold a value read from ``$secrets``:
        messages are written without them, and whatever a library's own message quoted is
        masked as ``{{ $secrets.NAME }}`` (the error is stored in ``$vars`` when the node
        has a ``failed`` route, and a later node may send it anywhere)."""
        secrets: dict[str, str] = {}

        def resolving(ref: Ref) -> Any:
            value = resolve(ref)
            if is_secret(ref):
                secrets[to_text(value)] = f"{{{{ {ref.text} }}}}"
            return value

        try:
            request, shown = self.render(resolving)
            return await self._run(request, shown, pool)
        except LatticeRunError as exc:
            if secrets:
                _mask(exc, secrets)
            raise

    async def _run(
        self, request: dict[str, Any], shown: str, pool: HttpClientPool
    ) -> dict[str, Any]:
        pool.policy.check_host(request["url"], shown)
        timeout = (
            (self.call.timeout_ms / 1000) if self.call.timeout_ms else pool.policy.default_timeout_s
        )
        where = f"{request['method']} {_safe_url(shown)}"
        retries = 0  # in all, whatever failed: a timeout then a 503 are two retries
        while True:
            try:
                return await self._send(pool, request, timeout, where)
            except LatticeRunError as exc:
                if not exc.details.get("retryable", False) or retries >= self.retry.max_retries:
                    if retries:
                        exc.details["retries"] = retries
                    raise
                delay = self.retry.delay(retries, exc.details.get("retry_after"))
                retries += 1
                await self.sleep(delay)

    # long: one request through the guard, the size limit and the decoding, in the order they happen
    async def _send(
        self, pool: HttpClientPool, request: dict[str, Any], timeout: float, where: str
    ) -> dict[str, Any]:
        import httpx

        from lattice.tools.netguard import DestinationRefused

        limit = pool.policy.max_response_bytes
        try:
            # httpx's timeout bounds each connect, write and read on its own (a server
            # sending a byte a second never trips it): the deadline bounds the whole call.
            async with (
                asyncio.timeout(timeout),
                pool.client().stream(timeout=timeout, **_with_query(request)) as response,
            ):
                if response.is_stream_consumed:  # built in memory (a MockTransport's)
                    body = _Body(limit, where, "")
                    chunks = response.aiter_bytes()
                else:  # decoded by _Body, within the cap
                    body = _Body(limit, where, response.headers.get("content-encoding", ""))
                    chunks = response.aiter_raw()
                async for chunk in chunks:
                    body.feed(chunk)
                raw = body.finish()
        except DestinationRefused as exc:  # from the guarded backend, before connecting
            raise _refused(exc) from exc
        except (
            httpx.InvalidURL,
            httpx.UnsupportedProtocol,
            httpx.LocalProtocolError,  # a request h11 refuses to write
            UnicodeEncodeError,
        ) as exc:
            raise LatticeRunError(
                f"{where} cannot be sent: {exc}",
                error_type="tool_error",
            ) from exc
        except (httpx.TimeoutException, TimeoutError) as exc:
            raise LatticeRunError(
                f"{where} timed out after {timeout:g}s",
                error_type="timeout_error",
                details={"retryable": True},
            ) from exc
        except httpx.HTTPError as exc:
            raise LatticeRunError(
                f"{where} failed: {type(exc).__name__}: {exc}",
                error_type="http_error",
                details={"retryable": True},
            ) from exc
        text = raw.decode(response.encoding or "utf-8", errors="replace")
        if response.status_code >= 400:
            raise LatticeRunError(
                f"{where} returned {response.status_code}: {_excerpt(text, 200)}",
                error_type="http_error",
                details={
                    "status": response.status_code,
                    "body_excerpt": _excerpt(text),
                    "retryable": response.status_code in RETRYABLE_STATUS,
                    "retry_after": retry_after_seconds(response.headers),
                },
            )
        body = self._decode(text, response.headers.get("content-type", ""))
        if self.validator is not None:
            if self.slow_checks:  # a slow pattern must not hold up the loop's other runs
                errors = await asyncio.to_thread(schema_errors, self.validator, body)
            else:
                errors = schema_errors(self.validator, body)
            errors.sort(key=lambda e: list(e.absolute_path))
            if errors:
                violations = [
                    {
                        "pointer": "/" + "/".join(str(p) for p in e.absolute_path),
                        "message": e.message,
                    }
                    for e in errors
                ]
                raise LatticeRunError(
                    "the response body does not match the node's outputSchema: "
                    + "; ".join(f"{v['pointer']}: {v['message']}" for v in violations[:5]),
                    error_type="schema_error",
                    details={"violations": violations},
                )
        return {"status": response.status_code, "headers": dict(response.headers), "body": body}

    def _decode(self, text: str, content_type: str) -> Any:
        """The body as the node's result; a lone surrogate JSON spells ("\\ud800")
        becomes U+FFFD, so that no run-folder write fails on it."""
        kind = self.call.response_type
        if kind == "text" or (kind == "auto" and "json" not in content_type.lower()):
            return text
        try:
            return unicode_value(json.loads(text)) if text.strip() else None
        except json.JSONDecodeError as exc:
            if kind == "json":
                raise LatticeRunError(
                    f"the response is not JSON: {exc.msg}",
                    error_type="http_error",
                    details={"body_excerpt": _excerpt(text)},
                ) from exc
            return text


class _Body:
    """A response body as it arrives, decoded (gzip or deflate) and refused as soon as it
    is bigger than ``limit``: a compressed chunk is inflated at most as far as the cap
    allows, so a small body that inflates to gigabytes never does."""

    def __init__(self, limit: int, where: str, encoding: str) -> None:
        self.limit = limit
        self.where = where
        self.chunks: list[bytes] = []
        self.size = 0
        codings = [c.strip().lower() for c in encoding.split(",")]
        codings = [c for c in codings if c and c != "identity"]
        self.inflater: zlib._Decompress | None = None
        self.raw_deflate = False
        """Deflate without the zlib header: tried when the first chunk is not zlib data."""
        if not codings:
            return
        if len(codings) > 1 or codings[0] not in ("gzip", "x-gzip", "deflate"):
            raise LatticeRunError(
                f"{where}: the response is encoded as {encoding!r}; Lattice decodes only "
                "gzip and deflate (it asks for no encoding unless the node sets "
                "Accept-Encoding)",
                error_type="tool_error",
                details={"content_encoding": encoding},
            )
        if codings[0] == "deflate":
            self.inflater = zlib.decompressobj()
            self.raw_deflate = True
        else:
            self.inflater = zlib.decompressobj(zlib.MAX_WBITS | 16)

    def feed(self, data: bytes) -> None:
        if self.inflater is None:
            self._take(data)
            return
        while data:
            try:
                out = self.inflater.decompress(data, self.limit - self.size + 1)
            except zlib.error as exc:
                if self.raw_deflate and not self.size:
                    self.raw_deflate = False
                    self.inflater = zlib.decompressobj(-zlib.MAX_WBITS)
                    continue
                raise self._undecodable(exc) from exc
            self.raw_deflate = False
            self._take(out)
            data = self.inflater.unconsumed_tail

    def finish(self) -> bytes:
        if self.inflater is not None:
            try:
                self._take(self.inflater.flush(self.limit - self.size + 1))
            except zlib.error as exc:
                raise self._undecodable(exc) from exc
        return b"".join(self.chunks)

    def _take(self, data: bytes) -> None:
        self.size += len(data)
        if self.size > self.limit:
            raise LatticeRunError(
                f"{self.where}: response larger than {self.limit} bytes",
                error_type="tool_error",
                details={"limit": self.limit},
            )
        self.chunks.append(data)

    def _undecodable(self, exc: zlib.error) -> LatticeRunError:
        return LatticeRunError(
            f"{self.where}: the response body cannot be decoded as its Content-Encoding "
            f"says: {exc}",
            error_type="http_error",
        )


def _with_query(request: dict[str, Any]) -> dict[str, Any]:
    """``request`` with its ``params`` merged into the URL's own query string (httpx's
    ``params=`` would replace that query string; a ``query`` key wins over the same name)."""
    request = dict(request)
    params = request.pop("params")
    if params:
        import httpx

        request["url"] = httpx.URL(request["url"]).copy_merge_params(params)
    return request


def _safe_url(url: str) -> str:
    """The URL without its query string and fragment (which may carry tokens) and without
    the user and password of its authority."""
    try:
        parts = urlsplit(url)
    except ValueError:
        parts = None
    if parts is None or not parts.scheme:
        return _excerpt(re.split(r"[?#]", url, maxsplit=1)[0], 200)
    host = parts.netloc.rpartition("@")[2]
    return f"{parts.scheme}://{host}{parts.path}"


def _mask(exc: LatticeRunError, secrets: dict[str, str]) -> None:
    """Replace, in ``exc``'s message and details, each secret value of ``secrets`` in each
    form a request gives it (lower-cased in a host, percent-encoded, IDNA-encoded, in a
    basic-auth header, an unreserved character percent-escaped: ``lattice.masking``) with
    its reference."""
    patterns = [
        (re.compile(forms_pattern(value)[0]), ref)
        for value, ref in sorted(secrets.items(), key=lambda item: len(item[0]), reverse=True)
        if value
    ]
    if not patterns:
        return

    def masked(value: Any) -> Any:
        if isinstance(value, str):
            for pattern, ref in patterns:
                value = replace(value, find(pattern, value), ref)
            return value
        if isinstance(value, dict):
            return {masked(k): masked(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [masked(v) for v in value]
        return value

    exc.message = masked(exc.message)
    exc.args = (exc.message, *exc.args[1:])
    exc.details = masked(exc.details)

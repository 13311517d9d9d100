"""WebFetch: one page over the run's guarded HTTP client.

The client is the one ``httpRequest`` nodes use, so the same address rules hold (no
private, loopback or metadata addresses unless the user's ``[http]`` settings allow
them, checked at every connection, redirects included). The body is read up to the cap
and HTML is reduced to its text.
"""

from __future__ import annotations

import html.parser
from typing import Any

import httpx

from lattice.tools.netguard import DestinationRefused
from lattice.workspace.paths import ToolRefused

MAX_REDIRECTS = 5
_SKIPPED_TAGS = frozenset({"script", "style", "noscript", "template", "svg"})
_BLOCK_TAGS = frozenset(
    {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "section", "article"}
)


async def fetch(client: httpx.AsyncClient, args: dict[str, Any], limit: int, timeout: float) -> str:
    """GET ``url``; the page's text (HTML reduced to text), at most ``limit`` bytes read."""
    url = args.get("url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ToolRefused("'url' must be an absolute http(s) URL")
    try:
        target = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise ToolRefused(f"{url!r} is not a valid URL: {exc}") from None
    for _ in range(MAX_REDIRECTS + 1):
        try:
            async with client.stream(
                "GET", target, timeout=timeout, follow_redirects=False
            ) as response:
                if response.is_redirect and "location" in response.headers:
                    target = target.join(response.headers["location"])
                    continue
                body, cut = await _read_capped(response, limit)
                kind = response.headers.get("content-type", "")
                status = response.status_code
        except DestinationRefused as exc:
            raise ToolRefused(f"{target} is not reachable from agents: {exc}") from None
        except httpx.HTTPError as exc:
            raise ToolRefused(f"fetching {target} failed: {exc}") from None
        text = body.decode("utf-8", errors="replace")
        if "html" in kind or text.lstrip()[:15].lower().startswith(("<!doctype html", "<html")):
            text = html_to_text(text)
        head = f"[{status} from {target}]"
        note = f"\n[cut at {limit} bytes]" if cut else ""
        prompt = args.get("prompt")
        asked = f"\n[asked: {prompt}]" if isinstance(prompt, str) and prompt else ""
        return f"{head}{asked}\n{text}{note}"
    raise ToolRefused(f"{url} redirected more than {MAX_REDIRECTS} times")


async def _read_capped(response: httpx.Response, limit: int) -> tuple[bytes, bool]:
    kept = bytearray()
    async for chunk in response.aiter_bytes():
        kept.extend(chunk)
        if len(kept) > limit:
            return bytes(kept[:limit]), True
    return bytes(kept), False


class _TextOf(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skipping = 0

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag in _SKIPPED_TAGS:
            self._skipping += 1
        elif tag in _BLOCK_TAGS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIPPED_TAGS and self._skipping:
            self._skipping -= 1

    def handle_data(self, data: str) -> None:
        if not self._skipping:
            self.parts.append(data)


def html_to_text(page: str) -> str:
    """The visible text of an HTML page, one block a line."""
    parser = _TextOf()
    parser.feed(page)
    lines = (" ".join(line.split()) for line in "".join(parser.parts).splitlines())
    return "\n".join(line for line in lines if line)

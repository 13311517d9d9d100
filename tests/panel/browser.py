"""A headless Chromium driven by selenium for the panel's browser tests.

The tests skip, saying how to install what is missing, when there is no Chromium, no
chromedriver or no selenium, unless ``LATTICE_BROWSER_TESTS=required`` (``.ci/run``
sets it), which makes a missing browser a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

REQUIRED = os.environ.get("LATTICE_BROWSER_TESTS") == "required"
INSTALL = (
    "the panel's browser tests need Chromium, chromedriver and selenium: "
    "apt-get install chromium chromium-driver (Debian; .ci/run does it) and "
    "pip install -e '.[test]' (selenium)"
)
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--disable-extensions",
    "--hide-scrollbars",
    "--force-device-scale-factor=1",
)
"""The flags this closed network needs (no background connections) for a fresh profile."""


def executables() -> tuple[str | None, str | None]:
    browser = next(
        filter(None, (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome"))),
        None,
    )
    return browser, shutil.which("chromedriver")


def problem() -> str | None:
    """Why the browser tests cannot run here, or None."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return f"selenium is missing; {INSTALL}"
    browser, driver = executables()
    if browser is None or driver is None:
        return f"no {'Chromium' if browser is None else 'chromedriver'} on PATH; {INSTALL}"
    return None


def require_browser() -> None:
    """Skip (or, in CI, fail) the calling test when the browser cannot run."""
    missing = problem()
    if missing is not None:
        if REQUIRED:
            pytest.fail(missing)
        pytest.skip(missing)


@contextmanager
def chromium(width: int = 1400, height: int = 900, *, network_log: bool = False) -> Iterator[Any]:
    """A headless Chromium with a fresh profile, driven by selenium (``network_log``: it
    records every request the pages make, for ``requested_urls``)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser, driver = executables()
    assert browser is not None and driver is not None
    profile = tempfile.mkdtemp(prefix="lattice-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--window-size={width},{height}")
    options.add_argument(f"--user-data-dir={profile}")
    logs = {"browser": "ALL", "performance": "ALL"} if network_log else {"browser": "ALL"}
    options.set_capability("goog:loggingPrefs", logs)
    session = webdriver.Chrome(service=Service(driver), options=options)
    try:
        session.set_window_size(width, height)
        yield session
    finally:
        session.quit()
        shutil.rmtree(profile, ignore_errors=True)


def console_errors(session: Any) -> list[str]:
    """The page's console errors since the last call."""
    return [entry["message"] for entry in session.get_log("browser") if entry["level"] == "SEVERE"]


BROWSER_OWN = ("chrome:", "chrome-extension:", "chrome-untrusted:", "devtools:")
"""Schemes of the browser's own pages (a new tab page, its components): Chromium's
requests, not the page's, whichever version made them."""


def page_requests(session: Any) -> list[dict[str, Any]]:
    """The requests the pages made since the last call (a ``network_log`` session),
    whether or not they got an answer: each ``url``, ``type`` and ``bytes`` (what came
    over the wire, 0 until it has; a response from the cache counts 0). Requests of the
    browser's own pages (``chrome://…``) are left out."""
    requests: dict[str, dict[str, Any]] = {}
    for entry in session.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        params = message.get("params") or {}
        method = message.get("method")
        if method == "Network.requestWillBeSent":
            url = params["request"]["url"]
            document = str(params.get("documentURL") or "")
            if url.startswith(BROWSER_OWN) or document.startswith(BROWSER_OWN):
                continue
            requests[params["requestId"]] = {"url": url, "type": params.get("type"), "bytes": 0}
        elif method == "Network.loadingFinished" and params.get("requestId") in requests:
            requests[params["requestId"]]["bytes"] = int(params.get("encodedDataLength") or 0)
    return list(requests.values())


def requested_urls(session: Any) -> list[str]:
    """The URL of every request the pages made since the last call (``page_requests``)."""
    return [request["url"] for request in page_requests(session)]

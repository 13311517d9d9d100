"""The API docs (``/docs``) in a real headless Chromium: every endpoint is on the page and
no request leaves the server (the assets come from the package, not a CDN)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from lattice.server.api_docs import ASSETS, FILES
from tests.panel.browser import chromium, console_errors, requested_urls, require_browser
from tests.server.helpers import TIMEOUT

LOCAL_SCHEMES = ("data:", "blob:", "about:")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    require_browser()
    with chromium(network_log=True) as session:
        yield session


def shown(browser: Any, css: str) -> str:
    """The text of the page's ``css`` elements once there are some (the page renders from
    its scripts after it loads)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(browser, TIMEOUT).until(lambda b: b.find_elements(By.CSS_SELECTOR, css))
    return str(browser.find_element(By.TAG_NAME, "body").text)


def assert_nothing_left_the_server(browser: Any, base_url: str) -> None:
    urls = requested_urls(browser)
    assert any(url.startswith(f"{base_url}{ASSETS}") for url in urls), urls
    outside = [u for u in urls if not u.startswith((f"{base_url}/", *LOCAL_SCHEMES))]
    assert not outside, outside


def paths_of(base_url: str) -> list[str]:
    schema = httpx.get(f"{base_url}/openapi.json", timeout=TIMEOUT).json()
    return list(schema["paths"])


def test_swagger_ui_shows_every_endpoint_from_the_server_alone(browser: Any, base_url: str) -> None:
    requested_urls(browser)
    browser.get(f"{base_url}/docs")
    text = shown(browser, ".opblock")
    for path in paths_of(base_url):
        assert path in text, path
    assert "start a run" in text
    assert not [e for e in console_errors(browser) if "favicon" not in e]
    assert_nothing_left_the_server(browser, base_url)


def test_the_assets_are_served_and_nothing_else(base_url: str) -> None:
    with httpx.Client(base_url=base_url, timeout=TIMEOUT) as client:
        for name, media in FILES.items():
            response = client.get(ASSETS + name)
            assert response.status_code == 200, name
            assert response.headers["content-type"] == media
            assert len(response.content) > 100_000
        for wrong in ("../app.py", "core.py", "redoc.standalone.js", "%2e%2e/consts.py"):
            assert client.get(ASSETS + wrong).status_code == 404, wrong
        assert client.get("/redoc").status_code == 404  # ReDoc would load its logo online

"""The panel's tests each get a workflows folder and a server of their own (per module)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lattice.config import LatticeConfig, RunsConfig
from lattice.server.app import ServerSettings
from lattice.server.in_thread import serve_in_thread
from tests.conftest import EXAMPLES
from tests.panel.browser import chromium, console_errors, require_browser
from tests.panel.helpers import workflows_folder
from tests.server.helpers import TIMEOUT, wait_for_status


@pytest.fixture(scope="module")
def space(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("panel")
    workflows_folder(root)
    return root


@pytest.fixture(scope="module")
def base_url(space: Path) -> Iterator[str]:
    settings = ServerSettings(
        runs_dir=space / "runs",
        workflows_dir=space / "workflows",
        config=LatticeConfig(runs=RunsConfig(durability="os")),
    )
    with serve_in_thread(settings) as url:
        yield url


@pytest.fixture(scope="module")
def triage(base_url: str) -> str:
    """A finished support-triage run whose classification was repaired, then escalated."""
    with httpx.Client(base_url=base_url, timeout=TIMEOUT) as client:
        inputs = json.loads((EXAMPLES / "support-triage.inputs.json").read_text())
        response = client.post(
            "/v1/runs",
            json={
                "workflow": "support-triage.json",
                "mock": "support-triage-repair.mock.json",
                "inputs": inputs,
            },
        )
        assert response.status_code == 202, response.text
        run_id = str(response.json()["run_id"])
        assert wait_for_status(client, run_id, ("completed",))["status"] == "completed"
        return run_id


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """A headless Chromium for the module's browser tests."""
    require_browser()
    with chromium() as session:
        yield session


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """The browser, at its usual size, with no console error left behind by the test."""
    browser.set_window_size(1400, 900)
    console_errors(browser)
    yield browser
    errors = [e for e in console_errors(browser) if "favicon" not in e]
    assert not errors, errors

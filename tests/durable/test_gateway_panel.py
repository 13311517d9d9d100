"""The execution panel on a gateway whose runs are on Temporal: the page follows a run
started from its form as it goes (its ops completed, then its question), the question is
answered from the page and the run finishes there; a shipped example is drawn on its
document's canvas, with its timeline and its op records in the inspector; a headless
Chromium drives the page (tests/panel/browser.py)."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lattice.config import LatticeConfig
from lattice.server.app import ServerSettings
from lattice.server.in_thread import serve_in_thread
from tests.builders import chain, node
from tests.conftest import EXAMPLES
from tests.durable.test_gateway import workers
from tests.panel.browser import chromium, console_errors, require_browser
from tests.panel.helpers import workflows_folder

pytest.importorskip("temporalio")

from lattice.durable.temporal.backend import TemporalRuns

WAIT = 90.0
"""Seconds the page may take at most on a loaded machine (a bound, not a timing)."""
REPO = Path(__file__).resolve().parents[2]
SHOTS_ENV = "LATTICE_PANEL_SHOTS"
"""``LATTICE_PANEL_SHOTS=docs`` copies the pictures taken here into docs/."""


@pytest.fixture
def page() -> Iterator[Any]:
    require_browser()
    with chromium() as session:
        yield session
        errors = [e for e in console_errors(session) if "favicon" not in e]
        assert not errors, errors


def until(what: Callable[[], Any], message: str) -> Any:
    deadline = time.monotonic() + WAIT
    while not (value := what()):
        assert time.monotonic() < deadline, message
        time.sleep(0.05)
    return value


def node_status(page: Any, node: str) -> str | None:
    value = page.execute_script(
        "return document.querySelector(`svg .node[data-node='${arguments[0]}']`)?.dataset.status",
        node,
    )
    return str(value) if value is not None else None


def run_status(page: Any) -> str:
    return str(
        page.execute_script("return document.querySelector('.run-head .badge')?.textContent || ''")
    )


def test_a_temporal_run_shows_live_and_is_answered_from_the_panel(
    page: Any, temporal_address: str, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    flows = workflows_folder(tmp_path)
    queue = f"panel-{uuid.uuid4().hex[:10]}"
    settings = ServerSettings(
        runs_dir=tmp_path / "runs",
        workflows_dir=flows,
        config=LatticeConfig(),
        backend=TemporalRuns(temporal_address, task_queue=queue),
    )
    with workers(temporal_address, queue, tmp_path, 1), serve_in_thread(settings) as url:
        page.get(f"{url}/")
        until(
            lambda: page.execute_script("return !!document.querySelector('#workflow-select')"),
            "no form",
        )
        Select(page.find_element(By.CSS_SELECTOR, "#workflow-select")).select_by_value(
            "approval.json"
        )
        until(
            lambda: page.execute_script(
                "return [...document.querySelectorAll('#mock-select option')]"
                ".some(o => o.value === 'approval.mock.json')"
            ),
            "the form of the workflow did not load",
        )
        Select(page.find_element(By.CSS_SELECTOR, "#mock-select")).select_by_value(
            "approval.mock.json"
        )
        latency = page.find_element(By.CSS_SELECTOR, "#mock-latency")
        latency.clear()
        latency.send_keys("500")
        page.find_element(By.CSS_SELECTOR, ".field[data-field='topic'] textarea").send_keys("tea")
        page.find_element(By.CSS_SELECTOR, "#start-run").click()
        # the page follows the run as it goes: its ops turn completed, then it halts
        until(lambda: node_status(page, "draft") == "completed", "the draft never completed")
        until(lambda: run_status(page) == "halted", "the run did not show halted")
        until(lambda: node_status(page, "approve") == "halted", "the question did not show")
        assert "Send the note?" in page.execute_script(
            "return document.querySelector('.notice.question')?.innerText ?? ''"
        )
        page.find_element(By.CSS_SELECTOR, ".notice.question button[data-option='Send']").click()
        until(lambda: run_status(page) == "completed", "the run did not finish after the answer")
        until(lambda: node_status(page, "end") == "completed", "the end node did not complete")
        assert node_status(page, "discarded") == "pending"
        # the run keeps its document on Temporal: the canvas is the document's (laid out,
        # as it has no positions), not its ExecIR's op by op
        note = page.execute_script("return document.querySelector('.layout-note')?.innerText")
        assert "computed" in note and "op by op" not in note, note
        # as a run folder's, the timeline offers "Re-run from here" on its steps
        assert page.execute_script("return document.querySelectorAll('.rerun').length") > 0
        # the run list of the panel lists it from Temporal
        page.get(f"{url}/#/")
        until(
            lambda: page.execute_script("return document.body.innerText.includes('approval')"),
            "the run list did not show the run",
        )
        # leave the page before the gateway stops: its list refreshes every two seconds,
        # and a refresh after the stop is a console error the fixture would report
        errors = [e for e in console_errors(page) if "favicon" not in e]
        page.get("about:blank")
    assert not errors, errors


def test_a_node_whose_op_runs_on_a_worker_shows_running(
    page: Any,
    temporal_address: str,
    tmp_path: Path,
    held: tuple[str, threading.Event, threading.Event],
) -> None:
    url_held, arrived, release = held
    (tmp_path / "lattice.toml").write_text('[http]\nallow_hosts = ["127.0.0.1"]\n')
    queue = f"panel-{uuid.uuid4().hex[:10]}"
    settings = ServerSettings(
        runs_dir=tmp_path / "runs",
        config=LatticeConfig(),
        backend=TemporalRuns(temporal_address, task_queue=queue),
    )
    doc = chain(node("call", "httpRequest", method="GET", url=f"{url_held}/slow"))
    with workers(temporal_address, queue, tmp_path, 1), serve_in_thread(settings) as url:
        started = httpx.post(f"{url}/v1/runs", json={"document": doc, "inputs": {}}, timeout=WAIT)
        assert started.status_code == 202, started.text
        page.get(f"{url}/#/runs/{started.json()['run_id']}")
        assert arrived.wait(WAIT)  # the op's activity is on a worker, held there
        until(lambda: node_status(page, "call") == "running", "the node never showed running")
        release.set()
        until(lambda: node_status(page, "call") == "completed", "the node did not complete")
        until(lambda: run_status(page) == "completed", "the run did not finish")
        errors = [e for e in console_errors(page) if "favicon" not in e]
        page.get("about:blank")
    assert not errors, errors


def test_a_shipped_example_on_temporal_is_drawn_as_a_run_folder_is(
    temporal_address: str, tmp_path: Path
) -> None:
    """support-triage with its mock script, started through the gateway: the panel draws
    it on its document's canvas (not op by op), the timeline has a row per op that ran,
    and the inspector shows a node's op records (the classification's attempts), all
    read from Temporal through the run-folder routes."""
    require_browser()
    document = json.loads((EXAMPLES / "support-triage.json").read_text())
    inputs = json.loads((EXAMPLES / "support-triage.inputs.json").read_text())
    queue = f"panel-{uuid.uuid4().hex[:10]}"
    settings = ServerSettings(
        runs_dir=tmp_path / "runs",
        workflows_dir=EXAMPLES,
        config=LatticeConfig(),
        backend=TemporalRuns(temporal_address, task_queue=queue),
    )
    with (
        workers(temporal_address, queue, tmp_path, 1),
        serve_in_thread(settings) as url,
        chromium(1440, 900) as page,
    ):
        started = httpx.post(
            f"{url}/v1/runs",
            json={
                "workflow": "support-triage.json",
                "inputs": inputs,
                "mock": "support-triage.mock.json",
            },
            timeout=WAIT,
        )
        assert started.status_code == 202, started.text
        run_id = started.json()["run_id"]
        page.get(f"{url}/#/runs/{run_id}")
        until(lambda: run_status(page) == "completed", "the run did not finish")
        # the canvas is the document's, with its positions, as a run folder's is
        drawn = page.execute_script(
            "return [...document.querySelectorAll('svg .node')].map(n => n.dataset.node)"
        )
        assert sorted(drawn) == sorted(n["id"] for n in document["nodes"])
        note = page.execute_script("return document.querySelector('.layout-note')?.innerText")
        assert not note or "op by op" not in note, note
        assert node_status(page, "classify") == "completed"
        # the timeline: a row per op that ran, each with the time its op took
        started_ops = page.execute_script(
            "return window.latticePanel.view.events.filter(e => e.type === 'op_started').length"
        )
        until(
            lambda: (
                page.execute_script("return document.querySelectorAll('.timeline-row').length")
                == started_ops
            ),
            "the timeline does not have a row per op",
        )
        rows = page.execute_script(
            "return [...document.querySelectorAll('.timeline-row')].map(r => r.dataset.op)"
        )
        assert "classify" in rows and "review" in rows, rows
        # the inspector: the node's op records, read from the run's record on Temporal
        records = httpx.get(f"{url}/v1/runs/{run_id}/ops?node=classify", timeout=WAIT).json()
        attempts = len(records["records"][-1]["attempts"])
        assert records["total"] >= 1 and attempts >= 1
        page.execute_script(
            "document.querySelector('.timeline-row[data-op=classify] .timeline-name').click()"
        )
        until(
            lambda: (
                page.execute_script(
                    "return document.querySelector('svg .node.selected')?.dataset.node"
                )
                == "classify"
            ),
            "the timeline row did not select its node",
        )
        until(
            lambda: (
                page.execute_script("return document.querySelectorAll('.attempt').length")
                == attempts
            ),
            "the inspector did not show the op record's attempts",
        )
        assert page.execute_script(
            "return document.querySelector('#inspector-title')?.textContent"
        ) == next(n["data"]["label"] for n in document["nodes"] if n["id"] == "classify")
        page.execute_script("document.querySelector('.timeline').scrollIntoView()")
        shot = tmp_path / "panel-temporal-1440.png"
        assert page.save_screenshot(str(shot))
        if os.environ.get(SHOTS_ENV):
            shutil.copy(shot, REPO / os.environ[SHOTS_ENV] / shot.name)
        # on a 390 px screen: the same rows and record, in one column inside the screen
        page.set_window_size(390, 844)
        until(
            lambda: page.execute_script(
                "return document.documentElement.scrollWidth"
                " - document.documentElement.clientWidth <= 1"
            ),
            "the run's page is wider than a 390 px screen",
        )
        assert (
            page.execute_script("return document.querySelectorAll('.timeline-row').length")
            == started_ops
        )
        assert page.execute_script("return document.querySelectorAll('.attempt').length") == (
            attempts
        )
        errors = [e for e in console_errors(page) if "favicon" not in e]
        page.get("about:blank")
    assert not errors, errors

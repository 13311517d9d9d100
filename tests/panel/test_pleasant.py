"""The panel as a new user met it (issue 39), at 1440 and 390 px in a real headless
Chromium: no bare ``null`` in the new-run form, a run with re-runs inside a phone's
width, Fit that shows a whole workflow when names stay readable and says so when they
cannot, a timeline that draws each step once, and a runs list usable at 1,000 runs
(search, "waiting on me", pages, statuses that change without a reload).

``LATTICE_PANEL_SHOTS=docs`` copies the pictures docs/panel.md shows there."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import EXAMPLES
from tests.panel.helpers import many_runs, sixteen_nodes, sixty_nodes
from tests.panel.test_browser import click, open_run, start_via_api, text, until
from tests.panel.test_canvas_timeline import shot
from tests.server.helpers import TIMEOUT, wait_for_status

WIDTHS = [1440, 390]

FIT_FACTS = """
const svg = document.querySelector('.run-page svg.graph');
const box = svg.getBoundingClientRect();
const canvas = window.latticePanel.view.canvas;
const titles = [...svg.querySelectorAll('.node .title')];
const nodes = [...svg.querySelectorAll('.node .shape')].map(n => n.getBoundingClientRect());
const inside = nodes.filter(r => r.left >= box.left - 1 && r.right <= box.right + 1
                                && r.top >= box.top - 1 && r.bottom <= box.bottom + 1).length;
const note = document.querySelector('.part-note');
const map = document.querySelector('.minimap');
return {
  nodes: nodes.length, inside, canvasWidth: box.width,
  smallest: Math.min(...titles.map(t => parseFloat(getComputedStyle(t).fontSize) * canvas.scale)),
  note: note && !note.hidden ? note.textContent : '',
  minimap: !!map && map.style.display !== 'none',
  pageWidth: document.documentElement.scrollWidth, viewWidth: document.documentElement.clientWidth,
};
"""
"""What Fit shows: how many nodes are whole inside the canvas, the smallest name's size
on screen, the note and the minimap, and whether the page scrolls sideways."""


@pytest.fixture
def client(base_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base_url, timeout=TIMEOUT) as client:
        yield client


@pytest.fixture(scope="module")
def finished(base_url: str, space: Path) -> dict[str, str]:
    """A finished run of analyst-panel, of a 16-node and a 60-node document, and a halted
    one."""
    (space / "workflows" / "sixteen.json").write_text(json.dumps(sixteen_nodes()))
    (space / "workflows" / "sixty.json").write_text(json.dumps(sixty_nodes()))
    runs = {}
    with httpx.Client(base_url=base_url, timeout=TIMEOUT) as client:
        inputs = json.loads((EXAMPLES / "analyst-panel.inputs.json").read_text())
        runs["analyst-panel"] = start_via_api(
            client, workflow="analyst-panel.json", mock="analyst-panel.mock.json", inputs=inputs
        )
        runs["sixteen"] = start_via_api(client, workflow="sixteen.json", inputs={"pick": "c"})
        runs["sixty"] = start_via_api(client, workflow="sixty.json", inputs={"pick": "c"})
        runs["halted"] = start_via_api(
            client, workflow="approval.json", mock="approval.mock.json", inputs={"topic": "x"}
        )
        for name, run_id in runs.items():
            want = "halted" if name == "halted" else "completed"
            assert wait_for_status(client, run_id, (want,))["status"] == want
    return runs


def fit_facts(page: Any, base_url: str, run_id: str, width: int) -> dict[str, Any]:
    page.set_window_size(width, 900)
    open_run(page, base_url, run_id, finished="completed")
    page.execute_script("window.latticePanel.view.canvas.fit()")
    return dict(page.execute_script(FIT_FACTS))


@pytest.mark.parametrize("width", WIDTHS)
def test_the_new_run_form_writes_no_bare_null(page: Any, base_url: str, width: int) -> None:
    """A workflow without notes has none to show: nothing, not the text "null"."""
    from selenium.webdriver.support.ui import Select

    page.set_window_size(width, 900)
    page.get(f"{base_url}/")
    for workflow in ("analyst-panel.json", "approval.json", "support-triage.json"):
        until(
            lambda: page.execute_script("return !!document.querySelector('#workflow-select')"),
            "no form",
        )
        Select(page.find_element("css selector", "#workflow-select")).select_by_value(workflow)
        until(
            lambda: (
                "Inputs" in text(page, ".form-box") and "Loading" not in text(page, ".form-box")
            ),
            f"the form of {workflow} did not load",
        )
        form = text(page, ".form-box")
        assert "null" not in form.split(), (workflow, form)
        nodes = page.execute_script(
            "const w = document.createTreeWalker(document.querySelector('.form-box'), NodeFilter.SHOW_TEXT);"
            "const out = []; while (w.nextNode()) if (w.currentNode.data.trim() === 'null') out.push(1);"
            "return out.length"
        )
        assert nodes == 0, workflow


def test_a_run_with_re_runs_fits_a_390_px_screen(
    page: Any, base_url: str, client: httpx.Client, triage: str
) -> None:
    child = client.post(f"{base_url}/v1/runs/{triage}/rerun", json={"op": "review", "visit": 1})
    assert child.status_code == 202, child.text
    wait_for_status(client, child.json()["run_id"], ("completed", "failed"))
    page.set_window_size(390, 844)
    open_run(page, base_url, triage, finished="completed")
    until(lambda: child.json()["run_id"] in text(page, ".lineage .reruns"), "no re-runs listed")
    widths = page.execute_script(
        "return [document.documentElement.scrollWidth, document.documentElement.clientWidth,"
        " Math.max(...[...document.querySelectorAll('.run-head *')].map(e => e.getBoundingClientRect().right))]"
    )
    assert widths[0] <= widths[1] + 1, widths  # no sideways scroll (was 752 px)
    assert widths[2] <= widths[1] + 0.5, widths


@pytest.mark.parametrize("workflow", ["analyst-panel", "sixteen"])
def test_fit_shows_the_whole_workflow_at_1440(
    page: Any, base_url: str, finished: dict[str, str], workflow: str, tmp_path: Path
) -> None:
    facts = fit_facts(page, base_url, finished[workflow], 1440)
    assert facts["canvasWidth"] > 1300, facts  # the empty inspector's column is the canvas's
    assert facts["inside"] == facts["nodes"], facts
    assert facts["smallest"] >= 11 - 1e-6, facts
    assert facts["note"] == "" and not facts["minimap"], facts
    if workflow == "sixteen":
        shot(page, "panel-fit16-1440.png", tmp_path)


@pytest.mark.parametrize("width", WIDTHS)
def test_fit_on_60_nodes_shows_them_whole_or_says_how_to_see_the_rest(
    page: Any, base_url: str, finished: dict[str, str], width: int, tmp_path: Path
) -> None:
    """Fit never makes names smaller than 11 px: a graph that fits at that size is shown
    whole, one that does not is shown from its start with the minimap and a note."""
    facts = fit_facts(page, base_url, finished["sixty"], width)
    assert facts["nodes"] == 60, facts
    assert facts["smallest"] >= 11 - 1e-6, facts
    assert facts["pageWidth"] <= facts["viewWidth"] + 1, facts
    if facts["inside"] == facts["nodes"]:
        assert facts["note"] == "" and not facts["minimap"], facts
    else:
        assert "Too large to show whole" in facts["note"] and facts["minimap"], facts
    until(
        lambda: page.execute_script("return document.querySelectorAll('.timeline-row').length"),
        "the timeline drew no rows",
    )
    if width == 390:
        page.execute_script("document.querySelector('.canvas').scrollIntoView()")
    shot(page, f"panel-fit60-{width}.png", tmp_path)


def test_selecting_a_node_gives_the_inspector_its_room_and_closing_gives_it_back(
    page: Any, base_url: str, finished: dict[str, str]
) -> None:
    fit_facts(page, base_url, finished["analyst-panel"], 1440)
    click(page, "svg .node[data-node='end']")
    until(lambda: text(page, "#inspector-title") == "End", "the inspector did not open")
    until(
        lambda: page.execute_script(
            "const r = document.querySelector(\"svg .node[data-node='end'] .shape\").getBoundingClientRect();"
            "const b = document.querySelector('.run-page svg.graph').getBoundingClientRect();"
            "return b.width < 1100 && r.right <= b.right + 1 && r.left >= b.left - 1"
        ),
        "the selected node is not in view beside the inspector",
    )
    click(page, ".inspector-close")
    until(
        lambda: page.execute_script(
            "return document.querySelector('.run-page svg.graph').getBoundingClientRect().width > 1300"
        ),
        "closing the inspector did not give the canvas its room back",
    )
    facts = page.execute_script(FIT_FACTS)
    assert facts["inside"] == facts["nodes"], facts  # still fitted
    assert "node=" not in page.current_url


@pytest.mark.parametrize("workflow", ["analyst-panel", "sixteen"])
def test_fit_on_a_390_px_screen_keeps_names_readable_and_says_how_to_see_the_rest(
    page: Any, base_url: str, finished: dict[str, str], workflow: str, tmp_path: Path
) -> None:
    facts = fit_facts(page, base_url, finished[workflow], 390)
    assert facts["smallest"] >= 11 - 1e-6, facts
    assert facts["pageWidth"] <= facts["viewWidth"] + 1, facts
    assert facts["inside"] < facts["nodes"], facts  # too wide for 390 px at 11 px
    assert "Too large to show whole" in facts["note"] and facts["minimap"], facts
    before = page.execute_script("return window.latticePanel.view.canvas.tx")
    page.execute_script(
        "const m = document.querySelector('.minimap'); const r = m.getBoundingClientRect();"
        "m.dispatchEvent(new PointerEvent('pointerdown', {clientX: r.right - 4, clientY: r.top + r.height / 2, bubbles: true}))"
    )
    assert page.execute_script("return window.latticePanel.view.canvas.tx") < before - 50
    if workflow == "sixteen":
        page.execute_script("window.latticePanel.view.canvas.fit()")
        page.execute_script("document.querySelector('.canvas').scrollIntoView()")
        shot(page, "panel-fit16-390.png", tmp_path)


def test_the_timeline_draws_each_step_once(
    page: Any, base_url: str, finished: dict[str, str]
) -> None:
    """A fork's join and a forEach item's end are no rows of their own: analyst-panel's
    lead was drawn three times, once per link."""
    open_run(page, base_url, finished["analyst-panel"], finished="completed")
    until(
        lambda: page.execute_script("return document.querySelectorAll('.timeline-row').length"),
        "no rows",
    )
    rows = page.execute_script(
        "return [...document.querySelectorAll('.timeline-row')].map(r =>"
        " [r.dataset.op, r.querySelector('.lane')?.textContent || '', r.querySelector('.timeline-name').textContent])"
    )
    ops = [op for op, _, _ in rows]
    assert not [op for op in ops if op.endswith("#join") or op.endswith("__end")], ops
    names = [name for _, lane, name in rows if not lane]
    assert len(names) == len(set(names)), names
    fork = next(name for op, _, name in rows if op.endswith("#fork"))
    assert fork == "⑃ 3 parallel branches"
    lanes = [lane for _, lane, _ in rows if lane]
    assert len(lanes) == len(set(lanes)) == 6  # three analysts, three forEach items


# -- the runs list at 1,000 runs ---------------------------------------------------------


@pytest.fixture(scope="module")
def thousand(base_url: str, space: Path, triage: str, finished: dict[str, str]) -> list[str]:
    """1,000 more runs (completed and halted ones), one every 37 minutes from October."""
    return many_runs(space / "runs", [triage, finished["halted"]], 1000)


def listed(client: httpx.Client, **params: Any) -> dict[str, Any]:
    response = client.get("/v1/runs", params=params)
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_the_runs_api_searches_by_words(client: httpx.Client, thousand: list[str]) -> None:
    one = thousand[123]
    assert [r["run_id"] for r in listed(client, q=one)["runs"]] == [one]
    day = listed(client, q="2026-10-02", limit=500)["runs"]
    assert day and all(r["started_at"].startswith("2026-10-02") for r in day)
    assert len(day) == 39  # 24 h / 37 min, give or take the first
    both = listed(client, q="2026-10-02 HALTED", limit=500)["runs"]
    assert both and all(r["status"] == "halted" for r in both) and len(both) < len(day)
    assert listed(client, q="support-triage", limit=5)["next"] is not None
    assert listed(client, q="no-such-thing")["runs"] == []


@pytest.mark.parametrize("width", WIDTHS)
def test_the_runs_list_at_a_thousand_runs(
    page: Any, base_url: str, client: httpx.Client, thousand: list[str], width: int, tmp_path: Path
) -> None:
    from selenium.webdriver.support.ui import Select

    page.set_window_size(width, 900)
    page.get(f"{base_url}/")
    page.execute_script("sessionStorage.clear()")
    page.get(f"{base_url}/")
    rows = "return [...document.querySelectorAll('table.runs tbody tr')].map(r => [r.dataset.run, r.dataset.status])"
    until(lambda: len(page.execute_script(rows)) == 50, "the first page is not 50 runs")
    first = page.execute_script(rows)
    assert text(page, "#runs-page") == "1–50"
    assert page.execute_script("return document.getElementById('runs-newer').disabled")
    click(page, "#runs-older")
    until(lambda: text(page, "#runs-page") == "51–100", "Older did not turn the page")
    second = page.execute_script(rows)
    assert second[0][0] < first[-1][0]  # older runs, in order
    click(page, "#runs-newer")
    until(lambda: text(page, "#runs-page") == "1–50", "Newer did not turn back")
    # waiting on me: only runs halted on a question
    Select(page.find_element("css selector", "#status-filter")).select_by_visible_text(
        "waiting on me"
    )
    until(
        lambda: {s for _, s in page.execute_script(rows)} == {"halted"},
        "the filter did not keep only the runs waiting on an answer",
    )
    # search by id, then by date
    search = page.find_element("css selector", "#runs-search")
    search.send_keys("2026-10-05")
    until(
        lambda: (
            all(r[0].startswith("20261005") for r in page.execute_script(rows))
            and len(page.execute_script(rows)) > 5
        ),
        "the search by date did not narrow the list",
    )
    assert {s for _, s in page.execute_script(rows)} == {"halted"}
    if width == 1440:
        shot(page, "panel-runs-1440.png", tmp_path)
    else:
        shot(page, "panel-runs-390.png", tmp_path)
    Select(page.find_element("css selector", "#status-filter")).select_by_visible_text("all")
    search.clear()
    search.send_keys(thousand[500])
    until(lambda: [r[0] for r in page.execute_script(rows)] == [thousand[500]], "no search by id")
    assert page.execute_script(
        "return document.documentElement.scrollWidth <= document.documentElement.clientWidth + 1"
    )
    search.clear()
    search.send_keys("zzzz-nothing")
    until(lambda: "No run found" in text(page, ".runs-list"), "no word for an empty search")


def test_the_runs_list_follows_a_run_without_a_reload(
    page: Any, base_url: str, client: httpx.Client, thousand: list[str]
) -> None:
    page.set_window_size(1440, 900)
    page.get(f"{base_url}/")
    page.execute_script("sessionStorage.clear()")
    page.get(f"{base_url}/")
    until(
        lambda: page.execute_script(
            "return document.querySelectorAll('table.runs tbody tr').length"
        ),
        "no rows",
    )
    page.execute_script("window.__notReloaded = true")
    script = {"responses": {"s0": ["one"], "s1": ["two"]}}
    from tests.server.helpers import steps

    run_id = start_via_api(client, document=steps(2), mock_script=script, mock_latency_ms=1500)
    status = f"return document.querySelector(\"tr[data-run='{run_id}']\")?.dataset.status"
    until(lambda: page.execute_script(status) == "running", "the new run did not appear running")
    until(lambda: page.execute_script(status) == "completed", "its status did not change", TIMEOUT)
    assert page.execute_script("return window.__notReloaded === true")


def test_the_page_s_own_requests_on_first_load(base_url: str, triage: str) -> None:
    """A fresh browser (nothing cached) opening the panel: every request goes to the
    server, none elsewhere; ``-s`` prints their count and bytes (docs/panel.md)."""
    from tests.panel.browser import chromium, page_requests, require_browser

    require_browser()
    with chromium(1440, 900, network_log=True) as fresh:
        page_requests(fresh)
        fresh.get(f"{base_url}/")
        until(lambda: "Inputs" in text(fresh, ".form-box"), "the home page did not load")
        until(lambda: text(fresh, "table.runs tbody"), "no runs listed")
        home = page_requests(fresh)
        fresh.get(f"{base_url}/#/runs/{triage}")
        until(
            lambda: fresh.execute_script("return !!document.querySelector('svg .node')"), "no run"
        )
        until(lambda: text(fresh, ".timeline-rows"), "no timeline")
        run = page_requests(fresh)
    for requests in (home, run):
        outside = [r["url"] for r in requests if not r["url"].startswith(f"{base_url}/")]
        assert not outside, outside
    files = [r for r in home if "/panel/" in r["url"] or r["url"] == f"{base_url}/"]
    calls = [r for r in home if "/v1/" in r["url"]]
    assert len(files) + len(calls) == len(home)
    assert all(r["bytes"] > 0 for r in files), files
    print(
        f"\nfirst load: {len(home)} requests, {sum(r['bytes'] for r in home):,} bytes "
        f"({len(files)} files of the page, {sum(r['bytes'] for r in files):,} bytes; "
        f"{len(calls)} API calls); then a run: {len(run)} requests, "
        f"{sum(r['bytes'] for r in run):,} bytes"
    )

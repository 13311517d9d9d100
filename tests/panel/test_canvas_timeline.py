"""The canvas at Fit, not-executed nodes, badges and counts, the timeline, narrow screens
(real headless Chromium)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import EXAMPLES, REPO
from tests.panel.test_browser import open_run, text, until

SHOTS_ENV = "LATTICE_PANEL_SHOTS"
"""A folder to copy the screenshots these tests take into (docs/ when regenerating)."""

EXAMPLE_DOCUMENTS = sorted(EXAMPLES.glob("*.json"))
WORKFLOWS = [
    p
    for p in EXAMPLE_DOCUMENTS
    if not p.name.endswith((".mock.json", ".inputs.json", ".answers.json"))
]

MEASURE_AT_FIT = """
const [documentText, width, height, done] = arguments;
(async () => {
  const { Canvas } = await import('/panel/js/canvas.js');
  const response = await fetch('/v1/graph', {method: 'POST', headers: {'Content-Type': 'application/json'},
                                            body: JSON.stringify({document: JSON.parse(documentText)})});
  const graph = await response.json();
  document.getElementById('fit-box')?.remove();
  const box = document.createElement('div');
  box.id = 'fit-box';
  box.style.cssText = `position:fixed;left:0;top:0;width:${width}px;height:${height}px;z-index:99;background:#fff`;
  document.body.append(box);
  const canvas = new Canvas(graph, {onSelect: () => {}});
  canvas.el.style.height = '100%';
  box.append(canvas.el);
  await new Promise(requestAnimationFrame);
  canvas.fit();
  const sizes = [...box.querySelectorAll('.node .title')].map(t => parseFloat(getComputedStyle(t).fontSize) * canvas.scale);
  const labels = [...box.querySelectorAll('.edge-label rect')].map(r => r.getBoundingClientRect().toJSON());
  box.remove();
  done({nodes: graph.nodes.length, smallest: Math.min(...sizes), labels, minimap: !!box.querySelector('.minimap') && box.querySelector('.minimap').style.display !== 'none'});
})().catch(e => done({error: String(e)}));
"""


@pytest.fixture
def page(page: Any) -> Any:
    """The panel's browser at 1440 px, the width these tests measure and picture."""
    page.set_window_size(1440, 900)
    return page


def overlapping(boxes: list[dict[str, float]]) -> list[tuple[int, int]]:
    pairs = []
    for i, a in enumerate(boxes):
        for j in range(i + 1, len(boxes)):
            b = boxes[j]
            if (
                a["left"] < b["right"]
                and b["left"] < a["right"]
                and a["top"] < b["bottom"]
                and b["top"] < a["bottom"]
            ):
                pairs.append((i, j))
    return pairs


def svg_text(page: Any, css: str) -> str:
    return str(
        page.execute_script("return document.querySelector(arguments[0])?.textContent ?? ''", css)
    )


def shot(page: Any, name: str, tmp_path: Path) -> None:
    path = tmp_path / name
    assert page.save_screenshot(str(path))
    target = os.environ.get(SHOTS_ENV)
    if target:
        shutil.copy(path, (REPO / target) / name)


@pytest.mark.parametrize("width", [1440, 390])
def test_fit_never_draws_a_node_name_under_11_px_nor_labels_on_each_other(
    page: Any, base_url: str, width: int
) -> None:
    assert len(WORKFLOWS) >= 10
    page.get(f"{base_url}/")
    until(lambda: page.execute_script("return !!document.body"), "no page")
    for document in WORKFLOWS:
        measured = page.execute_async_script(MEASURE_AT_FIT, document.read_text(), width, 560)
        assert "error" not in measured, (document.name, measured)
        assert measured["nodes"] > 1
        assert measured["smallest"] >= 11 - 1e-6, (document.name, measured["smallest"])
        assert overlapping(measured["labels"]) == [], document.name


def test_a_finished_run_greys_what_never_ran_and_counts_what_did(
    page: Any,
    base_url: str,
    triage: str,
    tmp_path: Path,
) -> None:
    open_run(page, base_url, triage, finished="completed")
    classes = page.execute_script(
        "return Object.fromEntries([...document.querySelectorAll('svg .node')]"
        ".map(n => [n.dataset.node, n.classList.contains('not-executed')]))"
    )
    assert classes["draft-bug"] and classes["draft-general"]
    assert not classes["classify"] and not classes["review"]
    badge = svg_text(page, "svg .node[data-node='classify'] .stats")
    assert "tok" in badge and "ms" in badge
    assert svg_text(page, "svg .node[data-node='route'] .stats").startswith("×2")
    counts = page.execute_script(
        "return [...document.querySelectorAll('.edge-count')].map(t => t.textContent).filter(Boolean)"
    )
    assert "×2" in counts  # the way round the review loop was taken twice
    page.execute_script("window.latticePanel.view.canvas.fit()")
    until(
        lambda: page.execute_script("return document.querySelectorAll('.timeline-row').length"),
        "no timeline",
    )
    shot(page, "panel-canvas-1440.png", tmp_path)


def test_the_timeline_has_a_row_per_op_and_selects_with_the_canvas(
    page: Any,
    base_url: str,
    triage: str,
    tmp_path: Path,
) -> None:
    open_run(page, base_url, triage, finished="completed")
    started = page.execute_script(
        "return window.latticePanel.view.events.filter(e => e.type === 'op_started').length"
    )
    until(
        lambda: (
            page.execute_script("return document.querySelectorAll('.timeline-row').length")
            == started
        ),
        "the timeline does not have one row per op",
    )
    rows = page.execute_script(
        "return [...document.querySelectorAll('.timeline-row')].map(r => [r.dataset.op, r.dataset.ms])"
    )
    finished = page.execute_script(
        "return window.latticePanel.view.events.filter(e => e.type === 'op_finished')"
        ".map(e => [e.op_id, String(e.data.duration_ms)])"
    )
    assert sorted(rows) == sorted(finished)
    assert page.execute_script(
        "return [...document.querySelectorAll('.timeline-row[data-op=classify] .attempt-chip')].map(c => c.textContent)"
    ) == ["initial", "repair", "escalation"]
    page.execute_script(
        "document.querySelector('.timeline-row[data-op=review] .timeline-name').click()"
    )
    until(
        lambda: (
            page.execute_script("return document.querySelector('svg .node.selected')?.dataset.node")
            == "review"
        ),
        "a row did not select its node",
    )
    marked = page.execute_script(
        "return [...document.querySelectorAll('.timeline-row.selected')].map(r => r.dataset.op)"
    )
    assert marked == ["review", "review"]
    page.execute_script("document.querySelector('.timeline').scrollIntoView()")
    shot(page, "panel-timeline-1440.png", tmp_path)


def test_a_390_px_screen_keeps_the_header_inside(
    page: Any, base_url: str, triage: str, tmp_path: Path
) -> None:
    page.set_window_size(390, 844)
    open_run(page, base_url, triage, finished="completed")
    right = page.execute_script(
        "return Math.max(...[...document.querySelectorAll('.run-head *')].map(e => e.getBoundingClientRect().right))"
    )
    width = page.execute_script("return document.documentElement.clientWidth")
    assert right <= width + 0.5
    overflow = page.execute_script(
        "return document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    assert overflow <= 1
    shot(page, "panel-canvas-390.png", tmp_path)


def test_every_shipped_workflow_is_measured() -> None:
    names = {p.name for p in WORKFLOWS}
    assert {"support-triage.json", "analyst-panel.json", "incident-response.json"} <= names
    assert all(json.loads(p.read_text()).get("nodes") for p in WORKFLOWS)


def test_rerun_from_a_step_with_an_edited_value(
    page: Any, base_url: str, triage: str, tmp_path: Path
) -> None:
    open_run(page, base_url, triage, finished="completed")
    until(
        lambda: page.execute_script(
            "return !!document.querySelector('.timeline-row[data-op=assemble] .rerun')"
        ),
        "no re-run button on a finished run's step",
    )
    page.execute_script("document.querySelector('.timeline-row[data-op=assemble] .rerun').click()")
    until(
        lambda: page.execute_script(
            "return document.getElementById('rerun-state')?.value.length > 10"
        ),
        "no state to edit",
    )
    state = json.loads(page.execute_script("return document.getElementById('rerun-state').value"))
    assert set(state) == {"in", "vars"} and state["vars"]["revisions"] == 1
    help_text = text(page, "#rerun-help")  # names the keys the editor holds
    assert 'edit "in"' in help_text and '"vars"' in help_text and "edit $in" not in help_text
    state["vars"]["current-draft"]["result"]["subject"] = "Edited from the panel"
    page.execute_script(
        "const t = document.getElementById('rerun-state'); t.value = 'not json'; t.dispatchEvent(new Event('input'));"
    )
    assert "Not JSON" in text(page, "#rerun-error")
    assert page.execute_script("return document.getElementById('rerun-start').disabled")
    page.execute_script(
        "const t = document.getElementById('rerun-state'); t.value = arguments[0]; t.dispatchEvent(new Event('input'));",
        json.dumps(state, indent=2),
    )
    shot(page, "panel-rerun-1440.png", tmp_path)
    page.execute_script("document.getElementById('rerun-start').click()")
    until(
        lambda: triage not in page.current_url and "#/runs/" in page.current_url,
        "the re-run did not open",
    )
    until(
        lambda: (
            page.execute_script("return document.querySelector('.run-head .badge')?.textContent")
            == "completed"
        ),
        "the re-run did not complete",
    )
    assert "Edited from the panel" in text(page, ".notice.done")
    assert triage in text(page, ".lineage .parent")
    child = page.current_url.rsplit("/", 1)[-1]
    page.get(f"{base_url}/#/runs/{triage}")
    until(lambda: child in text(page, ".lineage .reruns"), "the parent does not list its re-run")


def test_two_runs_compared_on_one_canvas(
    page: Any, base_url: str, triage: str, tmp_path: Path
) -> None:
    import httpx

    from tests.server.helpers import TIMEOUT, wait_for_status

    with httpx.Client(base_url=base_url, timeout=TIMEOUT) as client:
        preview = client.get(f"/v1/runs/{triage}/rerun", params={"op": "review", "visit": 1}).json()
        started = client.post(
            f"/v1/runs/{triage}/rerun",
            json={
                "op": "review",
                "visit": 1,
                "mock_script": {
                    "responses": {
                        "review": [{"approved": True, "feedback": "Fine as it is."}],
                        "assemble": [],
                    },
                    "default": "x",
                },
            },
        )
        assert started.status_code == 202, started.text
        child = started.json()["run_id"]
        wait_for_status(client, child, ("completed", "failed"))
        diff = client.get(f"/v1/runs/{triage}/compare/{child}").json()
    assert preview["visits"] == 2
    assert diff["changed"] and not diff["path"]["same"]
    assert "review" in diff["nodes"]
    # what the re-run took over from its parent is inherited, not "removed"
    rerun = diff["rerun"]
    assert (rerun["run"], rerun["op"], rerun["visit"]) == ("b", "review", 1)
    assert rerun["steps"][:2] == ["start", "classify"] and "classify" in rerun["nodes"]
    assert "classify" not in diff["nodes"] and "start" not in diff["nodes"]
    assert diff["path"]["a"][0] == diff["path"]["b"][0] == "review"
    page.get(f"{base_url}/#/compare/{triage}/{child}")
    until(
        lambda: page.execute_script("return !!document.querySelector('.compare-page svg .node')"),
        "no compare canvas",
    )
    marked = page.execute_script(
        "return [...document.querySelectorAll('.compare-page .node.differs')].map(n => n.dataset.node)"
    )
    assert "review" in marked
    only_a = page.execute_script(
        "return [...document.querySelectorAll('.compare-page .node.only-a')].map(n => n.dataset.node)"
    )
    assert "classify" not in only_a  # the re-run started after it: it inherited it
    inherited = page.execute_script(
        "return [...document.querySelectorAll('.compare-page .node.inherited')].map(n => n.dataset.node)"
    )
    assert {"start", "classify"} <= set(inherited)
    assert "is a re-run of A from Review reply" in text(page, "#compare-rerun")
    assert "inherited" in text(page, "#compare-rerun")
    kinds = page.execute_script(
        "return [...document.querySelectorAll('.compare-nodes .change')]"
        ".map(c => [c.dataset.change, c.querySelector('.sign').textContent,"
        " getComputedStyle(c).backgroundColor])"
    )
    assert kinds, "no change listed"
    signs = {"added": "+", "removed": "−", "changed": "~"}
    assert all(sign == signs[kind] for kind, sign, _ in kinds)
    colours = {kind: colour for kind, _, colour in kinds}
    assert len(set(colours.values())) == len(colours)  # each kind its own colour too
    assert text(page, ".side-a h2").startswith("A ") and text(page, ".side-b h2").startswith("B ")
    assert "differ" in text(page, "#compare-summary")
    shot(page, "panel-compare-1440.png", tmp_path)


RESPONSIVE = """
const [width, done] = arguments;
(async () => {
  const { Canvas } = await import('/panel/js/canvas.js');
  const { RunModel } = await import('/panel/js/model.js');
  const { Timeline } = await import('/panel/js/timeline.js');
  const nodes = [], edges = [], ops = {};
  for (let i = 0; i < 200; i++) {
    const id = `n${i}`;
    nodes.push({id, type: 'prompt', label: `Step ${i} of a long chain`, x: (i % 20) * 260, y: Math.floor(i / 20) * 120, w: 220, h: 52, group: null, ops: [id]});
    if (i) edges.push({from: `n${i - 1}`, to: id, port: 'default', label: null});
    ops[id] = {node: id, kind: 'LLM_WRITE', next: i < 199 ? [{port: 'default', edge: i}] : []};
  }
  const graph = {nodes, edges, groups: [], ops, layout: 'document', bounds: {x: 0, y: 0, w: 20 * 260, h: 10 * 120}};
  const events = [];
  let seq = 0;
  const t0 = Date.parse('2026-11-26T12:00:00Z');
  for (let k = 0; events.length < 10000; k++) {
    const id = `n${k % 200}`, ts = new Date(t0 + k * 10).toISOString();
    events.push({seq: ++seq, ts, type: 'op_started', op_id: id, node_id: id, data: {kind: 'LLM_WRITE'}});
    events.push({seq: ++seq, ts, type: 'llm_request', op_id: id, node_id: id, data: {kind: 'initial', model_class: 'default'}});
    events.push({seq: ++seq, ts, type: 'llm_response', op_id: id, node_id: id, data: {input_tokens: 100, output_tokens: 20}});
    events.push({seq: ++seq, ts, type: 'state_write', op_id: id, node_id: id, data: {path: `$vars.${id}.result`, value: {k}}});
    events.push({seq: ++seq, ts, type: 'op_finished', op_id: id, node_id: id, data: {duration_ms: 3.5, port: 'default'}});
  }
  const box = document.createElement('div');
  box.style.cssText = `position:fixed;left:0;top:0;width:${width}px;height:600px;z-index:99;background:#fff`;
  document.body.append(box);
  const canvas = new Canvas(graph, {onSelect: () => {}});
  canvas.el.style.height = '100%';
  const timeline = new Timeline({graph, onSelect: () => {}, onRerun: () => {}});
  box.append(canvas.el, timeline.el);
  const model = new RunModel(graph);
  await new Promise(requestAnimationFrame);
  // What the page does per batch (fold, redraw what changed) and per slider move
  // (rebuild to an event, redraw everything); the timeline is redrawn apart from them, at
  // most four times a second, and is timed on its own.
  const batches = [], timelines = [];
  for (let from = 0; from < events.length; from += 1000) {
    let t = performance.now();
    model.applyRange(events, from, from + 1000);
    canvas.update(model, model.takeDirty());
    batches.push(performance.now() - t);
    t = performance.now();
    timeline.render(model);
    timelines.push(performance.now() - t);
  }
  const seeks = [];
  for (const at of [1000, 9000, 5000, 200, 7500, 3000, 6000, 10000]) {
    const t = performance.now();
    model.rebuild(events, at);
    canvas.update(model, model.takeDirty());
    seeks.push(performance.now() - t);
  }
  box.remove();
  done({batches, seeks, timelines, rows: model.steps.length});
})().catch(e => done({error: String(e)}));
"""


def test_a_200_node_workflow_and_10000_events_stay_responsive(page: Any, base_url: str) -> None:
    import statistics

    page.get(f"{base_url}/")
    until(lambda: page.execute_script("return !!document.body"), "no page")
    measured = page.execute_async_script(RESPONSIVE, 1440)
    assert "error" not in measured, measured
    batches, seeks, timelines = measured["batches"], measured["seeks"], measured["timelines"]

    def figures(values: list[float]) -> str:
        return f"min {min(values):.1f} / median {statistics.median(values):.1f} / max {max(values):.1f} ms"

    print(
        f"\npanel, 200 nodes, 10,000 events: batches of 1,000 (fold, redraw) {figures(batches)}; "
        f"slider moves (rebuild to an event, redraw) {figures(seeks)}; "
        f"timeline redraws (400 rows) {figures(timelines)}"
    )
    # the times are figures to read (docs/panel.md), not assertions: they move with the
    # machine's load; what must hold is that every batch, seek and redraw happened
    assert measured["rows"] == 2000 and len(batches) == 10
    assert len(seeks) == 8 and len(timelines) > 0

"""The execution panel in a real headless Chromium (selenium and chromedriver), against
a real ``lattice serve``: a run started from the form turns its nodes completed in
order; an LLM node shows its repaired attempt; the state slider goes back in time; a
question is answered and the run finishes; a failed run is resumed; a batch of 1,000
events is applied quickly; a narrow window stacks the panel. The test that watches a
run live takes the screenshot of docs/panel.png (``LATTICE_PANEL_SCREENSHOT=docs/panel.png``
writes it there; otherwise it goes to the test's temporary folder)."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import EXAMPLES, REPO, TRIAGE_PATH
from tests.panel.browser import console_errors
from tests.server.helpers import TIMEOUT, script, steps, wait_for_status

SCREENSHOT_ENV = "LATTICE_PANEL_SCREENSHOT"
TRIAGE_ORDER = list(dict.fromkeys(TRIAGE_PATH))
"""The nodes support-triage's script goes through, in the order they first complete."""

OBSERVE = """
window.__seen = [];
new MutationObserver((changes) => {
  for (const change of changes) {
    const el = change.target;
    if (el.classList && el.classList.contains('node')) {
      window.__seen.push([el.dataset.node, el.dataset.status, performance.now()]);
    }
  }
}).observe(document.body, {subtree: true, attributes: true, attributeFilter: ['data-status']});
"""
"""Records every status a canvas node takes, in order (installed by the test, not the page)."""


@pytest.fixture
def client(base_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base_url, timeout=TIMEOUT) as client:
        yield client


def until(what: Callable[[], Any], message: str, timeout: float = TIMEOUT) -> Any:
    """Poll ``what`` until it is truthy; its value."""
    deadline = time.monotonic() + timeout
    while True:
        value = what()
        if value:
            return value
        assert time.monotonic() < deadline, message
        time.sleep(0.03)


def status(page: Any, node: str) -> str | None:
    value = page.execute_script(
        "return document.querySelector(`svg .node[data-node='${arguments[0]}']`)?.dataset.status",
        node,
    )
    return str(value) if value is not None else None


def run_status(page: Any) -> str:
    return str(
        page.execute_script("return document.querySelector('.run-head .badge')?.textContent || ''")
    )


def all_applied(page: Any) -> bool:
    return bool(
        page.execute_script(
            "const v = window.latticePanel.view;"
            "return !!(v && v.events && v.events.length > 0 && v.idle());"
        )
    )


def node_el(page: Any, node: str) -> Any:
    from selenium.webdriver.common.by import By

    return page.find_element(By.CSS_SELECTOR, f"svg .node[data-node='{node}']")


def by_css(page: Any, css: str) -> Any:
    from selenium.webdriver.common.by import By

    return page.find_element(By.CSS_SELECTOR, css)


def text(page: Any, css: str) -> str:
    """The text of the element ``css`` names (read at once: the page redraws parts of itself)."""
    return str(
        page.execute_script("return document.querySelector(arguments[0])?.innerText ?? ''", css)
    )


def click(page: Any, css: str) -> None:
    """Click the element ``css`` names (found again if the page redrew it meanwhile)."""
    from selenium.common.exceptions import StaleElementReferenceException

    for _ in range(20):
        try:
            by_css(page, css).click()
            return
        except StaleElementReferenceException:
            time.sleep(0.05)
    raise AssertionError(f"{css} kept being redrawn")


def type_into(page: Any, css: str, words: str) -> None:
    """Type ``words`` into the field ``css`` names (again, whole, if the page redrew it)."""
    from selenium.common.exceptions import StaleElementReferenceException

    for _ in range(20):
        try:
            field = by_css(page, css)
            field.clear()
            field.send_keys(words)
            return
        except StaleElementReferenceException:
            time.sleep(0.05)
    raise AssertionError(f"{css} kept being redrawn")


def start_via_api(client: httpx.Client, **body: Any) -> str:
    response = client.post("/v1/runs", json=body)
    assert response.status_code == 202, response.text
    return str(response.json()["run_id"])


def open_run(page: Any, base_url: str, run_id: str, *, finished: str | None = None) -> None:
    page.get(f"{base_url}/#/runs/{run_id}")
    until(lambda: page.execute_script("return !!document.querySelector('svg .node')"), "no canvas")
    if finished:
        until(lambda: run_status(page) == finished, f"the page never said {finished}")
        until(lambda: all_applied(page), "the events were not all applied")


def fill_form(page: Any, workflow: str, mock: str, latency: int = 0) -> None:
    from selenium.webdriver.support.ui import Select

    until(
        lambda: page.execute_script("return !!document.querySelector('#workflow-select')"),
        "no form",
    )
    Select(by_css(page, "#workflow-select")).select_by_value(workflow)
    until(
        lambda: page.execute_script(
            "return [...document.querySelectorAll('#mock-select option')].some(o => o.value === arguments[0])",
            mock,
        ),
        "the form of the workflow did not load",
    )
    Select(by_css(page, "#mock-select")).select_by_value(mock)
    latency_input = by_css(page, "#mock-latency")
    latency_input.clear()
    latency_input.send_keys(str(latency))


def save_screenshot(page: Any, tmp_path: Path) -> Path:
    shot = tmp_path / "panel.png"
    assert page.save_screenshot(str(shot))
    target = os.environ.get(SCREENSHOT_ENV)
    if target:
        destination = Path(target) if Path(target).is_absolute() else REPO / target
        shutil.copy(shot, destination)
    return shot


def test_a_run_started_from_the_form_turns_its_nodes_completed_in_order(
    page: Any, base_url: str, tmp_path: Path
) -> None:
    page.get(f"{base_url}/")
    fill_form(page, "support-triage.json", "support-triage-repair.mock.json", latency=450)
    # the ticket comes from support-triage.inputs.json, beside the workflow
    ticket = by_css(page, ".field[data-field='ticket'] textarea").get_attribute("value")
    assert ticket.startswith("Hello, I was charged twice")
    page.execute_script(OBSERVE)
    click(page, "#start-run")
    until(lambda: "#/runs/" in page.current_url, "the form did not open the run")

    until(lambda: status(page, "classify") == "running", "classify never ran")
    assert status(page, "review") == "pending"
    assert by_css(page, "#run-started-by").text == "HTTP API"  # how the run was started
    assert by_css(page, "#run-version").text == "support-triage@1"  # the version it runs
    until(lambda: status(page, "classify") == "completed", "classify never completed")
    # the canvas is drawn legibly, so it may not all be in view: stop following, bring it in
    page.execute_script(
        "const c = window.latticePanel.view.canvas; c.setFollow(false); c.reveal('classify');"
    )
    node_el(page, "classify").click()
    until(
        lambda: page.execute_script(
            "return !!document.querySelector(\".attempt[data-kind='repair']\")"
        ),
        "the inspector did not show classify's attempts",
    )
    until(lambda: status(page, "review") == "running", "review never ran")
    shot = save_screenshot(page, tmp_path)
    assert shot.stat().st_size > 10_000

    until(lambda: run_status(page) == "completed", "the run did not complete")
    seen = page.execute_script("return window.__seen")
    first_completed: list[str] = []
    for node, state, _at in seen:
        if state == "completed" and node not in first_completed:
            first_completed.append(node)
    assert first_completed == TRIAGE_ORDER
    running = [node for node, state, _at in seen if state == "running"]
    assert {"classify", "draft-billing", "review"} <= set(running)
    for never in ("draft-bug", "draft-general"):
        assert status(page, never) == "pending"
    # the taken branch lights up; the loop counts its visits
    assert page.execute_script(
        "return [...document.querySelectorAll('.edge-label.taken text')].map(t => t.textContent)"
    ) == ["Billing", "Approved", "Needs changes", "Revise again"]
    assert node_el(page, "route").get_attribute("aria-label") == (
        "Route by category, switch, completed, visited 2 times"
    )


def test_an_llm_node_shows_its_repaired_attempt_by_keyboard(
    page: Any, base_url: str, triage: str
) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    open_run(page, base_url, triage, finished="completed")
    keys = ActionChains(page)
    for _ in range(40):  # Tab from the top of the page to the canvas
        keys.send_keys(Keys.TAB).perform()
        if page.execute_script("return document.activeElement.classList.contains('node')"):
            break
    active = page.execute_script("return document.activeElement.dataset.node")
    assert active == "start"
    keys.send_keys(Keys.ARROW_RIGHT).perform()
    assert page.execute_script("return document.activeElement.dataset.node") == "classify"
    ring = page.execute_script(
        "return getComputedStyle(document.activeElement.querySelector('.focus-ring')).stroke"
    )
    assert ring not in ("none", ""), "the focused node shows no focus ring"
    keys.send_keys(Keys.ENTER).perform()

    until(
        lambda: page.execute_script("return document.querySelectorAll('.attempt').length") == 3,
        "the inspector did not show three attempts",
    )
    assert text(page, "#inspector-title") == "Classify ticket"
    kinds = page.execute_script(
        "return [...document.querySelectorAll('.attempt')].map(a => a.dataset.kind)"
    )
    assert kinds == ["initial", "repair", "escalation"]
    first, repair, escalation = (text(page, f".attempt[data-number='{n}']") for n in (1, 2, 3))
    assert "/urgency" in first and "is 9, at most 5 allowed" in first
    assert "schema_error" in first
    assert "Repair packet" in repair
    assert "The previous output broke the contract." in repair  # the packet, as sent
    assert "- /urgency: is 9, at most 5 allowed" in repair
    assert "'urgency' is a required property" in repair  # the repair's own violation
    assert "Sure! " in repair  # its raw output
    assert "Escalated from small to medium." in escalation
    assert "valid" in escalation
    assert "356 in / 10 out" in escalation
    inputs = text(page, ".record .i-section")
    assert "$in.ticket" in inputs
    # Space opens a node too (focused as Tab and the arrows focus it: the canvas pans to
    # it; a WebDriver click or key on a node out of the canvas's view would fail)
    page.execute_script("document.querySelector(\"svg .node[data-node='assemble']\").focus()")
    until(
        lambda: page.execute_script("return document.activeElement.dataset.node") == "assemble",
        "the node did not take the focus",
    )
    ActionChains(page).send_keys(Keys.SPACE).perform()
    until(lambda: text(page, "#inspector-title") == "Assemble answer", "Space did nothing")


def test_the_state_slider_goes_back_in_time(page: Any, base_url: str, triage: str) -> None:
    open_run(page, base_url, triage, finished="completed")
    leaf = "[data-path='$vars.revisions']"
    until(lambda: text(page, leaf) == "revisions: 1", "the final state is not shown")
    position = page.execute_script(
        "return window.latticePanel.view.events.findIndex("
        "e => e.type === 'state_write' && e.data.path === '$vars.revisions') + 1"
    )
    assert position > 0
    page.execute_script(
        "const s = document.getElementById('state-slider');"
        "s.value = arguments[0]; s.dispatchEvent(new Event('input'));",
        position,
    )
    until(lambda: text(page, leaf) == "revisions: 0", "the slider did not go back")
    assert "in the past" in text(page, "#state-position")
    assert page.execute_script(
        "return document.querySelector(arguments[0]).classList.contains('changed')", leaf
    )
    # the canvas travels with it: the op that wrote the value is running
    assert status(page, "init-revisions") == "running"
    assert status(page, "classify") == "completed"
    assert status(page, "count-revision") == "pending"
    click(page, "#state-next")  # the next write: init-feedback's
    until(lambda: status(page, "init-feedback") == "running", "the next write did not show")
    assert status(page, "init-revisions") == "completed"
    assert "$vars.feedback" in text(page, "#state-position")
    click(page, "#state-live")
    until(lambda: text(page, leaf) == "revisions: 1", "Live did not come back")
    assert status(page, "count-revision") == "completed"


def test_a_question_is_answered_and_the_run_finishes(page: Any, base_url: str) -> None:
    page.get(f"{base_url}/")
    fill_form(page, "approval.json", "approval.mock.json")
    topic = by_css(page, ".field[data-field='topic'] textarea")
    topic.send_keys("the spring launch")
    click(page, "#start-run")
    until(
        lambda: page.execute_script("return !!document.querySelector('.notice.question')"),
        "the question did not show",
    )
    assert "Send the note?" in text(page, ".notice.question")
    # the question, the run's status and the node's come from different events
    until(lambda: run_status(page) == "halted", "the run did not show halted")
    until(lambda: status(page, "approve") == "halted", "the question node did not show halted")
    options = page.execute_script(
        "return [...document.querySelectorAll('.notice.question button.option')].map(b => b.textContent)"
    )
    assert options == ["Send", "Discard"]
    assert "computed" in text(page, ".layout-note")  # no positions in this document
    click(page, ".notice.question button[data-option='Send']")
    until(lambda: run_status(page) == "completed", "the run did not finish after the answer")
    until(lambda: status(page, "end") == "completed", "the end node did not complete")
    assert status(page, "polish") == "completed"
    assert status(page, "discarded") == "pending"
    assert status(page, "approve") == "completed"
    until(lambda: "a polished note" in text(page, ".notice.done"), "no output shown")


def test_a_failed_run_shows_its_report_and_resumes(
    page: Any, base_url: str, client: httpx.Client
) -> None:
    run_id = start_via_api(client, document=steps(2), mock_script=script(2, given=1))
    wait_for_status(client, run_id, ("failed",))
    open_run(page, base_url, run_id, finished="failed")
    assert "mock_exhausted" in text(page, ".notice.failure")
    assert status(page, "s1") == "failed"
    assert status(page, "s0") == "completed"
    before = page.execute_script("return window.latticePanel.view.events.length")
    click(page, "#resume-failed")  # the script still has no answer: it fails again
    until(
        lambda: page.execute_script(
            "return window.latticePanel.view.events.some(e => e.type === 'run_resumed')"
        ),
        "the resumed run's events did not arrive",
    )
    until(lambda: run_status(page) == "failed", "the resumed run did not stop")
    assert page.execute_script("return window.latticePanel.view.events.length") > before
    until(lambda: "mock_exhausted" in text(page, ".notice.failure"), "no report after resume")


def test_a_failure_a_resume_cannot_fix_offers_no_resume(
    page: Any, base_url: str, client: httpx.Client
) -> None:
    # fix-a-bug's mock calls tools, and this server grants none: a resume keeps that
    body = {
        name: json.loads((EXAMPLES / f"fix-a-bug{suffix}.json").read_text())
        for name, suffix in (("document", ""), ("mock_script", ".mock"), ("inputs", ".inputs"))
    }
    run_id = start_via_api(client, **body)
    wait_for_status(client, run_id, ("failed",))
    open_run(page, base_url, run_id, finished="failed")
    until(lambda: "start a new run" in text(page, ".notice.failure"), "no next step shown")
    assert "would fail the same way" in text(page, "#no-resume")
    assert page.find_elements("css selector", "#resume-failed, #resume-run") == []


def test_a_batch_of_a_thousand_events_is_applied_quickly(
    page: Any, base_url: str, client: httpx.Client
) -> None:
    run_id = start_via_api(client, document=steps(1000), mock_script=script(1000), max_calls=2000)
    wait_for_status(client, run_id, ("completed",), timeout=120)
    open_run(page, base_url, run_id, finished="completed")
    total = page.execute_script("return window.latticePanel.view.events.length")
    batches = page.execute_script("return window.latticePanel.stats.batches")
    full = [b["ms"] for b in batches if b["size"] == 1000]
    print(
        f"\npanel: {total} events of a 1,000-op run applied in {len(batches)} batches; "
        f"batches of 1,000: {', '.join(f'{ms:.1f}' for ms in full)} ms "
        f"(median {statistics.median(full):.1f} ms; parse, fold into the model, redraw)"
    )
    # the figures above are reported, not asserted (they move with the machine's load):
    # what must hold is that the events came in batches and the canvas shows them all
    assert total > 5000 and len(full) >= 5
    assert status(page, "s999") == "completed"


def test_a_narrow_window_stacks_the_panel(page: Any, base_url: str, triage: str) -> None:
    page.set_window_size(420, 900)
    open_run(page, base_url, triage, finished="completed")
    overflow = page.execute_script(
        "return document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    assert overflow <= 1
    canvas = page.execute_script(
        "return document.querySelector('.canvas-area').getBoundingClientRect().toJSON()"
    )
    inspector = page.execute_script(
        "return document.querySelector('.inspector').getBoundingClientRect().toJSON()"
    )
    assert inspector["top"] >= canvas["bottom"] - 1  # one column
    assert canvas["width"] <= 420
    page.get(f"{base_url}/")
    until(lambda: page.execute_script("return !!document.querySelector('#start-run')"), "no form")
    overflow = page.execute_script(
        "return document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    assert overflow <= 1


def test_parallel_branches_run_at_once_on_the_canvas(
    page: Any, base_url: str, client: httpx.Client
) -> None:
    inputs = json.loads((EXAMPLES / "analyst-panel.inputs.json").read_text())
    run_id = start_via_api(
        client,
        workflow="analyst-panel.json",
        mock="analyst-panel.mock.json",
        inputs=inputs,
        mock_latency_ms=700,
    )
    open_run(page, base_url, run_id)
    analysts = ["market", "tech", "risk"]

    def together() -> bool:
        states = page.execute_script(
            "return arguments[0].map(n => document.querySelector("
            "`svg .node[data-node='${n}']`).dataset.status)",
            analysts,
        )
        return bool(states == ["running"] * 3)

    until(together, "the three analysts were never running at once")
    assert status(page, "brief") == "completed"  # its FORK does not keep it running
    until(lambda: run_status(page) == "completed", "the run did not complete")
    # the forEach ran its sub-flow once per question: one visit, three items inside
    assert status(page, "answer_all") == "completed"
    taken = page.execute_script("return [...document.querySelectorAll('.edge.taken')].length")
    assert taken == 9  # every connection of this run's path


def test_keyboard_focus_survives_live_updates(
    page: Any, base_url: str, client: httpx.Client, triage: str
) -> None:
    """The header ticks every second, the runs list refreshes every two: neither takes
    the focus away from the control a keyboard user is on."""
    run_id = start_via_api(client, document=steps(4), mock_script=script(4), mock_latency_ms=800)
    open_run(page, base_url, run_id)
    until(
        lambda: page.execute_script("return !!document.getElementById('cancel-run')"), "no Cancel"
    )
    page.execute_script("document.getElementById('cancel-run').focus()")
    time.sleep(2.2)
    assert page.execute_script("return document.activeElement.id") == "cancel-run"
    page.get(f"{base_url}/")
    link = f"tr[data-run='{triage}'] a"
    until(
        lambda: page.execute_script("return !!document.querySelector(arguments[0])", link), "no row"
    )
    page.execute_script("document.querySelector(arguments[0]).focus()", link)
    time.sleep(4.5)  # two refreshes, one of them while a run is running
    assert page.execute_script("return document.activeElement.closest('tr')?.dataset.run") == triage
    wait_for_status(client, run_id, ("completed",))


def test_the_inspector_shows_a_model_answer_growing_before_it_completes(
    page: Any, base_url: str, client: httpx.Client
) -> None:
    """A call answered in 8 pieces over 4 s: the selected node's inspector shows part of
    the answer while the node runs, then the recorded completion in its place."""
    answer = "Streaming answers arrive piece by piece, " * 4
    run_id = start_via_api(
        client,
        document=steps(1),
        mock_script={"responses": {"s0": [answer]}},
        mock_latency_ms=4000,
        mock_pieces=8,
    )
    page.get(f"{base_url}/#/runs/{run_id}?node=s0")
    partial = until(
        lambda: (shown := text(page, ".live-answer pre")) and len(shown) < len(answer) and shown,
        "no partial answer was shown",
    )
    assert answer.startswith(partial)
    assert status(page, "s0") == "running"
    assert text(page, ".live-answer h3") == "Answer so far"
    longer = until(
        lambda: len(shown := text(page, ".live-answer pre")) > len(partial) and shown,
        "the answer did not grow",
    )
    assert answer.startswith(longer)
    until(lambda: status(page, "s0") == "completed", "s0 did not complete")
    until(lambda: text(page, ".live-answer") == "", "the live answer stayed after completion")
    until(lambda: answer.strip() in text(page, "pre.completion"), "no recorded raw output")
    assert console_errors(page) == []


def test_a_branch_session_is_a_chat_in_the_panel(
    page: Any, base_url: str, client: httpx.Client
) -> None:
    session = "branchSession-review"
    mock = json.loads((EXAMPLES / "branch-session.mock.json").read_text())
    run_id = start_via_api(
        client,
        document=json.loads((EXAMPLES / "branch-session.json").read_text()),
        mock_script=mock,
        inputs=json.loads((EXAMPLES / "branch-session.inputs.json").read_text()),
    )
    wait_for_status(client, run_id, ("halted",))
    open_run(page, base_url, run_id, finished="halted")
    card = ".notice.question"
    until(lambda: "your turn" in text(page, f"{card} h2"), "the session's card did not show")
    assert "Branch session: Review the plan together" in text(page, card)
    by_css(page, f"{card} #answer-text").send_keys("Which step touches the file writer?")
    click(page, f"{card} button[type='submit']")
    reply = mock["responses"][session][0]
    until(lambda: reply in text(page, card), "the reply did not come back as the next turn")
    until(lambda: run_status(page) == "halted", "the run did not halt for the next message")
    click(page, f"{card} button.end-session")
    until(lambda: run_status(page) == "completed", "ending the session did not finish the run")
    until(lambda: status(page, session) == "completed", "the session node did not complete")

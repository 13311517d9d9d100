"""The panel's approval card: the fix-a-bug example with Claude Code's ``ask`` rules on
Bash and Edit, approved through the panel (a real headless Chromium against a real
gateway), ends with the same files and result as approving with ``lattice resume
--approve``, each decision journaled as made through the panel; the card keeps working
after the gateway restarts, and a turn's parallel calls are decided one by one."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from lattice.cli.main import main
from lattice.config import AgentsConfig, LatticeConfig, RunsConfig
from lattice.server.app import ServerSettings
from lattice.server.in_thread import serve_in_thread
from lattice.workspace import sandbox_problem
from tests.conftest import EXAMPLES
from tests.panel.browser import chromium, console_errors, require_browser
from tests.panel.test_browser import (
    by_css,
    click,
    open_run,
    run_status,
    start_via_api,
    text,
    type_into,
    until,
)
from tests.panel.test_canvas_timeline import shot
from tests.permissions.test_fix_a_bug_approvals import EXPECTED_OUTPUT, outcome, run_args
from tests.server.helpers import TIMEOUT

pytestmark = pytest.mark.skipif(sandbox_problem() is not None, reason="no sandbox here")
CARD = ".notice.approvals"


def ask_project(root: Path) -> Path:
    """A copy of fix-a-bug's project whose Claude Code settings ask before Bash and Edit."""
    shutil.copytree(EXAMPLES / "fix-a-bug-project", root)
    (root / ".claude").mkdir()
    (root / ".claude/settings.json").write_text(
        json.dumps({"permissions": {"ask": ["Bash", "Edit"]}})
    )
    return root


def files(root: Path) -> dict[str, str]:
    """The project's files and their text (caches left out)."""
    return {
        str(p.relative_to(root)): p.read_text()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


@contextmanager
def gateway(root: Path, project: Path) -> Iterator[str]:
    """A gateway over ``root``'s runs whose agents get ``project`` (its rules read)."""
    flows = root / "workflows"
    flows.mkdir(exist_ok=True)
    config = LatticeConfig(
        runs=RunsConfig(durability="os"),
        agents=AgentsConfig(workspace=str(project), allow=["read", "write", "shell"]),
    )
    settings = ServerSettings(runs_dir=root / "runs", workflows_dir=flows, config=config)
    with serve_in_thread(settings) as url:
        yield url


@pytest.fixture(scope="module")
def by_resume(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, dict[str, str]]:
    """The output and the project's files when the run is approved with ``lattice
    resume --approve`` (the door the panel's must agree with)."""
    root = tmp_path_factory.mktemp("by-resume")
    project = ask_project(root / "project")
    runs = root / "runs"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HOME", str(root / "home"))
        assert main(run_args(project, runs)) == 3
        (folder,) = runs.iterdir()
        assert main(["resume", str(folder), "--approve", "fix.1.1"]) == 3
        assert main(["resume", str(folder), "--approve", "fix.2.1"]) == 0
    output, _ = outcome(folder)
    return output, files(project)


@pytest.fixture
def page(request: pytest.FixtureRequest) -> Iterator[Any]:
    require_browser()
    width = getattr(request, "param", 1440)
    with chromium(width, 900) as session:
        session.set_window_size(width, 900)
        console_errors(session)
        yield session
        errors = [e for e in console_errors(session) if "favicon" not in e]
        assert not errors, errors


def start(url: str, script: dict[str, Any] | None = None) -> str:
    with httpx.Client(base_url=url, timeout=TIMEOUT) as client:
        return start_via_api(
            client,
            document=json.loads((EXAMPLES / "fix-a-bug.json").read_text()),
            mock_script=script or json.loads((EXAMPLES / "fix-a-bug.mock.json").read_text()),
            inputs=json.loads((EXAMPLES / "fix-a-bug.inputs.json").read_text()),
        )


def card_for(page: Any, ids: list[str]) -> None:
    """Wait until the approval card lists exactly the calls ``ids`` and can be answered."""
    until(
        lambda: page.execute_script(
            "const c = document.querySelector(arguments[0]);"
            "return !!c && !c.classList.contains('waiting') &&"
            " [...c.querySelectorAll('.approval')].map(a => a.dataset.id).join() === arguments[1];",
            CARD,
            ",".join(ids),
        ),
        f"the approval card did not show {ids}",
    )


def no_horizontal_scroll(page: Any) -> None:
    width = page.execute_script("return document.documentElement.scrollWidth")
    inner = page.execute_script("return window.innerWidth")
    assert width <= inner, f"the page is {width} px wide in a {inner} px window"


def check_edit_card(page: Any) -> None:
    """The Edit's card: its tool, its file, its arguments and its diff, added and removed
    lines told apart by sign (and a screen reader's word) as well as colour."""
    card_for(page, ["fix.1.1"])
    assert "Edit waits for your approval" in text(page, f"{CARD} h2")
    head = text(page, f"{CARD} .approval-head")
    assert "Edit" in head and "tally/stats.py" in head and "fix.1.1" in head
    assert "ask rule 'Edit'" in text(page, f"{CARD} .approval-why")
    args = page.execute_script(
        "return document.querySelector(arguments[0] + ' .approval-args').textContent", CARD
    )
    assert "old_string" in args and "len(values) + 1" in args
    lines = page.execute_script(
        "return [...document.querySelectorAll(arguments[0] + ' .approval-diff .dl')]"
        ".map(l => [l.className, l.textContent, getComputedStyle(l).backgroundColor])",
        CARD,
    )
    added = [line for line in lines if "dl-add" in line[0]]
    removed = [line for line in lines if "dl-del" in line[0]]
    assert [t for _, t, _ in added] == ["added: +    return sum(values) / len(values)"]
    assert [t for _, t, _ in removed] == ["removed: -    return sum(values) / (len(values) + 1)"]
    assert added[0][2] != removed[0][2]
    labels = page.execute_script(
        "return [...document.querySelectorAll(arguments[0] + ' .approval .decide')]"
        ".map(b => b.textContent)",
        CARD,
    )
    assert labels == ["Allow once", "Allow for this run", "Deny"]
    assert by_css(page, f"{CARD} .approval-reason").is_displayed()


def check_bash_card(page: Any, project: Path) -> None:
    card_for(page, ["fix.2.1"])
    command = text(page, f"{CARD} .approval-command")
    assert "$ python3 -m unittest discover -s tests" in command
    assert str(project) in command, "the folder it runs in"


@pytest.mark.parametrize("page", [1440], indirect=True)
def test_approved_in_the_panel_across_a_gateway_restart(
    page: Any, tmp_path: Path, by_resume: tuple[Any, dict[str, str]]
) -> None:
    project = ask_project(tmp_path / "project")
    with gateway(tmp_path, project) as url:
        run_id = start(url)
        open_run(page, url, run_id)
        check_edit_card(page)
        assert "(len(values) + 1)" in (project / "tally/stats.py").read_text(), "not yet"
        shot(page, "panel-approval-1440.png", tmp_path)
        click(page, f"{CARD} .approval[data-id='fix.1.1'] .decide-allow")
        check_bash_card(page, project)
    # a new gateway over the same runs: the halted run's folder is read back
    with gateway(tmp_path, project) as url:
        open_run(page, url, run_id, finished="halted")
        check_bash_card(page, project)
        click(page, f"{CARD} .approval[data-id='fix.2.1'] .decide-allow")
        until(lambda: run_status(page) == "completed", "the run did not complete")
        until(lambda: not page.execute_script(f"return !!document.querySelector('{CARD}')"), "")
    output, decided = outcome(tmp_path / "runs" / run_id)
    assert (output, files(project)) == by_resume
    assert output == EXPECTED_OUTPUT
    assert decided == [("fix.1.1", "allow", "panel"), ("fix.2.1", "allow", "panel")]


@pytest.mark.parametrize("page", [390], indirect=True)
def test_approved_in_a_narrow_panel(
    page: Any, tmp_path: Path, by_resume: tuple[Any, dict[str, str]]
) -> None:
    project = ask_project(tmp_path / "project")
    with gateway(tmp_path, project) as url:
        run_id = start(url)
        open_run(page, url, run_id)
        check_edit_card(page)
        no_horizontal_scroll(page)
        shot(page, "panel-approval-390.png", tmp_path)
        # for the rest of the agent's run: every edit of this visit (there is one)
        click(page, f"{CARD} .approval[data-id='fix.1.1'] .decide-allow_run")
        check_bash_card(page, project)
        no_horizontal_scroll(page)
        click(page, f"{CARD} .approval[data-id='fix.2.1'] .decide-allow")
        until(lambda: run_status(page) == "completed", "the run did not complete")
    output, decided = outcome(tmp_path / "runs" / run_id)
    assert (output, files(project)) == by_resume
    assert decided == [("fix.1.1", "allow_run", "panel"), ("fix.2.1", "allow", "panel")]


@pytest.mark.parametrize("page", [1440], indirect=True)
def test_a_card_answered_elsewhere_shows_where_the_run_is(page: Any, tmp_path: Path) -> None:
    """The Edit is approved through the gateway while the page still shows it: the page's
    decision is refused (not taken for the Bash's) and the page moves on to the Bash."""
    project = ask_project(tmp_path / "project")
    with gateway(tmp_path, project) as url:
        run_id = start(url)
        open_run(page, url, run_id)
        card_for(page, ["fix.1.1"])
        with httpx.Client(base_url=url, timeout=TIMEOUT) as client:
            answered = client.post(
                f"/v1/runs/{run_id}/answers", json={"approvals": {"fix.1.1": "allow"}}
            )
            assert answered.status_code == 202, answered.text
            until(
                lambda: (
                    [
                        a["id"]
                        for a in (client.get(f"/v1/runs/{run_id}").json()["question"] or {}).get(
                            "approvals", []
                        )
                    ]
                    == ["fix.2.1"]
                ),
                "the run did not halt for the Bash",
            )
        click(page, f"{CARD} .approval[data-id='fix.1.1'] .decide-deny")
        until(
            lambda: "answered elsewhere" in text(page, ".stale-approval"),
            "the page did not say the decision was not taken",
        )
        card_for(page, ["fix.2.1"])
        refused = console_errors(page)  # the browser logs the 409 it got
        assert refused and all("/answers" in e and "409" in e for e in refused), refused
        click(page, f"{CARD} .approval[data-id='fix.2.1'] .decide-allow")
        until(lambda: run_status(page) == "completed", "the run did not complete")
    _, decided = outcome(tmp_path / "runs" / run_id)
    assert decided == [("fix.1.1", "allow", "gateway"), ("fix.2.1", "allow", "panel")]


def parallel_script() -> dict[str, Any]:
    """fix-a-bug's script whose fixer asks for three calls in one turn (the edit, a push
    to deny, the tests), then for two (the tests again and a listing)."""
    script: dict[str, Any] = json.loads((EXAMPLES / "fix-a-bug.mock.json").read_text())
    edit, tests = (turn["$tool_calls"][0] for turn in script["responses"]["fix"][:2])
    push = {"name": "Bash", "arguments": {"command": "git push --force"}}
    listing = {"name": "Bash", "arguments": {"command": "ls tally"}}
    final = script["responses"]["fix"][2]
    script["responses"]["fix"] = [
        {"$tool_calls": [edit, push, tests]},
        {"$tool_calls": [tests, listing]},
        final,
    ]
    return script


@pytest.mark.parametrize("page", [1440], indirect=True)
def test_parallel_calls_are_decided_one_by_one(page: Any, tmp_path: Path) -> None:
    project = ask_project(tmp_path / "project")
    with gateway(tmp_path, project) as url:
        run_id = start(url, parallel_script())
        open_run(page, url, run_id)
        card_for(page, ["fix.1.1", "fix.1.2", "fix.1.3"])
        assert "3 tool calls wait for your approval" in text(page, f"{CARD} h2")
        assert by_css(page, f"{CARD} .send-approvals").get_attribute("disabled") is not None
        click(page, f"{CARD} .approval[data-id='fix.1.1'] .decide-allow")
        assert "1 of 3 decided" in text(page, f"{CARD} .approval-count")
        by_css(page, f"{CARD} .approval[data-id='fix.1.2'] .approval-reason").send_keys(
            "never push from an agent"
        )
        click(page, f"{CARD} .approval[data-id='fix.1.2'] .decide-deny")
        click(page, f"{CARD} .approval[data-id='fix.1.3'] .decide-allow")
        assert (
            by_css(page, f"{CARD} .approval[data-id='fix.1.2'] .decide-deny").get_attribute(
                "aria-pressed"
            )
            == "true"
        )
        assert "denied" in text(page, f"{CARD} .approval[data-id='fix.1.2'] .approval-status")
        assert (project / ".claude").exists() and "(len(values) + 1)" in (
            project / "tally/stats.py"
        ).read_text(), "nothing runs before the decisions are sent"
        page.execute_script(f"document.querySelector('{CARD}').scrollIntoView()")
        shot(page, "panel-approval-parallel-1440.png", tmp_path)
        click(page, f"{CARD} .send-approvals")
        card_for(page, ["fix.2.1", "fix.2.2"])
        click(page, f"{CARD} .decide-all-allow")
        until(lambda: run_status(page) == "completed", "the run did not complete")
    folder = tmp_path / "runs" / run_id
    lines = [json.loads(x) for x in (folder / "journal.jsonl").read_text().splitlines()]
    decided = [(x["id"], x["decision"], x["door"]) for x in lines if x["kind"] == "tool_decision"]
    assert decided == [
        ("fix.1.1", "allow", "panel"),
        ("fix.1.2", "deny", "panel"),
        ("fix.1.3", "allow", "panel"),
        ("fix.2.1", "allow", "panel"),
        ("fix.2.2", "allow", "panel"),
    ]
    denied = next(x for x in lines if x["kind"] == "tool_decision" and x["id"] == "fix.1.2")
    assert denied["reason"] == "never push from an agent"
    ran = [x["tool"] for x in lines if x["kind"] == "tool_call"]
    assert ran == ["Glob", "Grep", "Read", "Read", "Read", "Edit", "Bash", "Bash", "Bash"], (
        "no push"
    )
    refused = [x["text"] for x in lines if x["kind"] == "tool_result" and x["is_error"]]
    assert len(refused) == 1 and "never push from an agent" in refused[0], "the model is told"
    assert "(len(values) + 1)" not in (project / "tally/stats.py").read_text()


@pytest.mark.parametrize("page", [1440], indirect=True)
def test_a_branch_session_card_at_1440(page: Any, base_url: str, tmp_path: Path) -> None:
    """The branch session's chat card beside the approval card (docs/panel.md's picture)."""
    mock = json.loads((EXAMPLES / "branch-session.mock.json").read_text())
    with httpx.Client(base_url=base_url, timeout=TIMEOUT) as client:
        run_id = start_via_api(
            client,
            document=json.loads((EXAMPLES / "branch-session.json").read_text()),
            mock_script=mock,
            inputs=json.loads((EXAMPLES / "branch-session.inputs.json").read_text()),
        )
    open_run(page, base_url, run_id, finished="halted")
    card = ".notice.question"
    until(lambda: "your turn" in text(page, f"{card} h2"), "the session's card did not show")
    type_into(page, f"{card} #answer-text", "Which step touches the file writer?")
    click(page, f"{card} button[type='submit']")
    reply = mock["responses"]["branchSession-review"][0]
    until(lambda: reply in text(page, card), "the reply did not come back")
    until(lambda: run_status(page) == "halted", "the run did not halt for the next message")
    shot(page, "panel-session-1440.png", tmp_path)

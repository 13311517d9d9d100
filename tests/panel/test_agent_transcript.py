"""The panel's inspector shows an agent op as its transcript: turns, tool calls, results
and the diff of the file it changed (a real headless Chromium against a real server
whose configuration grants the agents a workspace)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from lattice.config import AgentsConfig, LatticeConfig, RunsConfig
from lattice.server.app import ServerSettings
from lattice.server.in_thread import serve_in_thread
from lattice.workspace import sandbox_problem
from tests.conftest import EXAMPLES
from tests.panel.browser import chromium, console_errors, require_browser
from tests.panel.test_browser import click, node_el, open_run, start_via_api, text, until
from tests.server.helpers import TIMEOUT, wait_for_status

pytestmark = pytest.mark.skipif(sandbox_problem() is not None, reason="no sandbox here")


@pytest.fixture(scope="module")
def agent_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("panel-agents")
    flows = root / "workflows"
    flows.mkdir()
    for suffix in (".json", ".mock.json"):
        shutil.copy(EXAMPLES / f"fix-a-bug{suffix}", flows / f"fix-a-bug{suffix}")
    project = root / "project"
    shutil.copytree(EXAMPLES / "fix-a-bug-project", project)
    config = LatticeConfig(
        runs=RunsConfig(durability="os"),
        agents=AgentsConfig(workspace=str(project), allow=["read", "write", "shell"]),
    )
    settings = ServerSettings(runs_dir=root / "runs", workflows_dir=flows, config=config)
    with serve_in_thread(settings) as url:
        yield url


@pytest.fixture(scope="module")
def page() -> Iterator[Any]:
    require_browser()
    with chromium() as session:
        session.set_window_size(1400, 900)
        console_errors(session)
        yield session
        errors = [e for e in console_errors(session) if "favicon" not in e]
        assert not errors, errors


def test_an_agent_node_shows_its_transcript_and_diff(page: Any, agent_server: str) -> None:
    inputs = json.loads((EXAMPLES / "fix-a-bug.inputs.json").read_text())
    with httpx.Client(base_url=agent_server, timeout=TIMEOUT) as client:
        run_id = start_via_api(
            client, workflow="fix-a-bug.json", mock="fix-a-bug.mock.json", inputs=inputs
        )
        wait_for_status(client, run_id, ("completed",))
    open_run(page, agent_server, run_id, finished="completed")
    node_el(page, "fix").click()
    until(
        lambda: page.execute_script("return document.querySelectorAll('.turn').length") == 3,
        "the inspector did not show the agent's three turns",
    )
    tools = page.execute_script(
        "return [...document.querySelectorAll('.tool-call')].map(c => c.dataset.tool)"
    )
    assert tools == ["Edit", "Bash"]
    bash = text(page, ".tool-call[data-tool='Bash'] .tool-result")
    assert "Ran 3 tests" in bash and "OK" in bash
    diff = text(page, ".i-section .diff[data-path='tally/stats.py'] .diff-text")
    assert "+    return sum(values) / len(values)" in diff
    assert "answer" in text(page, ".turn.final h5")
    # Every turn is a model request: the node counts the agent's turns and their tokens,
    # as the op record (and `lattice runs show`) does, not only the final answer.
    with httpx.Client(base_url=agent_server, timeout=TIMEOUT) as client:
        records = client.get(f"/v1/runs/{run_id}/ops", params={"node": "fix"}).json()
    turns = [t for r in records["records"] for t in r["transcript"]["turns"]]
    tokens = sum(t["input_tokens"] + t["output_tokens"] for t in turns)
    assert len(turns) == 3
    assert f"3 model calls, {tokens:,} tokens" in text(page, ".node-meta")
    # its attempt says the same: three model calls (its turns) and their tokens, not the
    # last turn's alone beside totals that contradict it
    assert (
        page.execute_script("return document.querySelector('.record .attempt').dataset.calls")
        == "3"
    )
    attempt = text(page, ".record .attempt")
    assert "3 (turns 1–3)" in attempt
    ins = sum(t["input_tokens"] for t in turns)
    outs = sum(t["output_tokens"] for t in turns)
    assert f"{ins:,} in / {outs:,} out, all turns" in attempt
    assert "3 model calls" in text(page, ".record > summary")
    # the diff: a row per line, added and removed told apart by sign, word and colour
    lines = page.execute_script(
        "return [...document.querySelectorAll(\".i-section .diff[data-path='tally/stats.py'] .dl\")]"
        ".map(l => [l.className, l.textContent, getComputedStyle(l).backgroundColor])"
    )
    added = [line for line in lines if "dl-add" in line[0]]
    removed = [line for line in lines if "dl-del" in line[0]]
    assert added and removed, lines
    assert all(t.startswith("added: +") for _, t, _ in added)
    assert all(t.startswith("removed: -") for _, t, _ in removed)
    colours = {added[0][2], removed[0][2], next(c for k, _, c in lines if "dl-ctx" in k)}
    assert len(colours) == 3, colours
    assert text(page, ".i-section .diff[data-path='tally/stats.py'] .diff-count").startswith("+")
    # the timeline nests each tool call under its op, with its time
    until(
        lambda: (
            page.execute_script(
                "return document.querySelectorAll('.timeline-row[data-op=fix] .tool-rows li').length"
            )
            == 2
        ),
        "the timeline did not nest the agent's tool calls",
    )
    rows = text(page, ".timeline-row[data-op=fix] .tool-rows")
    assert rows.splitlines()[0].startswith("Edit ") and rows.splitlines()[1].startswith("Bash ")
    assert "…" not in rows  # both finished
    click(page, "svg .node[data-node='explore']")
    until(
        lambda: (
            page.execute_script(
                "return [...document.querySelectorAll('.tool-call')].map(c => c.dataset.tool).join()"
            )
            == "Glob,Grep,Read,Read"
        ),
        "the explore agent's calls were not shown",
    )

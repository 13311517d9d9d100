"""Every run records how it was started (``meta.started_by``), shown by ``lattice runs
show`` and in the run's JSON the gateway (and its panel) reads."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx

from lattice import Runner, lower
from lattice.llm.mock import MockProvider
from lattice.runs.store import RunStore
from lattice.runs.view import show_run, started_by_text
from lattice.server.app import ServerSettings
from lattice.server.in_thread import serve_in_thread
from tests.conftest import EXAMPLES

HELLO = EXAMPLES / "hello-world.json"


def test_a_run_from_python_says_the_library_started_it(tmp_path: Path) -> None:
    ir = lower(HELLO)
    provider = MockProvider.from_file(EXAMPLES / "hello-world.mock.json")
    result = Runner(ir, provider=provider, store=RunStore(tmp_path)).run({"name": "Ada"})
    assert result.run_dir is not None
    meta = json.loads((result.run_dir / "checkpoint.json").read_text())["meta"]
    assert meta["started_by"] == {"via": "library"}
    assert "started by the Python library (Runner)" in show_run(result.run_dir)


def test_a_run_of_the_api_says_so_in_its_json(tmp_path: Path) -> None:
    with serve_in_thread(ServerSettings(runs_dir=tmp_path, workflows_dir=EXAMPLES)) as url:
        started = httpx.post(
            f"{url}/v1/runs",
            json={
                "workflow": "hello-world.json",
                "inputs": {"name": "Ada"},
                "mock": "hello-world.mock.json",
            },
        ).json()
        for _ in range(2000):
            run = httpx.get(f"{url}/v1/runs/{started['run_id']}").json()
            if run["status"] != "running":
                break
            time.sleep(0.01)
        listed = httpx.get(f"{url}/v1/runs").json()["runs"]
    assert run["started_by"] == {"via": "api"}
    assert listed[0]["started_by"] == {"via": "api"}


def test_each_way_of_starting_reads_in_words() -> None:
    words = {
        "mcp": ({"tool": "hello-world"}, "MCP tool hello-world"),
        "webhook": ({"trigger": "gh", "delivery": "d-1"}, "webhook gh (delivery d-1)"),
        "schedule": (
            {"schedule": "nightly", "tick": "2026-12-02T02:00:00+01:00"},
            "schedule nightly (tick 2026-12-02T02:00:00+01:00)",
        ),
    }
    for via, (details, text) in words.items():
        assert started_by_text({"started_by": {"via": via, **details}}) == text
    assert started_by_text({}) is None

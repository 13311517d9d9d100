"""Re-running from a step: the state before it, edited, as a new run linked to its parent
(the runtime, the service and ``POST /v1/runs/{id}/rerun`` on a real server)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lattice.config import LatticeConfig, RunsConfig
from lattice.errors import InputError
from lattice.runtime.runner import Runner
from lattice.server.app import ServerSettings
from lattice.server.in_thread import serve_in_thread
from lattice.service.rerun import prepare_rerun, rerun_point
from tests.conftest import EXAMPLES
from tests.server.helpers import TIMEOUT, file_events, wait_for_status

CONFIG = LatticeConfig(runs=RunsConfig(durability="os"))
INPUTS = json.loads((EXAMPLES / "support-triage.inputs.json").read_text())


@pytest.fixture(scope="module")
def space(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("rerun")
    flows = root / "workflows"
    flows.mkdir()
    for suffix in (".json", ".mock.json", ".inputs.json"):
        shutil.copy(EXAMPLES / f"support-triage{suffix}", flows / f"support-triage{suffix}")
    return root


@pytest.fixture(scope="module")
def base_url(space: Path) -> Iterator[str]:
    settings = ServerSettings(
        runs_dir=space / "runs", workflows_dir=space / "workflows", config=CONFIG
    )
    with serve_in_thread(settings) as url:
        yield url


@pytest.fixture(scope="module")
def parent(base_url: str) -> str:
    with httpx.Client(base_url=base_url, timeout=TIMEOUT) as client:
        started = client.post(
            "/v1/runs",
            json={
                "workflow": "support-triage.json",
                "mock": "support-triage.mock.json",
                "inputs": INPUTS,
            },
        )
        assert started.status_code == 202, started.text
        run_id = str(started.json()["run_id"])
        wait_for_status(client, run_id, ("completed",))
        return run_id


def test_the_state_before_each_visit_of_an_op(space: Path, parent: str) -> None:
    folder = space / "runs" / parent
    first = rerun_point(folder, "review", 1)
    second = rerun_point(folder, "review")
    assert (first.visits, second.visit) == (2, 2)
    assert first.state["vars"]["revisions"] == 0 and second.state["vars"]["revisions"] == 1
    assert "review" not in first.state["vars"]  # the review has not happened yet
    assert first.state["in"] == INPUTS
    with pytest.raises(InputError, match="visit 3 is not one of them"):
        rerun_point(folder, "review", 3)
    with pytest.raises(InputError, match="never ran"):
        rerun_point(folder, "draft-bug")


def test_a_rerun_with_an_edited_value_reflects_it_and_names_its_parent(
    base_url: str, space: Path, parent: str
) -> None:
    with httpx.Client(base_url=base_url, timeout=TIMEOUT) as client:
        preview = client.get(f"/v1/runs/{parent}/rerun", params={"op": "assemble"})
        assert preview.status_code == 200, preview.text
        state = preview.json()["state"]
        state["vars"]["current-draft"]["result"]["subject"] = "Edited in the panel"
        started = client.post(
            f"/v1/runs/{parent}/rerun", json={"op": "assemble", "state": {"vars": state["vars"]}}
        )
        assert started.status_code == 202, started.text
        child = str(started.json()["run_id"])
        assert started.json()["parent"] == {"run_id": parent, "op": "assemble", "visit": 1}
        done = wait_for_status(client, child, ("completed",))
        assert done["output"]["subject"] == "Edited in the panel"
        assert done["parent"] == {"run_id": parent, "op": "assemble", "visit": 1}
        assert client.get(f"/v1/runs/{parent}").json()["reruns"] == [
            {"run_id": child, "op": "assemble", "visit": 1}
        ]
    events = file_events(space / "runs" / child)
    assert events[0]["data"]["parent"]["run_id"] == parent
    ran = [e["op_id"] for e in events if e["type"] == "op_started"]
    assert ran == ["assemble", "end"]  # nothing before the step runs again


def test_a_rerun_is_refused_with_reasons(base_url: str, parent: str) -> None:
    with httpx.Client(base_url=base_url, timeout=TIMEOUT) as client:
        missing = client.post(f"/v1/runs/{parent}/rerun", json={"op": "nope"})
        assert missing.status_code == 422 and "no op 'nope'" in missing.text
        bad_input = client.post(
            f"/v1/runs/{parent}/rerun", json={"op": "review", "state": {"in": {"ticket": 42}}}
        )
        assert bad_input.status_code == 422, bad_input.text
        tmp = client.post(f"/v1/runs/{parent}/rerun", json={"op": "review", "state": {"tmp": {}}})
        assert tmp.status_code == 422 and "only in and vars" in tmp.text


def test_a_rerun_that_fails_resumes_from_its_own_start(
    tmp_path: Path, space: Path, parent: str
) -> None:
    folder = space / "runs" / parent
    failing = tmp_path / "failing.mock.json"
    script: dict[str, Any] = json.loads((EXAMPLES / "support-triage.mock.json").read_text())
    script["responses"]["review"] = [{"$error": "provider_error", "message": "down"}]
    failing.write_text(json.dumps(script))
    from lattice.service.providers import ProviderChoice
    from lattice.service.runs import ProviderSpec

    prepared = prepare_rerun(
        folder,
        op="review",
        visit=2,
        provider=ProviderSpec(ProviderChoice(mock=str(failing))),
        config=CONFIG,
        runs_dir=tmp_path / "runs",
    )
    result = prepared.run()
    assert result.status == "failed"
    resumed = Runner.resume(tmp_path / "runs" / result.run_id, provider=_mock())
    assert resumed.status == "completed"
    events = file_events(tmp_path / "runs" / result.run_id)
    assert "classify" not in [e.get("op_id") for e in events]  # never before its start op
    assert resumed.output["revisions"] == 1


def _mock() -> Any:
    from lattice.llm.mock import MockProvider

    script = json.loads((EXAMPLES / "support-triage.mock.json").read_text())
    script["responses"]["review"] = script["responses"]["review"][1:]  # the approving answer
    return MockProvider.from_script(script)


def test_runs_diff_says_what_a_rerun_inherited(
    base_url: str, space: Path, parent: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The steps before the re-run's start are its parent's: inherited, not removed, and
    the parent is compared from that step on (both ways round)."""
    from lattice.batch.diff import diff_runs
    from lattice.cli import main

    with httpx.Client(base_url=base_url, timeout=TIMEOUT) as client:
        started = client.post(f"/v1/runs/{parent}/rerun", json={"op": "review", "visit": 2})
        assert started.status_code == 202, started.text
        child = str(started.json()["run_id"])
        wait_for_status(client, child, ("completed",))
    runs = space / "runs"
    forward = diff_runs(runs / parent, runs / child)
    assert forward.rerun is not None and forward.rerun["run"] == "b"
    assert (forward.rerun["op"], forward.rerun["visit"]) == ("review", 2)
    assert forward.rerun["steps"][:2] == ["start", "classify"]
    assert "classify" in forward.rerun["nodes"] and "classify" not in forward.nodes
    assert forward.a.path[0] == forward.b.path[0] == "review"
    backward = diff_runs(runs / child, runs / parent)
    assert backward.rerun is not None and backward.rerun["run"] == "a"
    assert backward.rerun["steps"] == forward.rerun["steps"]
    main(["runs", "diff", str(runs / parent), str(runs / child)])
    out = capsys.readouterr().out
    assert f"B is a re-run of {parent} from review (visit 2)" in out
    assert "inherited, compared from there on" in out
    assert "node classify" not in out

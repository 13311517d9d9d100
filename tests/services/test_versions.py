"""The gateway serves workflows by name and version (docs/services.md, "Versions"):
each content of a workflow file is deployed once as an immutable version, a run records
the version it ran, ``latest`` moves only with new content, and a run of an old version
resumes on that version's IR."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from lattice.cli.main import main
from lattice.config import LatticeConfig
from lattice.errors import LatticeUserError
from lattice.ir.serialize import execir_digest, ir_from_json
from lattice.runs.view import show_run
from lattice.server.app import ServerSettings, create_app
from lattice.server.in_thread import serve_in_thread
from lattice.services.catalog import Catalog
from lattice.services.webhooks import sign
from tests.conftest import EXAMPLES

NAME = "expense-approval"
INPUTS = json.loads((EXAMPLES / f"{NAME}.inputs.json").read_text())


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A workflows folder holding the expense approval (v1 once deployed) and its mock."""
    root = tmp_path / "workflows"
    root.mkdir()
    for suffix in (".json", ".mock.json"):
        shutil.copy(EXAMPLES / f"{NAME}{suffix}", root / f"{NAME}{suffix}")
    return root


def change(folder: Path, *, prompt: str, approved: str) -> None:
    """Edit the workflow file: the summary's prompt and the approved end's output."""
    path = folder / f"{NAME}.json"
    document = json.loads(path.read_text())
    for node in document["nodes"]:
        if node["id"] == "summarise":
            node["data"]["prompt"] = prompt
        if node["id"] == "approved":
            node["data"]["output"] = approved
    path.write_text(json.dumps(document))


def test_identical_content_is_the_same_version_and_a_change_is_the_next(folder: Path) -> None:
    catalog = Catalog(folder, versions=folder.parent / "runs" / ".versions")
    first = catalog.resolve(NAME)
    assert first.version is not None and first.version.ref == f"{NAME}@1"
    # the same content again, with other whitespace and key order: no new version
    path = folder / f"{NAME}.json"
    document = json.loads(path.read_text())
    path.write_text(json.dumps(dict(reversed(list(document.items()))), indent=4))
    assert (
        Catalog(folder, versions=folder.parent / "runs" / ".versions").resolve(NAME).version
        == first.version
    )
    assert catalog.resolve(NAME).version == first.version
    change(folder, prompt="Say it in one line: {{ $in.purpose }}", approved="OK")
    latest = catalog.resolve(NAME)
    assert latest.version is not None and latest.version.number == 2
    assert catalog.resolve(f"{NAME}@latest").version == latest.version
    old = catalog.resolve(f"{NAME}@1")
    assert old.version == first.version
    assert old.ir == first.ir and old.ir != latest.ir
    assert catalog.resolve(f"{NAME}.json@1").version == first.version
    with pytest.raises(LatticeUserError, match="no version 3"):
        catalog.resolve(f"{NAME}@3")


def test_a_deployed_version_that_was_changed_is_refused(folder: Path) -> None:
    catalog = Catalog(folder, versions=folder.parent / "runs" / ".versions")
    catalog.resolve(NAME)
    change(folder, prompt="Summarise: {{ $in.purpose }}", approved="OK")
    catalog.resolve(NAME)  # version 2 now; version 1 is kept
    kept = folder.parent / "runs" / ".versions" / NAME / "1" / "workflow.json"
    assert not kept.stat().st_mode & 0o222  # read-only
    kept.chmod(0o644)
    tampered = json.loads(kept.read_text())
    tampered["description"] = "changed behind the store's back"
    kept.write_text(json.dumps(tampered))
    with pytest.raises(LatticeUserError, match="changed after it was deployed") as caught:
        catalog.resolve(f"{NAME}@1")
    assert caught.value.error_type == "version_changed"


def wait(url: str, run_id: str, *, until: str | None = None) -> dict[str, Any]:
    for _ in range(3000):
        run: dict[str, Any] = httpx.get(f"{url}/v1/runs/{run_id}").json()
        if run["status"] != "running" and (until is None or run["status"] == until):
            return run
        time.sleep(0.01)
    raise AssertionError(f"run {run_id} did not stop: {run}")


def start(url: str, workflow: str) -> str:
    answer = httpx.post(
        f"{url}/v1/runs",
        json={"workflow": workflow, "inputs": INPUTS, "mock": f"{NAME}.mock.json"},
    )
    assert answer.status_code == 202, answer.text
    return str(answer.json()["run_id"])


def test_runs_record_their_version_and_an_old_run_resumes_on_its_own_ir(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "runs"
    settings = ServerSettings(runs_dir=runs, workflows_dir=folder)
    with serve_in_thread(settings) as url:
        v1_run = start(url, NAME)
        halted = wait(url, v1_run)
        assert halted["status"] == "halted"
        assert halted["workflow_version"]["version"] == 1
        v1_digest = halted["workflow_version"]["ir_digest"]

        change(folder, prompt="Summarise for the board: {{ $in.purpose }}", approved="Paid.")
        v2_run = start(url, NAME)
        v2 = wait(url, v2_run)
        assert v2["workflow_version"]["version"] == 2
        v2_ir = ir_from_json((runs / v2_run / "execir.json").read_text())
        assert "for the board" in json.dumps(
            json.loads((runs / v2_run / "workflow.json").read_text())
        )
        assert execir_digest(v2_ir) == v2["workflow_version"]["ir_digest"] != v1_digest
        pinned = start(url, f"{NAME}@1")
        assert wait(url, pinned)["workflow_version"]["version"] == 1
        missing = httpx.post(f"{url}/v1/runs", json={"workflow": f"{NAME}@9", "inputs": INPUTS})
        assert missing.status_code == 404
        outside = httpx.post(f"{url}/v1/runs", json={"workflow": "../x.json@1", "inputs": {}})
        assert outside.status_code == 400

        # the halted v1 run, answered after v2 was deployed, goes on with v1's IR
        answered = httpx.post(
            f"{url}/v1/runs/{v1_run}/answers", json={"answers": {"approve": "Approve"}}
        )
        assert answered.status_code == 202, answered.text
        done = wait(url, v1_run, until="completed")
        assert done["output"].startswith("Approved: Ada Lovelace")
        assert done["workflow_version"]["version"] == 1
        v1_ir = ir_from_json((runs / v1_run / "execir.json").read_text())
        assert execir_digest(v1_ir) == v1_digest

        listed = httpx.get(f"{url}/v1/runs", params={"workflow": f"{NAME}@1"}).json()["runs"]
        assert {run["run_id"] for run in listed} == {v1_run, pinned}
        every = httpx.get(f"{url}/v1/runs", params={"workflow": NAME}).json()["runs"]
        assert {run["run_id"] for run in every} == {v1_run, v2_run, pinned}

    result = json.loads((runs / v1_run / "result.json").read_text())
    assert result["workflow_version"]["version"] == 1
    assert f"workflow {NAME}@1 (document sha256:" in show_run(runs / v1_run)

    assert main(["runs", "list", "--runs-dir", str(runs), "--workflow", f"{NAME}@1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert sorted(line.split()[0] for line in lines) == sorted([v1_run, pinned])
    assert all(f"{NAME}@1" in line for line in lines)
    assert main(["runs", "list", "--runs-dir", str(runs), "--workflow", f"{NAME}@2"]) == 0
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()] == [v2_run]


def test_lattice_deploy_prints_each_version_new_or_unchanged(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = str(tmp_path / "runs")
    assert main(["deploy", str(folder), "--runs-dir", runs]) == 0
    assert capsys.readouterr().out.split()[:2] == [f"{NAME}@1", "new"]
    assert main(["deploy", str(folder), "--runs-dir", runs]) == 0
    assert capsys.readouterr().out.split()[:2] == [f"{NAME}@1", "unchanged"]
    change(folder, prompt="Summarise: {{ $in.purpose }}", approved="OK")
    (folder / "broken.json").write_text('{"nodes": [{"id": "x"}]}')
    assert main(["deploy", str(folder), "--runs-dir", runs]) == 2
    out = capsys.readouterr()
    assert out.out.split()[:2] == [f"{NAME}@2", "new"]
    assert "broken.json not deployed" in out.err


def test_a_tool_call_at_the_gateway_takes_name_at_version(folder: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"

    def version_of(run_id: str) -> int:
        meta = json.loads((runs / run_id / "checkpoint.json").read_text())["meta"]
        return int(meta["workflow_version"]["version"])

    async def go(url: str) -> None:
        async with httpx.AsyncClient(timeout=60) as http:
            transport = streamable_http_client(f"{url}/mcp", http_client=http)
            async with Client(transport, read_timeout_seconds=60) as mcp:
                first = (await mcp.call_tool(NAME, INPUTS)).structured_content
                assert first is not None and version_of(first["run_id"]) == 1
                change(folder, prompt="Summarise: {{ $in.purpose }}", approved="Paid.")
                latest = (await mcp.call_tool(NAME, INPUTS)).structured_content
                assert latest is not None and version_of(latest["run_id"]) == 2
                pinned = (await mcp.call_tool(f"{NAME}@1", INPUTS)).structured_content
                assert pinned is not None and version_of(pinned["run_id"]) == 1
                unknown = await mcp.call_tool(f"{NAME}@7", INPUTS)
                assert unknown.is_error and "no version 7" in str(unknown.content)

    settings = ServerSettings(runs_dir=runs, workflows_dir=folder, mocks=True)
    with serve_in_thread(settings) as url:
        anyio.run(go, url)


def test_a_webhook_pinned_to_a_version_starts_that_version(
    folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = tmp_path / "runs"
    secret = "whsec-versions-0123456789"
    monkeypatch.setenv("LATTICE_TEST_HOOK_SECRET", secret)
    trigger = {"path": "expense", "workflow": f"{NAME}@1", "secret_env": "LATTICE_TEST_HOOK_SECRET"}
    trigger["inputs"] = {key: f"body.{key}" for key in INPUTS}
    missing = LatticeConfig.model_validate(
        {"triggers": {"t": {**trigger, "workflow": f"{NAME}@4"}}}
    )
    with pytest.raises(LatticeUserError, match="no version 4"):
        create_app(ServerSettings(runs_dir=runs, workflows_dir=folder, config=missing))
    config = LatticeConfig.model_validate({"triggers": {"expense": trigger}})
    settings = ServerSettings(runs_dir=runs, workflows_dir=folder, config=config, mocks=True)
    with serve_in_thread(settings) as url:  # deploys the file as it is: version 1
        change(folder, prompt="Summarise: {{ $in.purpose }}", approved="Paid.")
        body = json.dumps(INPUTS).encode()
        headers = {
            "X-Lattice-Signature": sign(secret.encode(), body, timestamp=int(time.time())),
            "X-Lattice-Delivery": "delivery-1",
        }
        answer = httpx.post(f"{url}/hooks/expense", content=body, headers=headers)
        assert answer.status_code == 202, answer.text
        run = wait(url, answer.json()["run_id"])
        assert run["workflow_version"]["version"] == 1
        latest = wait(url, start(url, NAME))  # the file changed: latest is version 2
        assert latest["workflow_version"]["version"] == 2

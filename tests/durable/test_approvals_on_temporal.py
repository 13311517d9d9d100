"""Approvals of agents' tool calls on Temporal: the fix-a-bug example with ``ask`` rules on
Edit and Bash waits, with no worker held, for each decision; approved with ``lattice
resume --temporal`` and through a gateway on Temporal it ends with the files and the
result of the local run (``tests/permissions/test_fix_a_bug_approvals.py``). Workers
killed with ``kill -9`` while the run waits and after a decision: no tool call runs twice
and no decided call is asked again."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lattice.workspace import sandbox_problem
from tests.conftest import EXAMPLES
from tests.durable.helpers import example, worker_process
from tests.permissions.test_fix_a_bug_approvals import EXPECTED_OUTPUT, FIXED

pytest.importorskip("temporalio")

from lattice.durable.temporal.backend import TemporalRuns
from lattice.durable.temporal.client import approve, connect, start_run
from lattice.durable.temporal.plan import ActivityOptions

pytestmark = pytest.mark.skipif(
    sandbox_problem() is not None, reason=f"no sandbox here: {sandbox_problem()}"
)
LATTICE = [sys.executable, "-m", "lattice.cli"]
WAIT = 120.0
"""Seconds a run may take at most on a loaded machine (a bound, not a timing)."""
COUNTER = 'import pathlib\nwith open(pathlib.Path(__file__).parent.parent / "ran.log", "a") as f:\n    f.write("ran\\n")\n'
"""A test module of the project: each run of its tests (the agent's Bash) adds a line."""


class Workers:
    """One ``lattice worker`` process at a time on a task queue of its own, in a folder
    whose ``lattice.toml`` grants the project; ``kill`` is ``kill -9`` and a new one."""

    def __init__(self, address: str, root: Path, project: Path) -> None:
        self.address = address
        self.queue = f"appr-{uuid.uuid4().hex[:10]}"
        self.cwd = root / "worker"
        self.cwd.mkdir()
        (self.cwd / "lattice.toml").write_text(
            f'[agents]\nworkspace = "{project}"\nallow = ["read", "write", "shell"]\n'
        )
        self.env = {"HOME": str(root / "home")}
        self.process = self._start()

    def _start(self) -> subprocess.Popen[bytes]:
        return worker_process(self.address, self.queue, self.cwd, self.env)

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        self.process = self._start()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    shutil.copytree(EXAMPLES / "fix-a-bug-project", root)
    (root / ".claude").mkdir()
    (root / ".claude/settings.json").write_text(
        json.dumps({"permissions": {"ask": ["Bash", "Edit"]}})
    )
    (root / "tests/test_zz_counter.py").write_text(COUNTER)
    return root


@pytest.fixture
def workers(temporal_address: str, tmp_path: Path, project: Path) -> Iterator[Workers]:
    running = Workers(temporal_address, tmp_path, project)
    try:
        yield running
    finally:
        running.stop()


def lattice(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "LATTICE_CONFIG"}
    return subprocess.run(
        [*LATTICE, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=WAIT,
    )


def the_fixed_project(project: Path) -> None:
    """The project as the local run leaves it: the bug fixed, its tests run once."""
    original = EXAMPLES / "fix-a-bug-project"
    files = sorted(
        str(p.relative_to(project))
        for p in project.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    )
    assert files == sorted(
        [
            ".claude/settings.json",
            "ran.log",
            "tests/test_zz_counter.py",
            *(
                str(p.relative_to(original))
                for p in original.rglob("*")
                if p.is_file() and "__pycache__" not in p.parts
            ),
        ]
    )
    stats = (project / "tally/stats.py").read_text()
    assert FIXED in stats
    before = (original / "tally/stats.py").read_text()
    assert stats == before.replace("    return sum(values) / (len(values) + 1)\n", FIXED)
    assert (project / "ran.log").read_text() == "ran\n", "the agent's Bash ran once"


async def record(address: str, run_id: str) -> dict[str, Any]:
    client = await connect(address)
    result: dict[str, Any] = await client.get_workflow_handle(run_id).query("record")
    return result


def asked_and_decided(rec: dict[str, Any]) -> tuple[list[str], list[tuple[str, str, str]]]:
    """The approvals the run asked for (each time) and the decisions given (id, choice,
    door), from the workflow's record."""
    asked = [e["data"]["id"] for e in rec["events"] if e["type"] == "approval_requested"]
    return asked, [(d["id"], d["decision"], d["door"]) for d in rec["decisions"]]


def fix_calls(rec: dict[str, Any]) -> list[tuple[str, bool]]:
    (fix,) = [op for op in rec["ops"] if op["node_id"] == "fix"]
    return [
        (call["name"], call["is_error"])
        for turn in fix["transcript"]["turns"]
        for call in turn["tool_calls"]
    ]


def test_approved_with_lattice_resume_on_temporal(
    temporal_address: str, workers: Workers, project: Path, tmp_path: Path
) -> None:
    common = ("--temporal", temporal_address)
    started = lattice(
        "run",
        str(EXAMPLES / "fix-a-bug.json"),
        *("--mock", str(EXAMPLES / "fix-a-bug.mock.json")),
        *("--inputs", str(EXAMPLES / "fix-a-bug.inputs.json")),
        *("--engine", "temporal", *common, "--task-queue", workers.queue, "--json"),
        cwd=tmp_path,
    )
    assert started.returncode == 3, started.stderr
    line = next(x for x in started.stderr.splitlines() if "--approve fix.1.1" in x)
    run_id = line.split("lattice resume ")[1].split()[0]
    assert "(len(values) + 1)" in (project / "tally/stats.py").read_text(), "the Edit waits"

    listed = lattice("runs", "list", "--waiting", *common, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    rows = listed.stdout.splitlines()
    at = next((i for i, row in enumerate(rows) if row.startswith(run_id)), None)
    assert at is not None, listed.stdout + listed.stderr
    assert "halted" in rows[at] and "[waiting_for_approval] fix" in rows[at]
    assert rows[at + 1] == "    approve fix.1.1: Edit tally/stats.py"
    workers.kill()  # while the run waits: no activity is in flight

    wrong = lattice("resume", run_id, *common, "--approve", "fix.9.9", cwd=tmp_path)
    assert wrong.returncode == 2 and "no tool call waits for approval as fix.9.9" in wrong.stderr
    edited = lattice("resume", run_id, *common, "--approve", "fix.1.1", cwd=tmp_path)
    assert edited.returncode == 3, edited.stderr
    assert f"lattice resume {run_id} --temporal {temporal_address} --approve fix.2.1" in (
        edited.stderr
    )
    assert FIXED in (project / "tally/stats.py").read_text()
    workers.kill()  # after a decision, while the run waits for the next

    done = lattice("resume", run_id, *common, "--approve", "fix.2.1", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["output"] == EXPECTED_OUTPUT
    the_fixed_project(project)
    rec = asyncio.run(record(temporal_address, run_id))
    assert asked_and_decided(rec) == (
        ["fix.1.1", "fix.2.1"],
        [("fix.1.1", "allow", "lattice resume"), ("fix.2.1", "allow", "lattice resume")],
    )
    assert fix_calls(rec) == [("Edit", False), ("Bash", False)]


def wait_for(check: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + WAIT
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"waited too long for {what}"
        time.sleep(0.05)


def test_approved_through_a_gateway_on_temporal(
    temporal_address: str, workers: Workers, project: Path, tmp_path: Path
) -> None:
    from lattice.config import LatticeConfig
    from lattice.server.app import ServerSettings
    from lattice.server.in_thread import serve_in_thread

    settings = ServerSettings(
        runs_dir=tmp_path / "runs",
        config=LatticeConfig(),
        backend=TemporalRuns(temporal_address, task_queue=workers.queue),
    )
    with serve_in_thread(settings) as url, httpx.Client(base_url=url, timeout=WAIT) as client:
        started = client.post(
            "/v1/runs",
            json={
                "document": json.loads((EXAMPLES / "fix-a-bug.json").read_text()),
                "mock_script": json.loads((EXAMPLES / "fix-a-bug.mock.json").read_text()),
                "inputs": json.loads((EXAMPLES / "fix-a-bug.inputs.json").read_text()),
            },
        )
        assert started.status_code == 202, started.text
        run_id = started.json()["run_id"]

        def halted_on(request_id: str) -> dict[str, Any] | None:
            response = client.get(f"/v1/runs/{run_id}")
            if response.status_code == 503:  # no worker answered yet
                return None
            run: dict[str, Any] = response.json()
            approvals = ((run.get("failure") or {}).get("details") or {}).get("approvals")
            if run.get("status") == "halted" and approvals and approvals[0]["id"] == request_id:
                return run
            return None

        for request_id, tool in (("fix.1.1", "Edit"), ("fix.2.1", "Bash")):
            run = wait_for(lambda r=request_id: halted_on(r), f"the run to wait on {request_id}")
            (waiting,) = run["failure"]["details"]["approvals"]
            assert waiting["tool"] == tool
            workers.kill()  # while the run waits
            body = {"approvals": {request_id: "allow"}}
            answered = wait_for(  # 503 until the new worker answers the run's queries
                lambda b=body: (
                    (r := client.post(f"/v1/runs/{run_id}/answers", json=b)).status_code != 503
                    and r
                ),
                "a worker to answer",
            )
            assert answered.status_code == 202, answered.text
        run = wait_for(
            lambda: (
                (r := client.get(f"/v1/runs/{run_id}")).status_code == 200
                and r.json()["status"] == "completed"
                and r.json()
            ),
            "the run to complete",
        )
        assert run["output"] == EXPECTED_OUTPUT
    the_fixed_project(project)
    rec = asyncio.run(record(temporal_address, run_id))
    assert asked_and_decided(rec) == (
        ["fix.1.1", "fix.2.1"],
        [("fix.1.1", "allow", "gateway"), ("fix.2.1", "allow", "gateway")],
    )


def test_a_worker_killed_after_each_decision_runs_and_asks_nothing_twice(
    temporal_address: str, workers: Workers, project: Path
) -> None:
    """The kill probe: the worker is killed once each decided call has run (the op's
    activity still in flight), and Temporal starts the op again on a new worker."""
    ir, script, inputs = example("fix-a-bug")
    run_id = f"appr-{uuid.uuid4().hex[:10]}"

    async def start() -> None:
        await start_run(
            await connect(temporal_address),
            ir,
            run_id=run_id,
            inputs=inputs,
            provider={"mock_script": script},
            activity=ActivityOptions(heartbeat_seconds=2),
            task_queue=workers.queue,
        )

    async def progress() -> dict[str, Any]:
        client = await connect(temporal_address)
        found: dict[str, Any] = await client.get_workflow_handle(run_id).query("progress", 1 << 62)
        return found

    def waits_on(request_id: str) -> bool:
        question = asyncio.run(progress())["question"]
        return bool(question) and question["details"]["approvals"][0]["id"] == request_id

    async def decide(request_id: str) -> None:
        await approve(
            await connect(temporal_address),
            run_id,
            {request_id: {"decision": "allow", "door": "probe"}},
        )

    async def bash_result_kept() -> bool:
        """Whether the op's journal on the server holds the Bash's result (or the op
        is over)."""
        client = await connect(temporal_address)
        described = await client.get_workflow_handle(run_id).describe()
        pending = described.raw_description.pending_activities
        for activity in pending:
            details = await client.data_converter.decode(activity.heartbeat_details.payloads)
            lines = details[0] if details else []
            bash = {x["key"] for x in lines if x["kind"] == "tool_call" and x["tool"] == "Bash"}
            if any(x["kind"] == "tool_result" and x["key"] in bash for x in lines):
                return True
        return not pending

    asyncio.run(start())
    wait_for(lambda: waits_on("fix.1.1"), "the Edit to wait")
    asyncio.run(decide("fix.1.1"))
    wait_for(lambda: FIXED in (project / "tally/stats.py").read_text(), "the Edit to apply")
    workers.kill()
    wait_for(lambda: waits_on("fix.2.1"), "the Bash to wait")
    asyncio.run(decide("fix.2.1"))
    wait_for(lambda: (project / "ran.log").exists(), "the Bash to run")
    # killed once its result is kept (a call killed while it runs may run again, as locally)
    wait_for(lambda: asyncio.run(bash_result_kept()), "the Bash's result to be kept")
    workers.kill()
    wait_for(lambda: asyncio.run(progress())["result"], "the run to end")
    rec = asyncio.run(record(temporal_address, run_id))
    assert rec["result"]["status"] == "completed", rec["result"]
    assert rec["result"]["output"] == EXPECTED_OUTPUT
    the_fixed_project(project)
    assert asked_and_decided(rec) == (
        ["fix.1.1", "fix.2.1"],
        [("fix.1.1", "allow", "probe"), ("fix.2.1", "allow", "probe")],
    )
    assert fix_calls(rec) == [("Edit", False), ("Bash", False)]

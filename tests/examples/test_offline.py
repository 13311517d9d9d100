"""Every example runs offline to its real result with the one command its README gives.

The commands are read from the "Run them" block of ``workflows/examples/README.md`` and
run in-process (``lattice.cli.main``) from the repository root. A command that starts
with ``python workflows/examples/services.py --`` runs against the example services this
test process started on a free port: its inputs file is copied with the base URLs (or
the port) pointing there, which is what the helper's default port gives a user. MCP servers
are started by lattice from the example's config, as for a user.

Each run must complete, take no ``failed`` port, send each HTTP request once and quickly
(no retries, no time-outs), and return the values the stand-ins and the mock give.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lattice.cli import main
from tests.builders import op_records
from tests.conftest import EXAMPLES, REPO, example_files

README = EXAMPLES / "README.md"
HELPER = ["python", "workflows/examples/services.py", "--"]
DEFAULT_URL = "http://127.0.0.1:8765"
HTTP_OP_MS = 5000
"""An HTTP call to the local services takes milliseconds; one that took this long waited
for a time-out or a retry."""


def documented_commands() -> dict[str, list[str]]:
    """Example name → the command of the README's "Run them" block, split like a shell."""
    text = README.read_text(encoding="utf-8")
    section = text.split("\n## Run them\n", 1)[1]
    block = section.split("```sh\n", 1)[1].split("\n```", 1)[0]
    commands: dict[str, list[str]] = {}
    for line in block.splitlines():
        argv = shlex.split(line)
        lattice = argv[len(HELPER) :] if argv[: len(HELPER)] == HELPER else argv
        assert lattice[:2] == ["lattice", "run"], line
        name = Path(lattice[2]).name.removesuffix(".json")
        assert name not in commands, f"two commands for {name}"
        commands[name] = argv
    return commands


COMMANDS = documented_commands()


def test_every_example_has_one_documented_command() -> None:
    assert set(COMMANDS) == {p.stem for p in example_files()}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_command_uses_the_examples_own_files(name: str) -> None:
    argv = COMMANDS[name]
    for flag, suffix in (
        ("--mock", ".mock.json"),
        ("--inputs", ".inputs.json"),
        ("--answers", ".answers.json"),
        ("--config", ".lattice.toml"),
    ):
        helper = EXAMPLES / f"{name}{suffix}"
        if flag in argv:
            assert argv[argv.index(flag) + 1] == f"workflows/examples/{name}{suffix}"
        elif flag != "--inputs" or not helper.exists():
            assert not helper.exists(), f"{helper.name} exists but the command does not use it"
    if "--config" in argv:
        config = (EXAMPLES / f"{name}.lattice.toml").read_text(encoding="utf-8")
        # a command that reaches 127.0.0.1 runs with the services, and only then
        assert ('"127.0.0.1"' in config) == (argv[: len(HELPER)] == HELPER)


# -- running them -------------------------------------------------------------------------


def local_inputs(name: str, services: Any, tmp_path: Path) -> Path:
    """The example's inputs with the services' default address replaced by ``services``'."""
    inputs = json.loads((EXAMPLES / f"{name}.inputs.json").read_text(encoding="utf-8"))
    for key, value in inputs.items():
        if isinstance(value, str) and value.startswith(DEFAULT_URL):
            inputs[key] = services.url + value.removeprefix(DEFAULT_URL)
        elif key == "port" and value == 8765:
            inputs[key] = services.port
    path = tmp_path / f"{name}.inputs.json"
    path.write_text(json.dumps(inputs), encoding="utf-8")
    return path


class Run:
    """One documented command, run: the JSON result, its folder's events and op records,
    and the requests the services received during it."""

    def __init__(self, result: dict[str, Any], requests: list[dict[str, Any]]) -> None:
        self.result = result
        self.output = result["output"]
        self.vars = result["vars"]
        self.requests = requests
        folder = Path(result["run_dir"])
        self.events = [
            json.loads(line)
            for line in (folder / "events.jsonl").read_text(encoding="utf-8").splitlines()
        ]
        self.records = op_records(folder)
        ops = json.loads((folder / "execir.json").read_text(encoding="utf-8"))["ops"]
        self.http_ops = {i for i, op in ops.items() if op.get("call", {}).get("tool") == "http"}

    def nodes(self) -> list[str]:
        return [r["node_id"] for r in self.records]


def run_documented(
    name: str, services: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> Run:
    argv = list(COMMANDS[name])
    with_services = argv[: len(HELPER)] == HELPER
    if with_services:
        argv = argv[len(HELPER) :]
        at = argv.index("--inputs") + 1
        argv[at] = str(local_inputs(name, services, tmp_path))
    if "--workspace" in argv:  # the example edits its workspace: a copy of its project
        at = argv.index("--workspace") + 1
        argv[at] = str(shutil.copytree(EXAMPLES / f"{name}-project", tmp_path / "project"))
    seen = len(services.received)
    capsys.readouterr()
    code = main([*argv[1:], "--runs-dir", str(tmp_path / "runs"), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    requests = services.received[seen:]
    if not with_services:
        assert requests == [], "a command without the services reached them"
    return Run(json.loads(out), requests)


def check_the_real_path(run: Run) -> None:
    assert run.result["status"] == "completed", run.result["failure"]
    failed = [
        e["node_id"]
        for e in run.events
        if e["type"] == "op_finished" and e["data"].get("port") == "failed"
    ]
    assert failed == [], f"left through a failed port: {failed}"
    calls = [e for e in run.events if e["type"] == "tool_call"]
    results = [e for e in run.events if e["type"] == "tool_result"]
    assert len(calls) == len(results)
    http = [r for r in run.records if r["op_id"] in run.http_ops]
    assert len(http) == len(run.requests)
    for record in http:
        assert record["duration_ms"] < HTTP_OP_MS, record
    sent = [(r["method"], r["path"], json.dumps(r["body"])) for r in run.requests]
    assert len(sent) == len(set(sent)), f"a request was sent again: {sent}"
    assert all(r["status"] < 300 for r in run.requests), run.requests


def tools(run: Run) -> list[str]:
    return [
        e["data"]["tool"] if e["data"]["tool"] == "http" else f"mcp:{e['data']['server']}"
        for e in run.events
        if e["type"] == "tool_call"
    ]


# -- what each example must return --------------------------------------------------------


def support_triage(run: Run) -> None:
    assert run.output["category"] == "billing"
    assert run.output["urgency"] == 4
    assert run.output["approved"] is True
    assert run.output["revisions"] == 1
    assert run.output["subject"] == "Refund of the duplicate charge for INV-2291"


def hello_world(run: Run) -> None:
    assert run.output == "Welcome aboard, Ada: your first Lattice workflow just ran!"


def expense_approval(run: Run) -> None:
    assert run.output == "Approved: Ada Lovelace is paid 42.5 with the next payroll."
    assert run.vars["summarise"]["result"].startswith("Ada Lovelace claims 42.5")


def analyst_panel(run: Run) -> None:
    assert run.output["verdict"] == "wait"
    assert run.output["answers"][0]["question"] == "Who buys it first?"


def brainstorm_ideas(run: Run) -> None:
    assert run.output["ranking"][0]["idea"] == "SMS reminders 48h and 2h before"


def branch_session(run: Run) -> None:
    assert run.output.startswith("- [ ] parser: --dry-run")
    session = run.vars["branchSession-review"]
    assert [turn["person"] for turn in session["transcript"]] == [
        "Which step touches the file writer?",
        "The dry run should print each path with its size.",
        "What do the tests check?",
    ]
    assert session["result"].startswith("Agreed plan:")


def content_moderation(run: Run) -> None:
    assert run.output["decision"]["action"] == "hold"


def code_review_fix(run: Run) -> None:
    assert run.output.startswith("--- a/app/users.py")


def world_clock(run: Run) -> None:
    assert tools(run) == ["http", "mcp:time"]
    assert [r["path"] for r in run.requests] == ["/members/ana"]
    assert run.output["member"] == "Ana"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+0[01]:00", run.output["local_time"])
    assert run.vars["clock"]["result"]["timezone"] == "Europe/Lisbon"
    assert run.output["advice"]["verdict"] == "call now"


def standup_digest(run: Run) -> None:
    assert tools(run) == ["mcp:time", "http"]
    (request,) = run.requests
    assert request["path"] == "/tasks/api/v1/teams/platform/tasks"
    assert "updatedWithin=24h" in request["query"]
    assert run.vars["now"]["result"]["timezone"] == "Europe/Berlin"
    assert run.vars["done"]["result"] == [
        "Rotate staging TLS certificates",
        "Upgrade Postgres to 16.3",
    ]
    assert run.vars["open"]["result"] == [
        {"title": "Migrate CI runners to arm64", "owner": "sam", "blocked": True},
        {"title": "Write runbook for failover", "owner": "maya", "blocked": False},
    ]
    assert run.output.startswith("## Done\n- Rotate staging TLS certificates (maya)")
    prompt = summarize_prompt(run)
    assert "Migrate CI runners to arm64" in prompt and "Europe/Berlin" in prompt


def summarize_prompt(run: Run) -> str:
    (record,) = [r for r in run.records if r["node_id"] == "summarize"]
    return str(record["attempts"][-1]["messages"][-1]["content"])


def release_announcement(run: Run) -> None:
    assert tools(run) == ["http", "http"]
    assert run.output == "Posted 3.1.1 to #eng-releases (HTTP 201)."
    read, post = run.requests
    assert read["path"] == "/github/repos/pallets/flask/releases/latest"
    assert post["path"] == "/chat/api/channels/eng-releases/messages"
    assert post["body"]["text"].startswith("*Flask 3.1.1 is out*\nFlask 3.1.1 fixes")
    assert post["body"]["metadata"] == {
        "repo": "pallets/flask",
        "release": "3.1.1",
        "url": "https://github.com/pallets/flask/releases/tag/3.1.1",
    }
    assert run.vars["post"]["result"]["body"]["id"].startswith("msg-")


def employee_onboarding(run: Run) -> None:
    assert tools(run) == ["http"]
    (request,) = run.requests
    assert request["body"]["employee"] == {
        "name": "Priya Raman",
        "role": "backend engineer",
        "startDate": "2026-02-02",
    }
    assert request["body"]["accounts"] == [
        "google-workspace",
        "github",
        "slack",
        "jira",
        "aws-readonly",
    ]
    provisioning = run.output["provisioning"]
    assert provisioning["via"] == "IT provisioning API"
    assert re.fullmatch(r"PRV-\d{4}", provisioning["request"])
    assert provisioning["status"] == "queued"
    assert run.output["welcome"]["subject"] == "Welcome to the team, Priya!"
    assert "provision__helpdesk-note" not in run.nodes()


def incident_response(run: Run) -> None:
    assert tools(run) == ["mcp:pagerduty"]
    assert run.output["triage"]["severity"] == "sev1"
    incident = run.output["incident"]
    assert incident["status"] == "triggered"
    assert incident["service"] == "security-response"
    assert incident["assigned_to"] == "Dana Whitfield"
    assert incident["urgency"] == "high"
    assert re.fullmatch(r"P[0-9A-F]{10}", incident["id"])


def meeting_prep(run: Run) -> None:
    assert tools(run) == ["mcp:time", "mcp:google-calendar"]
    assert run.vars["now"]["result"]["timezone"] == "Europe/Berlin"
    assert run.vars["location"] == "Video call (link added by the calendar)"
    event = run.output
    assert re.fullmatch(r"evt_[0-9a-f]{10}", event["id"])
    assert event["status"] == "confirmed"
    assert event["summary"] == "Q2 on-call rotation"
    assert (event["start"], event["end"]) == (
        "2026-01-13T10:00:00+01:00",
        "2026-01-13T10:30:00+01:00",
    )
    assert event["attendees"] == ["maya@example.com", "li@example.com"]
    assert event["location"] == "Video call (link added by the calendar)"


def fix_a_bug(run: Run) -> None:
    assert run.output["tests_passed"] is True
    (change,) = run.result["changes"]
    assert change["path"] == "tally/stats.py" and change["op"] == "fix"
    project = Path(run.result["run_dir"]).parent.parent / "project"
    assert "return sum(values) / len(values)\n" in (project / "tally/stats.py").read_text()


def add_a_feature(run: Run) -> None:
    assert "all 4 tests pass" in run.output
    changes = [(c["op"], c["path"]) for c in run.result["changes"]]
    assert changes == [
        ("implement", "tally/stats.py"),
        ("implement", "tests/test_stats.py"),
        ("checks", "tally/stats.py"),
    ]
    project = Path(run.result["run_dir"]).parent.parent / "project"
    assert "def median(" in (project / "tally/stats.py").read_text()


EXPECTED: dict[str, Callable[[Run], None]] = {
    "fix-a-bug": fix_a_bug,
    "add-a-feature": add_a_feature,
    "support-triage": support_triage,
    "hello-world": hello_world,
    "analyst-panel": analyst_panel,
    "brainstorm-ideas": brainstorm_ideas,
    "content-moderation": content_moderation,
    "code-review-fix": code_review_fix,
    "world-clock": world_clock,
    "standup-digest": standup_digest,
    "release-announcement": release_announcement,
    "employee-onboarding": employee_onboarding,
    "incident-response": incident_response,
    "meeting-prep": meeting_prep,
    "branch-session": branch_session,
    "expense-approval": expense_approval,
}


def test_every_example_has_expectations() -> None:
    assert set(EXPECTED) == set(COMMANDS)


@pytest.mark.usefixtures("repo_root_with_venv")
@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_documented_command_gives_the_real_result(
    name: str, services: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = run_documented(name, services, tmp_path, capsys)
    check_the_real_path(run)
    EXPECTED[name](run)


# -- the helper itself, as a user runs it -------------------------------------------------


SERVICES = [sys.executable, str(EXAMPLES / "services.py")]


@pytest.fixture
def helper_env(venv_path: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LATTICE_", "OPENAI_"))}
    env["PATH"] = venv_path
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return env


def test_the_helper_serves_while_the_command_runs_and_passes_its_exit_code(
    helper_env: dict[str, str],
) -> None:
    """The release-announcement command as a user types it, through a real
    ``services.py`` process (``--port 0``: a free port, which ``{url}`` passes on) and
    the ``lattice`` console script."""
    argv = list(COMMANDS["release-announcement"])
    assert argv[: len(HELPER)] == HELPER
    argv[len(HELPER) - 1 : len(HELPER) - 1] = ["--port", "0"]
    argv += ["--input", "github_api={url}/github", "--input", "chat_api={url}/chat"]
    done = subprocess.run(
        [*argv, "--no-record"],
        cwd=REPO,
        env=helper_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == "Posted 3.1.1 to #eng-releases (HTTP 201)."
    log = [line for line in done.stderr.splitlines() if line.startswith("services: ")]
    assert [line.split("?")[0] for line in log] == [
        "services: GET /github/repos/pallets/flask/releases/latest -> 200",
        "services: POST /chat/api/channels/eng-releases/messages -> 201",
    ]


def test_the_helper_exits_with_the_commands_code(helper_env: dict[str, str]) -> None:
    code = "import sys, urllib.request; urllib.request.urlopen(sys.argv[1]); sys.exit(3)"
    done = subprocess.run(
        [
            *SERVICES,
            "--port",
            "0",
            "--quiet",
            "--",
            sys.executable,
            "-c",
            code,
            "{url}/members/ana",
        ],
        env=helper_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 3, done.stderr
    assert done.stderr == ""


def test_the_helper_says_when_its_port_is_taken(services: Any, helper_env: dict[str, str]) -> None:
    done = subprocess.run(
        [
            *SERVICES,
            "--port",
            str(services.port),
            "--",
            sys.executable,
            "-c",
            "print('never runs')",
        ],
        env=helper_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert f"cannot listen on 127.0.0.1:{services.port}" in done.stderr

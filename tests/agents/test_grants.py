"""Grants come from the user: [agents] in lattice.toml and the flags; a document only asks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lattice.config import LatticeConfig, with_agent_grants
from lattice.errors import LatticeUserError
from lattice.runs.view import show_run
from lattice.runtime.settings import agent_settings_from_config
from tests.builders import chain, node, op_record
from tests.cli.test_run import cli, write_json

GP = node(
    "fix",
    "subAgent",
    prompt="Fix it",
    builtInType="general-purpose",
    tools="Read, LS, Glob, Grep, Edit, MultiEdit, Write, Bash",
)
"""A general-purpose agent narrowed to the workspace's tools (its type alone asks for all)."""


def test_nothing_is_granted_by_default() -> None:
    grant = agent_settings_from_config(LatticeConfig()).grant
    assert grant.root is None and grant.decide(["Read", "WebFetch"]).granted == ()


def test_flags_add_to_the_configuration(tmp_path: Path) -> None:
    config = LatticeConfig.model_validate({"agents": {"allow": ["read"], "max_turns": 5}})
    config = with_agent_grants(
        config, workspace=str(tmp_path), allow=["write,shell", "web"], patch_only=True
    )
    settings = agent_settings_from_config(config)
    grant = settings.grant
    assert grant.root == tmp_path.resolve() and grant.patch_only
    assert (grant.read, grant.write, grant.shell, grant.web) == (True, True, True, True)
    assert settings.max_turns == 5


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"allow": ["root"]}, "--allow root: grants are read, write, shell, web"),
        ({"allow": ["reed"]}, "grants are read, write, shell, web (did you mean 'read'?)"),
        ({"mcp_servers": ["ghost"]}, "agent grants: agents.mcp_servers names ['ghost'], not in"),
    ],
)
def test_a_bad_grant_is_a_user_error(change: dict[str, list[str]], fragment: str) -> None:
    with pytest.raises(LatticeUserError) as caught:
        with_agent_grants(LatticeConfig(), **change)  # type: ignore[arg-type]
    assert fragment in caught.value.message


def test_a_workspace_that_is_not_a_folder_is_refused(tmp_path: Path) -> None:
    config = with_agent_grants(LatticeConfig(), workspace=str(tmp_path / "nope"))
    with pytest.raises(LatticeUserError, match="not a directory"):
        agent_settings_from_config(config)


def test_check_lists_each_agents_tools_and_what_is_granted(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    doc = write_json(tmp_path / "doc.json", chain(GP))
    code, out, _ = cli(capsys, "check", doc, "--workspace", tmp_path, "--allow", "read")
    assert code == 0
    assert out.splitlines() == [
        f"agent nodes (workspace {tmp_path.resolve()}; grants read):",
        "  fix (general-purpose)",
        "    asks for: Read, LS, Glob, Grep, Edit, MultiEdit, Write, Bash",
        "    granted:  Read, LS, Glob, Grep",
        "    not granted: Edit, MultiEdit, Write (to grant: [agents] allow = ['write'] "
        "(or --allow write))",
        "    not granted: Bash (to grant: [agents] allow = ['shell'] (or --allow shell))",
    ]


def test_check_lists_what_an_agent_asking_for_every_tool_gets(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    plain = node("fix", "subAgent", prompt="Fix it")
    doc = write_json(tmp_path / "doc.json", chain(plain))
    code, out, _ = cli(capsys, "check", doc, "--workspace", tmp_path, "--allow", "read,shell")
    assert code == 0
    assert out.splitlines() == [
        f"agent nodes (workspace {tmp_path.resolve()}; grants read, shell):",
        "  fix (custom)",
        "    asks for: every tool of the main agent (*)",
        "    granted:  Read, LS, Glob, Grep, Bash",
    ]
    code, out, _ = cli(capsys, "check", doc)
    assert out.splitlines()[-3:] == [
        "without tools in this run (Claude Code would give them tools):",
        "  fix (sub-agent)",
        "    to grant: [agents] workspace and allow (or --workspace DIR --allow read,write,shell)",
    ]


def test_a_run_warns_once_per_node_and_setting_of_what_it_left_out(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    doc = write_json(tmp_path / "doc.json", chain(GP))
    mock = write_json(tmp_path / "mock.json", {"responses": {"fix": ["done"]}})
    runs = tmp_path / "runs"
    code, _, err = cli(capsys, "run", doc, "--mock", mock, "--runs-dir", runs)
    assert code == 0
    warnings = [line for line in err.splitlines() if "warning: agent node" in line]
    assert warnings == [
        f"lattice: warning: agent node 'fix' asks for {tools}, not granted: left out of the "
        f"model's tools (to grant: [agents] workspace and allow = ['{kind}'] (or --workspace "
        f"DIR --allow {kind}))"
        for tools, kind in (
            ("Read, LS, Glob, Grep", "read"),
            ("Edit, MultiEdit, Write", "write"),
            ("Bash", "shell"),
        )
    ]
    text = next(runs.iterdir()).joinpath("events.jsonl").read_text()
    events = [json.loads(line) for line in text.splitlines()]
    refused = [e["data"] for e in events if e["type"] == "agent_tool_refused"]
    assert {tool for r in refused for tool in r["tools"]} == {
        "Read",
        "LS",
        "Glob",
        "Grep",
        "Edit",
        "MultiEdit",
        "Write",
        "Bash",
    }
    assert all(r["node"] == "fix" for r in refused)


def test_a_tool_less_agent_is_told_one_allow_list_that_grants_all_it_asks_for(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    explore = node("look", "subAgent", prompt="Look around", builtInType="explore")
    doc = write_json(tmp_path / "doc.json", chain(explore))
    code, out, _ = cli(capsys, "check", doc)
    assert code == 0
    listed = out.split("without tools in this run", 1)[1].splitlines()
    assert listed[1:3] == [
        "  look (sub-agent)",
        "    to grant: [agents] workspace and allow = ['read', 'shell'] "
        "(or --workspace DIR --allow read,shell)",
    ]


def test_serve_takes_the_grant_flags(tmp_path: Path) -> None:
    pytest.importorskip("fastapi")
    from lattice.cli.parser import build_parser
    from lattice.server.main import settings_from_args

    argv = ["serve", "--workspace", str(tmp_path), "--allow", "read", "--patch-only"]
    settings = settings_from_args(build_parser().parse_args(argv))
    agents = settings.config.agents
    assert (agents.workspace, agents.allow, agents.patch_only) == (str(tmp_path), ["read"], True)


def test_batch_runs_agents_with_the_grant_flags(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "notes.txt").write_text("the answer is 42\n")
    doc = write_json(
        tmp_path / "doc.json", chain(node("a", "subAgent", prompt="{{ $in.q }}", tools="Read"))
    )
    read = {"$tool_calls": [{"name": "Read", "arguments": {"file_path": "notes.txt"}}]}
    mock = write_json(tmp_path / "mock.json", {"responses": {"a": [read, "42", read, "42"]}})
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"q": "what is it?"}\n{"q": "and again?"}\n')
    out = tmp_path / "results.jsonl"
    code, _, err = cli(
        capsys,
        "batch",
        doc,
        "--inputs",
        rows,
        "--output",
        out,
        "--mock",
        mock,
        "--concurrency",
        "1",
        "--runs-dir",
        tmp_path / "runs",
        "--workspace",
        tmp_path,
        "--allow",
        "read",
    )
    assert code == 0, err
    results = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["status"] for r in results] == ["completed", "completed"]
    folders = sorted((tmp_path / "runs").iterdir())
    calls = [op_record(folder, "a")["transcript"]["tool_calls"] for folder in folders]
    assert calls == [1, 1]


def test_a_scripted_tool_call_without_grants_says_to_grant_and_start_again(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    doc = write_json(tmp_path / "doc.json", chain(GP))
    calls = {"$tool_calls": [{"name": "Read", "arguments": {"file_path": "a.py"}}]}
    mock = write_json(tmp_path / "mock.json", {"responses": {"fix": [calls, "done"]}})
    runs = tmp_path / "runs"
    code, _, err = cli(capsys, "run", doc, "--mock", mock, "--runs-dir", runs)
    assert code == 1
    assert "none of its tools is granted" in err
    (next_step,) = [line for line in err.splitlines() if line.startswith("lattice: next:")]
    # A resume keeps the grants the run started with: it would fail the same way.
    assert "lattice resume" not in next_step
    assert "--workspace DIR --allow" in next_step and "start a new run" in next_step


def test_runs_show_counts_the_tool_calls_answered_with_an_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    doc = write_json(tmp_path / "doc.json", chain(GP))
    edit = {
        "name": "Edit",
        "arguments": {"file_path": "a.py", "old_string": "a", "new_string": "b"},
    }
    ls = {"name": "LS", "arguments": {"path": "."}}
    calls = {"$tool_calls": [ls, edit]}
    mock = write_json(tmp_path / "mock.json", {"responses": {"fix": [calls, "done"]}})
    runs = tmp_path / "runs"
    workspace = tmp_path / "project"
    workspace.mkdir()
    args = ["--workspace", workspace, "--allow", "read", "--runs-dir", runs]
    code, _, _ = cli(capsys, "run", doc, "--mock", mock, *args)
    assert code == 0
    shown = show_run(next(runs.iterdir()))
    # Edit is not granted: the model got an error for it, which the summary says
    assert "2 turn(s), 2 tool call(s) (1 answered with an error)" in shown


def test_the_shells_limits_come_from_the_configuration() -> None:
    limits = {
        "shell_tmp_bytes": 64_000_000,
        "shell_file_bytes": 5_000_000,
        "shell_write_bytes": 50_000_000,
        "shell_write_files": 500,
    }
    grant = agent_settings_from_config(LatticeConfig.model_validate({"agents": limits})).grant
    assert {name: getattr(grant, name) for name in limits} == limits

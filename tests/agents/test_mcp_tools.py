"""MCP tools for agents in Claude Code's names: one tool (``mcp__demo__shout``) or all of a
server's (``mcp__demo``, ``mcp__demo__*``), asked for by a node and granted by the user."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from lattice.agents.loop import ToolBox
from lattice.config import LatticeConfig, with_agent_grants
from lattice.errors import LatticeUserError
from lattice.ir.tool_names import mcp_grant_entry, parse_mcp_name
from lattice.tools.mcp import McpServerSpec, ToolSessions
from lattice.workspace.grants import WorkspaceGrant
from lattice.workspace.toolset import workspace_toolsets
from tests.builders import chain, node
from tests.cli.test_run import cli, write_json

SERVER = Path(__file__).resolve().parent.parent / "mcp_test_server.py"
DEMO = McpServerSpec("demo", command=sys.executable, args=(str(SERVER),))
DEMO_TOOLS = ["add", "shout", "fail", "nap", "get_pull_request", "env", "complain"]


@pytest.mark.parametrize(
    ("name", "parsed"),
    [
        ("mcp__demo__shout", ("demo", "shout")),
        ("mcp__demo__*", ("demo", None)),
        ("mcp__demo", ("demo", None)),
        ("mcp__*", None),
        ("mcp____x", None),
        ("mcp__demo__a*", None),
        ("Read", None),
    ],
)
def test_mcp_names_are_read_as_claude_code_reads_them(
    name: str, parsed: tuple[str, str | None] | None
) -> None:
    assert parse_mcp_name(name) == parsed


def test_a_grant_entry_is_a_server_or_one_tool() -> None:
    assert mcp_grant_entry("demo") == ("demo", None)
    assert mcp_grant_entry("mcp__demo__*") == ("demo", None)
    assert mcp_grant_entry("mcp__demo__shout") == ("demo", "shout")
    assert mcp_grant_entry("mcp__*") is None


def test_a_whole_server_asked_for_is_granted_by_the_server_or_by_some_of_its_tools() -> None:
    asked = ["mcp__demo__*", "mcp__demo__add"]
    assert WorkspaceGrant(mcp_servers=("demo",)).decide(asked).granted == tuple(asked)
    one_tool = WorkspaceGrant(mcp_servers=("mcp__demo__shout",))
    decision = one_tool.decide(asked)
    assert decision.granted == ("mcp__demo__*",)
    assert [tool for tool, _ in decision.refused] == ["mcp__demo__add"]
    assert WorkspaceGrant(mcp_servers=("other",)).decide(asked).granted == ()


def offered(grant: WorkspaceGrant, asked: list[str]) -> tuple[list[str], Any, Any]:
    """The names a ToolBox over the demo server offers, and two calls' results."""

    async def go() -> tuple[list[str], Any, Any]:
        sessions = ToolSessions({"demo": DEMO})
        try:
            granted = grant.decide(asked).granted
            box = await ToolBox.open(workspace_toolsets(grant, granted, mcp=sessions), granted)
            toolsets = list(workspace_toolsets(grant, granted, mcp=sessions))
            shout = await toolsets[0].call("mcp__demo__shout", {"text": "hi"})
            add = await toolsets[0].call("mcp__demo__add", {"a": 1, "b": 2})
            return list(box.names), shout, add
        finally:
            await sessions.aclose()

    return asyncio.run(go())


@pytest.mark.parametrize("asked", ["mcp__demo__*", "mcp__demo"])
def test_a_whole_server_asked_for_offers_every_tool_it_lists(asked: str) -> None:
    names, shout, add = offered(WorkspaceGrant(mcp_servers=("demo",)), [asked])
    assert names == [f"mcp__demo__{tool}" for tool in DEMO_TOOLS]
    assert (shout.is_error, shout.text) == (False, "HI")
    assert not add.is_error


def test_a_grant_of_one_tool_narrows_a_whole_server_to_it() -> None:
    names, shout, add = offered(WorkspaceGrant(mcp_servers=("mcp__demo__shout",)), ["mcp__demo__*"])
    assert names == ["mcp__demo__shout"]
    assert shout.text == "HI"
    assert add.is_error and "is not a tool of MCP server 'demo'" in add.text


def test_the_configuration_takes_the_same_names_and_refuses_others() -> None:
    config = LatticeConfig.model_validate(
        {"mcp": {"servers": {"demo": {"command": sys.executable}}}}
    )
    granted = with_agent_grants(config, mcp_servers=["mcp__demo__shout", "mcp__demo__*"])
    assert granted.agents.mcp_servers == ["mcp__demo__shout", "mcp__demo__*"]
    with pytest.raises(LatticeUserError, match=r"'mcp__\*' is not a server id, mcp__<server>"):
        with_agent_grants(config, mcp_servers=["mcp__*"])
    with pytest.raises(LatticeUserError, match=r"names \['ghost'\], not in \[mcp.servers\]"):
        with_agent_grants(config, mcp_servers=["mcp__ghost__x"])


def demo_config(tmp_path: Path) -> Path:
    path = tmp_path / "lattice.toml"
    path.write_text(
        f"[mcp.servers.demo]\ncommand = {json.dumps(sys.executable)}\n"
        f"args = [{json.dumps(str(SERVER))}]\n"
    )
    return path


def test_check_lists_a_whole_server_and_what_of_it_is_granted(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    agent = node("ask", "subAgent", prompt="Go", tools="Read, mcp__demo__*, mcp__*")
    doc = write_json(tmp_path / "doc.json", chain(agent))
    config = demo_config(tmp_path)
    code, out, err = cli(
        capsys, "check", doc, "--config", config, "--allow-mcp", "mcp__demo__shout"
    )
    assert code == 0
    assert "unknown tool 'mcp__*' (name the server: mcp__<server>__* asks for all" in err
    assert out.splitlines()[1:4] == [
        "  ask (custom)",
        "    asks for: Read, mcp__demo__*",
        "    granted:  mcp__demo__* (only mcp__demo__shout)",
    ]
    code, out, _ = cli(capsys, "check", doc, "--config", config, "--allow-mcp", "demo")
    assert "    granted:  mcp__demo__*" in out.splitlines()


def test_a_granted_tool_no_server_lists_is_said_not_dropped_unseen(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    agent = node("ask", "subAgent", prompt="Go", tools="mcp__demo__shout, mcp__demo__nosuch")
    doc = write_json(tmp_path / "doc.json", chain(agent))
    mock = write_json(tmp_path / "mock.json", {"responses": {"ask": ["done"]}})
    runs = tmp_path / "runs"
    code, _, err = cli(
        capsys,
        "run",
        doc,
        "--mock",
        mock,
        "--runs-dir",
        runs,
        "--config",
        demo_config(tmp_path),
        "--allow-mcp",
        "demo",
    )
    assert code == 0, err
    assert (
        "lattice: warning: agent node 'ask': mcp__demo__nosuch granted, but no tool of that "
        "name is listed" in err
    )
    (folder,) = runs.iterdir()
    events = [json.loads(line) for line in (folder / "events.jsonl").read_text().splitlines()]
    started = next(e["data"] for e in events if e["type"] == "agent_started")
    assert started["tools"] == ["mcp__demo__shout"]
    missing = [e["data"] for e in events if e["type"] == "agent_tool_missing"]
    assert missing == [{"node": "ask", "tools": ["mcp__demo__nosuch"]}]


def test_an_ir_asking_for_a_whole_server_reads_back() -> None:
    from lattice.ir.serialize import check_ir, ir_from_json, ir_to_json
    from tests.builders import lower_ok

    ir = lower_ok(chain(node("ask", "subAgent", prompt="Go", tools="mcp__demo__*")))
    assert check_ir(ir) == []
    (op,) = [op for op in ir_from_json(ir_to_json(ir)).ops.values() if op.kind == "AGENT"]
    assert op.tools == ["mcp__demo__*"]


def test_mock_init_scripts_calls_of_single_mcp_tools_only() -> None:
    from lattice.service.mocks import agent_turns

    (turn,) = agent_turns(["mcp__demo__*", "mcp__demo__shout"])
    assert [call["name"] for call in turn["$tool_calls"]] == ["mcp__demo__shout"]

"""Mock scripts answer tool calls: an mcp or httpRequest node's results by node id, an
MCP tool's by ``server/tool``; what the script does not list goes to the real server."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from lattice.cli import main
from lattice.errors import LatticeRunError, LatticeUserError
from lattice.llm.mock import MockProvider, check_script


def node(node_id: str, type_: str, **data: object) -> dict[str, object]:
    return {"id": node_id, "type": type_, "name": node_id, "data": data}


def clock_document() -> dict[str, object]:
    return {
        "id": "clocks",
        "name": "clocks",
        "nodes": [
            node("start", "start"),
            node(
                "utc",
                "mcp",
                serverId="time",
                toolName="get_current_time",
                parameterValues={"timezone": "UTC"},
            ),
            node(
                "tokyo",
                "mcp",
                serverId="time",
                toolName="get_current_time",
                parameterValues={"timezone": "Asia/Tokyo"},
            ),
            node(
                "end",
                "end",
                output={"utc": "$vars.utc.result.datetime", "tokyo": "$vars.tokyo.result.datetime"},
            ),
        ],
        "connections": [
            {"from": "start", "to": "utc"},
            {"from": "utc", "to": "tokyo"},
            {"from": "tokyo", "to": "end"},
        ],
    }


def run(
    tmp_path: Path, script: Mapping[str, object], capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, str]:
    flow = tmp_path / "clocks.json"
    flow.write_text(json.dumps(clock_document()))
    mock = tmp_path / "clocks.mock.json"
    mock.write_text(json.dumps(script))
    code = main(["run", str(flow), "--mock", str(mock), "--no-record"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_results_by_node_id_then_by_server_and_tool(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = {
        "responses": {},
        "tools": {
            "utc": [{"datetime": "12:00"}],
            "time/get_current_time": [{"datetime": "21:00"}],
        },
    }
    code, out, err = run(tmp_path, script, capsys)
    assert code == 0, err
    assert json.loads(out) == {"utc": "12:00", "tokyo": "21:00"}


def test_a_call_the_script_does_not_list_goes_to_the_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(tmp_path, {"tools": {"utc": [{"datetime": "12:00"}]}}, capsys)
    assert code != 0
    assert "[tool_error] at tokyo: MCP server 'time': not configured" in err


def test_a_used_up_list_and_a_scripted_failure_fail_the_call() -> None:
    provider = MockProvider(tools={"a": [1], "b": [{"$error": "tool_error", "message": "down"}]})
    assert provider.tool_answer("a") == 1
    with pytest.raises(LatticeRunError, match="used up") as used_up:
        provider.tool_answer("a")
    assert used_up.value.error_type == "mock_exhausted"
    with pytest.raises(LatticeRunError, match="down") as failed:
        provider.tool_answer("b")
    assert failed.value.error_type == "tool_error"
    assert provider.checkpoint()["cursor"] == {"tool:a": 1, "tool:b": 1}


def test_a_malformed_tools_section_is_refused() -> None:
    with pytest.raises(LatticeUserError, match=r'tools\["utc"\] must be a list'):
        check_script({"tools": {"utc": {"datetime": "x"}}})
    with pytest.raises(LatticeUserError, match='"tools" maps'):
        check_script({"tools": ["utc"]})


def test_tools_naming_a_node_that_calls_no_tool_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(tmp_path, {"tools": {"utcc": ["x"]}}, capsys)
    assert code == 2
    assert "tools name node(s) that call no tool: 'utcc' (did you mean 'utc'?)" in err


def test_mock_init_asks_a_configured_server_for_its_tools_input_schemas(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """The node names no ``parameters``; the configured server's ``add`` tool says it
    takes numbers ``a`` and ``b``, so the scripted arguments have them."""
    script = Path(__file__).resolve().parents[1] / "mcp_test_server.py"
    config = tmp_path / "lattice.toml"
    config.write_text(
        f"[mcp.servers.calc]\ncommand = {json.dumps(sys.executable)}\n"
        f"args = [{json.dumps(str(script))}]\ntimeout = 30\n"
    )
    flow = tmp_path / "sum.json"
    flow.write_text(
        json.dumps(
            {
                "id": "sum",
                "name": "sum",
                "nodes": [
                    node("start", "start"),
                    node(
                        "add",
                        "mcp",
                        serverId="calc",
                        toolName="add",
                        mode="aiParameterConfig",
                        aiParameterConfig={"description": "add two and three"},
                    ),
                    node("end", "end"),
                ],
                "connections": [{"from": "start", "to": "add"}, {"from": "add", "to": "end"}],
            }
        )
    )
    mock = tmp_path / "sum.mock.json"
    assert main(["mock", "init", str(flow), "-o", str(mock), "--config", str(config)]) == 0
    assert "asked MCP server 'calc' for its tools" in capfd.readouterr().err
    written = json.loads(mock.read_text())
    arguments = written["responses"]["add"][0]
    assert isinstance(arguments["a"], int | float) and isinstance(arguments["b"], int | float)
    assert set(written["tools"]) == {"add"}


def test_a_resume_goes_on_from_the_tool_results_already_taken(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The second tool call fails as scripted; the resume (same script) takes the next
    result for it, and does not ask the first node's list again."""
    flow = tmp_path / "clocks.json"
    flow.write_text(json.dumps(clock_document()))
    mock = tmp_path / "clocks.mock.json"
    mock.write_text(
        json.dumps(
            {
                "tools": {
                    "utc": [{"datetime": "12:00"}],
                    "tokyo": [{"$error": "tool_error", "message": "down"}, {"datetime": "21:00"}],
                }
            }
        )
    )
    runs = tmp_path / "runs"
    assert main(["run", str(flow), "--mock", str(mock), "--runs-dir", str(runs)]) == 1
    assert "[tool_error] at tokyo: down" in capsys.readouterr().err
    (folder,) = runs.iterdir()
    assert main(["resume", str(folder), "--mock", str(mock)]) == 0
    assert json.loads(capsys.readouterr().out) == {"utc": "12:00", "tokyo": "21:00"}

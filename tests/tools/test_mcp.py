"""MCP TOOL_CALLs against real MCP servers started by the tests.

``mcp-server-time`` (PyPI) over stdio, and ``tests/mcp_test_server.py`` (the SDK's
server API) over streamable HTTP on 127.0.0.1. The AI modes use the mock LLM.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lattice.errors import LatticeRunError
from lattice.llm.mock import MockProvider
from lattice.runtime import Runner, RunResult, RunStore
from lattice.runtime.settings import RuntimeSettings
from lattice.tools.mcp import McpServerSpec, McpSession
from tests.builders import chain, lower_ok, node
from tests.conftest import REPO
from tests.mcp_test_server import serve_http

TIME = McpServerSpec(
    "time",
    command=sys.executable,
    args=("-m", "mcp_server_time", "--local-timezone", "UTC"),
    timeout=30,
)


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    with serve_http() as url:
        yield url


def mcp_node(node_id: str, server: str, tool: str | None, **data: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {"serverId": server, **data}
    if tool is not None:
        fields["toolName"] = tool
    return node(node_id, "mcp", **fields)


def run(
    doc: dict[str, Any],
    servers: dict[str, McpServerSpec],
    *,
    mock: dict[str, list[Any]] | None = None,
    store: RunStore | None = None,
    inputs: dict[str, Any] | None = None,
) -> tuple[RunResult, MockProvider]:
    provider = MockProvider(mock or {})
    runner = Runner(
        lower_ok(doc),
        provider=provider,
        store=store or RunStore(None),
        settings=RuntimeSettings(mcp_servers=servers),
    )
    return runner.run(inputs or {}), provider


def types(result: RunResult, kind: str) -> list[dict[str, Any]]:
    return [e for e in result.events if e["type"] == kind]


# -- manualParameterConfig ------------------------------------------------------------


def test_stdio_time_server_two_calls_share_one_session() -> None:
    doc = chain(
        mcp_node(
            "now",
            "time",
            "get_current_time",
            mode="manualParameterConfig",
            parameterValues={"timezone": "{{ $in.zone }}"},
        ),
        mcp_node(
            "convert",
            "time",
            "convert_time",
            parameterValues={
                "source_timezone": "$vars.now.result.timezone",
                "time": "12:00",
                "target_timezone": "Asia/Tokyo",
            },
        ),
    )
    result, _ = run(doc, {"time": TIME}, inputs={"zone": "Europe/Paris"})
    assert result.status == "completed", result.failure
    assert result.state["vars"]["now"]["result"]["timezone"] == "Europe/Paris"
    converted = result.output
    assert converted["source"]["datetime"].startswith(converted["source"]["datetime"][:10])
    assert converted["target"]["timezone"] == "Asia/Tokyo"
    assert converted["time_difference"] == "+8.0h"
    opened = types(result, "tool_session_opened")
    assert [e["data"] for e in opened] == [{"server": "time", "transport": "stdio"}]
    assert [e["data"]["name"] for e in types(result, "tool_call")] == [
        "get_current_time",
        "convert_time",
    ]


def test_http_server_structured_and_text_results(http_url: str) -> None:
    doc = chain(
        mcp_node("sum", "calc", "add", parameterValues={"a": "$in.a", "b": 2}),
        mcp_node(
            "loud", "calc", "shout", parameterValues={"text": "sum is {{ $vars.sum.result.total }}"}
        ),
    )
    spec = McpServerSpec("calc", url=http_url, timeout=10)
    result, _ = run(doc, {"calc": spec}, inputs={"a": 40})
    assert result.status == "completed", result.failure
    assert result.state["vars"]["sum"]["result"] == {"total": 42.0}
    assert result.output == "SUM IS 42.0"
    assert [e["data"]["transport"] for e in types(result, "tool_session_opened")] == ["http"]
    assert [e["data"]["structured"] for e in types(result, "tool_result")] == [True, False]


class _AnsweringClient:
    """Stands in for ``mcp.Client``: every tool call answers ``result``."""

    def __init__(self, result: Any) -> None:
        self.result = result

    async def call_tool(self, name: str, arguments: Any, read_timeout_seconds: Any = None) -> Any:
        return self.result

    async def list_tools(self, cursor: str | None = None) -> Any:
        return self.result


def test_a_lone_surrogate_in_a_tool_result_becomes_u_fffd() -> None:
    """A server's JSON may spell ``"\\ud800"``, which no run folder can hold: structured
    content, text and an error's text come back with U+FFFD in its place."""
    from mcp.types import CallToolResult, TextContent

    def answer(**fields: Any) -> Any:
        session = McpSession(McpServerSpec("calc", url="http://127.0.0.1:9/mcp", timeout=5))
        session._client = _AnsweringClient(CallToolResult(**fields))
        return asyncio.run(session.call_tool("t", {}))

    text = [TextContent(type="text", text="ok \ud800")]
    assert answer(content=[], structured_content={"\udc00": ["a\ud800"]}) == {"\ufffd": ["a\ufffd"]}
    assert answer(content=text) == "ok \ufffd"
    with pytest.raises(LatticeRunError) as raised:
        answer(content=text, is_error=True)
    assert raised.value.message.endswith("ok \ufffd")
    assert raised.value.details["text"] == "ok \ufffd"


def test_a_lone_surrogate_in_a_tools_description_becomes_u_fffd() -> None:
    """Tool definitions go into prompts and their hashes: theirs are mended as results are."""
    from mcp.types import ListToolsResult, Tool

    tool = Tool(name="t\ud800", description="d\udc00", input_schema={"title": "\ud800"})
    session = McpSession(McpServerSpec("calc", url="http://127.0.0.1:9/mcp", timeout=5))
    session._client = _AnsweringClient(ListToolsResult(tools=[tool]))
    [found] = asyncio.run(session.list_tools())
    assert (found.name, found.description) == ("t\ufffd", "d\ufffd")
    assert found.input_schema == {"title": "\ufffd"}


def test_tool_error_carries_the_servers_text_and_takes_the_failed_port(http_url: str) -> None:
    doc = chain(
        mcp_node("boom", "calc", "fail", parameterValues={"message": "disk full"}),
        extra_nodes=[node("fallback", "end", output="$vars.boom.error.summary")],
        extra_connections=[{"id": "f", "from": "boom", "to": "fallback", "fromPort": "failed"}],
    )
    result, _ = run(doc, {"calc": McpServerSpec("calc", url=http_url, timeout=10)})
    assert result.status == "completed"
    assert "tool 'fail' failed" in result.output and "disk full" in result.output
    error = result.state["vars"]["boom"]["error"]
    assert error["category"] == "tool_error"
    assert error["details"]["text"].endswith("disk full")


def test_unknown_tool_names_the_tools_the_server_has(http_url: str) -> None:
    doc = chain(mcp_node("x", "calc", "multiply", parameterValues={"a": 1}))
    result, _ = run(doc, {"calc": McpServerSpec("calc", url=http_url, timeout=10)})
    assert result.status == "failed"
    assert result.failure is not None and result.failure.category == "tool_error"
    assert "no tool 'multiply'" in result.failure.summary
    assert "add, shout, fail, nap, get_pull_request" in result.failure.summary


def test_arguments_are_checked_against_the_input_schema_before_the_call(http_url: str) -> None:
    from tests.mcp_test_server import served

    before = len(served)
    doc = chain(mcp_node("sum", "calc", "add", parameterValues={"a": "one"}))
    result, _ = run(doc, {"calc": McpServerSpec("calc", url=http_url, timeout=10)})
    assert result.status == "failed" and result.failure is not None
    assert result.failure.category == "tool_error"
    pointers = {v["pointer"] for v in result.failure.details["violations"]}
    assert pointers == {"/", "/a"}  # b is missing, a is not a number
    assert len(served) == before  # the server never saw the call


def test_a_slow_call_times_out(http_url: str) -> None:
    doc = chain(mcp_node("z", "calc", "nap", parameterValues={"seconds": 5}))
    started = __import__("time").monotonic()
    result, _ = run(doc, {"calc": McpServerSpec("calc", url=http_url, timeout=0.5)})
    assert result.status == "failed" and result.failure is not None
    assert result.failure.category == "timeout_error"
    assert __import__("time").monotonic() - started < 4


def test_a_server_that_fails_to_start_fails_the_run_with_its_folder_intact(
    tmp_path: Path,
) -> None:
    broken = McpServerSpec("time", command="lattice-no-such-mcp-server", timeout=10)
    doc = chain(mcp_node("now", "time", "get_current_time", parameterValues={"timezone": "UTC"}))
    result, _ = run(doc, {"time": broken}, store=RunStore(tmp_path))
    assert result.status == "failed" and result.failure is not None
    assert result.failure.category == "tool_error"
    assert "could not start" in result.failure.summary
    assert "command not found" in result.failure.summary
    folder = result.run_dir
    assert folder is not None
    assert json.loads((folder / "failure_report.json").read_text())["category"] == "tool_error"
    assert json.loads((folder / "checkpoint.json").read_text())["next_op"] == "now"


def test_an_unconfigured_server_is_a_run_error_naming_the_config_section() -> None:
    doc = chain(mcp_node("now", "github", "get_me", parameterValues={}))
    result, _ = run(doc, {"time": TIME})
    assert result.failure is not None and result.failure.category == "tool_error"
    assert "[mcp.servers.github]" in result.failure.summary
    assert "configured: time" in result.failure.summary


# -- AI modes -------------------------------------------------------------------------


def test_ai_parameter_config_uses_the_servers_input_schema_as_the_contract(
    http_url: str,
) -> None:
    doc = chain(
        mcp_node(
            "sum",
            "calc",
            "add",
            mode="aiParameterConfig",
            aiParameterConfig={"description": "Add the two numbers the user gave."},
        )
    )
    mock = {"sum": [{"a": "2"}, {"a": 2, "b": 3}]}  # first: wrong type and b missing
    result, provider = run(
        doc, {"calc": McpServerSpec("calc", url=http_url, timeout=10)}, mock=mock
    )
    assert result.status == "completed", result.failure
    assert result.output == {"total": 5.0}
    first, repair = provider.calls
    assert first.response_schema is not None
    assert first.response_schema["required"] == [
        "a",
        "b",
    ]  # the server's schema, not the document's
    assert (
        "Add two numbers." in first.messages[-1].content
    )  # the tool's description reaches the model
    failed = types(result, "validation_failed")[0]["data"]
    assert {v["pointer"] for v in failed["violations"]} == {"/", "/a"}
    assert '{"a": "2"}' in repair.messages[-1].content  # fix-only packet with the bad output


def test_ai_tool_selection_validates_the_arguments_of_the_chosen_tool(http_url: str) -> None:
    doc = chain(
        mcp_node(
            "pick",
            "calc",
            None,
            mode="aiToolSelection",
            aiToolSelectionConfig={"taskDescription": "Shout the word hello."},
        )
    )
    mock = {
        "pick": [
            {"tool": "shout", "arguments": {"words": "hello"}},  # wrong argument name
            {"tool": "shout", "arguments": {"text": "hello"}},
        ]
    }
    result, provider = run(
        doc, {"calc": McpServerSpec("calc", url=http_url, timeout=10)}, mock=mock
    )
    assert result.status == "completed", result.failure
    assert result.output == "HELLO"
    schema = provider.calls[0].response_schema
    assert schema is not None and schema["properties"]["tool"]["enum"] == [
        "add",
        "shout",
        "fail",
        "nap",
        "get_pull_request",
        "env",
        "complain",
    ]
    violations = types(result, "validation_failed")[0]["data"]["violations"]
    assert any(
        v["pointer"] == "/arguments" and "'text' is a required" in v["message"] for v in violations
    )
    call = types(result, "tool_call")[0]["data"]
    assert call == {"tool": "mcp", "server": "calc", "name": "shout"}


def test_ai_tool_selection_of_an_unknown_tool_is_repaired(http_url: str) -> None:
    doc = chain(mcp_node("pick", "calc", None, mode="aiToolSelection"))
    mock = {
        "pick": [
            {"tool": "divide", "arguments": {}},
            {"tool": "add", "arguments": {"a": 1, "b": 1}},
        ]
    }
    result, _ = run(doc, {"calc": McpServerSpec("calc", url=http_url, timeout=10)}, mock=mock)
    assert result.status == "completed", result.failure
    assert result.output == {"total": 2.0}
    violations = types(result, "validation_failed")[0]["data"]["violations"]
    assert any(v["pointer"] == "/tool" for v in violations)


# -- the corpus document with an mcp node ----------------------------------------------


def test_corpus_pr_review_flow_runs_with_its_server_configured(http_url: str) -> None:
    from lattice.lower import lower
    from tests.conftest import corpus_document

    path = corpus_document("*automated-pr-code-review-flow.json")
    ir = lower(path)
    mock = {
        "mcp-1766987094528": [{"owner": "acme", "repo": "shop", "pull_number": 7}],
        "switch-1": [{"branch": "Small"}],
        "ifelse-1": [{"branch": "No Issues"}],
    }
    provider = MockProvider(mock, default="Looks good.")
    runner = Runner(
        ir,
        provider=provider,
        store=RunStore(None),
        settings=RuntimeSettings(mcp_servers={"github": McpServerSpec("github", url=http_url)}),
    )
    result = runner.run({})
    assert result.status == "completed", result.failure
    pr = result.state["vars"]["mcp-1766987094528"]["result"]
    assert pr == {
        "title": "Fix race in shop cache",
        "author": "acme",
        "number": 7,
        "lines_changed": 42,
        "files": ["cache.py", "tests/test_cache.py"],
    }
    nodes = [e["node_id"] for e in result.events if e["type"] == "op_finished"]
    assert "skill-1766986427119" in nodes and "subagent-approve" in nodes  # small PR, approved
    assert "subagent-notify" not in nodes
    # the classifier saw the PR the tool returned
    switch_call = next(c for c in provider.calls if c.node_id == "switch-1")
    assert "Fix race in shop cache" in switch_call.messages[-1].content


# -- command line -------------------------------------------------------------------------


def write_config(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "lattice.toml"
    path.write_text(body, encoding="utf-8")
    return path


def test_check_and_run_flag_unconfigured_servers_with_their_location(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from lattice.cli import main

    doc = chain(
        mcp_node("gh", "github", "get_me", parameterValues={}),
        mcp_node("find", "lattice", "retrieve_context", parameterValues={"query": "x"}),
    )
    path = tmp_path / "wf.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    config = write_config(tmp_path, '[mcp.servers.time]\ncommand = "mcp-server-time"\n')
    assert main(["check", str(path), "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "error[mcp-server-unknown] node 'gh' at /nodes/1/data/serverId" in err
    assert "add [mcp.servers.github] to lattice.toml (configured: time)" in err
    assert "'find'" not in err  # the built-in server needs no configuration
    # without a config file no server is configured: check and run both warn, naming
    # the server and how to configure it, and the run fails at the node
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    monkeypatch.delenv("LATTICE_CONFIG", raising=False)
    warning = (
        "warning[mcp-server-unknown] node 'gh' at /nodes/1/data/serverId: MCP server 'github' "
        "is not configured: add [mcp.servers.github] to lattice.toml (configured: none); "
        "until then a run fails at this node (unless a mock script's tools answer it)"
    )
    assert main(["check", str(path)]) == 0
    err = capsys.readouterr().err
    assert warning in err and "ok (" in err
    mock = tmp_path / "wf.mock.json"
    mock.write_text('{"responses": {}}', encoding="utf-8")
    assert main(["run", str(path), "--mock", str(mock), "--no-record"]) == 1
    err = capsys.readouterr().err
    assert warning in err and "[tool_error] at gh" in err


def test_a_server_needs_exactly_one_transport(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from lattice.cli import main

    both = write_config(
        tmp_path, '[mcp.servers.x]\ncommand = "a"\nurl = "http://127.0.0.1:1/mcp"\n'
    )
    assert main(["mcp", "list", "--config", str(both)]) == 2
    err = capsys.readouterr().err
    assert "mcp.servers.x: give either command (stdio) or url" in err
    assert "Value error" not in err


def test_mcp_list_shows_tools_and_input_schemas(
    tmp_path: Path, http_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from lattice.cli import main

    config = write_config(
        tmp_path,
        f'[mcp.servers.calc]\nurl = "{http_url}"\n'
        '[mcp.servers.dead]\ncommand = "lattice-no-such-mcp-server"\n',
    )
    assert main(["mcp", "list", "calc", "--config", str(config), "--json"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)
    assert entry["server"] == "calc"
    add = next(t for t in entry["tools"] if t["name"] == "add")
    assert add["description"] == "Add two numbers."
    assert add["inputSchema"]["required"] == ["a", "b"]

    assert main(["mcp", "list", "--config", str(config)]) == 1  # one server is broken
    out = capsys.readouterr().out
    assert "calc  (http://127.0.0.1:" in out and "  add: Add two numbers." in out
    assert "dead  (lattice-no-such-mcp-server)\n  error: MCP server 'dead': could not start" in out
    assert "lattice  (builtin)\n  retrieve_context:" in out

    assert main(["mcp", "list", "nope", "--config", str(config)]) == 2
    assert "MCP server 'nope' is not configured (configured: calc, dead" in capsys.readouterr().err


# -- env passed on from Lattice's environment -------------------------------------------


def stdio_test_server(**env: str) -> McpServerSpec:
    script = REPO / "tests" / "mcp_test_server.py"
    return McpServerSpec("local", command=sys.executable, args=(str(script),), env=env, timeout=30)


def test_an_env_reference_passes_a_variable_on_and_keeps_it_out_of_the_run_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "tok-4f9c2e71-secret-value"
    monkeypatch.setenv("LATTICE_TEST_MCP_TOKEN", secret)
    server = stdio_test_server(SERVICE_TOKEN="${LATTICE_TEST_MCP_TOKEN}", PLAIN="literal")
    doc = chain(
        mcp_node(
            "token",
            "local",
            "env",
            mode="manualParameterConfig",
            parameterValues={"name": "SERVICE_TOKEN"},
        ),
        mcp_node(
            "plain", "local", "env", mode="manualParameterConfig", parameterValues={"name": "PLAIN"}
        ),
    )
    result, _ = run(doc, {"local": server}, store=RunStore(tmp_path))
    assert result.status == "completed", result.failure
    # the server got the value, and answered it: it enters the state masked
    assert result.vars["token"]["result"] == "***"
    assert result.vars["plain"]["result"] == "literal"
    files = [p for p in result.run_dir.rglob("*") if p.is_file()]  # type: ignore[union-attr]
    assert files and not [p.name for p in files if secret in p.read_text(encoding="utf-8")]
    assert "***" in (result.run_dir / "state_final.json").read_text(encoding="utf-8")  # type: ignore[operator]


def test_an_env_reference_to_an_unset_variable_is_a_tool_error_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("LATTICE_TEST_MCP_UNSET", raising=False)
    server = stdio_test_server(SERVICE_TOKEN="${LATTICE_TEST_MCP_UNSET}")
    doc = chain(
        mcp_node(
            "token", "local", "env", mode="manualParameterConfig", parameterValues={"name": "X"}
        )
    )
    result, _ = run(doc, {"local": server})
    assert result.status == "failed" and result.failure is not None
    assert result.failure.category == "tool_error"
    assert "LATTICE_TEST_MCP_UNSET is not set" in result.failure.summary


def test_only_whole_dollar_brace_values_are_references() -> None:
    spec = McpServerSpec(
        "s", command="x", env={"A": "${TOKEN}", "B": "pre-${TOKEN}", "C": "$TOKEN"}
    )
    assert spec.env_references() == ("TOKEN",)
    settings = RuntimeSettings(mcp_servers={"s": spec}, secrets_allow=("OTHER", "TOKEN"))
    assert settings.secret_names() == ("OTHER", "TOKEN")


def test_a_stdio_servers_stderr_goes_to_the_run_folder_masked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "tok-77aa10-stderr-secret"
    monkeypatch.setenv("LATTICE_TEST_MCP_TOKEN", secret)
    server = stdio_test_server(SERVICE_TOKEN="${LATTICE_TEST_MCP_TOKEN}")
    doc = chain(
        mcp_node(
            "say",
            "local",
            "complain",
            mode="manualParameterConfig",
            parameterValues={"text": "{{ $in.line }}"},
        )
    )
    result, _ = run(
        doc, {"local": server}, store=RunStore(tmp_path), inputs={"line": f"token {secret}"}
    )
    assert result.status == "completed", result.failure
    log = result.run_dir / "mcp" / "local.stderr.log"  # type: ignore[operator]
    assert log.read_text(encoding="utf-8").splitlines()[-1] == "token ***"

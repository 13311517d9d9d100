"""Agent nodes: which nodes lower to AGENT ops, with which tools, and what stays LLM_WRITE."""

from __future__ import annotations

from typing import Any

import pytest

from lattice.ir.models import AgentOp, LLMWriteOp
from lattice.lower import lower_document
from tests.builders import chain, find, lower_ok, node


def _op(data: dict[str, Any], node_type: str = "subAgent") -> Any:
    return lower_ok(chain(node("a", node_type, **data))).ops["a"]


@pytest.mark.parametrize(
    ("builtin", "tools"),
    [
        ("explore", ["Read", "LS", "Glob", "Grep", "Bash"]),
        ("plan", ["Read", "LS", "Glob", "Grep", "Bash"]),
        ("general-purpose", ["*"]),
    ],
)
def test_a_built_in_type_asks_for_its_tools(builtin: str, tools: list[str]) -> None:
    op = _op({"prompt": "Find the bug", "builtInType": builtin, "agentDefinition": "You fix."})
    assert isinstance(op, AgentOp)
    assert (op.tools, op.agent_type, op.system) == (tools, builtin, "You fix.")
    assert op.writes == "$vars.a.result" and op.limits.max_turns == 20


def test_a_tool_list_is_read_as_claude_code_writes_it() -> None:
    op = _op({"prompt": "p", "tools": "Read, Grep,Glob , Bash(git:*), mcp__docs__search, Read"})
    assert op.tools == ["Read", "Grep", "Glob", "Bash", "mcp__docs__search"]


def test_an_unknown_tool_is_a_warning_with_a_hint_and_is_left_out() -> None:
    result = lower_document(chain(node("a", "subAgent", prompt="p", tools="Read, Grpe, Teleport")))
    assert result.ir is not None and not result.errors
    assert result.ir.ops["a"].tools == ["Read"]
    messages = [d.message for d in find(result, "agent-tool-unknown")]
    assert len(messages) == 2
    assert "unknown tool 'Grpe' (did you mean 'Grep'?)" in messages[0]
    assert "'Teleport'" in messages[1]


def test_a_hundred_thousand_unknown_tools_are_a_few_short_warnings() -> None:
    tools = ",".join(["X" * 1_000_000, *(f"T{i}" for i in range(100_000)), "Read"])
    result = lower_document(chain(node("a", "subAgent", prompt="p", tools=tools)))
    assert result.ir is not None and result.ir.ops["a"].tools == ["Read"]
    messages = [d.message for d in find(result, "agent-tool-unknown")]
    assert len(messages) == 11 and max(map(len, messages)) < 400
    assert messages[-1].startswith("99,991 more unknown tools")


def test_a_sub_agent_without_tools_asks_for_every_tool_of_the_main_agent() -> None:
    op = _op({"prompt": "Say hi"})
    assert isinstance(op, AgentOp) and (op.tools, op.agent_type) == (["*"], "custom")
    result = lower_document(chain(node("a", "subAgent", prompt="p", builtInType="explorer")))
    assert result.ir is not None and result.ir.ops["a"].tools == ["*"]
    (warning,) = find(result, "agent-type-unknown")
    assert "(did you mean 'explore'?)" in warning.message


def test_an_executing_skill_is_an_agent_narrowed_by_its_allowed_tools() -> None:
    data = {"name": "lint", "prompt": "Lint it", "allowedTools": "Read, Bash"}
    for mode in ({}, {"executionMode": "execute"}):  # the format's default is execute
        op = _op({**data, **mode}, "skill")
        assert isinstance(op, AgentOp) and op.tools == ["Read", "Bash"]
        assert op.agent_type == "skill"
    everything = _op({"name": "lint", "prompt": "Lint it"}, "skill")
    assert isinstance(everything, AgentOp) and everything.tools == ["*"]
    loaded = _op({**data, "executionMode": "load"}, "skill")
    assert loaded.kind == "TRANSFORM"  # its text is the next nodes' input: nothing runs


@pytest.mark.parametrize(("sandbox", "writes"), [("read-only", False), ("workspace-write", True)])
def test_a_codex_sandbox_maps_to_tools(sandbox: str, writes: bool) -> None:
    op = _op({"prompt": "Fix it", "sandbox": sandbox}, "codex")
    assert isinstance(op, AgentOp) and op.agent_type == "codex"
    assert ("Edit" in op.tools) is writes and ("Bash" in op.tools) is writes
    assert isinstance(_op({"prompt": "Fix it"}, "codex"), LLMWriteOp)


def test_the_document_may_lower_an_agents_limits() -> None:
    op = _op({"prompt": "p", "builtInType": "plan", "maxTurns": 3, "maxToolCalls": 7})
    assert (op.limits.max_turns, op.limits.max_tool_calls) == (3, 7)
    result = lower_document(chain(node("a", "subAgent", prompt="p", tools="Read", maxTurns=0)))
    assert result.errors


@pytest.mark.parametrize(("key", "value"), [("maxTurns", 10**30), ("maxToolCalls", 1e300)])
def test_a_document_cannot_ask_for_an_unbounded_loop(key: str, value: Any) -> None:
    result = lower_document(chain(node("a", "subAgent", prompt="p", tools="Read", **{key: value})))
    assert result.ir is None
    assert [(e.code, e.pointer) for e in result.errors] == [
        ("invalid-field", f"/nodes/1/data/{key}")
    ]


def test_a_sub_agent_flows_tools_go_to_its_sub_agents_without_their_own() -> None:
    flow = {
        "id": "f",
        "name": "f",
        "nodes": [
            node("fs", "start"),
            node("ask", "subAgent", prompt="Look around"),
            node("own", "subAgent", prompt="Plan", builtInType="plan"),
            node("write", "prompt", prompt="Summarise"),
            node("fe", "end"),
        ],
        "connections": [
            {"from": "fs", "to": "ask"},
            {"from": "ask", "to": "own"},
            {"from": "own", "to": "write"},
            {"from": "write", "to": "fe"},
        ],
    }
    call = node("call", "subAgentFlow", subAgentFlowId="f", tools="Read, Grep")
    ir = lower_ok(chain(call, subAgentFlows=[flow]))
    assert ir.ops["call__ask"].tools == ["Read", "Grep"]
    assert ir.ops["call__own"].tools == ["Read", "LS", "Glob", "Grep", "Bash"]  # its own type
    assert isinstance(ir.ops["call__write"], LLMWriteOp) and ir.ops["call__write"].main_agent
    plain = lower_ok(chain(node("call", "subAgentFlow", subAgentFlowId="f"), subAgentFlows=[flow]))
    assert plain.ops["call__ask"].tools == ["*"]


@pytest.mark.parametrize(
    ("node_type", "data"),
    [
        ("subAgent", {"builtInType": []}),
        ("subAgent", {"builtInType": {"x": 1}}),
        ("codex", {"sandbox": ["read-only"]}),
        ("subAgent", {"tools": 7}),
        ("skill", {"name": "s", "executionMode": "execute", "allowedTools": {"Read": 1}}),
    ],
)
def test_a_malformed_agent_field_is_a_located_error_not_a_crash(
    node_type: str, data: dict[str, Any]
) -> None:
    result = lower_document(chain(node("a", node_type, prompt="p", **data)))
    errors = [d for d in result.diagnostics if d.code == "invalid-field"]
    assert errors and errors[0].pointer.startswith("/nodes/1/data/")

"""Documents in the older forms upstream's editor still reads lower and run: the legacy
``branch`` node (conditional and switch), mcp ``mode`` names of old files, questions
whose options have no ``id`` and connections carrying ``condition``, no
``schemaVersion``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lattice.ir.models import LLMWriteOp, McpCall, SwitchOp, ToolCallOp
from lattice.lower import lower_document
from tests.service.test_mocks import run_with_init


def node(node_id: str, type_: str, **data: object) -> dict[str, object]:
    return {
        "id": node_id,
        "type": type_,
        "name": node_id,
        "position": {"x": 0, "y": 0},
        "data": data,
    }


def agent(node_id: str) -> dict[str, object]:
    return node(
        node_id,
        "subAgent",
        description=node_id,
        agentDefinition="You help.",
        prompt=f"Do {node_id}.",
        outputPorts=1,
    )


def edge(source: str, target: str, port: str = "output", **extra: str) -> dict[str, str]:
    return {
        "id": f"{source}-{target}",
        "from": source,
        "to": target,
        "fromPort": port,
        "toPort": "input",
        **extra,
    }


def document(
    nodes: list[dict[str, object]], connections: list[dict[str, str]]
) -> dict[str, object]:
    return {
        "id": "old",
        "name": "old-form",
        "version": "1.0.0",
        "nodes": nodes,
        "connections": connections,
    }


def conditional_branch() -> dict[str, object]:
    """The 1.0 form: a two-way ``branch`` deciding in natural language."""
    branch = node(
        "b",
        "branch",
        branchType="conditional",
        outputPorts=2,
        branches=[
            {"id": "ok", "label": "Success", "condition": "the tests passed"},
            {"id": "ko", "label": "Error", "condition": "a test failed"},
        ],
    )
    return document(
        [node("start", "start"), agent("test"), branch, agent("fix"), node("end", "end")],
        [
            edge("start", "test"),
            edge("test", "b"),
            edge("b", "end", "branch-0"),
            edge("b", "fix", "branch-1"),
            edge("fix", "test"),
        ],
    )


def switch_branch() -> dict[str, object]:
    """A multi-way ``branch`` with deterministic conditions on an input."""
    branch = node(
        "route",
        "branch",
        branchType="switch",
        outputPorts=3,
        branches=[
            {"label": "Bug", "condition": '== "bug"'},
            {"label": "Feature", "condition": '== "feature"'},
            {"label": "Other", "condition": "exists"},
        ],
    )
    return document(
        [
            node(
                "start",
                "start",
                inputs={
                    "type": "object",
                    "properties": {"kind": {"type": "string"}},
                    "required": ["kind"],
                },
            ),
            branch,
            agent("bug"),
            agent("feature"),
            agent("other"),
            node("end", "end"),
        ],
        [
            edge("start", "route"),
            edge("route", "bug", "branch-0"),
            edge("route", "feature", "branch-1"),
            edge("route", "other", "branch-2"),
            edge("bug", "end"),
            edge("feature", "end"),
            edge("other", "end"),
        ],
    )


def old_mcp_and_question() -> dict[str, object]:
    """mcp modes named as 1.2 files name them; options without ids; ``condition`` on
    the question's connections."""
    question = node(
        "pick",
        "askUserQuestion",
        questionText="Which?",
        outputPorts=2,
        options=[
            {"label": "Now", "description": "the time"},
            {"label": "Later", "description": "nothing"},
        ],
    )
    detailed = node(
        "clock",
        "mcp",
        serverId="time",
        toolName="get_current_time",
        mode="detailed",
        parameterValues={"timezone": "UTC"},
        validationStatus="valid",
        outputPorts=1,
    )
    natural = node(
        "zone",
        "mcp",
        serverId="time",
        toolName="convert_time",
        mode="naturalLanguageParam",
        validationStatus="valid",
        outputPorts=1,
        aiParameterConfig={"description": "convert to Tokyo", "timestamp": "x"},
    )
    return document(
        [node("start", "start"), question, detailed, natural, node("end", "end")],
        [
            edge("start", "pick"),
            edge("pick", "clock", "branch-0", condition="Now"),
            edge("pick", "end", "branch-1", condition="Later"),
            edge("clock", "zone"),
            edge("zone", "end"),
        ],
    )


FORMS = {
    "branch-conditional": conditional_branch,
    "branch-switch": switch_branch,
    "mcp-modes-and-question": old_mcp_and_question,
}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_each_old_form_lowers_and_runs(
    form: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / f"{form}.json"
    path.write_text(json.dumps(FORMS[form]()))
    run_with_init(path, tmp_path, capsys)


def test_a_conditional_branch_is_a_two_way_classifier_with_no_default() -> None:
    result = lower_document(conditional_branch())
    assert result.ir is not None, result.errors
    classify = result.ir.ops["b"]
    switch = result.ir.ops["b#switch"]
    assert isinstance(classify, LLMWriteOp) and classify.labels == ["Success", "Error"]
    assert isinstance(switch, SwitchOp) and switch.default_port is None


def test_a_switch_branch_tests_its_conditions_in_order() -> None:
    result = lower_document(switch_branch())
    assert result.ir is not None, result.errors
    route = result.ir.ops["route"]
    assert isinstance(route, SwitchOp)
    assert [case.port for case in route.cases] == ["Bug", "Feature", "Other"]
    assert route.default_port is None


@pytest.mark.parametrize(
    ("branch_type", "count", "message"),
    [("conditional", 3, "exactly two"), ("switch", 1, "two or more"), ("other", 2, "branchType")],
)
def test_a_branch_node_of_the_wrong_shape_is_refused(
    branch_type: str, count: int, message: str
) -> None:
    doc = conditional_branch()
    branch = doc["nodes"][2]  # type: ignore[index]
    branch["data"]["branchType"] = branch_type
    branch["data"]["branches"] = [
        {"label": f"L{i}", "condition": f"case {i}"} for i in range(count)
    ]
    result = lower_document(doc)
    assert result.ir is None
    assert any(d.code == "invalid-field" and message in d.message for d in result.errors)


def test_old_mcp_mode_names_mean_todays_modes() -> None:
    result = lower_document(old_mcp_and_question())
    assert result.ir is not None, result.errors
    clock = result.ir.ops["clock"]
    assert isinstance(clock, ToolCallOp) and isinstance(clock.call, McpCall)
    assert clock.call.mode == "manualParameterConfig"
    zone = result.ir.ops["zone"]
    assert isinstance(zone, LLMWriteOp) and zone.purpose == "tool_arguments"

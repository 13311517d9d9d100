"""The secret lane: ``$secrets.X`` is read only where it leaves the process for its
destination (an httpRequest node's url, headers, query and body). Anywhere else it would
reach a model, the run's state or its output, and lowering refuses it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lattice.cli.main import main
from lattice.ir.models import HttpCall, ToolCallOp
from lattice.lower import lower_document
from tests.builders import chain, conn, describe, lower_ok, node, only, workflow

SECRET = "{{ $secrets.API_TOKEN }}"


def test_secrets_in_the_http_lane_lower() -> None:
    http = node(
        "h",
        "httpRequest",
        method="POST",
        url="https://api.example.test/v1/{{ $secrets.TENANT }}/items",
        headers={"Authorization": "Bearer " + SECRET},
        query={"key": SECRET},
        body={"token": "$secrets.API_TOKEN", "nested": [SECRET]},
    )
    ir = lower_ok(chain(http))
    op = ir.ops["h"]
    assert isinstance(op, ToolCallOp) and isinstance(op.call, HttpCall)
    assert op.call.headers == {"Authorization": "Bearer " + SECRET}
    assert "$secrets.API_TOKEN" in op.reads and "$secrets.TENANT" in op.reads


def _ask() -> dict[str, Any]:
    return node("q", "askUserQuestion", questionText=SECRET, options=[{"label": "a"}])


REFUSED: list[tuple[str, dict[str, Any], str]] = [
    ("prompt", node("n", "prompt", prompt="Use " + SECRET), "/data/prompt"),
    (
        "prompt-variable",
        node("n", "prompt", prompt="{{ v }}", variables={"v": SECRET}),
        "/data/variables/v",
    ),
    ("subAgent", node("n", "subAgent", prompt=SECRET), "/data/prompt"),
    ("subAgent-description", node("n", "subAgent", description=SECRET), "/data/description"),
    ("codex", node("n", "codex", prompt=SECRET), "/data/prompt"),
    ("skill-description", node("n", "skill", name="s", description=SECRET), "/data/description"),
    (
        "dataTransform-input",
        node("n", "dataTransform", expression="@", input="$secrets.API_TOKEN"),
        "/data/input",
    ),
    (
        "variableStore",
        node("n", "variableStore", operation="set", name="v", value=SECRET),
        "/data/value",
    ),
    (
        "variableStore-path",
        node("n", "variableStore", operation="set", name="v", value={"a": "$secrets.X"}),
        "/data/value/a",
    ),
    (
        "mcp-parameters",
        node("n", "mcp", serverId="s", toolName="t", parameterValues={"q": SECRET}),
        "/data/parameterValues/q",
    ),
    (
        "mcp-tool-description",
        node(
            "n", "mcp", serverId="s", toolName="t", mode="aiParameterConfig", toolDescription=SECRET
        ),
        "/data/toolDescription",
    ),
    (
        "mcp-task",
        node(
            "n",
            "mcp",
            serverId="s",
            mode="aiToolSelection",
            aiToolSelectionConfig={"taskDescription": SECRET},
        ),
        "/data/aiToolSelectionConfig/taskDescription",
    ),
    (
        "http-output-schema-is-not-a-template",
        node(
            "n", "httpRequest", url="https://x.test", outputSchema={"type": "object"}, timeoutMs=5
        ),
        "",
    ),
]


@pytest.mark.parametrize(
    ("middle", "pointer"), [(n, p) for _, n, p in REFUSED], ids=[name for name, _, _ in REFUSED]
)
def test_secrets_outside_the_lane_are_refused(middle: dict[str, Any], pointer: str) -> None:
    result = lower_document(chain(middle))
    if not pointer:  # the control: nothing secret, nothing refused
        assert result.errors == [], describe(result.diagnostics)
        return
    d = only(result, "secret-outside-lane")
    assert (d.node_id, d.pointer) == ("n", "/nodes/1" + pointer)
    assert "$secrets" in d.message and "httpRequest" in d.message
    assert result.ir is None


def test_end_output_may_not_hold_a_secret() -> None:
    doc = chain(node("p", "prompt", prompt="x"))
    doc["nodes"][2]["data"]["output"] = {"answer": "$vars.p.result", "leak": SECRET}
    d = only(lower_document(doc), "secret-outside-lane")
    assert (d.node_id, d.pointer) == ("end", "/nodes/2/data/output/leak")


def test_question_text_may_not_hold_a_secret() -> None:
    d = only(lower_document(chain(_ask())), "secret-outside-lane")
    assert (d.node_id, d.pointer) == ("q", "/nodes/1/data/questionText")


def _branch(**data: Any) -> dict[str, Any]:
    return workflow(
        [
            node("start", "start"),
            node("p", "prompt", prompt="x"),
            node("b", "switch", **data),
            node("end", "end"),
        ],
        [
            conn("start", "p"),
            conn("p", "b"),
            conn("b", "end", "branch-0"),
            conn("b", "end", "branch-1"),
        ],
    )


@pytest.mark.parametrize(
    ("data", "pointer"),
    [
        (
            {
                "evaluationTarget": "$secrets.API_TOKEN",
                "branches": [
                    {"label": "a", "condition": "exists"},
                    {"label": "b", "isDefault": True},
                ],
            },
            "/data/evaluationTarget",
        ),
        (
            {
                "branches": [
                    {"label": "a", "condition": "mentions " + SECRET},
                    {"label": "b", "isDefault": True},
                ]
            },
            "/data/branches/0/condition",
        ),
        (
            {
                "branches": [
                    {"label": SECRET, "condition": "is it urgent"},
                    {"label": "b", "isDefault": True},
                ]
            },
            "/data/branches/0/label",
        ),
        (
            {
                "evaluationTarget": "the " + SECRET,
                "branches": [
                    {"label": "a", "condition": "is it urgent"},
                    {"label": "b", "isDefault": True},
                ],
            },
            "/data/evaluationTarget",
        ),
    ],
    ids=["evaluation-target", "condition", "label", "question"],
)
def test_branches_may_not_read_secrets(data: dict[str, Any], pointer: str) -> None:
    d = only(lower_document(_branch(**data)), "secret-outside-lane")
    assert (d.node_id, d.pointer) == ("b", "/nodes/2" + pointer)


def test_a_deterministic_condition_holds_text_not_a_template() -> None:
    # `== "{{ $secrets.X }}"` compares with that literal text; nothing is rendered.
    data = {
        "branches": [
            {"label": "a", "condition": '== "' + SECRET + '"'},
            {"label": "b", "isDefault": True},
        ]
    }
    lower_ok(_branch(**data))


def test_secrets_in_a_subflow_are_refused_where_they_are_written() -> None:
    flow = {
        "id": "sub",
        "nodes": [node("fs", "start"), node("leak", "prompt", prompt=SECRET), node("fe", "end")],
        "connections": [conn("fs", "leak"), conn("leak", "fe")],
    }
    doc = chain(node("call", "subAgentFlow", subAgentFlowId="sub"), subAgentFlows=[flow])
    d = only(lower_document(doc), "secret-outside-lane")
    assert (d.node_id, d.pointer) == ("call__leak", "/subAgentFlows/0/nodes/1/data/prompt")


def test_system_text_is_not_a_template() -> None:
    # agentDefinition is sent as written: a "{{ $secrets.X }}" in it is text, not a secret.
    lower_ok(chain(node("a", "subAgent", prompt="go", agentDefinition="Never print " + SECRET)))


def test_cli_reports_the_lane(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    path = tmp_path / "doc.json"
    path.write_text(json.dumps(chain(node("p", "prompt", prompt=SECRET))), "utf-8")
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert "error[secret-outside-lane] node 'p' at /nodes/1/data/prompt" in err
    assert "Traceback" not in err

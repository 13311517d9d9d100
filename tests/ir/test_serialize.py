"""Reading ExecIR back: an IR file is input too, held to what running it needs."""

from __future__ import annotations

from typing import Any

import pytest

from lattice.errors import LatticeUserError
from lattice.ir import IR_VERSION, execir_json_schema, ir_from_json, ir_to_dict
from lattice.ir.serialize import check_ir
from tests.builders import chain, conn, lower_ok, node, workflow


def _ir() -> dict[str, Any]:
    doc = chain(
        node("p", "prompt", prompt="Hi {{ $in.name }}"),
        node(
            "b",
            "switch",
            branches=[
                {"label": "a", "condition": 'matches "^x"'},
                {"label": "b", "isDefault": True},
            ],
        ),
    )
    doc["connections"][2]["fromPort"] = "branch-0"
    doc["connections"].append({"from": "b", "to": "end", "fromPort": "branch-1"})
    return ir_to_dict(lower_ok(doc))


def test_lowered_ir_reads_back() -> None:
    data = _ir()
    assert check_ir(ir_from_json(data)) == []


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        (lambda d: d["ops"]["p"].update(prompt="{{ $in."), "ops['p'].prompt"),
        (lambda d: d.update(entry="nowhere"), "entry: no op 'nowhere'"),
        (lambda d: d["ops"]["p"]["next"][0].update(to="ghost"), "ops['p'].next[0]: no op 'ghost'"),
        (lambda d: d["ops"]["p"].update(writes="vars.p"), "ops['p'].writes"),
        (lambda d: d["ops"]["p"]["context"].append("$in."), "ops['p'].context[0]"),
        (lambda d: d["ops"]["b"]["cases"][0]["test"].update(value="["), "ops['b'].cases[0].test"),
        (
            lambda d: d["ops"]["b"]["cases"][0].update(test={"op": "jmespath", "value": "a["}),
            "invalid JMESPath",
        ),
        (
            lambda d: d["ops"]["p"].update(outputSchema={"type": 3}),
            "ops['p'].outputSchema: invalid JSON Schema",
        ),
        (lambda d: d["ops"]["end"].update(output={"x": "{{"}), "ops['end'].output"),
    ],
    ids=["prompt", "entry", "edge", "writes", "context", "regex", "jmespath", "schema", "output"],
)
def test_an_ir_that_cannot_run_is_refused(change: Any, fragment: str) -> None:
    data = _ir()
    change(data)
    with pytest.raises(LatticeUserError) as caught:
        ir_from_json(data)
    assert caught.value.error_type == "invalid_ir"
    assert fragment in caught.value.message


def test_an_ir_nested_too_deeply_is_refused() -> None:
    text = (
        '{"irVersion": "1", "workflow": {"id": "w", "name": "w"}, "entry": "s", "ops": {"s": {"id": "s", "kind": "END", "sourceNode": "s", "output": '
        + "[" * 5000
        + "]" * 5000
        + "}}}"
    )
    with pytest.raises(LatticeUserError) as caught:
        ir_from_json(text)
    assert caught.value.error_type == "invalid_ir"


def _parallel_ir() -> dict[str, Any]:
    """start → {x, y} → z → end: a FORK after start and its JOIN before z."""
    doc = workflow(
        [
            node("start", "start"),
            node("x", "dataTransform", expression="`1`"),
            node("y", "dataTransform", expression="`2`"),
            node("z", "dataTransform", expression="`3`"),
            node("end", "end"),
        ],
        [conn("start", "x"), conn("start", "y"), conn("x", "z"), conn("y", "z"), conn("z", "end")],
    )
    return ir_to_dict(lower_ok(doc))


def _for_each(d: dict[str, Any], **fields: Any) -> None:
    d["ops"]["fe"] = {
        "id": "fe",
        "kind": "FOR_EACH",
        "sourceNode": "p",
        "items": "$in.xs",
        "body": "p",
        "writes": "$vars.fe.result",
        **fields,
    }


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        (lambda d: d.update(irVersion="99"), "irVersion: '99'"),
        (lambda d: _for_each(d, body="nope"), "ops['fe'].body: no op 'nope'"),
        (lambda d: _for_each(d, items="{{ $secrets.TOK }}"), "ops['fe'].items: $secrets.TOK"),
        (
            lambda d: d["ops"]["end"].update(output="{{ $secrets.TOK }}"),
            "ops['end'].output: $secrets.TOK: a secret may be read only in",
        ),
        (lambda d: d["ops"]["p"].update(prompt="{{ $secrets.TOK }}"), "ops['p'].prompt: $secrets"),
        (lambda d: d["ops"]["p"]["reads"].append("$secrets.TOK"), "ops['p'].reads[1]: $secrets"),
        (lambda d: d["ops"]["b"].update(input="$secrets.TOK"), "ops['b'].input: $secrets"),
    ],
    ids=["version", "body", "items-secret", "end-secret", "prompt-secret", "reads", "switch"],
)
def test_an_ir_lowering_would_not_make_is_refused(change: Any, fragment: str) -> None:
    # Each of these was accepted: the END's secret became the run's output, and a
    # FOR_EACH body naming no op was an internal error (KeyError) at run time.
    data = _ir()
    change(data)
    with pytest.raises(LatticeUserError) as caught:
        ir_from_json(data)
    assert caught.value.error_type == "invalid_ir"
    assert fragment in caught.value.message


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        (
            lambda d: d["ops"]["start#fork"]["branches"].append("ghost"),
            "ops['start#fork'].branches[2]: no op 'ghost'",
        ),
        (lambda d: d["ops"]["start#fork"].update(join="x"), "ops['start#fork'].join: no JOIN"),
        (lambda d: d["ops"]["start#fork#join"].update(fork="z"), "ops['start#fork#join'].fork"),
    ],
    ids=["branch", "join", "fork"],
)
def test_a_fork_or_join_naming_what_is_not_there_is_refused(change: Any, fragment: str) -> None:
    data = _parallel_ir()
    assert check_ir(ir_from_json(data)) == []
    change(data)
    with pytest.raises(LatticeUserError) as caught:
        ir_from_json(data)
    assert fragment in caught.value.message


def test_a_secret_in_an_http_calls_lane_is_accepted() -> None:
    doc = chain(node("h", "httpRequest", url="https://api.test/{{ $secrets.TOK }}"))
    data = ir_to_dict(lower_ok(doc))
    assert check_ir(ir_from_json(data)) == []


def test_the_schema_id_names_the_ir_version() -> None:
    assert execir_json_schema()["$id"].endswith(f"/execir-{IR_VERSION}.json")


def _agent(data: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """The prompt op ``p`` of ``data`` turned into an AGENT op (with ``fields``)."""
    op = data["ops"]["p"]
    op.pop("purpose", None)
    op.pop("mainAgent", None)  # a prompt step's mark: what a grant would make an agent of
    op.update(kind="AGENT", tools=["Read", "Grep", "mcp__docs__search"], **fields)
    return data


def test_an_agent_op_reads_back_with_its_tools_and_limits() -> None:
    data = _agent(_ir(), limits={"maxTurns": 4, "maxToolCalls": 9, "toolTimeoutS": 2.5})
    ir = ir_from_json(data)
    op = ir.ops["p"]
    assert op.kind == "AGENT"
    assert op.tools == ["Read", "Grep", "mcp__docs__search"]
    assert (op.limits.max_turns, op.limits.max_tool_calls, op.limits.tool_timeout_s) == (4, 9, 2.5)
    assert op.limits.max_tokens is None
    assert ir_to_dict(ir)["ops"]["p"]["limits"]["maxTurns"] == 4
    assert "AgentOp" in str(execir_json_schema()["$defs"])


@pytest.mark.parametrize(
    ("fields", "fragment"),
    [
        ({"tools": ["Read", "rm -rf /"]}, "ops['p'].tools: [1]: 'rm -rf /' is not a tool name"),
        ({"tools": ["Read", "Read"]}, "ops['p'].tools: a tool is named twice"),
        ({"prompt": "{{ $in."}, "ops['p'].prompt"),
        ({"limits": {"maxTurns": 0}}, "limits.maxTurns"),
        ({"limits": {"toolTimeoutS": -1}}, "limits.toolTimeoutS"),
        ({"purpose": "classify"}, "purpose"),
    ],
    ids=["tool-name", "tool-twice", "prompt", "turns", "timeout", "llm-only-field"],
)
def test_an_agent_op_that_cannot_run_is_refused(fields: dict[str, Any], fragment: str) -> None:
    data = _agent(_ir())
    data["ops"]["p"].update(fields)
    with pytest.raises(LatticeUserError) as caught:
        ir_from_json(data)
    assert caught.value.error_type == "invalid_ir"
    assert fragment in caught.value.message

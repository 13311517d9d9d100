"""Invalid documents: every problem is a located diagnostic (code, node id, JSON pointer).

Most cases run twice, on a plain document and on the same document wrapped as
``{"meta": ..., "workflow": ...}``, whose pointers carry a ``/workflow`` prefix.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from lattice import cli
from lattice.errors import DocumentError, LatticeUserError, Severity
from lattice.lower import LoweringResult, lower, lower_document
from tests.builders import chain, conn, describe, find, node, only, workflow, wrap


@dataclass(frozen=True)
class Shape:
    """A document shape: plain, or wrapped in ``{"meta", "workflow"}``."""

    wrapped: bool

    @property
    def prefix(self) -> str:
        return "/workflow" if self.wrapped else ""

    def lower(self, doc: dict[str, Any]) -> LoweringResult:
        return lower_document(wrap(doc) if self.wrapped else doc)


@pytest.fixture(params=[False, True], ids=["plain", "wrapped"])
def shape(request: pytest.FixtureRequest) -> Shape:
    return Shape(request.param)


def _if_else(node_id: str, **data: Any) -> dict[str, Any]:
    branches = [{"label": "high", "condition": "> 0.5"}, {"label": "low", "condition": ""}]
    return node(node_id, "ifElse", evaluationTarget="$in.score", branches=branches, **data)


# --- graph shape ---------------------------------------------------------------------------


def test_start_missing(shape: Shape) -> None:
    doc = workflow([node("p", "prompt", prompt="hi"), node("end", "end")], [conn("p", "end")])
    result = shape.lower(doc)
    d = only(result, "start-missing")
    assert d.severity is Severity.ERROR
    assert d.node_id is None
    assert d.pointer == shape.prefix + "/nodes"
    assert result.ir is None


def test_start_multiple(shape: Shape) -> None:
    doc = chain(
        node("p", "prompt", prompt="hi"),
        extra_nodes=[node("start2", "start")],
        extra_connections=[conn("start2", "p")],
    )
    result = shape.lower(doc)
    d = only(result, "start-multiple")
    assert d.node_id == "start2"
    assert d.pointer == shape.prefix + "/nodes/3"
    assert "'start'" in d.message
    assert result.ir is None


def test_end_missing(shape: Shape) -> None:
    doc = workflow([node("start", "start"), node("p", "prompt", prompt="hi")], [conn("start", "p")])
    result = shape.lower(doc)
    d = only(result, "end-missing")
    assert (d.node_id, d.pointer) == (None, shape.prefix + "/nodes")
    assert result.ir is None


def test_connection_to_unknown_node(shape: Shape) -> None:
    doc = chain(node("p", "prompt", prompt="hi"))
    doc["connections"][1]["to"] = "ennd"
    result = shape.lower(doc)
    d = only(result, "connection-unknown-node")
    assert d.node_id is None
    assert d.pointer == shape.prefix + "/connections/1/to"
    assert "'ennd'" in d.message and "did you mean 'end'" in d.message
    assert result.ir is None


def test_connection_from_unknown_node(shape: Shape) -> None:
    doc = chain(node("p", "prompt", prompt="hi"))
    doc["connections"][1]["from"] = "ghost"
    result = shape.lower(doc)
    d = only(result, "connection-unknown-node")
    assert d.pointer == shape.prefix + "/connections/1/from"
    assert "'ghost'" in d.message
    assert result.ir is None


def test_connection_unknown_port(shape: Shape) -> None:
    doc = workflow(
        [node("start", "start"), _if_else("check"), node("end", "end")],
        [
            conn("start", "check"),
            conn("check", "end", "branch-0"),
            conn("check", "end", "branch-1"),
            conn("check", "end", "branch-5"),
        ],
    )
    result = shape.lower(doc)
    d = only(result, "connection-unknown-port")
    assert d.node_id == "check"
    assert d.pointer == shape.prefix + "/connections/3/fromPort"
    assert "branch-5" in d.message and "branch-0, branch-1" in d.message
    assert result.ir is None


def test_sequential_node_has_no_branch_port(shape: Shape) -> None:
    doc = chain(node("p", "prompt", prompt="hi"))
    doc["connections"][1]["fromPort"] = "branch-1"
    d = only(shape.lower(doc), "connection-unknown-port")
    assert (d.node_id, d.pointer) == ("p", shape.prefix + "/connections/1/fromPort")


def test_node_unreachable_is_a_warning(shape: Shape) -> None:
    doc = chain(
        node("p", "prompt", prompt="hi"),
        extra_nodes=[node("orphan", "prompt", prompt="nobody calls me")],
        extra_connections=[conn("orphan", "end")],
    )
    result = shape.lower(doc)
    d = only(result, "node-unreachable")
    assert d.severity is Severity.WARNING
    assert (d.node_id, d.pointer) == ("orphan", shape.prefix + "/nodes/3")
    assert result.errors == []
    assert result.ir is not None
    (kept,) = result.ir.diagnostics
    assert (kept.code, kept.severity, kept.node_id, kept.pointer) == (
        "node-unreachable",
        "warning",
        "orphan",
        shape.prefix + "/nodes/3",
    )


def test_node_dead_end_is_a_warning(shape: Shape) -> None:
    doc = chain(
        node("p", "prompt", prompt="hi"),
        extra_nodes=[node("stuck", "prompt", prompt="no way out")],
        extra_connections=[conn("start", "stuck")],
    )
    result = shape.lower(doc)
    d = only(result, "node-dead-end")
    assert d.severity is Severity.WARNING
    assert (d.node_id, d.pointer) == ("stuck", shape.prefix + "/nodes/3")
    assert result.ir is not None
    assert "stuck" in result.ir.ops


def test_node_duplicate_id(shape: Shape) -> None:
    doc = chain(node("a", "prompt", prompt="one"), node("a", "prompt", prompt="two"))
    result = shape.lower(doc)
    d = only(result, "node-duplicate-id")
    assert (d.node_id, d.pointer) == ("a", shape.prefix + "/nodes/2/id")
    assert result.ir is None


def test_duplicate_ids_keep_each_nodes_own_pointer(shape: Shape) -> None:
    doc = chain(node("a", "prompt", prompt="{{ broken"), node("a", "prompt", prompt="fine"))
    d = only(shape.lower(doc), "template-syntax")
    assert d.pointer == shape.prefix + "/nodes/1/data/prompt"


def test_pointers_after_an_invalid_node_item(shape: Shape) -> None:
    doc = chain(node("a", "prompt", prompt="x"), node("b", "prompt", prompt="{{ oops"))
    del doc["nodes"][1]["type"]
    d = only(shape.lower(doc), "template-syntax")
    assert (d.node_id, d.pointer) == ("b", shape.prefix + "/nodes/2/data/prompt")


def test_group_node_cannot_be_connected(shape: Shape) -> None:
    doc = chain(
        node("p", "prompt", prompt="hi"),
        extra_nodes=[node("frame", "group")],
        extra_connections=[conn("p", "frame")],
    )
    d = only(shape.lower(doc), "connection-group")
    assert (d.node_id, d.pointer) == ("frame", shape.prefix + "/connections/2/to")


# --- templates and references --------------------------------------------------------------


def test_template_ref_not_before(shape: Shape) -> None:
    doc = chain(
        node("a", "prompt", prompt="Summarise {{ $vars.b.result }}"),
        node("b", "prompt", prompt="later"),
    )
    result = shape.lower(doc)
    d = only(result, "template-ref-not-before")
    assert (d.node_id, d.pointer) == ("a", shape.prefix + "/nodes/1/data/prompt")
    assert "$vars.b.result" in d.message
    assert result.ir is None


def test_template_reading_its_own_result_is_not_before(shape: Shape) -> None:
    doc = chain(node("a", "prompt", prompt="{{ $vars.a.result }}"))
    d = only(shape.lower(doc), "template-ref-not-before")
    assert (d.node_id, d.pointer) == ("a", shape.prefix + "/nodes/1/data/prompt")


def test_template_ref_in_a_retry_loop_is_fine(shape: Shape) -> None:
    """In a loop, a node may read a result produced later in the loop body."""
    check = node(
        "check",
        "ifElse",
        evaluationTarget="$vars.draft.result.ok",
        branches=[{"label": "retry", "condition": "== false"}, {"label": "done", "condition": ""}],
    )
    doc = workflow(
        [
            node("start", "start"),
            node("draft", "prompt", prompt="Improve {{ $vars.review.result }}"),
            node("review", "prompt", prompt="Review {{ $vars.draft.result }}"),
            check,
            node("end", "end"),
        ],
        [
            conn("start", "draft"),
            conn("draft", "review"),
            conn("review", "check"),
            conn("check", "draft", "branch-0"),
            conn("check", "end", "branch-1"),
        ],
    )
    result = shape.lower(doc)
    assert result.errors == [], describe(result.diagnostics)


def test_template_unknown_ref_suggests_a_name(shape: Shape) -> None:
    doc = chain(
        node("classify", "prompt", prompt="label it"),
        node("answer", "prompt", prompt="Label: {{ $vars.clasify.result }}"),
    )
    d = only(shape.lower(doc), "template-unknown-ref")
    assert (d.node_id, d.pointer) == ("answer", shape.prefix + "/nodes/2/data/prompt")
    assert "'clasify'" in d.message
    assert "did you mean 'classify'" in d.message


def test_template_unknown_ctx_key(shape: Shape) -> None:
    doc = chain(node("a", "prompt", prompt="run {{ $ctx.run_id }} {{ $ctx.runid }}"))
    d = only(shape.lower(doc), "template-unknown-ref")
    assert (d.node_id, d.pointer) == ("a", shape.prefix + "/nodes/1/data/prompt")
    assert "did you mean 'run_id'" in d.message


def test_template_unknown_property(shape: Shape) -> None:
    schema = {
        "type": "object",
        "properties": {"label": {"type": "string"}, "score": {"type": "number"}},
    }
    doc = chain(
        node("a", "prompt", prompt="classify", outputSchema=schema),
        node("b", "prompt", prompt="{{ $vars.a.result.label }} {{ $vars.a.result.missing }}"),
    )
    result = shape.lower(doc)
    d = only(result, "template-unknown-property")
    assert (d.node_id, d.pointer) == ("b", shape.prefix + "/nodes/2/data/prompt")
    assert "'missing'" in d.message
    assert result.ir is None


def test_template_unknown_property_not_reported_for_open_schemas(shape: Shape) -> None:
    schema = {"type": "object", "properties": {"x": {}}, "additionalProperties": True}
    doc = chain(
        node("a", "prompt", prompt="x", outputSchema=schema),
        node("b", "prompt", prompt="{{ $vars.a.result.anything }}"),
    )
    assert shape.lower(doc).errors == []


def test_template_unknown_property_of_node_key(shape: Shape) -> None:
    doc = chain(node("a", "prompt", prompt="x"), node("b", "prompt", prompt="{{ $vars.a.output }}"))
    d = only(shape.lower(doc), "template-unknown-property")
    assert (d.node_id, d.pointer) == ("b", shape.prefix + "/nodes/2/data/prompt")
    assert "'output'" in d.message


def test_template_unknown_input_property_with_declared_inputs(shape: Shape) -> None:
    doc = chain(node("a", "prompt", prompt="{{ $in.tickt }}"))
    doc["nodes"][0]["data"]["inputs"] = {
        "type": "object",
        "properties": {"ticket": {"type": "string"}},
        "additionalProperties": False,
    }
    d = only(shape.lower(doc), "template-unknown-property")
    assert (d.node_id, d.pointer) == ("a", shape.prefix + "/nodes/1/data/prompt")
    assert "did you mean 'ticket'" in d.message


def test_template_ref_to_routing_node_has_no_result(shape: Shape) -> None:
    doc = workflow(
        [
            node("start", "start"),
            _if_else("check"),
            node("p", "prompt", prompt="{{ $vars.check.result }}"),
            node("end", "end"),
        ],
        [
            conn("start", "check"),
            conn("check", "p", "branch-0"),
            conn("check", "p", "branch-1"),
            conn("p", "end"),
        ],
    )
    d = only(shape.lower(doc), "template-ref-no-result")
    assert (d.node_id, d.pointer) == ("p", shape.prefix + "/nodes/2/data/prompt")


def test_template_syntax_unclosed(shape: Shape) -> None:
    doc = chain(node("a", "prompt", prompt="Hello {{ $in.name"))
    result = shape.lower(doc)
    d = only(result, "template-syntax")
    assert (d.node_id, d.pointer) == ("a", shape.prefix + "/nodes/1/data/prompt")
    assert "unclosed" in d.message
    assert result.ir is None


def test_template_syntax_in_a_nested_value(shape: Shape) -> None:
    doc = chain(
        node("h", "httpRequest", method="POST", url="https://example.test", body={"q": "{{ $in."})
    )
    d = only(shape.lower(doc), "template-syntax")
    # The pointer names the string that breaks, not just the field holding it.
    assert (d.node_id, d.pointer) == ("h", shape.prefix + "/nodes/1/data/body/q")


def test_variable_ref_after_set_is_fine(shape: Shape) -> None:
    doc = chain(
        node("init", "variableStore", operation="set", name="counter", value=0),
        node("bump", "variableStore", operation="increment", name="counter"),
        node("p", "prompt", prompt="count is {{ $vars.counter }}"),
    )
    result = shape.lower(doc)
    assert result.errors == [], describe(result.diagnostics)
    assert result.ir is not None


def test_variable_ref_before_set_is_not_before(shape: Shape) -> None:
    doc = chain(
        node("p", "prompt", prompt="count is {{ $vars.counter }}"),
        node("init", "variableStore", operation="set", name="counter", value=0),
    )
    d = only(shape.lower(doc), "template-ref-not-before")
    assert (d.node_id, d.pointer) == ("p", shape.prefix + "/nodes/1/data/prompt")
    assert "'counter'" in d.message


def test_variable_name_clashing_with_node_id(shape: Shape) -> None:
    doc = chain(
        node("a", "prompt", prompt="x"),
        node("store", "variableStore", operation="set", name="a", value=1),
    )
    d = only(shape.lower(doc), "variable-name-clash")
    assert (d.node_id, d.pointer) == ("store", shape.prefix + "/nodes/2/data/name")


# --- node data -----------------------------------------------------------------------------


def test_schema_invalid(shape: Shape) -> None:
    doc = chain(node("a", "prompt", prompt="x", outputSchema={"type": "nope"}))
    result = shape.lower(doc)
    d = only(result, "schema-invalid")
    assert (d.node_id, d.pointer) == ("a", shape.prefix + "/nodes/1/data/outputSchema/type")
    assert result.ir is None


def test_start_inputs_schema_invalid(shape: Shape) -> None:
    doc = chain(node("a", "prompt", prompt="x"))
    doc["nodes"][0]["data"]["inputs"] = {"type": "object", "required": "ticket"}
    d = only(shape.lower(doc), "schema-invalid")
    assert (d.node_id, d.pointer) == ("start", shape.prefix + "/nodes/0/data/inputs/required")


def test_jmespath_invalid(shape: Shape) -> None:
    doc = chain(node("t", "dataTransform", expression="foo["))
    result = shape.lower(doc)
    d = only(result, "jmespath-invalid")
    assert (d.node_id, d.pointer) == ("t", shape.prefix + "/nodes/1/data/expression")
    assert result.ir is None


def test_unknown_node_type_suggests_the_closest(shape: Shape) -> None:
    doc = chain(node("a", "promt", prompt="x"))
    result = shape.lower(doc)
    d = only(result, "unknown-node-type")
    assert (d.node_id, d.pointer) == ("a", shape.prefix + "/nodes/1/type")
    assert "did you mean 'prompt'" in d.message
    assert result.ir is None


def test_unknown_node_type_far_from_any_lists_known_types(shape: Shape) -> None:
    doc = chain(node("a", "zzzzzzzz", prompt="x"))
    d = only(shape.lower(doc), "unknown-node-type")
    assert "known types:" in d.message and "prompt" in d.message


def test_unknown_node_type_does_not_cascade_into_connection_errors() -> None:
    result = lower_document(chain(node("a", "promt", prompt="x")))
    assert [d.code for d in result.errors] == ["unknown-node-type"], describe(result.errors)


def test_condition_invalid(shape: Shape) -> None:
    sw = node(
        "route",
        "switch",
        evaluationTarget="$in.category",
        branches=[
            {"label": "billing", "condition": "== billing"},
            {"label": "other", "condition": "", "isDefault": True},
        ],
    )
    doc = workflow(
        [node("start", "start"), sw, node("end", "end")],
        [
            conn("start", "route"),
            conn("route", "end", "branch-0"),
            conn("route", "end", "branch-1"),
        ],
    )
    result = shape.lower(doc)
    d = only(result, "condition-invalid")
    assert (d.node_id, d.pointer) == ("route", shape.prefix + "/nodes/1/data/branches/0/condition")
    assert '"billing"' in d.message  # the message shows how to write it
    assert result.ir is None


def test_missing_required_field(shape: Shape) -> None:
    doc = chain(node("a", "prompt"))
    d = only(shape.lower(doc), "missing-field")
    assert (d.node_id, d.pointer) == ("a", shape.prefix + "/nodes/1/data")


def test_wrong_field_type(shape: Shape) -> None:
    doc = chain(node("a", "prompt", prompt="x", temperature="hot"))
    d = only(shape.lower(doc), "invalid-field")
    assert (d.node_id, d.pointer) == ("a", shape.prefix + "/nodes/1/data/temperature")


def test_invalid_node_item(shape: Shape) -> None:
    doc = chain(node("a", "prompt", prompt="x"))
    del doc["nodes"][1]["type"]
    result = shape.lower(doc)
    d = only(result, "invalid-node")
    assert (d.node_id, d.pointer) == ("a", shape.prefix + "/nodes/1/type")
    assert result.ir is None


def test_subflow_unknown(shape: Shape) -> None:
    doc = chain(node("call", "subAgentFlow", subAgentFlowId="flow-x"))
    doc["subAgentFlows"] = [{"id": "flow-y", "name": "y", "nodes": [], "connections": []}]
    d = only(shape.lower(doc), "subflow-unknown")
    assert (d.node_id, d.pointer) == ("call", shape.prefix + "/nodes/1/data/subAgentFlowId")
    assert "did you mean 'flow-y'" in d.message


def test_not_an_object_document(tmp_path: Path) -> None:
    path = tmp_path / "list.json"
    path.write_text("[1, 2, 3]", encoding="utf-8")
    result = lower_document(path)
    d = only(result, "invalid-document")
    assert result.ir is None
    assert d.node_id is None


def test_document_without_nodes() -> None:
    result = lower_document({"id": "x", "connections": []})
    d = only(result, "invalid-document")
    assert d.pointer == "/"
    assert result.ir is None


# --- several problems at once --------------------------------------------------------------

MANY_MISTAKES = {
    ("unknown-node-type", "typo"),
    ("template-syntax", "broken"),
    ("schema-invalid", "schema"),
    ("jmespath-invalid", "xf"),
    ("condition-invalid", "route"),
    ("template-unknown-ref", "reader"),
    ("connection-unknown-node", None),
}


def _many_mistakes() -> dict[str, Any]:
    route = node(
        "route",
        "switch",
        evaluationTarget="$in.kind",
        branches=[
            {"label": "a", "condition": "== billing"},
            {"label": "b", "condition": "", "isDefault": True},
        ],
    )
    return workflow(
        [
            node("start", "start"),
            node("typo", "promt", prompt="x"),
            node("broken", "prompt", prompt="{{ $in.x"),
            node("schema", "prompt", prompt="y", outputSchema={"type": "nope"}),
            node("xf", "dataTransform", expression="foo["),
            route,
            node("reader", "prompt", prompt="{{ $vars.nobody.result }}"),
            node("end", "end"),
        ],
        [
            conn("start", "broken"),
            conn("broken", "schema"),
            conn("schema", "xf"),
            conn("xf", "route"),
            conn("route", "reader", "branch-0"),
            conn("route", "reader", "branch-1"),
            conn("reader", "end"),
            conn("reader", "nowhere"),
        ],
    )


def test_every_problem_is_reported_together(shape: Shape) -> None:
    result = shape.lower(_many_mistakes())
    found = {(d.code, d.node_id) for d in result.errors}
    assert found >= MANY_MISTAKES, describe(result.diagnostics)
    assert result.ir is None
    for d in result.diagnostics:
        assert d.pointer.startswith(shape.prefix + "/"), d.format()


def test_lower_raises_document_error_listing_every_error() -> None:
    with pytest.raises(DocumentError) as info:
        lower(_many_mistakes())
    err = info.value
    assert isinstance(err, LatticeUserError)
    assert err.error_type == "invalid_document"
    codes = {d.code for d in err.diagnostics}
    assert codes >= {code for code, _ in MANY_MISTAKES}
    for code, _ in MANY_MISTAKES:
        assert f"[{code}]" in str(err)


# --- files ---------------------------------------------------------------------------------


def test_invalid_json_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"nodes": [', encoding="utf-8")
    with pytest.raises(DocumentError) as info:
        lower_document(bad)
    (d,) = info.value.diagnostics
    assert d.code == "invalid-json"
    assert "line 1" in d.message
    assert info.value.source == str(bad)
    with pytest.raises(DocumentError):
        lower(bad)


def test_unreadable_file(tmp_path: Path) -> None:
    missing = tmp_path / "missing.json"
    with pytest.raises(DocumentError) as info:
        lower_document(missing)
    (d,) = info.value.diagnostics
    assert d.code == "file-unreadable"
    assert "missing.json" in d.message


def test_undecodable_file(tmp_path: Path) -> None:
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(DocumentError) as info:
        lower_document(binary)
    assert [d.code for d in info.value.diagnostics] == ["file-unreadable"]


def test_directory_is_unreadable(tmp_path: Path) -> None:
    with pytest.raises(DocumentError) as info:
        lower_document(tmp_path)
    assert [d.code for d in info.value.diagnostics] == ["file-unreadable"]


# --- CLI -----------------------------------------------------------------------------------


def _write(tmp_path: Path, doc: Any, name: str = "bad.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def test_cli_check_reports_every_diagnostic(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, _many_mistakes())
    assert cli.main(["check", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "Traceback" not in captured.err
    lines = captured.err.splitlines()
    result = lower_document(path)
    for d in result.diagnostics:
        where = f"node '{d.node_id}' at {d.pointer}" if d.node_id else d.pointer
        expected = f"{path}: {d.severity.value}[{d.code}] {where}: {d.message.splitlines()[0]}"
        assert any(line.startswith(expected) for line in lines), expected
    assert (
        f"{path}: error[unknown-node-type] node 'typo' at /nodes/1/type: "
        "unknown node type 'promt' (did you mean 'prompt'?)"
    ) in lines
    assert f"{path}: error[template-syntax] node 'broken' at /nodes/2/data/prompt: " in (
        captured.err
    )
    assert lines[-1] == (
        f"{path}: {len(result.errors)} error(s), {len(result.warnings)} warning(s)"
    )


def test_cli_check_wrapped_document_pointers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, wrap(chain(node("a", "prompt", prompt="{{ $vars.zz.result }}"))))
    assert cli.main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: error[template-unknown-ref] node 'a' at /workflow/nodes/1/data/prompt: " in err


def test_cli_lower_invalid_document_prints_no_ir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, _many_mistakes())
    assert cli.main(["lower", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "error[condition-invalid]" in captured.err
    assert "Traceback" not in captured.err


def test_cli_check_warnings_only_exits_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = chain(
        node("p", "prompt", prompt="hi"),
        extra_nodes=[node("orphan", "prompt", prompt="x")],
        extra_connections=[conn("orphan", "end")],
    )
    path = _write(tmp_path, doc, "warn.json")
    assert cli.main(["check", str(path)]) == 0
    err = capsys.readouterr().err
    assert f"{path}: warning[node-unreachable] node 'orphan' at /nodes/3: " in err
    assert f"{path}: ok (4 ops, 1 warning(s))" in err


@pytest.mark.parametrize("command", ["check", "lower"])
def test_cli_invalid_json(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    path = tmp_path / "broken.json"
    path.write_text("{\n  nodes: []\n}", encoding="utf-8")
    assert cli.main([command, str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"{path}: error[invalid-json] /: not valid JSON")
    assert "line 2" in captured.err
    assert "Traceback" not in captured.err


@pytest.mark.parametrize("command", ["check", "lower"])
def test_cli_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    path = tmp_path / "nope.json"
    assert cli.main([command, str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(f"{path}: error[file-unreadable] /: cannot read {path}")
    assert "Traceback" not in captured.err


def test_cli_not_a_workflow(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, ["not", "a", "workflow"])
    assert cli.main(["check", str(path)]) == 2
    assert "error[invalid-document]" in capsys.readouterr().err


def test_cli_bad_usage_exits_two(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["lower"])
    assert info.value.code == 2
    with pytest.raises(SystemExit) as info:
        cli.main(["lower", "x.json", "--emit", "svg"])
    assert info.value.code == 2
    assert "Traceback" not in capsys.readouterr().err


# --- bugs found while writing these tests ---------------------------------------------------


def _subflow_doc() -> dict[str, Any]:
    flow = {
        "id": "flow-1",
        "name": "inner flow",
        "nodes": [
            node("fs", "start"),
            node("x", "prompt", prompt="x"),
            node("y", "prompt", prompt="y"),
            node("fe", "end"),
        ],
        "connections": [
            conn("fs", "x"),
            conn("fs", "y"),
            conn("x", "fe"),
            conn("y", "fe"),
        ],
    }
    return chain(
        node("call", "subAgentFlow", subAgentFlowId="flow-1"),
        node("p", "prompt", prompt="p"),
        subAgentFlows=[flow],
    )


def test_connection_pointer_survives_subflow_inlining(shape: Shape) -> None:
    doc = _subflow_doc()
    doc["connections"][2]["fromPort"] = "bogus"  # p -> end
    d = only(shape.lower(doc), "connection-unknown-port")
    assert (d.node_id, d.pointer) == ("p", shape.prefix + "/connections/2/fromPort")


def test_inner_subflow_connection_pointer(shape: Shape) -> None:
    doc = _subflow_doc()
    doc["subAgentFlows"][0]["connections"].append(conn("x", "y", "bogus"))
    d = only(shape.lower(doc), "connection-unknown-port")
    assert d.pointer == shape.prefix + "/subAgentFlows/0/connections/4/fromPort"


@pytest.mark.parametrize("flow_id", [[], {"id": "flow-1"}, 3])
def test_subflow_id_of_the_wrong_type_is_a_diagnostic(flow_id: Any) -> None:
    doc = _subflow_doc()
    doc["nodes"][1]["data"]["subAgentFlowId"] = flow_id
    result = lower_document(doc)
    d = only(result, "invalid-field")
    assert (d.node_id, d.pointer) == ("call", "/nodes/1/data/subAgentFlowId")
    assert result.ir is None


def test_recursive_subflow_is_reported() -> None:
    flow = {
        "id": "loop",
        "name": "loop",
        "nodes": [
            node("fs", "start"),
            node("again", "subAgentFlow", subAgentFlowId="loop"),
            node("fe", "end"),
        ],
        "connections": [conn("fs", "again"), conn("again", "fe")],
    }
    doc = chain(node("call", "subAgentFlow", subAgentFlowId="loop"), subAgentFlows=[flow])
    result = lower_document(doc)
    d = only(result, "subflow-recursive")
    assert d.pointer == "/subAgentFlows/0/nodes/1"
    assert result.ir is None


def test_recursive_subflow_has_no_knock_on_connection_errors() -> None:
    flow = {
        "id": "loop",
        "name": "loop",
        "nodes": [
            node("fs", "start"),
            node("again", "subAgentFlow", subAgentFlowId="loop"),
            node("fe", "end"),
        ],
        "connections": [conn("fs", "again"), conn("again", "fe")],
    }
    doc = chain(node("call", "subAgentFlow", subAgentFlowId="loop"), subAgentFlows=[flow])
    result = lower_document(doc)
    assert find(result, "connection-unknown-node") == [], describe(result.diagnostics)

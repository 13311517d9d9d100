"""Invalid documents: every problem is a located diagnostic (code, node id, JSON pointer).

Most cases run twice, on a plain document and on the same document wrapped as
``{"meta": ..., "workflow": ...}``, whose pointers carry a ``/workflow`` prefix.

Most cases have one shape: a document with one mistake gives exactly one error, at one
node and pointer, saying something in particular, and no IR. Each such case is a builder
registered with ``@located(...)`` and checked by ``test_error_is_located``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import pytest

from lattice import cli
from lattice.errors import DocumentError, LatticeUserError, Severity
from lattice.lower import LoweringResult, lower, lower_document
from tests.builders import (
    chain,
    conn,
    describe,
    find,
    node,
    only,
    recursive_subflow,
    workflow,
    wrap,
)


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


@dataclass(frozen=True)
class Located:
    """The one error a document must give: its code, node id (``ANY``: not checked), pointer
    (without the ``/workflow`` prefix) and words its message must contain."""

    code: str
    node_id: Any
    pointer: str
    says: tuple[str, ...] = ()


Builder = Callable[[], dict[str, Any]]
LOCATED: list[Any] = []
"""``pytest.param(builder, Located)`` for every ``@located`` builder, id'd by its name."""


def located(code: str, node_id: Any, pointer: str, *says: str) -> Callable[[Builder], Builder]:
    def register(build: Builder) -> Builder:
        expected = Located(code, node_id, pointer, says)
        LOCATED.append(pytest.param(build, expected, id=build.__name__))
        return build

    return register


# --- graph shape ---------------------------------------------------------------------------


@located("start-missing", None, "/nodes")
def start_missing() -> dict[str, Any]:
    return workflow([node("p", "prompt", prompt="hi"), node("end", "end")], [conn("p", "end")])


@located("start-multiple", "start2", "/nodes/3", "'start'")
def start_multiple() -> dict[str, Any]:
    return chain(
        node("p", "prompt", prompt="hi"),
        extra_nodes=[node("start2", "start")],
        extra_connections=[conn("start2", "p")],
    )


@located("end-missing", None, "/nodes")
def end_missing() -> dict[str, Any]:
    return workflow(
        [node("start", "start"), node("p", "prompt", prompt="hi")], [conn("start", "p")]
    )


@located("connection-unknown-node", None, "/connections/1/to", "'ennd'", "did you mean 'end'")
def connection_to_unknown_node() -> dict[str, Any]:
    doc = chain(node("p", "prompt", prompt="hi"))
    doc["connections"][1]["to"] = "ennd"
    return doc


@located("connection-unknown-node", None, "/connections/1/from", "'ghost'")
def connection_from_unknown_node() -> dict[str, Any]:
    doc = chain(node("p", "prompt", prompt="hi"))
    doc["connections"][1]["from"] = "ghost"
    return doc


@located(
    "connection-unknown-port", "check", "/connections/3/fromPort", "branch-5", "branch-0, branch-1"
)
def connection_unknown_port() -> dict[str, Any]:
    return workflow(
        [node("start", "start"), _if_else("check"), node("end", "end")],
        [
            conn("start", "check"),
            conn("check", "end", "branch-0"),
            conn("check", "end", "branch-1"),
            conn("check", "end", "branch-5"),
        ],
    )


@located("connection-unknown-port", "p", "/connections/1/fromPort")
def sequential_node_has_no_branch_port() -> dict[str, Any]:
    doc = chain(node("p", "prompt", prompt="hi"))
    doc["connections"][1]["fromPort"] = "branch-1"
    return doc


@located("node-duplicate-id", "a", "/nodes/2/id")
def node_duplicate_id() -> dict[str, Any]:
    return chain(node("a", "prompt", prompt="one"), node("a", "prompt", prompt="two"))


@located("template-syntax", "a", "/nodes/1/data/prompt")
def duplicate_ids_keep_each_nodes_own_pointer() -> dict[str, Any]:
    return chain(node("a", "prompt", prompt="{{ broken"), node("a", "prompt", prompt="fine"))


@located("template-syntax", "b", "/nodes/2/data/prompt")
def pointers_after_an_invalid_node_item() -> dict[str, Any]:
    doc = chain(node("a", "prompt", prompt="x"), node("b", "prompt", prompt="{{ oops"))
    del doc["nodes"][1]["type"]
    return doc


@located("connection-group", "frame", "/connections/2/to")
def group_node_cannot_be_connected() -> dict[str, Any]:
    return chain(
        node("p", "prompt", prompt="hi"),
        extra_nodes=[node("frame", "group")],
        extra_connections=[conn("p", "frame")],
    )


# --- templates and references --------------------------------------------------------------


@located("template-ref-not-before", "a", "/nodes/1/data/prompt", "$vars.b.result")
def template_ref_not_before() -> dict[str, Any]:
    return chain(
        node("a", "prompt", prompt="Summarise {{ $vars.b.result }}"),
        node("b", "prompt", prompt="later"),
    )


@located("template-ref-not-before", "a", "/nodes/1/data/prompt")
def template_reading_its_own_result_is_not_before() -> dict[str, Any]:
    return chain(node("a", "prompt", prompt="{{ $vars.a.result }}"))


@located(
    "template-unknown-ref",
    "answer",
    "/nodes/2/data/prompt",
    "'clasify'",
    "did you mean 'classify'",
)
def template_unknown_ref_suggests_a_name() -> dict[str, Any]:
    return chain(
        node("classify", "prompt", prompt="label it"),
        node("answer", "prompt", prompt="Label: {{ $vars.clasify.result }}"),
    )


@located("template-unknown-ref", "a", "/nodes/1/data/prompt", "did you mean 'run_id'")
def template_unknown_ctx_key() -> dict[str, Any]:
    return chain(node("a", "prompt", prompt="run {{ $ctx.run_id }} {{ $ctx.runid }}"))


@located("template-unknown-property", "b", "/nodes/2/data/prompt", "'missing'")
def template_unknown_property() -> dict[str, Any]:
    schema = {
        "type": "object",
        "properties": {"label": {"type": "string"}, "score": {"type": "number"}},
    }
    return chain(
        node("a", "prompt", prompt="classify", outputSchema=schema),
        node("b", "prompt", prompt="{{ $vars.a.result.label }} {{ $vars.a.result.missing }}"),
    )


@located("template-unknown-property", "b", "/nodes/2/data/prompt", "'output'")
def template_unknown_property_of_node_key() -> dict[str, Any]:
    return chain(
        node("a", "prompt", prompt="x"), node("b", "prompt", prompt="{{ $vars.a.output }}")
    )


@located("template-unknown-property", "a", "/nodes/1/data/prompt", "did you mean 'ticket'")
def template_unknown_input_property_with_declared_inputs() -> dict[str, Any]:
    doc = chain(node("a", "prompt", prompt="{{ $in.tickt }}"))
    doc["nodes"][0]["data"]["inputs"] = {
        "type": "object",
        "properties": {"ticket": {"type": "string"}},
        "additionalProperties": False,
    }
    return doc


@located("template-ref-no-result", "p", "/nodes/2/data/prompt")
def template_ref_to_routing_node_has_no_result() -> dict[str, Any]:
    return workflow(
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


@located("template-syntax", "a", "/nodes/1/data/prompt", "unclosed")
def template_syntax_unclosed() -> dict[str, Any]:
    return chain(node("a", "prompt", prompt="Hello {{ $in.name"))


@located("template-syntax", "h", "/nodes/1/data/body/q")  # the string that breaks
def template_syntax_in_a_nested_value() -> dict[str, Any]:
    return chain(
        node("h", "httpRequest", method="POST", url="https://example.test", body={"q": "{{ $in."})
    )


@located("template-ref-not-before", "p", "/nodes/1/data/prompt", "'counter'")
def variable_ref_before_set_is_not_before() -> dict[str, Any]:
    return chain(
        node("p", "prompt", prompt="count is {{ $vars.counter }}"),
        node("init", "variableStore", operation="set", name="counter", value=0),
    )


@located("variable-name-clash", "store", "/nodes/2/data/name")
def variable_name_clashing_with_node_id() -> dict[str, Any]:
    return chain(
        node("a", "prompt", prompt="x"),
        node("store", "variableStore", operation="set", name="a", value=1),
    )


# --- node data -----------------------------------------------------------------------------


@located("schema-invalid", "a", "/nodes/1/data/outputSchema/type")
def schema_invalid() -> dict[str, Any]:
    return chain(node("a", "prompt", prompt="x", outputSchema={"type": "nope"}))


@located("schema-invalid", "start", "/nodes/0/data/inputs/required")
def start_inputs_schema_invalid() -> dict[str, Any]:
    doc = chain(node("a", "prompt", prompt="x"))
    doc["nodes"][0]["data"]["inputs"] = {"type": "object", "required": "ticket"}
    return doc


@located("jmespath-invalid", "t", "/nodes/1/data/expression")
def jmespath_invalid() -> dict[str, Any]:
    return chain(node("t", "dataTransform", expression="foo["))


@located("unknown-node-type", "a", "/nodes/1/type", "did you mean 'prompt'")
def unknown_node_type_suggests_the_closest() -> dict[str, Any]:
    return chain(node("a", "promt", prompt="x"))


@located("unknown-node-type", "a", "/nodes/1/type", "known types:", "prompt")
def unknown_node_type_far_from_any_lists_known_types() -> dict[str, Any]:
    return chain(node("a", "zzzzzzzz", prompt="x"))


@located(
    "condition-invalid",
    "route",
    "/nodes/1/data/branches/0/condition",
    '"billing"',  # the message shows how to write it
)
def condition_invalid() -> dict[str, Any]:
    sw = node(
        "route",
        "switch",
        evaluationTarget="$in.category",
        branches=[
            {"label": "billing", "condition": "== billing"},
            {"label": "other", "condition": "", "isDefault": True},
        ],
    )
    return workflow(
        [node("start", "start"), sw, node("end", "end")],
        [
            conn("start", "route"),
            conn("route", "end", "branch-0"),
            conn("route", "end", "branch-1"),
        ],
    )


@located("missing-field", "a", "/nodes/1/data")
def missing_required_field() -> dict[str, Any]:
    return chain(node("a", "prompt"))


@located("invalid-field", "a", "/nodes/1/data/temperature")
def wrong_field_type() -> dict[str, Any]:
    return chain(node("a", "prompt", prompt="x", temperature="hot"))


@located("invalid-node", "a", "/nodes/1/type")
def invalid_node_item() -> dict[str, Any]:
    doc = chain(node("a", "prompt", prompt="x"))
    del doc["nodes"][1]["type"]
    return doc


@located("subflow-unknown", "call", "/nodes/1/data/subAgentFlowId", "did you mean 'flow-y'")
def subflow_unknown() -> dict[str, Any]:
    doc = chain(node("call", "subAgentFlow", subAgentFlowId="flow-x"))
    doc["subAgentFlows"] = [{"id": "flow-y", "name": "y", "nodes": [], "connections": []}]
    return doc


# --- sub-flows (bugs found while writing these tests) --------------------------------------


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


@located("connection-unknown-port", "p", "/connections/2/fromPort")
def connection_pointer_survives_subflow_inlining() -> dict[str, Any]:
    doc = _subflow_doc()
    doc["connections"][2]["fromPort"] = "bogus"  # p -> end
    return doc


@located("connection-unknown-port", ANY, "/subAgentFlows/0/connections/4/fromPort")
def inner_subflow_connection_pointer() -> dict[str, Any]:
    doc = _subflow_doc()
    doc["subAgentFlows"][0]["connections"].append(conn("x", "y", "bogus"))
    return doc


@located("subflow-recursive", ANY, "/subAgentFlows/0/nodes/1")
def recursive_subflow_is_reported() -> dict[str, Any]:
    return recursive_subflow()


@pytest.mark.parametrize(("build", "expected"), LOCATED)
def test_error_is_located(shape: Shape, build: Builder, expected: Located) -> None:
    result = shape.lower(build())
    d = only(result, expected.code)
    assert d.severity is Severity.ERROR
    assert (d.node_id, d.pointer) == (expected.node_id, shape.prefix + expected.pointer)
    for words in expected.says:
        assert words in d.message, d.format()
    assert result.ir is None


def _routed_after(check: dict[str, Any]) -> dict[str, Any]:
    """start → a → check → (b | c) → end, b and c reading a's answer."""
    return workflow(
        [
            node("start", "start"),
            node("a", "prompt", prompt="hi"),
            check,
            node("b", "prompt", prompt="B {{ $vars.a.result }}"),
            node("c", "prompt", prompt="C {{ $vars.a.result }}"),
            node("end", "end"),
        ],
        [
            conn("start", "a"),
            conn("a", "check"),
            conn("check", "b", "branch-0"),
            conn("check", "c", "branch-1"),
            conn("b", "end"),
            conn("c", "end"),
        ],
    )


def test_a_node_in_error_does_not_bury_its_error_under_what_follows_from_it() -> None:
    # its ports cannot be known: its connections are not judged, and the nodes after it
    # stay reachable (they used to be unreachable, their references "not before")
    check = _if_else("check")
    check["data"]["branches"] = []
    result = lower_document(_routed_after(check))
    assert [d.code for d in result.diagnostics] == ["missing-field"], describe(result.diagnostics)


def test_a_connection_to_no_node_stands_for_any_node_in_the_graph_checks() -> None:
    # a → "chekc": what follows from it (check, b, c unreachable; their references to
    # a "not before") is not reported, as it could have been meant for any node
    doc = _routed_after(_if_else("check"))
    doc["connections"][1]["to"] = "chekc"
    result = lower_document(doc)
    assert [d.code for d in result.diagnostics] == ["connection-unknown-node"], describe(
        result.diagnostics
    )
    # but a mistake of its own is: b reading c, which cannot have run before it
    doc["nodes"][3]["data"]["prompt"] = "B {{ $vars.c.result }}"
    codes = [d.code for d in lower_document(doc).diagnostics]
    assert codes == ["connection-unknown-node", "template-ref-not-before"]


def test_an_unrelated_connection_in_error_hides_no_order_error() -> None:
    doc = chain(
        node("a", "prompt", prompt="A {{ $vars.b.result }}"), node("b", "prompt", prompt="B")
    )
    # "ghost" → end could come from any node, but no path from b to a goes through it
    doc["connections"].append(conn("ghost", "end"))
    codes = sorted(d.code for d in lower_document(doc).diagnostics)
    assert codes == ["connection-unknown-node", "template-ref-not-before"]


def test_a_node_in_error_with_ports_still_has_its_ports_judged() -> None:
    doc = chain(node("p", "prompt", prompt="hi", temperature="hot"))
    doc["connections"][1]["fromPort"] = "faild"
    codes = sorted(d.code for d in lower_document(doc).diagnostics)
    assert codes == ["connection-unknown-port", "invalid-field"]


# --- warnings ------------------------------------------------------------------------------


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


# --- documents without errors --------------------------------------------------------------


def _retry_loop() -> dict[str, Any]:
    """In a loop, a node may read a result produced later in the loop body."""
    check = node(
        "check",
        "ifElse",
        evaluationTarget="$vars.draft.result.ok",
        branches=[{"label": "retry", "condition": "== false"}, {"label": "done", "condition": ""}],
    )
    return workflow(
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


def _open_schema_property() -> dict[str, Any]:
    """No template-unknown-property for schemas open to more properties."""
    schema = {"type": "object", "properties": {"x": {}}, "additionalProperties": True}
    return chain(
        node("a", "prompt", prompt="x", outputSchema=schema),
        node("b", "prompt", prompt="{{ $vars.a.result.anything }}"),
    )


def _variable_ref_after_set() -> dict[str, Any]:
    return chain(
        node("init", "variableStore", operation="set", name="counter", value=0),
        node("bump", "variableStore", operation="increment", name="counter"),
        node("p", "prompt", prompt="count is {{ $vars.counter }}"),
    )


@pytest.mark.parametrize(
    "build",
    [_retry_loop, _open_schema_property, _variable_ref_after_set],
    ids=["template-ref-in-a-retry-loop", "open-schema-property", "variable-ref-after-set"],
)
def test_references_that_are_fine(shape: Shape, build: Builder) -> None:
    result = shape.lower(build())
    assert result.errors == [], describe(result.diagnostics)
    assert result.ir is not None


def test_unknown_node_type_does_not_cascade_into_connection_errors() -> None:
    result = lower_document(chain(node("a", "promt", prompt="x")))
    assert [d.code for d in result.errors] == ["unknown-node-type"], describe(result.errors)


@pytest.mark.parametrize("flow_id", [[], {"id": "flow-1"}, 3])
def test_subflow_id_of_the_wrong_type_is_a_diagnostic(flow_id: Any) -> None:
    doc = _subflow_doc()
    doc["nodes"][1]["data"]["subAgentFlowId"] = flow_id
    result = lower_document(doc)
    d = only(result, "invalid-field")
    assert (d.node_id, d.pointer) == ("call", "/nodes/1/data/subAgentFlowId")
    assert result.ir is None


def test_recursive_subflow_has_no_knock_on_connection_errors() -> None:
    result = lower_document(recursive_subflow())
    assert find(result, "connection-unknown-node") == [], describe(result.diagnostics)


# --- whole documents -----------------------------------------------------------------------


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


UNREADABLE = {
    "missing": lambda tmp: tmp / "missing.json",
    "undecodable": lambda tmp: _written(tmp / "binary.json", b"\xff\xfe\x00garbage"),
    "directory": lambda tmp: tmp,
}


def _written(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("make", list(UNREADABLE.values()), ids=list(UNREADABLE))
def test_unreadable_file(tmp_path: Path, make: Callable[[Path], Path]) -> None:
    path = make(tmp_path)
    with pytest.raises(DocumentError) as info:
        lower_document(path)
    assert [d.code for d in info.value.diagnostics] == ["file-unreadable"]
    (d,) = info.value.diagnostics
    assert path.name in d.message
    assert info.value.source == str(path)


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

"""A document is untrusted input: every malformed one ends in located diagnostics.

One test per reproducer found by fuzzing (each is a diagnostic with its code and
location, and the CLI exits 2 without a traceback), the document limits, and the
bounds that keep lowering linear in the size of the document.
"""

from __future__ import annotations

import cProfile
import itertools
import json
import pstats
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lattice.cli.main import main
from lattice.document import limits
from lattice.document.limits import MAX_JSON_DEPTH, check_json_value
from lattice.errors import SUGGESTION_BUDGET, DocumentError, Suggester
from lattice.ir.serialize import check_ir, ir_to_json
from lattice.llm.base import LLMResponse, ToolCall
from lattice.lower import lower_document
from lattice.lower.emit import EMITTERS
from lattice.lower.subflows import MAX_DEPTH
from lattice.text import unicode_text, unicode_value
from tests.builders import chain, conn, describe, find, lower_ok, node, only, workflow


def _nested(depth: int, leaf: Any = 1) -> Any:
    """``{"k": [{"k": [...]}]}``, ``depth`` levels deep."""
    value = leaf
    for i in range(depth):
        value = [value] if (depth - 1 - i) % 2 else {"k": value}
    return value


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """Run ``lattice argv``; return the exit code and stderr (which must hold no traceback)."""
    code = main(list(argv))
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return code, err


def _write(tmp_path: Path, doc: Any, name: str = "doc.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(doc), encoding="utf-8")
    return str(path)


# --- the reproducers -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("[" * 100_000, "document-too-deep"),
        ('{"a":' * 100_000, "document-too-deep"),
        ('["' * 100_000, "invalid-json"),
        ("[" * 1_000 + "]" * 1_000, "document-too-deep"),
        ("1" * 5_000, "invalid-json"),  # past Python's digit limit: a ValueError, not JSON's
    ],
    ids=["brackets", "objects", "bracket-quote", "deep-but-parsed", "long-integer"],
)
def test_malformed_json_text_is_a_diagnostic(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, code: str
) -> None:
    path = tmp_path / "doc.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DocumentError) as caught:
        lower_document(path)
    assert [d.code for d in caught.value.diagnostics] == [code]
    for command in ("check", "lower", "run"):
        exit_code, err = _cli(capsys, command, str(path))
        assert exit_code == 2
        assert f"error[{code}]" in err


def test_deep_value_in_a_subflow_node_is_located(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flow = {
        "id": "sub",
        "name": "sub",
        "nodes": [
            node("fs", "start"),
            node("inner", "prompt", prompt="x", variables={"v": _nested(600)}),
            node("fe", "end"),
        ],
        "connections": [conn("fs", "inner"), conn("inner", "fe")],
    }
    doc = chain(node("call", "subAgentFlow", subAgentFlowId="sub"), subAgentFlows=[flow])
    result = lower_document(doc)
    d = only(result, "document-too-deep")
    assert d.node_id == "inner"
    assert d.pointer.startswith("/subAgentFlows/0/nodes/1/data/variables/v/k/0/k/")
    assert d.pointer.count("/") == MAX_JSON_DEPTH  # the first value past the limit
    assert result.ir is None
    exit_code, err = _cli(capsys, "check", _write(tmp_path, doc))
    assert exit_code == 2
    assert "error[document-too-deep] node 'inner' at /subAgentFlows/0/nodes/1/data" in err


def test_mcp_parameter_type_that_is_a_list(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mcp = node(
        "m",
        "mcp",
        serverId="srv",
        toolName="search",
        mode="aiParameterConfig",
        parameters=[{"name": "q", "type": ["string"]}],
    )
    doc = chain(mcp)
    d = only(lower_document(doc), "invalid-field")
    assert (d.node_id, d.pointer) == ("m", "/nodes/1/data/parameters/0/type")
    exit_code, err = _cli(capsys, "check", _write(tmp_path, doc))
    assert exit_code == 2
    assert "error[invalid-field] node 'm' at /nodes/1/data/parameters/0/type" in err


def test_mcp_parameter_listed_twice() -> None:
    # Found by bench/fuzz_documents.py: the arguments schema had "required": ["q", "q"],
    # which is not a valid JSON Schema.
    params = [{"name": "q", "required": True}, {"name": "q", "type": "string", "required": True}]
    mcp = node("m", "mcp", serverId="s", toolName="t", mode="aiParameterConfig", parameters=params)
    d = only(lower_document(chain(mcp)), "invalid-field")
    assert (d.node_id, d.pointer) == ("m", "/nodes/1/data/parameters/1/name")


def _if_else(condition: str, **data: Any) -> dict[str, Any]:
    return node(
        "b",
        "ifElse",
        branches=[{"label": "yes", "condition": condition}, {"label": "no"}],
        **data,
    )


def _branching(branch_node: dict[str, Any]) -> dict[str, Any]:
    return workflow(
        [
            node("start", "start"),
            node("p", "prompt", prompt="x"),
            branch_node,
            node("end", "end"),
        ],
        [
            conn("start", "p"),
            conn("p", branch_node["id"]),
            conn(branch_node["id"], "end", "branch-0"),
            conn(branch_node["id"], "end", "branch-1"),
        ],
    )


def test_branch_condition_that_is_an_open_tag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = _branching(_if_else("{{"))
    result = lower_document(doc)
    d = only(result, "template-syntax")
    assert (d.node_id, d.pointer) == ("b", "/nodes/2/data/branches/0/condition")
    path = _write(tmp_path, doc)
    for command in ("check", "run"):  # check used to say ok and run to end in a traceback
        exit_code, err = _cli(capsys, command, path)
        assert exit_code == 2
        assert "error[template-syntax] node 'b' at /nodes/2/data/branches/0/condition" in err


@pytest.mark.parametrize(
    ("where", "text"),
    [
        ("label", '{{ $in["a"] }}'),  # fine alone, broken once JSON-quoted into the prompt
        ("evaluationTarget", "the {{ mood"),
    ],
)
def test_classifier_prompt_pieces_are_checked(where: str, text: str) -> None:
    branch = _if_else("is it sunny")
    if where == "label":
        branch["data"]["branches"][0]["label"] = text
        pointer = "/nodes/2/data/branches/0/label"
    else:
        branch["data"]["evaluationTarget"] = text
        pointer = "/nodes/2/data/evaluationTarget"
    d = only(lower_document(_branching(branch)), "template-syntax")
    assert (d.node_id, d.pointer) == ("b", pointer)


def test_natural_language_condition_references_are_checked() -> None:
    doc = _branching(_if_else("is {{ $vars.nobody.result }} positive"))
    d = only(lower_document(doc), "template-unknown-ref")
    assert (d.node_id, d.pointer) == ("b", "/nodes/2/data/branches/0/condition")
    good = _branching(_if_else("is {{ $vars.p.result }} positive"))
    classify = lower_ok(good).ops["b"]
    assert "$vars.p.result" in classify.reads


def test_deep_value_that_used_to_break_the_emitters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = chain(node("v", "variableStore", operation="set", name="x", value=_nested(300)))
    d = only(lower_document(doc), "document-too-deep")
    assert d.node_id == "v"
    assert d.pointer.startswith("/nodes/1/data/value/k/0/")
    path = _write(tmp_path, doc)
    for emit in EMITTERS:
        exit_code, err = _cli(capsys, "lower", path, "--emit", emit)
        assert exit_code == 2
        assert "error[document-too-deep] node 'v' at /nodes/1/data/value" in err


def test_values_at_the_depth_limit_lower_emit_and_check() -> None:
    # /nodes/1/data/value is 4 levels down; the value may use the rest.
    doc = chain(
        node("v", "variableStore", operation="set", name="x", value=_nested(MAX_JSON_DEPTH - 4))
    )
    ir = lower_ok(doc)
    assert check_ir(ir) == []
    for emit in EMITTERS.values():
        assert emit(ir)


def _self_calling_flow(calls: int) -> dict[str, Any]:
    inner = [node(f"c{i}", "subAgentFlow", subAgentFlowId="loop") for i in range(calls)]
    ids = ["s", *[n["id"] for n in inner], "e"]
    return {
        "id": "loop",
        "name": "loop",
        "nodes": [node("s", "start"), *inner, node("e", "end")],
        "connections": [conn(a, b) for a, b in itertools.pairwise(ids)],
    }


def test_subflow_calling_itself_three_times(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = chain(
        node("call", "subAgentFlow", subAgentFlowId="loop"), subAgentFlows=[_self_calling_flow(3)]
    )
    assert len(json.dumps(doc)) < 2_000
    started = time.perf_counter()
    result = lower_document(doc)
    elapsed = time.perf_counter() - started
    found = find(result, "subflow-recursive")
    # One diagnostic per place in the document (was 6,561 and 22 s).
    assert [(d.node_id, d.pointer) for d in found] == [
        ("call__c0", "/subAgentFlows/0/nodes/1"),
        ("call__c1", "/subAgentFlows/0/nodes/2"),
        ("call__c2", "/subAgentFlows/0/nodes/3"),
    ]
    assert "'loop' uses itself (loop → loop)" in found[0].message
    assert len(result.errors) == 3, describe(result.diagnostics)
    assert elapsed < 5  # in practice milliseconds; the bound is the diagnostics above
    exit_code, err = _cli(capsys, "check", _write(tmp_path, doc))
    assert exit_code == 2
    assert err.count("error[subflow-recursive]") == 3


def test_subflows_nesting_too_deep() -> None:
    depth = MAX_DEPTH + 1
    flows: list[dict[str, Any]] = []
    for level in range(depth):
        body = (
            [node("x", "subAgentFlow", subAgentFlowId=f"f{level + 1}")]
            if level + 1 < depth
            else [node("x", "prompt", prompt="leaf")]
        )
        flows.append(
            {
                "id": f"f{level}",
                "nodes": [node("s", "start"), *body, node("e", "end")],
                "connections": [conn("s", "x"), conn("x", "e")],
            }
        )
    doc = chain(node("call", "subAgentFlow", subAgentFlowId="f0"), subAgentFlows=flows)
    d = only(lower_document(doc), "subflow-too-deep")
    assert d.pointer == f"/subAgentFlows/{MAX_DEPTH - 1}/nodes/1"
    assert "f0 → f1" in d.message
    flows[-2]["nodes"][1] = node("x", "prompt", prompt="leaf")  # one level less: fine
    lower_ok(doc)


def test_subflow_expansion_is_bounded() -> None:
    # Eight levels of flows, each calling the next four times: 4**8 = 65,536 copies of the
    # leaf. Expansion stops at the budget with one diagnostic instead of growing for ever.
    flows = []
    for level in range(8):
        if level < 7:
            calls = [
                node(f"c{i}", "subAgentFlow", subAgentFlowId=f"f{level + 1}") for i in range(4)
            ]
        else:
            calls = [node("c0", "prompt", prompt="leaf")]
        ids = ["s", *[c["id"] for c in calls], "e"]
        flows.append(
            {
                "id": f"f{level}",
                "nodes": [node("s", "start"), *calls, node("e", "end")],
                "connections": [conn(a, b) for a, b in itertools.pairwise(ids)],
            }
        )
    doc = chain(node("call", "subAgentFlow", subAgentFlowId="f0"), subAgentFlows=flows)
    assert len(json.dumps(doc)) < 10_000
    result = lower_document(doc)
    d = only(result, "subflow-expansion-too-large")
    assert d.pointer.startswith("/subAgentFlows/")
    assert result.ir is None


def test_inlined_node_data_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from lattice.lower import subflows

    monkeypatch.setattr(subflows, "MAX_INLINED_DATA", 10_000)
    flow = {
        "id": "big",
        "nodes": [node("s", "start"), node("p", "prompt", prompt="x" * 3_000), node("e", "end")],
        "connections": [conn("s", "p"), conn("p", "e")],
    }
    calls = [node(f"call{i}", "subAgentFlow", subAgentFlowId="big") for i in range(5)]
    d = only(lower_document(chain(*calls, subAgentFlows=[flow])), "subflow-expansion-too-large")
    assert (d.node_id, d.pointer) == ("call3", "/nodes/4")


def test_a_calls_tools_count_in_the_inlined_data_once_per_sub_agent_taking_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each tool-less subAgent of a flow gets its own copy of the call's tools: uncounted,
    # 20 calls of a flow of 200 such agents with 260 kB of tools made 80 million tool
    # names (5.6 GB, 130 s) from a 6 MB document.
    from lattice.lower import subflows

    monkeypatch.setattr(subflows, "MAX_INLINED_DATA", 100_000)
    agents = [node(f"a{i}", "subAgent", prompt="x") for i in range(10)]
    ids = ["s", *(a["id"] for a in agents), "e"]
    flow = {
        "id": "f",
        "nodes": [node("s", "start"), *agents, node("e", "end")],
        "connections": [conn(a, b) for a, b in itertools.pairwise(ids)],
    }
    tools = ",".join(f"mcp__s{i}__x" for i in range(1_000))  # 13 kB, 130 kB copied
    calls = [node(f"c{j}", "subAgentFlow", subAgentFlowId="f", tools=tools) for j in range(2)]
    result = lower_document(chain(*calls, subAgentFlows=[flow]))
    d = only(result, "subflow-expansion-too-large")
    assert (d.node_id, d.pointer, result.ir) == ("c0", "/nodes/1", None)


# --- document limits -------------------------------------------------------------------------


def test_document_too_large(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "MAX_DOCUMENT_BYTES", 1_000)
    doc = chain(node("p", "prompt", prompt="x" * 2_000))
    path = _write(tmp_path, doc)
    exit_code, err = _cli(capsys, "check", path)
    assert exit_code == 2
    assert "error[document-too-large]" in err
    assert "larger than 1,000 bytes" in err
    monkeypatch.setattr(limits, "MAX_DOCUMENT_BYTES", 10_000)
    assert _cli(capsys, "check", path)[0] == 0


@pytest.mark.parametrize(
    ("value", "code", "suffix"),
    [
        (float("nan"), "invalid-number", ""),
        (float("inf"), "invalid-number", ""),
        (10**400, "invalid-number", ""),
        ("x\ud800", "invalid-string", ""),
        ({"\udc00": 1}, "invalid-string", ""),
        ((1, 2), "invalid-value", ""),
        ({1: "a"}, "invalid-value", ""),
        (_nested(80), "document-too-deep", "/k/0"),
    ],
    ids=["nan", "infinity", "huge-int", "surrogate", "surrogate-key", "tuple", "int-key", "deep"],
)
def test_values_no_json_document_can_hold(value: Any, code: str, suffix: str) -> None:
    doc = chain(node("v", "variableStore", operation="set", name="x", value=value))
    d = only(lower_document(doc), code)
    assert d.node_id == "v"
    assert d.pointer.startswith("/nodes/1/data/value" + suffix)


def test_non_finite_numbers_in_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = chain(node("p", "prompt", prompt="x", temperature=float("nan"), topP=float("inf")))
    text = json.dumps(doc)  # Python writes NaN and Infinity, and reads them back
    assert "NaN" in text and "Infinity" in text
    path = tmp_path / "doc.json"
    path.write_text(text, "utf-8")
    exit_code, err = _cli(capsys, "check", str(path))
    assert exit_code == 2
    assert "error[invalid-number] node 'p' at /nodes/1/data/temperature" in err
    assert "error[invalid-number] node 'p' at /nodes/1/data/topP" in err


def test_a_self_containing_dict_is_too_deep_not_a_hang() -> None:
    doc = chain(node("p", "prompt", prompt="x"))
    doc["nodes"][1]["data"]["loop"] = doc["nodes"][1]["data"]
    assert only(lower_document(doc), "document-too-deep").node_id == "p"


def test_check_json_value_stops_after_many_findings() -> None:
    findings = check_json_value([float("nan")] * 10_000)
    assert len(findings) == limits.MAX_DIAGNOSTICS


# --- linear checks ---------------------------------------------------------------------------


def _calls(build: Callable[[int], dict[str, Any]], size: int) -> int:
    """Python function calls made lowering ``build(size)``: exact, unlike a timing."""
    doc = build(size)
    profiler = cProfile.Profile()
    profiler.enable()
    lower_document(doc)
    profiler.disable()
    return pstats.Stats(profiler).total_calls  # type: ignore[attr-defined, no-any-return]


def _unknown_refs(n: int) -> dict[str, Any]:
    """n prompts, each reading a node nobody defined (a distinct name each)."""
    return chain(
        *[node(f"p{i}", "prompt", prompt=f"{{{{ $vars.ghost{i}.result }}}}") for i in range(n)]
    )


def _valid_chain(n: int) -> dict[str, Any]:
    prompts = [
        node(f"p{i}", "prompt", prompt=f"then {{{{ $vars.p{i - 1}.result }}}}" if i else "hi")
        for i in range(n)
    ]
    return chain(*prompts)


def _if_chain(n: int) -> dict[str, Any]:
    """n deterministic ifElse nodes in a row (each asks what flows into it)."""
    branches = [{"label": "a", "condition": "== 1"}, {"label": "b"}]
    nodes = [node(f"i{k}", "ifElse", branches=branches) for k in range(n)]
    ids = ["start", *[f"i{k}" for k in range(n)], "end"]
    conns = [conn("start", "i0")]
    for a, b in itertools.pairwise(ids[1:]):
        conns += [conn(a, b, "branch-0"), conn(a, b, "branch-1")]
    return workflow([node("start", "start"), *nodes, node("end", "end")], conns)


def _many_variables(n: int) -> dict[str, Any]:
    """n variables set in a row, all read by one prompt."""
    setters = [
        node(f"v{k}", "variableStore", operation="set", name=f"var{k}", value=k) for k in range(n)
    ]
    reader = node("p", "prompt", prompt=" ".join(f"{{{{ $vars.var{k} }}}}" for k in range(n)))
    return chain(*setters, reader)


def _fan_in(n: int) -> dict[str, Any]:
    """n prompts after start, all feeding one prompt that reads every one of them."""
    prompts = [node(f"p{k}", "prompt", prompt="x") for k in range(n)]
    sink = node("sink", "prompt", prompt=" ".join(f"{{{{ $vars.p{k}.result }}}}" for k in range(n)))
    conns = [conn("start", f"p{k}") for k in range(n)] + [conn(f"p{k}", "sink") for k in range(n)]
    return workflow(
        [node("start", "start"), *prompts, sink, node("end", "end")], [*conns, conn("sink", "end")]
    )


def _far_reads(n: int) -> dict[str, Any]:
    """2n prompts in a row, the second half each reading its own far-away producer."""
    prompts = [
        node(f"p{i}", "prompt", prompt=f"{{{{ $vars.p{i - n}.result }}}}" if i >= n else "x")
        for i in range(2 * n)
    ]
    return chain(*prompts)


def _unknown_targets(n: int) -> dict[str, Any]:
    """n connections to nodes that do not exist (each a distinct name)."""
    doc = chain(node("p", "prompt", prompt="x"))
    doc["connections"] += [conn("p", f"ghost{k}") for k in range(n)]
    return doc


def _invalid_nodes(n: int) -> dict[str, Any]:
    """n prompt nodes without a prompt: n errors, one per node."""
    return chain(*[node(f"p{i}", "prompt") for i in range(n)])


def _shared_variable(n: int) -> dict[str, Any]:
    """n nodes in a row, every other one setting the variable x, the others reading it."""
    return chain(
        *[
            node(f"s{i}", "variableStore", operation="set", name="x", value=i)
            if i % 2 == 0
            else node(f"r{i}", "prompt", prompt="{{ $vars.x }}")
            for i in range(n)
        ]
    )


@pytest.mark.parametrize(
    "build",
    [
        _unknown_refs,
        _valid_chain,
        _if_chain,
        _many_variables,
        _fan_in,
        _far_reads,
        _unknown_targets,
        _invalid_nodes,
        _shared_variable,
    ],
    ids=lambda f: f.__name__.strip("_"),
)
def test_lowering_work_grows_linearly(build: Callable[[int], dict[str, Any]]) -> None:
    # Four times the document, about four times the work (quadratic would be sixteen).
    small, large = _calls(build, 400), _calls(build, 1_600)
    assert large / small < 6, (small, large)


def test_2000_unknown_references_cost_about_as_much_as_a_valid_chain() -> None:
    unknown, valid = _calls(_unknown_refs, 2_000), _calls(_valid_chain, 2_000)
    assert unknown < 2 * valid, (unknown, valid)
    result = lower_document(_unknown_refs(2_000))
    assert len(find(result, "template-unknown-ref")) == 2_000


def test_suggestions_are_computed_once_per_name_and_within_a_budget() -> None:
    names = [f"node{i}" for i in range(2_000)]
    suggest = Suggester(names)
    assert suggest.hint("node12x") == " (did you mean 'node12'?)"
    assert suggest.hint("NODE7") == " (did you mean 'node7'?)"  # case only: no fuzzy search
    compared = suggest.compared
    assert suggest.hint("node12x") == " (did you mean 'node12'?)"
    assert suggest.compared == compared  # cached
    for i in range(1_000):
        suggest.hint(f"zzz{i}")
    assert suggest.compared <= SUGGESTION_BUDGET
    assert suggest.hint("node13x") == ""  # past the budget: no hint, no work


def test_emitted_ir_of_a_large_document_parses_back() -> None:
    ir = lower_ok(_if_chain(300))
    assert check_ir(ir) == []
    assert ir_to_json(ir)


def test_a_workflow_built_in_python_is_held_to_the_limits() -> None:
    from lattice.document import Node, Workflow

    workflow = Workflow(
        nodes=[
            Node(id="start", type="start"),
            Node(
                id="v",
                type="variableStore",
                data={"operation": "set", "name": "x", "value": _nested(200)},
            ),
            Node(id="end", type="end"),
        ]
    )
    d = only(lower_document(workflow), "document-too-deep")
    assert d.node_id == "v"
    assert d.pointer.startswith("/nodes/1/data/value/k/0")


def test_unknown_node_types_get_hints_within_the_budget() -> None:
    doc = chain(node("a", "promt"), *[node(f"x{i}", f"garbage-type-{i}") for i in range(3_000)])
    found = find(lower_document(doc), "unknown-node-type")
    assert len(found) == 3_001
    assert "(did you mean 'prompt'?)" in found[0].message


def test_unicode_text_and_value_replace_lone_surrogates_and_keep_pairs() -> None:
    """Text from outside (a model, a tool) as Unicode any file can hold: a pair split in
    two (streamed pieces joined) is its character again, a lone surrogate U+FFFD; a
    value holding none is returned as it is."""
    assert unicode_text("a\ud83d" + "\ude00b\ud800") == "a\U0001f600b\ufffd"
    assert unicode_text("\ude00\ud83d") == "\ufffd\ufffd"
    plain = {"k": ["caf\u00e9", 1, None]}
    assert unicode_value(plain) is plain
    assert unicode_value({"\udc00": [{"x": "\ud800"}, 2]}) == {"\ufffd": [{"x": "\ufffd"}, 2]}
    response = LLMResponse("ok \ud800", tool_calls=(ToolCall("c1", "Read", {"p": "\ud800"}),))
    assert response.text == "ok \ufffd"
    assert response.tool_calls[0].arguments == {"p": "\ufffd"}

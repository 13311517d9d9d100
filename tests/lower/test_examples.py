"""Every shipped example lowers cleanly, and its helper files fit the document.

For ``workflows/examples/<name>.json`` the helper files are ``<name>.mock.json``
(scripted LLM answers), ``<name>.inputs.json`` and ``<name>.answers.json``.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from lattice.ir.models import AgentOp, AskOp, ContractOpBase, ExecIR, LLMWriteOp
from lattice.lower import DEFAULT_REGISTRY, LoweringResult, lower_document
from lattice.lower.main_agent import under_grant
from lattice.lower.subflows import NAMESPACE_SEPARATOR
from lattice.workspace.grants import WorkspaceGrant
from tests.conftest import REPO

EXAMPLES = REPO / "workflows" / "examples"
HELPER_SUFFIXES = (".mock.json", ".answers.json", ".inputs.json")
MAIN_EXAMPLE = "support-triage.json"

INTENTIONAL_WARNINGS: dict[str, set[str]] = {}
"""Example file name → diagnostic codes it is allowed to warn with (none today)."""


def example_files() -> list[Path]:
    return sorted(p for p in EXAMPLES.glob("*.json") if not p.name.endswith(HELPER_SUFFIXES))


def helper(path: Path, kind: str) -> Path:
    return path.with_name(path.name.removesuffix(".json") + f".{kind}.json")


@cache
def lowered(path: Path) -> LoweringResult:
    return lower_document(path)


def ir_of(path: Path) -> ExecIR:
    result = lowered(path)
    assert result.ir is not None, [d.format(path.name) for d in result.errors]
    return result.ir


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def document(path: Path) -> dict[str, Any]:
    raw = read_json(path)
    return raw["workflow"] if "workflow" in raw and "nodes" not in raw else raw


def llm_ops(ir: ExecIR) -> list[ContractOpBase]:
    """The ops that call a model: LLM_WRITE and AGENT."""
    return [op for op in ir.ops.values() if isinstance(op, ContractOpBase)]


EXAMPLE_IDS = [p.name for p in example_files()]
# No skip when the examples are missing: they live in this repository, and
# test_there_are_enough_examples fails if they disappear.


def test_there_are_enough_examples() -> None:
    assert len(EXAMPLE_IDS) >= 9
    assert MAIN_EXAMPLE in EXAMPLE_IDS


@pytest.mark.parametrize("path", example_files(), ids=EXAMPLE_IDS)
def test_example_lowers_without_errors(path: Path) -> None:
    result = lowered(path)
    assert result.errors == [], "\n".join(d.format(path.name) for d in result.errors)
    assert result.ir is not None
    allowed = INTENTIONAL_WARNINGS.get(path.name, set())
    unexpected = [d for d in result.warnings if d.code not in allowed]
    assert unexpected == [], "\n".join(d.format(path.name) for d in unexpected)


@pytest.mark.parametrize("path", example_files(), ids=EXAMPLE_IDS)
def test_mock_names_only_llm_nodes_of_the_document(path: Path) -> None:
    mock_path = helper(path, "mock")
    ir = ir_of(path)
    if not llm_ops(ir):
        assert not mock_path.exists(), "a mock script for a workflow without LLM nodes"
        return
    assert mock_path.exists(), f"{path.name} has LLM nodes but no {mock_path.name}"
    mock = read_json(mock_path)
    assert set(mock) <= {"responses", "default", "description"}
    responses = mock["responses"]
    assert isinstance(responses, dict) and responses

    doc = document(path)
    doc_nodes = {n["id"]: n for n in doc["nodes"]}
    flows = {f["id"]: {n["id"] for n in f.get("nodes", [])} for f in doc.get("subAgentFlows", [])}
    llm_nodes = {op.source_node for op in llm_ops(ir)}
    for node_id, answers in responses.items():
        call, sep, inner = node_id.partition(NAMESPACE_SEPARATOR)
        if sep and doc_nodes.get(call, {}).get("type") in ("subAgentFlow", "forEach"):
            flow_id = doc_nodes[call]["data"].get("subAgentFlowId")
            assert inner in flows.get(flow_id, set()), f"{node_id}: no node {inner!r} in {flow_id}"
        else:
            assert node_id in doc_nodes, f"mock names {node_id!r}, which is not in the document"
        assert node_id in llm_nodes, f"mock names {node_id!r}, which makes no LLM call"
        # An empty list is allowed: it states that the node makes no call in this run.
        assert isinstance(answers, list), f"{node_id}: answers are a list"
    assert any(responses.values()), "the mock answers no LLM call at all"


@pytest.mark.parametrize("path", example_files(), ids=EXAMPLE_IDS)
def test_mock_answers_fit_the_output_contracts(path: Path) -> None:
    mock_path = helper(path, "mock")
    if not mock_path.exists():
        pytest.skip("no mock script")
    ir = ir_of(path)
    if path.with_name(f"{path.stem}-project").is_dir():  # run with a workspace granted
        ir = under_grant(ir, WorkspaceGrant(root=path.parent, read=True))
    responses = read_json(mock_path)["responses"]
    assert any(responses.values()), "the mock answers no LLM call at all"
    for node_id, answers in responses.items():
        # a node's model calls: its op, or (a branch session) its replies and its summary
        ops = [o for o in ir.ops.values() if o.source_node == node_id]
        contract_ops = [o for o in ops if isinstance(o, ContractOpBase)]
        assert contract_ops, f"{node_id}: no LLM or AGENT op"
        for index, answer in enumerate(answers):
            if isinstance(answer, dict) and "$tool_calls" in answer:
                assert any(isinstance(o, AgentOp) for o in contract_ops), (
                    f"{node_id}[{index}]: tool calls of a non-agent"
                )
                continue  # an agent's turn, not its answer
            problems = [answer_problems(o, answer) for o in contract_ops]
            assert [] in problems, f"{node_id}[{index}]: {problems}"


def answer_problems(op: ContractOpBase, answer: Any) -> list[str]:
    """Why ``answer`` does not fit ``op``'s contract (none: it fits)."""
    if op.output_schema is None:
        return [] if isinstance(answer, str) else ["free-text node, answer text"]
    value = json.loads(answer) if isinstance(answer, str) else answer
    return [e.message for e in jsonschema.Draft202012Validator(op.output_schema).iter_errors(value)]


@pytest.mark.parametrize("path", example_files(), ids=EXAMPLE_IDS)
def test_inputs_file_fits_the_inputs_schema(path: Path) -> None:
    ir = ir_of(path)
    inputs_path = helper(path, "inputs")
    if ir.inputs_schema.get("required"):
        assert inputs_path.exists(), f"{path.name} has required inputs but no {inputs_path.name}"
    if inputs_path.exists():
        jsonschema.validate(read_json(inputs_path), ir.inputs_schema)


@pytest.mark.parametrize("path", example_files(), ids=EXAMPLE_IDS)
def test_answers_file_names_question_options(path: Path) -> None:
    ir = ir_of(path)
    asks = {op.id: op for op in ir.ops.values() if isinstance(op, AskOp)}
    answers_path = helper(path, "answers")
    tool_asks = _asked_through_the_tool(path)
    if not asks and not tool_asks:
        assert not answers_path.exists()
        return
    assert answers_path.exists(), f"{path.name} asks questions but has no {answers_path.name}"
    answers = read_json(answers_path)
    assert set(answers) == {op.source_node for op in asks.values()} | set(tool_asks)
    for op in asks.values():
        if op.once:  # a branch session's messages, then the command that ends it
            assert answers[op.source_node][-1] == "/done", op.source_node
            continue
        label = answers[op.source_node]
        assert label in [o.label for o in op.options], f"{op.source_node}: {label!r}"
    for node_id, options in tool_asks.items():
        assert answers[node_id] in [o["label"] for o in options], node_id


def _asked_through_the_tool(path: Path) -> dict[str, list[dict[str, Any]]]:
    """The prompt steps whose mock turns ask the person (AskUserQuestion), with the
    options of their question."""
    mock_path = helper(path, "mock")
    responses = read_json(mock_path)["responses"] if mock_path.exists() else {}
    found: dict[str, list[dict[str, Any]]] = {}
    for node_id, turns in responses.items():
        for turn in turns:
            for call in turn.get("$tool_calls", []) if isinstance(turn, dict) else ():
                if call["name"] == "AskUserQuestion":
                    found[node_id] = call["arguments"]["questions"][0].get("options", [])
    return found


def test_examples_cover_every_node_type() -> None:
    seen: set[str] = set()
    files = example_files()
    assert files, f"no examples in {EXAMPLES}"
    for path in files:
        doc = document(path)
        seen |= {n["type"] for n in doc["nodes"]}
        for flow in doc.get("subAgentFlows", []):
            seen |= {n["type"] for n in flow.get("nodes", [])}
    # the legacy branch node is read for old files; examples show today's ifElse/switch
    # (tests/lower/test_legacy_forms.py runs it)
    current = set(DEFAULT_REGISTRY.types()) - {"branch"}
    assert current <= seen, current - seen


def test_examples_cover_the_documented_features() -> None:
    files = example_files()
    assert files, f"no examples in {EXAMPLES}"
    ops = [op for path in files for op in ir_of(path).ops.values()]
    kinds = {op.kind for op in ops}
    assert kinds >= {
        "START",
        "END",
        "LLM_WRITE",
        "SWITCH",
        "TOOL_CALL",
        "STATE",
        "TRANSFORM",
        "ASK",
    }
    purposes = {op.purpose for op in ops if isinstance(op, LLMWriteOp)}
    assert {"generate", "classify", "tool_arguments"} <= purposes
    states = {op.operation for op in ops if op.kind == "STATE"}  # type: ignore[union-attr]
    assert states == {"set", "get", "append", "increment", "delete"}
    methods = {op.call.method for op in ops if op.kind == "TOOL_CALL" and op.call.tool == "http"}  # type: ignore[union-attr]
    assert {"GET", "POST"} <= methods


def test_main_example_has_the_review_loop() -> None:
    ir = ir_of(EXAMPLES / MAIN_EXAMPLE)
    route = ir.ops["route"]
    assert route.kind == "SWITCH" and route.input == "$vars.classify.result.category"
    assert route.default_port is not None
    approved = ir.ops["approved"]
    assert approved.kind == "SWITCH" and approved.input == "$vars.review.result.approved"
    # The else branch of the review leads back to the route (and so to the drafting node).
    seen, stack = set(), [e.to for e in approved.next if e.port != "Approved"]
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        stack.extend(e.to for e in ir.ops[current].next)
    assert {"count-revision", "revision-limit", "route", "draft-billing"} <= seen
    end = ir.ops["end"]
    assert end.kind == "END" and end.output == "$vars.assemble.result"
    mock = read_json(helper(EXAMPLES / MAIN_EXAMPLE, "mock"))["responses"]
    assert [a["approved"] for a in mock["review"]] == [False, True]

"""What each node type lowers to (small documents built as dicts)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import jsonschema
import pytest

from lattice.document.models import Node
from lattice.errors import Severity
from lattice.ir import (
    AgentOp,
    AskOp,
    Edge,
    EndOp,
    ExecIR,
    HttpCall,
    LLMWriteOp,
    McpCall,
    StartOp,
    StateOp,
    SwitchOp,
    ToolCallOp,
    TransformOp,
)
from lattice.lower import (
    LowererRegistry,
    LoweringContext,
    NodeLowering,
    default_registry,
    lower_document,
)
from lattice.lower.branch_nodes import classifier_schema
from tests.builders import chain, conn, describe, find, lower_ok, node, only, workflow


def _op(ir: ExecIR, op_id: str, kind: type[Any]) -> Any:
    assert op_id in ir.ops, f"no op {op_id!r}; ops: {list(ir.ops)}"
    op = ir.ops[op_id]
    assert isinstance(op, kind), f"{op_id} is {op.kind}"
    return op


def _edges(op: Any) -> list[tuple[str, str]]:
    return [(e.port, e.to) for e in op.next]


def _branching(
    branch_node: dict[str, Any], targets: list[str], *, before: str = "start"
) -> dict[str, Any]:
    """start (→ before) → branch node, whose branch-N goes to targets[N]; every target → end."""
    nodes = [node("start", "start")]
    connections = []
    if before != "start":
        nodes.append(node(before, "prompt", prompt="produce something"))
        connections.append(conn("start", before))
    nodes.append(branch_node)
    connections.append(conn(before, branch_node["id"]))
    for i, target in enumerate(targets):
        if target != "end" and target not in [n["id"] for n in nodes]:
            nodes.append(node(target, "prompt", prompt=f"handle {target}"))
            connections.append(conn(target, "end"))
        connections.append(conn(branch_node["id"], target, f"branch-{i}"))
    nodes.append(node("end", "end"))
    return workflow(nodes, connections)


# --- start / end ---------------------------------------------------------------------------


def test_start_and_end() -> None:
    ir = lower_ok(chain())
    start = _op(ir, "start", StartOp)
    end = _op(ir, "end", EndOp)
    assert ir.entry == "start"
    assert _edges(start) == [("default", "end")]
    assert end.next == []
    assert end.output is None
    assert start.source_node == "start" and end.source_node == "end"
    assert ir.workflow.id == "wf" and ir.workflow.name == "test workflow"


def test_end_output_template_is_checked_and_read() -> None:
    doc = chain(node("a", "prompt", prompt="x"))
    doc["nodes"][2]["data"]["output"] = "$vars.a.result"
    end = _op(lower_ok(doc), "end", EndOp)
    assert end.output == "$vars.a.result"
    assert end.reads == ["$vars.a.result"]
    doc["nodes"][2]["data"]["output"] = {"answer": "{{ $vars.b.result }}"}
    d = only(lower_document(doc), "template-unknown-ref")
    assert (d.node_id, d.pointer) == ("end", "/nodes/2/data/output/answer")


# --- prompt / subAgent / codex -------------------------------------------------------------


def test_prompt_becomes_llm_write() -> None:
    doc = chain(
        node("draft", "prompt", prompt="Write about {{ $in.topic }}"),
        node("polish", "prompt", prompt="Polish this"),
    )
    ir = lower_ok(doc)
    draft = _op(ir, "draft", LLMWriteOp)
    polish = _op(ir, "polish", LLMWriteOp)
    assert draft.purpose == "generate"
    assert draft.prompt == "Write about {{ $in.topic }}"
    assert draft.writes == "$vars.draft.result"
    assert polish.writes == "$vars.polish.result"
    assert draft.context == []  # the prompt already reads from $in: not repeated as context
    assert polish.context == ["$vars.draft.result"]
    assert "$vars.draft.result" in polish.reads
    assert "$in.topic" in draft.reads
    assert _edges(draft) == [("default", "polish")]
    assert _edges(polish) == [("default", "end")]
    assert (draft.model_class, draft.model, draft.output_schema) == ("default", None, None)
    assert draft.escalate is True and draft.invariants == []


def test_prompt_contract_fields() -> None:
    schema = {
        "type": "object",
        "properties": {"title": {"type": "string"}},
        "required": ["title"],
    }
    doc = chain(
        node(
            "a",
            "prompt",
            prompt="{{ tone }} title for {{ $in.topic }}",
            variables={"tone": "$in.style"},
            outputSchema=schema,
            modelClass="large",
            temperature=0.2,
            topP=0.9,
            maxTokens=300,
            template="artifact-builder@1",
            invariants=["no_code", {"name": "max_chars", "max": 80}],
            repair={"maxAttempts": 2},
            escalate={"maxClass": "large"},
            system="You are terse.",
        )
    )
    ir = lower_ok(doc)
    op = _op(ir, "a", LLMWriteOp)
    assert op.output_schema == schema
    assert op.model_class == "large"
    assert (op.temperature, op.top_p, op.max_tokens) == (0.2, 0.9, 300)
    assert op.template == "artifact-builder@1"
    assert op.invariants == ["no_code", {"name": "max_chars", "max": 80}]
    assert op.max_attempts == 2
    assert op.escalate == {"maxClass": "large"}
    assert op.system == "You are terse."
    assert op.variables == {"tone": "$in.style"}
    assert set(ir.inputs_schema["required"]) == {"style", "topic"}


def test_context_does_not_repeat_what_the_prompt_reads() -> None:
    doc = chain(
        node("draft", "prompt", prompt="x"),
        node("a", "prompt", prompt="Title: {{ $vars.draft.result.title }}"),
        node("b", "prompt", prompt="no references"),
    )
    ir = lower_ok(doc)
    assert _op(ir, "a", LLMWriteOp).context == []
    assert _op(ir, "b", LLMWriteOp).context == ["$vars.a.result"]


def test_a_bare_name_that_is_a_node_id_warns_with_the_path_of_its_answer() -> None:
    doc = chain(
        node("analyzer-1", "prompt", prompt="x"),
        node("report", "prompt", prompt="Report on {{analyzer-1}}"),
    )
    d = only(lower_document(doc), "template-name-is-node")
    assert d.severity is Severity.WARNING and d.node_id == "report"
    assert d.pointer == "/nodes/2/data/prompt"
    assert "{{ $vars.analyzer-1.result }}" in d.message
    # the path it names reads the answer, without the warning
    doc["nodes"][2]["data"]["prompt"] = "Report on {{ $vars.analyzer-1.result }}"
    assert lower_ok(doc).inputs_schema.get("required", []) == []
    # an input the start node declares under that name is meant as one
    doc["nodes"][2]["data"]["prompt"] = "Report on {{analyzer-1}}"
    doc["nodes"][0]["data"]["inputs"] = {
        "type": "object",
        "properties": {"analyzer-1": {"type": "string"}},
    }
    assert "template-name-is-node" not in [x.code for x in lower_document(doc).diagnostics]


def test_error_of_a_node_with_a_failed_port_can_be_read() -> None:
    doc = chain(
        node("a", "prompt", prompt="x"),
        extra_nodes=[node("handler", "prompt", prompt="It failed: {{ $vars.a.error }}")],
        extra_connections=[conn("a", "handler", "failed"), conn("handler", "end")],
    )
    lower_ok(doc)
    doc = chain(
        node("init", "variableStore", operation="set", name="v", value=1),
        node("read", "variableStore", operation="get", name="v"),
        node("p", "prompt", prompt="{{ $vars.read.error }}"),
    )
    d = only(lower_document(doc), "template-unknown-property")
    assert (d.node_id, d.pointer) == ("p", "/nodes/3/data/prompt")


def test_prompt_failed_port_is_wired() -> None:
    doc = chain(
        node("a", "prompt", prompt="x"),
        extra_nodes=[node("fallback", "prompt", prompt="sorry")],
        extra_connections=[conn("a", "fallback", "failed"), conn("fallback", "end")],
    )
    op = _op(lower_ok(doc), "a", LLMWriteOp)
    assert _edges(op) == [("default", "end"), ("failed", "fallback")]


def test_context_looks_through_routing_nodes() -> None:
    check = node(
        "check",
        "ifElse",
        evaluationTarget="$vars.a.result.ok",
        branches=[{"label": "yes", "condition": "== true"}, {"label": "no", "condition": ""}],
    )
    doc = workflow(
        [
            node("start", "start"),
            node("a", "prompt", prompt="x"),
            check,
            node("store", "variableStore", operation="set", name="flag", value=True),
            node("b", "prompt", prompt="y"),
            node("end", "end"),
        ],
        [
            conn("start", "a"),
            conn("a", "check"),
            conn("check", "store", "branch-0"),
            conn("check", "b", "branch-1"),
            conn("store", "b"),
            conn("b", "end"),
        ],
    )
    b = _op(lower_ok(doc), "b", LLMWriteOp)
    assert b.context == ["$vars.a.result"]


def test_merge_in_gives_context_from_every_producer() -> None:
    doc = workflow(
        [
            node("start", "start"),
            node("a", "prompt", prompt="x"),
            node("b", "prompt", prompt="y"),
            node("join", "prompt", prompt="merge"),
            node("end", "end"),
        ],
        [
            conn("start", "a"),
            conn("start", "b"),
            conn("a", "join"),
            conn("b", "join"),
            conn("join", "end"),
        ],
    )
    join = _op(lower_ok(doc), "join", LLMWriteOp)
    assert join.context == ["$vars.a.result", "$vars.b.result"]


@pytest.mark.parametrize(
    ("model", "model_class", "concrete"),
    [
        ("haiku", "small", None),
        ("sonnet", "medium", None),
        ("opus", "large", None),
        ("inherit", "default", None),
        ("Sonnet", "medium", None),
        ("medium", "medium", None),
        ("gpt-4o-mini", "default", "gpt-4o-mini"),
    ],
)
def test_subagent_model_classes(model: str, model_class: str, concrete: str | None) -> None:
    doc = chain(
        node(
            "agent",
            "subAgent",
            description="Reviewer",
            prompt="Review the diff",
            agentDefinition="You are a careful reviewer.",
            model=model,
        )
    )
    op = _op(lower_ok(doc), "agent", AgentOp)
    assert (op.model_class, op.model) == (model_class, concrete)
    assert op.system == "You are a careful reviewer."
    assert op.prompt == "Review the diff"
    assert op.writes == "$vars.agent.result"


def test_subagent_model_class_overrides_model_name() -> None:
    doc = chain(node("agent", "subAgent", prompt="x", model="haiku", modelClass="large"))
    assert _op(lower_ok(doc), "agent", AgentOp).model_class == "large"


def test_subagent_without_prompt_uses_description() -> None:
    doc = chain(node("agent", "subAgent", description="Summarise {{ $in.doc }}"))
    ir = lower_ok(doc)
    assert _op(ir, "agent", AgentOp).prompt == "Summarise {{ $in.doc }}"
    assert ir.inputs_schema["required"] == ["doc"]


def test_codex_becomes_llm_write() -> None:
    doc = chain(node("cx", "codex", prompt="Refactor {{ $in.file }}", model="o3"))
    ir = lower_ok(doc)
    op = _op(ir, "cx", LLMWriteOp)
    assert op.prompt == "Refactor {{ $in.file }}"
    assert op.system is None
    assert op.writes == "$vars.cx.result"
    assert ir.inputs_schema["required"] == ["file"]


# --- skill ---------------------------------------------------------------------------------


def _skill_doc(**data: Any) -> dict[str, Any]:
    return chain(node("sk", "skill", name="code-review", description="Code quality", **data))


def test_skill_unresolved_is_a_warning() -> None:
    result = lower_document(_skill_doc(scope="project"))
    d = only(result, "skill-unresolved")
    assert d.is_error is False
    assert (d.node_id, d.pointer) == ("sk", "/nodes/1/data")
    assert result.ir is not None
    op = _op(result.ir, "sk", AgentOp)
    assert op.system is None
    assert "code-review" in op.prompt and "Code quality" in op.prompt


def test_skill_md_becomes_the_system_prompt(tmp_path: Path) -> None:
    skill = tmp_path / ".claude" / "skills" / "code-review" / "SKILL.md"
    skill.parent.mkdir(parents=True)
    text = "---\nname: code-review\n---\nReview code for bugs. Be specific.\n"
    skill.write_text(text, encoding="utf-8")
    result = lower_document(_skill_doc(scope="project"), base_dir=tmp_path)
    assert find(result, "skill-unresolved") == [], describe(result.diagnostics)
    assert result.ir is not None
    assert _op(result.ir, "sk", AgentOp).system == text


def test_skill_found_next_to_the_document_file(tmp_path: Path) -> None:
    skill = tmp_path / ".claude" / "skills" / "code-review" / "SKILL.md"
    skill.parent.mkdir(parents=True)
    skill.write_text("Skill body", encoding="utf-8")
    path = tmp_path / "flows" / "wf.json"
    path.parent.mkdir()
    path.write_text(json.dumps(_skill_doc()), encoding="utf-8")
    ir = lower_ok(path)
    assert _op(ir, "sk", AgentOp).system == "Skill body"


def test_personal_skill_is_read_from_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    skill = home / ".claude" / "skills" / "code-review" / "SKILL.md"
    skill.parent.mkdir(parents=True)
    skill.write_text("Personal skill", encoding="utf-8")
    monkeypatch.setenv("HOME", str(home))
    ir = lower_ok(_skill_doc(scope="personal"), base_dir=tmp_path / "elsewhere")
    assert _op(ir, "sk", AgentOp).system == "Personal skill"


def test_skill_name_cannot_escape_the_skills_folder(tmp_path: Path) -> None:
    secret = tmp_path / ".claude" / "secret" / "SKILL.md"
    secret.parent.mkdir(parents=True)
    secret.write_text("do not read", encoding="utf-8")
    (tmp_path / ".claude" / "skills").mkdir()
    doc = chain(node("sk", "skill", name="../secret"))
    result = lower_document(doc, base_dir=tmp_path)
    only(result, "skill-unresolved")
    assert result.ir is not None
    assert _op(result.ir, "sk", AgentOp).system is None


# --- ifElse / switch -----------------------------------------------------------------------


def test_if_else_deterministic_is_one_switch() -> None:
    check = node(
        "check",
        "ifElse",
        evaluationTarget="$in.score",
        branches=[{"label": "high", "condition": "> 0.5"}, {"label": "low", "condition": ""}],
    )
    ir = lower_ok(_branching(check, ["hot", "cold"]))
    switch = _op(ir, "check", SwitchOp)
    assert [op_id for op_id in ir.ops if op_id.startswith("check")] == ["check"]
    assert switch.input == "$in.score"
    assert [(c.port, c.test.op, c.test.value, c.source) for c in switch.cases] == [
        ("high", "gt", 0.5, "> 0.5")
    ]
    assert switch.default_port == "low"
    assert _edges(switch) == [("high", "hot"), ("low", "cold")]
    assert ir.inputs_schema["required"] == ["score"]
    assert not any(op.purpose == "classify" for op in ir.ops.values() if op.kind == "LLM_WRITE")


def test_if_else_without_target_tests_the_single_upstream_result() -> None:
    check = node(
        "check",
        "ifElse",
        branches=[{"label": "ok", "condition": 'contains "LGTM"'}, {"label": "else"}],
    )
    ir = lower_ok(_branching(check, ["end", "end"], before="review"))
    switch = _op(ir, "check", SwitchOp)
    assert switch.input == "$vars.review.result"
    assert switch.default_port == "else"


@pytest.mark.parametrize("node_type", ["ifElse", "switch"])
def test_natural_language_condition_becomes_classifier_and_switch(node_type: str) -> None:
    branches = [
        {"label": "Passed", "condition": "Passed"},
        {"label": "Failed", "condition": "the review found problems"},
    ]
    check = node("check", node_type, branches=branches)
    ir = lower_ok(_branching(check, ["ship", "fix"], before="review"))
    classify = _op(ir, "check", LLMWriteOp)
    switch = _op(ir, "check#switch", SwitchOp)
    assert classify.purpose == "classify"
    assert classify.output_schema == classifier_schema(["Passed", "Failed"])
    assert classify.output_schema["properties"]["branch"]["enum"] == ["Passed", "Failed"]
    assert classify.labels == ["Passed", "Failed"]
    assert classify.writes == "$vars.check.result"
    assert classify.context == ["$vars.review.result"]
    assert classify.model_class == "small"
    assert classify.template == "classifier@1"
    assert "the review found problems" in classify.prompt
    assert _edges(classify) == [("default", "check#switch")]
    assert switch.source_node == "check" and classify.source_node == "check"
    assert switch.input == "$vars.check.result.branch"
    assert [(c.port, c.test.op, c.test.value) for c in switch.cases] == [
        ("Passed", "eq", "Passed"),
        ("Failed", "eq", "Failed"),
    ]
    assert _edges(switch) == [("Passed", "ship"), ("Failed", "fix")]
    # The review step leads into the classifier, not the SWITCH.
    assert _edges(ir.ops["review"]) == [("default", "check")]


def test_classifier_reads_the_evaluation_target() -> None:
    check = node(
        "check",
        "switch",
        evaluationTarget="$in.ticket",
        branches=[
            {"label": "billing", "condition": "is about money"},
            {"label": "other", "condition": "", "isDefault": True},
        ],
        model="sonnet",
    )
    ir = lower_ok(_branching(check, ["end", "end"]))
    classify = _op(ir, "check", LLMWriteOp)
    assert classify.context == ["$in.ticket"]
    assert classify.model_class == "medium"
    assert classify.labels == ["billing", "other"]
    assert ir.inputs_schema["required"] == ["ticket"]


def test_classifier_result_can_be_read_downstream() -> None:
    check = node("check", "ifElse", branches=[{"label": "yes", "condition": "is it urgent"}, {}])
    doc = _branching(check, ["end", "after"])
    after = next(n for n in doc["nodes"] if n["id"] == "after")
    after["data"]["prompt"] = "Chose {{ $vars.check.result.branch }}"
    lower_ok(doc)
    after["data"]["prompt"] = "Chose {{ $vars.check.result.label }}"
    d = only(lower_document(doc), "template-unknown-property")
    assert d.node_id == "after"


def test_switch_with_is_default_branch() -> None:
    route = node(
        "route",
        "switch",
        evaluationTarget="$in.category",
        branches=[
            {"label": "billing", "condition": '== "billing"'},
            {"label": "tech", "condition": 'in ["bug", "crash"]'},
            {"label": "other", "condition": "ignored for the default", "isDefault": True},
        ],
    )
    ir = lower_ok(_branching(route, ["pay", "fix", "chat"]))
    switch = _op(ir, "route", SwitchOp)
    assert [(c.port, c.test.op, c.test.value) for c in switch.cases] == [
        ("billing", "eq", "billing"),
        ("tech", "in", ["bug", "crash"]),
    ]
    assert switch.default_port == "other"
    assert _edges(switch) == [("billing", "pay"), ("tech", "fix"), ("other", "chat")]


def test_switch_without_default_has_no_default_port() -> None:
    route = node(
        "route",
        "switch",
        evaluationTarget="$in.n",
        branches=[{"label": "big", "condition": "> 10"}, {"label": "small", "condition": "<= 10"}],
    )
    switch = _op(lower_ok(_branching(route, ["end", "end"])), "route", SwitchOp)
    assert switch.default_port is None
    assert [c.port for c in switch.cases] == ["big", "small"]


def test_branch_labels_are_made_unique() -> None:
    route = node(
        "route",
        "switch",
        evaluationTarget="$in.n",
        branches=[
            {"label": "x", "condition": "== 1"},
            {"label": "x", "condition": "== 2"},
            {"label": "", "condition": "== 3"},
            {"label": "default", "condition": "== 4"},
        ],
    )
    switch = _op(lower_ok(_branching(route, ["end"] * 4)), "route", SwitchOp)
    ports = [c.port for c in switch.cases]
    assert len(set(ports)) == 4
    assert ports[0] == "x" and ports[2] == "branch-2"
    assert "default" not in ports


def test_bare_evaluation_target_warns_and_switches_on_the_incoming_result() -> None:
    route = node(
        "route",
        "switch",
        evaluationTarget="score",
        branches=[
            {"label": "high", "condition": "> 0.5"},
            {"label": "other", "condition": "", "isDefault": True},
        ],
    )
    result = lower_document(_branching(route, ["end", "end"]))
    # A bare name is not read as $in.score: the switch tests the incoming result, with a
    # warning that says how to write the path.
    assert result.errors == [], describe(result.diagnostics)
    d = only(result, "evaluation-target-not-path")
    assert d.severity is Severity.WARNING
    assert (d.node_id, d.pointer) == ("route", "/nodes/1/data/evaluationTarget")
    assert "$in.score" in d.message
    assert [x.code for x in result.diagnostics] == ["evaluation-target-not-path"]
    assert result.ir is not None
    switch = _op(result.ir, "route", SwitchOp)
    assert switch.input == "$in"
    assert [(c.port, c.test.op, c.test.value) for c in switch.cases] == [("high", "gt", 0.5)]
    assert switch.default_port == "other"


# --- askUserQuestion -----------------------------------------------------------------------


def test_ask_user_question_becomes_ask_and_switch() -> None:
    ask = node(
        "ask",
        "askUserQuestion",
        questionText="Deploy to {{ $in.env }}?",
        options=[{"label": "Yes", "description": "ship it"}, {"label": "No"}],
    )
    ir = lower_ok(_branching(ask, ["deploy", "end"]))
    ask_op = _op(ir, "ask", AskOp)
    switch = _op(ir, "ask#switch", SwitchOp)
    assert ask_op.question == "Deploy to {{ $in.env }}?"
    assert [(o.label, o.description) for o in ask_op.options] == [("Yes", "ship it"), ("No", None)]
    assert ask_op.multi_select is False
    assert ask_op.writes == "$vars.ask.result"
    assert _edges(ask_op) == [("default", "ask#switch")]
    assert switch.input == "$vars.ask.result.label"
    assert [(c.port, c.test.op, c.test.value) for c in switch.cases] == [
        ("Yes", "eq", "Yes"),
        ("No", "eq", "No"),
    ]
    assert _edges(switch) == [("Yes", "deploy"), ("No", "end")]
    assert ir.inputs_schema["required"] == ["env"]


def test_multi_select_question_is_sequential() -> None:
    ask = node(
        "ask",
        "askUserQuestion",
        questionText="Which?",
        multiSelect=True,
        options=[{"label": "A"}, {"label": "B"}],
    )
    ir = lower_ok(chain(ask))
    assert "ask#switch" not in ir.ops
    ask_op = _op(ir, "ask", AskOp)
    assert ask_op.multi_select is True
    assert _edges(ask_op) == [("default", "end")]


# --- mcp / httpRequest ---------------------------------------------------------------------


def test_mcp_ai_parameter_config_is_llm_then_tool_call() -> None:
    doc = chain(
        node(
            "gh",
            "mcp",
            serverId="github",
            toolName="search_issues",
            toolDescription="Search issues",
            mode="aiParameterConfig",
            aiParameterConfig={"description": "find open bugs"},
            parameters=[
                {"name": "q", "type": "string", "required": True, "description": "query"},
                {"name": "limit", "type": "integer"},
            ],
        ),
        extra_nodes=[node("oops", "prompt", prompt="report failure")],
        extra_connections=[conn("gh", "oops", "failed"), conn("oops", "end")],
    )
    ir = lower_ok(doc)
    llm = _op(ir, "gh", LLMWriteOp)
    call = _op(ir, "gh#call", ToolCallOp)
    assert llm.purpose == "tool_arguments"
    assert llm.writes == "$vars.gh.arguments"
    assert llm.output_schema == {
        "type": "object",
        "properties": {
            "q": {"type": "string", "description": "query"},
            "limit": {"type": "integer"},
        },
        "required": ["q"],
    }
    assert "search_issues" in llm.prompt and "find open bugs" in llm.prompt
    assert isinstance(call.call, McpCall)
    assert call.call.server_id == "github"
    assert call.call.tool_name == "search_issues"
    assert call.call.arguments_from == "$vars.gh.arguments"
    assert call.call.mode == "aiParameterConfig"
    assert call.writes == "$vars.gh.result"
    assert call.source_node == "gh"
    assert _edges(llm) == [("default", "gh#call"), ("failed", "oops")]
    assert _edges(call) == [("default", "end"), ("failed", "oops")]


def test_mcp_ai_tool_selection() -> None:
    doc = chain(
        node(
            "pick",
            "mcp",
            serverId="fs",
            mode="aiToolSelection",
            aiToolSelectionConfig={"taskDescription": "list files"},
        )
    )
    ir = lower_ok(doc)
    llm = _op(ir, "pick", LLMWriteOp)
    call = _op(ir, "pick#call", ToolCallOp)
    assert llm.purpose == "tool_selection"
    assert llm.output_schema is not None
    assert llm.output_schema["required"] == ["tool", "arguments"]
    assert call.call.tool_name is None
    assert call.call.arguments_from == "$vars.pick.arguments"


def test_mcp_manual_is_one_tool_call() -> None:
    doc = chain(
        node(
            "gh",
            "mcp",
            serverId="github",
            toolName="get_issue",
            mode="manualParameterConfig",
            parameterValues={"number": "{{ $in.issue }}", "repo": "acme/app"},
        )
    )
    ir = lower_ok(doc)
    assert [op_id for op_id in ir.ops if op_id.startswith("gh")] == ["gh"]
    call = _op(ir, "gh", ToolCallOp)
    assert isinstance(call.call, McpCall)
    assert call.call.mode == "manualParameterConfig"
    assert call.call.arguments == {"number": "{{ $in.issue }}", "repo": "acme/app"}
    assert call.call.arguments_from is None
    assert call.writes == "$vars.gh.result"
    assert call.reads == ["$in.issue"]
    assert ir.inputs_schema["required"] == ["issue"]


def test_http_request_is_an_http_tool_call() -> None:
    body_schema = {"type": "object", "properties": {"name": {"type": "string"}}}
    doc = chain(
        node(
            "fetch",
            "httpRequest",
            method="post",
            url="https://api.example.test/users/{{ $in.user_id }}",
            headers={"Accept": "application/json"},
            query={"verbose": "true"},
            body={"note": "{{ $in.note }}", "n": 1},
            timeoutMs=5000,
            responseType="json",
            outputSchema=body_schema,
        ),
        node(
            "use",
            "prompt",
            prompt="Hi {{ $vars.fetch.result.body.name }} ({{ $vars.fetch.result.status }})",
        ),
    )
    ir = lower_ok(doc)
    op = _op(ir, "fetch", ToolCallOp)
    assert isinstance(op.call, HttpCall)
    assert op.call.method == "POST"
    assert op.call.url == "https://api.example.test/users/{{ $in.user_id }}"
    assert op.call.headers == {"Accept": "application/json"}
    assert op.call.query == {"verbose": "true"}
    assert op.call.body == {"note": "{{ $in.note }}", "n": 1}
    assert (op.call.timeout_ms, op.call.response_type) == (5000, "json")
    assert op.output_schema == body_schema
    assert op.writes == "$vars.fetch.result"
    assert set(ir.inputs_schema["required"]) == {"user_id", "note"}
    # The declared body schema is checked downstream.
    doc["nodes"][2]["data"]["prompt"] = "{{ $vars.fetch.result.body.nmae }}"
    d = only(lower_document(doc), "template-unknown-property")
    assert "'nmae'" in d.message


def test_http_request_rejects_unknown_method() -> None:
    doc = chain(node("fetch", "httpRequest", method="FETCH", url="https://x.test"))
    d = only(lower_document(doc), "invalid-field")
    assert (d.node_id, d.pointer) == ("fetch", "/nodes/1/data/method")


# --- variableStore / dataTransform / group -------------------------------------------------


@pytest.mark.parametrize(
    ("operation", "value", "writes"),
    [
        ("set", "{{ $in.x }}", None),
        ("get", None, "$vars.read.result"),
        ("append", "$in.x", None),
        ("increment", 2, None),
        ("delete", None, None),
    ],
)
def test_variable_store_becomes_state(operation: str, value: Any, writes: str | None) -> None:
    data: dict[str, Any] = {"operation": operation, "name": "counter"}
    if value is not None:
        data["value"] = value
    doc = chain(
        node("init", "variableStore", operation="set", name="counter", value=0),
        node("read", "variableStore", **data),
    )
    ir = lower_ok(doc)
    op = _op(ir, "read", StateOp)
    assert op.operation == operation
    assert op.variable == "counter"
    assert op.value == value
    assert op.writes == writes
    if operation in ("get", "increment", "delete"):
        assert "$vars.counter" in op.reads
    else:  # set writes it; append records only the appended item (run folders grow linearly)
        assert "$vars.counter" not in op.reads


def test_variable_get_result_feeds_llm_context() -> None:
    doc = chain(
        node("init", "variableStore", operation="set", name="notes", value=[]),
        node("read", "variableStore", operation="get", name="notes"),
        node("p", "prompt", prompt="use the notes"),
    )
    p = _op(lower_ok(doc), "p", LLMWriteOp)
    assert p.context[0] == "$vars.read.result"  # then what flowed in before the variable nodes


def test_data_transform_becomes_transform() -> None:
    doc = chain(
        node("fetch", "httpRequest", url="https://x.test"),
        node("pick", "dataTransform", expression="vars.fetch.result.body.items[0]"),
        node("pick2", "dataTransform", expression="items[*].name", input="$vars.fetch.result.body"),
    )
    ir = lower_ok(doc)
    pick = _op(ir, "pick", TransformOp)
    assert pick.expression == "vars.fetch.result.body.items[0]"
    assert pick.input is None  # the default {in, vars, ctx} view
    assert pick.writes == "$vars.pick.result"
    pick2 = _op(ir, "pick2", TransformOp)
    assert pick2.input == "$vars.fetch.result.body"
    assert pick2.reads == ["$vars.fetch.result.body"]


def test_data_transform_input_must_be_a_path() -> None:
    doc = chain(node("t", "dataTransform", expression="a", input="not a path"))
    d = only(lower_document(doc), "template-syntax")
    assert (d.node_id, d.pointer) == ("t", "/nodes/1/data/input")


def test_group_lowers_to_nothing() -> None:
    inside = node("p", "prompt", prompt="x")
    inside["parentId"] = "frame"
    doc = chain(inside, extra_nodes=[node("frame", "group", label="Phase 1")])
    ir = lower_ok(doc)
    assert "frame" not in ir.ops
    assert all(op.source_node != "frame" for op in ir.ops.values())
    assert list(ir.ops) == ["start", "p", "end"]


# --- subAgentFlow --------------------------------------------------------------------------


def _flow() -> dict[str, Any]:
    return {
        "id": "research",
        "name": "Research",
        "nodes": [
            node("fs", "start"),
            node("search", "prompt", prompt="Search for {{ $in.topic }}"),
            node("summary", "prompt", prompt="Summarise {{ $vars.search.result }}"),
            node("fe", "end"),
        ],
        "connections": [conn("fs", "search"), conn("search", "summary"), conn("summary", "fe")],
    }


def test_subagent_flow_is_inlined() -> None:
    doc = chain(
        node("call", "subAgentFlow", subAgentFlowId="research"),
        node("after", "prompt", prompt="Report {{ $vars.call__summary.result }}"),
        subAgentFlows=[_flow()],
    )
    ir = lower_ok(doc)
    assert "call" not in ir.ops
    search = _op(ir, "call__search", LLMWriteOp)
    summary = _op(ir, "call__summary", LLMWriteOp)
    assert _edges(ir.ops["start"]) == [("default", "call__search")]
    assert _edges(search) == [("default", "call__summary")]
    assert _edges(summary) == [("default", "after")]
    assert summary.prompt == "Summarise {{ $vars.call__search.result }}"
    assert summary.writes == "$vars.call__summary.result"
    assert search.prompt == "Search for {{ $in.topic }}"
    assert ir.inputs_schema["required"] == ["topic"]


def test_subagent_flow_used_twice_is_namespaced_per_caller() -> None:
    doc = chain(
        node("one", "subAgentFlow", subAgentFlowId="research"),
        node("two", "subAgentFlow", subAgentFlowId="research"),
        subAgentFlows=[_flow()],
    )
    ir = lower_ok(doc)
    assert {"one__search", "one__summary", "two__search", "two__summary"} <= set(ir.ops)
    assert _edges(ir.ops["one__summary"]) == [("default", "two__search")]
    assert ir.ops["two__summary"].prompt == "Summarise {{ $vars.two__search.result }}"


def test_subagent_flow_inner_errors_point_into_the_flow() -> None:
    flow = _flow()
    flow["nodes"][2]["data"]["prompt"] = "Summarise {{ $vars.serch.result }}"
    doc = chain(node("call", "subAgentFlow", subAgentFlowId="research"), subAgentFlows=[flow])
    d = only(lower_document(doc), "template-unknown-ref")
    assert d.pointer == "/subAgentFlows/0/nodes/2/data/prompt"


def test_subagent_flow_unknown_id() -> None:
    doc = chain(node("call", "subAgentFlow", subAgentFlowId="reserch"), subAgentFlows=[_flow()])
    result = lower_document(doc)
    d = only(result, "subflow-unknown")
    assert (d.node_id, d.pointer) == ("call", "/nodes/1/data/subAgentFlowId")
    assert "did you mean 'research'" in d.message
    assert result.ir is None


# --- ports and inputs schema ---------------------------------------------------------------


@pytest.mark.parametrize("port", [None, "output", "out", "default", "Output", " out ", "next", ""])
def test_sequential_port_aliases(port: str | None) -> None:
    doc = chain(node("a", "prompt", prompt="x"), node("b", "prompt", prompt="y"))
    for connection in doc["connections"]:
        if port is not None:
            connection["fromPort"] = port
            connection["toPort"] = "input"
    ir = lower_ok(doc)
    assert _edges(ir.ops["start"]) == [("default", "a")]
    assert _edges(ir.ops["a"]) == [("default", "b")]
    assert _edges(ir.ops["b"]) == [("default", "end")]


def test_inferred_inputs_schema() -> None:
    doc = chain(
        node("a", "prompt", prompt="Ticket {{ $in.ticket.id }}: {{ customer }}"),
        node("b", "prompt", prompt="{{ tone }} and {{ $in.ticket }}", variables={"tone": "calm"}),
    )
    ir = lower_ok(doc)
    assert ir.inputs_schema == {
        "type": "object",
        "properties": {"customer": {}, "ticket": {}},
        "required": ["customer", "ticket"],
        "additionalProperties": False,
    }


def test_no_input_references_give_an_empty_closed_schema() -> None:
    ir = lower_ok(chain(node("a", "prompt", prompt="hello")))
    assert ir.inputs_schema == {
        "type": "object",
        "properties": {},
        "required": [],
        "additionalProperties": False,
    }


def test_declared_inputs_schema_wins() -> None:
    declared = {
        "type": "object",
        "properties": {"ticket": {"type": "string"}, "priority": {"type": "integer"}},
        "required": ["ticket"],
    }
    doc = chain(node("a", "prompt", prompt="{{ $in.ticket }} {{ priority }}"))
    doc["nodes"][0]["data"]["inputs"] = declared
    ir = lower_ok(doc)
    assert ir.inputs_schema == declared


def test_reading_all_of_in_accepts_inputs() -> None:
    ir = lower_ok(chain(node("a", "prompt", prompt="Summarise {{ $in }}")))
    validator = jsonschema.Draft202012Validator(ir.inputs_schema)
    assert validator.is_valid({"text": "hello"}), ir.inputs_schema


def test_data_transform_reading_inputs_accepts_inputs() -> None:
    ir = lower_ok(chain(node("t", "dataTransform", expression="in.text")))
    validator = jsonschema.Draft202012Validator(ir.inputs_schema)
    assert validator.is_valid({"text": "hello"}), ir.inputs_schema


# --- registry ------------------------------------------------------------------------------


class _NoteLowerer:
    """A custom node type: copies ``data.text`` into a TRANSFORM of a literal."""

    node_type: ClassVar[str] = "note"

    def ports(self, node: Node) -> list[str]:
        return ["default"]

    def lower(self, node: Node, ctx: LoweringContext) -> NodeLowering:
        op = TransformOp(
            id=node.id,
            source_node=node.id,
            expression='`"noted"`',
            writes=f"$vars.{node.id}.result",
        )
        return NodeLowering.single(op)


def test_custom_lowerer_in_a_registry() -> None:
    registry = default_registry()
    registry.register(_NoteLowerer())
    doc = chain(node("n", "note"), node("p", "prompt", prompt="{{ $vars.n.result }}"))
    ir = lower_ok(doc, registry=registry)
    assert ir.ops["n"].kind == "TRANSFORM"
    assert "note" in registry.types()
    # The default registry is untouched.
    assert find(lower_document(doc), "unknown-node-type")


def test_registry_suggestions() -> None:
    registry = default_registry()
    assert registry.suggest("promt") == "prompt"
    assert registry.suggest("IFELSE") == "ifElse"
    assert registry.suggest("httprequest") == "httpRequest"
    assert registry.suggest("qqqqqq") is None
    assert LowererRegistry().types() == []


# --- bugs found while writing these tests ---------------------------------------------------


def test_generated_op_ids_cannot_be_overwritten_by_document_nodes() -> None:
    check = node("check", "ifElse", branches=[{"label": "yes", "condition": "is it good"}, {}])
    doc = _branching(check, ["check#switch", "end"], before="review")
    result = lower_document(doc)
    if result.ir is None:
        assert result.errors  # rejecting the clash with an error is fine too
        return
    ops = result.ir.ops
    kinds = sorted((op.source_node, op.kind) for op in ops.values())
    assert ("check", "SWITCH") in kinds, describe(result.diagnostics)
    assert ("check#switch", "LLM_WRITE") in kinds


def test_edges_carry_ports_as_ir_edges() -> None:
    ir = lower_ok(chain(node("a", "prompt", prompt="x")))
    assert ir.ops["a"].next == [Edge(port="default", to="end")]

"""The fork's ``branchSession`` node: read as the fork writes it, lowered to a session
loop (a message, a reply, the transcript; ``/done`` to the summary), and given a full
session by ``mock init``."""

from __future__ import annotations

from typing import Any

from lattice.ir.models import AgentOp, AskOp, LLMWriteOp, StateOp, SwitchOp
from lattice.lower import lower_document
from lattice.lower.acting import toolless_nodes
from lattice.runtime.conditions import compile_condition
from lattice.service.mocks import plan_mocks
from lattice.workspace.grants import BUILTIN_TYPE_TOOLS, WorkspaceGrant
from tests.builders import chain, describe, lower_ok, node


def session(node_id: str = "review", **data: Any) -> dict[str, Any]:
    """A branchSession node as the fork writes it."""
    fields = {"label": "Review together", "workDescription": "Go through the plan.", **data}
    return node(node_id, "branchSession", outputPorts=1, **fields)


def document(**data: Any) -> dict[str, Any]:
    return chain(
        node("plan", "prompt", prompt="Plan it"),
        session(**data),
        node("next", "prompt", prompt="Use the result"),
    )


def test_the_fork_s_node_lowers_to_a_session_loop() -> None:
    ir = lower_ok(document())
    ops = {op_id: op for op_id, op in ir.ops.items() if op.source_node == "review"}
    assert list(ops) == [
        "review",
        "review#open",
        "review#message",
        "review#end",
        "review#reply",
        "review#turn",
        "review#summary",
    ]
    start, ask, end = ops["review"], ops["review#message"], ops["review#end"]
    reply, turn, summary = ops["review#reply"], ops["review#turn"], ops["review#summary"]
    assert isinstance(start, StateOp) and start.value == (
        "Branch session: Review together\n\nGo through the plan."
    )
    assert ops["review#open"].value == []  # type: ignore[union-attr]
    assert isinstance(ask, AskOp) and ask.once and not ask.options
    assert isinstance(end, SwitchOp)
    assert {e.port: e.to for e in end.next} == {"done": "review#summary", "default": "review#reply"}
    # the reply is an agent asking for what Claude Code's main agent has; the grant decides
    assert isinstance(reply, AgentOp)
    assert tuple(reply.tools) == BUILTIN_TYPE_TOOLS["general-purpose"]
    assert "$vars.plan.result" in reply.context
    assert isinstance(turn, StateOp) and turn.operation == "append"
    assert [e.to for e in turn.next] == ["review#message"]
    assert isinstance(summary, LLMWriteOp) and summary.writes == "$vars.review.result"
    # the next node gets the summary as its input, and nothing else of the session
    assert ir.ops["next"].context == ["$vars.review.result"]  # type: ignore[union-attr]


def test_a_new_node_as_the_editor_makes_it_lowers() -> None:
    made = {
        "id": "branch-session-1764670000000",
        "type": "branchSession",
        "position": {"x": 100, "y": 0},
        "data": {"label": "New Branch Session", "workDescription": "", "outputPorts": 1},
    }
    ir = lower_ok(chain(made))
    start = ir.ops["branch-session-1764670000000"]
    assert isinstance(start, StateOp)
    assert start.value == "Branch session: New Branch Session"


def test_only_done_ends_the_session() -> None:
    ir = lower_ok(document())
    end = ir.ops["review#end"]
    assert isinstance(end, SwitchOp)
    test = compile_condition(end.cases[0].test)
    assert all(test(text) for text in ("/done", " /DONE\n", "/Done"))
    assert not any(test(text) for text in ("done", "/done now", "I am /done", ""))


def test_the_session_loop_draws_no_warning() -> None:
    result = lower_document(document())
    assert result.errors == [] and result.warnings == [], describe(result.diagnostics)
    notes = result.ir.workflow.notes if result.ir else []
    assert any("branchSession: an interactive session" in n for n in notes), notes


def test_the_summary_is_held_to_the_node_s_contract() -> None:
    schema = {
        "type": "object",
        "properties": {"plan": {"type": "string"}},
        "required": ["plan"],
    }
    ir = lower_ok(document(outputSchema=schema, modelClass="large"))
    summary = ir.ops["review#summary"]
    reply = ir.ops["review#reply"]
    assert isinstance(summary, LLMWriteOp) and summary.output_schema == schema
    assert isinstance(reply, AgentOp) and reply.output_schema is None
    assert summary.model_class == reply.model_class == "large"


def test_label_and_description_are_checked_templates() -> None:
    result = lower_document(document(workDescription="Review {{ $vars.nope.result }}"))
    assert [d.code for d in result.errors] == ["template-unknown-ref"]
    assert result.errors[0].pointer.endswith("/data/workDescription")
    ir = lower_ok(document(label="Review {{ $vars.plan.result }}"))
    assert "$vars.plan.result" in ir.ops["review"].reads


def test_an_id_that_is_no_plain_name_is_refused() -> None:
    doc = chain(session("a b"))
    result = lower_document(doc)
    assert [d.code for d in result.errors] == ["invalid-field"]
    assert "plain name" in result.errors[0].message


def test_mock_init_gives_a_whole_session() -> None:
    plan = plan_mocks(lower_ok(document()))
    messages = plan.answers["review"]
    assert messages[-1] == "/done" and len(messages) == 4
    # three replies (the agent's answers, no tools without a grant), then the summary
    assert len(plan.script["responses"]["review"]) == 4


def test_without_a_grant_it_is_listed_as_a_branch_session() -> None:
    listed = toolless_nodes(lower_ok(document()), WorkspaceGrant())
    found = [t for t in listed if t.node == "review"]
    assert [t.kind for t in found] == ["branch session"]
    assert "each reply one model call" in found[0].message()

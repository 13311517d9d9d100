"""Loops without a way out are errors; loops only a model's answer can end are warned about."""

from __future__ import annotations

import pytest

from lattice.errors import DocumentError
from lattice.lower import lower, lower_document
from tests.builders import conn, node, workflow


def test_two_agents_pointing_at_each_other_is_an_error_naming_both() -> None:
    doc = workflow(
        [
            node("start", "start"),
            node("writer", "subAgent", agentDefinition="You write.", prompt="Write"),
            node("critic", "subAgent", agentDefinition="You criticise.", prompt="Criticise"),
            node("end", "end"),
        ],
        [conn("start", "writer"), conn("writer", "critic"), conn("critic", "writer")],
    )
    with pytest.raises(DocumentError) as raised:
        lower(doc)
    (error,) = [d for d in raised.value.diagnostics if d.code == "loop-no-exit"]
    assert error.node_id == "writer" and error.pointer == "/nodes/1"
    assert "'writer', 'critic'" in error.message and "max_visits" in error.message


def test_a_loop_a_counter_can_end_draws_no_diagnostic() -> None:
    doc = workflow(
        [
            node("start", "start"),
            node("count", "variableStore", operation="increment", name="n"),
            node(
                "again",
                "ifElse",
                evaluationTarget="$vars.n",
                branches=[
                    {"label": "more", "condition": "< 3"},
                    {"label": "done", "condition": "", "isDefault": True},
                ],
            ),
            node("end", "end"),
        ],
        [
            conn("start", "count"),
            conn("count", "again"),
            conn("again", "count", "branch-0"),
            conn("again", "end", "branch-1"),
        ],
    )
    result = lower_document(doc)
    assert result.ir is not None
    assert not [d for d in result.diagnostics if d.code.startswith("loop-")]


def test_a_loop_only_a_model_can_end_is_a_warning_naming_the_bounds() -> None:
    doc = workflow(
        [
            node("start", "start"),
            node("draft", "prompt", prompt="Draft"),
            node(
                "good",
                "ifElse",
                branches=[
                    {"label": "yes", "condition": "the draft is good enough to send"},
                    {"label": "no", "condition": "", "isDefault": True},
                ],
            ),
            node("end", "end"),
        ],
        [
            conn("start", "draft"),
            conn("draft", "good"),
            conn("good", "end", "branch-0"),
            conn("good", "draft", "branch-1"),
        ],
    )
    result = lower_document(doc)
    assert result.ir is not None
    (warning,) = [d for d in result.diagnostics if d.code == "loop-exit-by-model"]
    assert warning.node_id == "draft" and not warning.is_error
    assert (
        "'good'" in warning.message
        and "--max-visits" in warning.message
        and "--max-calls" in warning.message
    )

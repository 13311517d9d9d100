"""Behaviour of single ops, through small documents lowered with ``lattice.lower.lower``."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lattice.errors import LatticeRunError
from lattice.llm.mock import MockProvider
from lattice.lower import lower
from lattice.runtime import RunLimits, Runner, RunResult, RunStore, StateStore
from lattice.runtime import executors as executors_module
from tests.builders import chain, conn, node, workflow

KIND_INPUTS = {
    "type": "object",
    "properties": {"kind": {"type": "string"}},
    "required": ["kind"],
}


def run_doc(
    doc: dict[str, Any],
    inputs: dict[str, Any] | None = None,
    *,
    provider: Any = None,
    **kwargs: Any,
) -> RunResult:
    runner = Runner(lower(doc), provider=provider or MockProvider(), store=RunStore(None), **kwargs)
    return runner.run(inputs or {})


def events_of(result: RunResult, type_: str) -> list[dict[str, Any]]:
    return [e for e in result.events if e["type"] == type_]


def branches(result: RunResult) -> list[tuple[str, str]]:
    return [(e["node_id"], e["data"]["port"]) for e in events_of(result, "branch_taken")]


def assert_failed(result: RunResult, category: str) -> None:
    assert result.status == "failed", result.output
    assert result.failure is not None
    assert result.failure.category == category, result.failure.summary
    assert result.output is None
    failed = events_of(result, "run_failed")
    assert len(failed) == 1
    assert failed[0]["data"]["error_type"] == category
    assert result.events[-1]["type"] == "run_failed"


# -- SWITCH -----------------------------------------------------------------------------


def switch_doc(branch_list: list[dict[str, Any]], target: str | None = "$in.kind") -> dict:
    data: dict[str, Any] = {"branches": branch_list}
    if target is not None:
        data["evaluationTarget"] = target
    ends = [node(f"end-{i}", "end", output=f"went {i}") for i in range(len(branch_list))]
    return workflow(
        [node("start", "start", inputs=KIND_INPUTS), node("sw", "switch", **data), *ends],
        [conn("start", "sw")]
        + [conn("sw", f"end-{i}", f"branch-{i}") for i in range(len(branch_list))],
    )


THREE_WAY = [
    {"label": "Billing", "condition": '== "billing"'},
    {"label": "Bug", "condition": 'in ["bug", "crash"]'},
    {"label": "Other", "condition": "", "isDefault": True},
]


@pytest.mark.parametrize(
    ("kind", "port", "output"),
    [
        ("billing", "Billing", "went 0"),
        ("bug", "Bug", "went 1"),
        ("crash", "Bug", "went 1"),
        ("question", "Other", "went 2"),
        ("Billing", "Other", "went 2"),  # comparisons are exact
    ],
)
def test_switch_is_deterministic_with_a_default(kind: str, port: str, output: str) -> None:
    for _ in range(3):  # same input, same branch, every time
        result = run_doc(switch_doc(THREE_WAY), {"kind": kind})
        assert result.status == "completed"
        assert result.output == output
        assert branches(result) == [("sw", port)]
    taken = events_of(result, "branch_taken")[0]
    assert taken["op_id"] == "sw"
    assert taken["data"]["input"] == "$in.kind"
    if port == "Other":
        assert taken["data"]["condition"] == "default"


def test_switch_without_a_match_or_default_fails_naming_the_value() -> None:
    doc = switch_doc(
        [
            {"label": "Billing", "condition": '== "billing"'},
            {"label": "Bug", "condition": '== "bug"'},
        ]
    )
    result = run_doc(doc, {"kind": "refund-please"})
    assert_failed(result, "no_matching_branch")
    failure = result.failure
    assert failure is not None
    assert failure.op_id == "sw"
    assert failure.node_id == "sw"
    assert '"refund-please"' in failure.summary
    assert "$in.kind" in failure.summary
    assert failure.details["value"] == "refund-please"
    assert failure.details["conditions"] == ['== "billing"', '== "bug"']
    assert branches(result) == []


def test_switch_on_a_missing_target_fails_with_missing_value() -> None:
    """``flag`` is only set on one path into the switch; on the other it has no value."""
    doc = workflow(
        [
            node("start", "start"),
            node(
                "ask",
                "askUserQuestion",
                questionText="Set the flag?",
                options=[{"label": "Yes"}, {"label": "No"}],
            ),
            node("set-flag", "variableStore", operation="set", name="flag", value="billing"),
            node("sw", "switch", evaluationTarget="$vars.flag", branches=THREE_WAY),
            *[node(f"end-{i}", "end") for i in range(3)],
        ],
        [
            conn("start", "ask"),
            conn("ask", "set-flag", "branch-0"),
            conn("ask", "sw", "branch-1"),
            conn("set-flag", "sw"),
            *[conn("sw", f"end-{i}", f"branch-{i}") for i in range(3)],
        ],
    )
    assert branches(run_doc(doc, answers={"ask": "Yes"}))[-1] == ("sw", "Billing")
    result = run_doc(doc, answers={"ask": "No"})
    assert_failed(result, "missing_value")
    assert result.failure is not None
    assert result.failure.op_id == "sw"
    assert "$vars.flag" in result.failure.summary


def test_if_else_without_target_tests_the_upstream_result() -> None:
    doc = workflow(
        [
            node("start", "start"),
            node("ask-model", "prompt", prompt="Is this urgent?"),
            node(
                "check",
                "ifElse",
                branches=[
                    {"label": "Yes", "condition": 'contains "yes"'},
                    {"label": "No", "condition": ""},
                ],
            ),
            node("end-yes", "end", output="urgent"),
            node("end-no", "end", output="calm"),
        ],
        [
            conn("start", "ask-model"),
            conn("ask-model", "check"),
            conn("check", "end-yes", "branch-0"),
            conn("check", "end-no", "branch-1"),
        ],
    )
    yes = run_doc(doc, provider=MockProvider({"ask-model": ["oh yes, very"]}))
    no = run_doc(doc, provider=MockProvider({"ask-model": ["nope"]}))
    assert (yes.output, branches(yes)) == ("urgent", [("check", "Yes")])
    assert (no.output, branches(no)) == ("calm", [("check", "No")])


# -- STATE ------------------------------------------------------------------------------


def test_state_set_literal_template_and_path() -> None:
    doc = chain(
        node("s1", "variableStore", operation="set", name="n", value=41),
        node("s2", "variableStore", operation="set", name="greeting", value="hi {{ $in.who }}"),
        node("s3", "variableStore", operation="set", name="copy", value="$vars.n"),
        node("s4", "variableStore", operation="set", name="obj", value={"who": "$in.who"}),
    )
    doc["nodes"][0]["data"]["inputs"] = {
        "type": "object",
        "properties": {"who": {"type": "string"}},
        "required": ["who"],
    }
    result = run_doc(doc, {"who": "Ada"})
    assert result.status == "completed"
    assert result.vars["n"] == 41
    assert result.vars["greeting"] == "hi Ada"
    assert result.vars["copy"] == 41
    assert result.vars["obj"] == {"who": "Ada"}
    writes = [e["data"]["path"] for e in events_of(result, "state_write")]
    assert writes == ["$vars.n", "$vars.greeting", "$vars.copy", "$vars.obj"]


def test_state_get_append_increment_delete() -> None:
    doc = chain(
        node("a1", "variableStore", operation="append", name="log", value="first"),
        node("a2", "variableStore", operation="append", name="log", value={"n": 2}),
        node("i1", "variableStore", operation="increment", name="count"),
        node("i2", "variableStore", operation="increment", name="count", value=10),
        node("i3", "variableStore", operation="increment", name="count", value=0.5),
        node("s1", "variableStore", operation="set", name="tmp", value="gone soon"),
        node("d1", "variableStore", operation="delete", name="tmp"),
        node("g1", "variableStore", operation="get", name="count"),
    )
    result = run_doc(doc)
    assert result.status == "completed", result.failure
    assert result.vars["log"] == ["first", {"n": 2}]
    assert result.vars["count"] == 11.5
    assert "tmp" not in result.vars
    assert result.vars["g1"] == {"result": 11.5}
    assert result.output == 11.5  # END without output: the most recent result (the get)
    deleted = [e for e in events_of(result, "state_write") if e["data"].get("deleted")]
    assert [e["data"]["path"] for e in deleted] == ["$vars.tmp"]


def test_state_append_to_a_scalar_makes_a_list() -> None:
    doc = chain(
        node("s", "variableStore", operation="set", name="xs", value="one"),
        node("a", "variableStore", operation="append", name="xs", value="two"),
    )
    assert run_doc(doc).vars["xs"] == ["one", "two"]


def test_state_increment_of_a_non_number_fails() -> None:
    doc = chain(
        node("s", "variableStore", operation="set", name="n", value="three"),
        node("i", "variableStore", operation="increment", name="n"),
    )
    result = run_doc(doc)
    assert_failed(result, "state_error")
    assert result.failure is not None
    assert result.failure.node_id == "i"
    assert "$vars.n" in result.failure.summary


def test_state_get_of_an_unset_variable_fails_with_missing_value() -> None:
    doc = workflow(
        [
            node("start", "start"),
            node("g", "variableStore", operation="get", name="later"),
            node("s", "variableStore", operation="set", name="later", value=1),
            node("end", "end"),
        ],
        [conn("start", "g"), conn("g", "s"), conn("s", "end")],
    )
    result = run_doc(doc)
    assert_failed(result, "missing_value")
    assert result.failure is not None
    assert result.failure.details["missing"] == "$vars.later"


# -- TRANSFORM --------------------------------------------------------------------------


def test_transform_default_input_is_in_vars_ctx() -> None:
    doc = chain(
        node(
            "s",
            "variableStore",
            operation="set",
            name="items",
            value=[
                {"title": "a", "done": True},
                {"title": "b", "done": False},
                {"title": "c", "done": True},
            ],
        ),
        node(
            "t",
            "dataTransform",
            expression="{who: in.who, done: vars.items[?done].title, wf: ctx.workflow_id, "
            "run: ctx.run_id}",
        ),
    )
    doc["nodes"][0]["data"]["inputs"] = {
        "type": "object",
        "properties": {"who": {"type": "string"}},
    }
    result = run_doc(doc, {"who": "Ada"})
    assert result.status == "completed"
    value = result.vars["t"]["result"]
    assert value == {"who": "Ada", "done": ["a", "c"], "wf": "wf", "run": result.run_id}
    assert result.output == value


def test_transform_explicit_input() -> None:
    doc = chain(
        node(
            "s",
            "variableStore",
            operation="set",
            name="items",
            value=[
                {"title": "a", "done": True},
                {"title": "b", "done": False},
            ],
        ),
        node("t", "dataTransform", input="$vars.items", expression="[?!done].title | [0]"),
    )
    result = run_doc(doc)
    assert result.vars["t"]["result"] == "b"
    assert result.output == "b"


def test_transform_reading_the_result_of_an_llm_op() -> None:
    schema = {
        "type": "object",
        "properties": {"tags": {"type": "array", "items": {"type": "string"}}},
        "required": ["tags"],
    }
    doc = chain(
        node("tagger", "prompt", prompt="Tag it", outputSchema=schema),
        node("count", "dataTransform", expression="length(vars.tagger.result.tags)"),
    )
    provider = MockProvider({"tagger": [{"tags": ["a", "b", "c"]}]})
    assert run_doc(doc, provider=provider).output == 3


def test_transform_type_error_fails_with_transform_error() -> None:
    doc = chain(
        node("s", "variableStore", operation="set", name="x", value=3),
        node("t", "dataTransform", expression="length(vars.x)"),
    )
    result = run_doc(doc)
    assert_failed(result, "transform_error")
    assert result.failure is not None
    assert "length(vars.x)" in result.failure.summary


def test_transform_failure_can_take_the_failed_port() -> None:
    doc = workflow(
        [
            node("start", "start"),
            node("t", "dataTransform", expression="length(in)"),
            node("end", "end"),
            node("fallback", "end", output="{{ $vars.t.error.category }}"),
        ],
        [conn("start", "t"), conn("t", "end"), conn("t", "fallback", "failed")],
    )
    ok = run_doc(doc)
    assert ok.output == 0
    doc["nodes"][1]["data"]["expression"] = "length(`3`)"
    routed = run_doc(doc)
    assert routed.status == "completed"
    assert routed.output == "transform_error"


# -- END --------------------------------------------------------------------------------

NAME_INPUTS = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ("Bye {{ $in.name }}, you said {{ $vars.greet.result }}", "Bye Ada, you said hello Ada"),
        ("{{ $vars.greet.result }}", "hello Ada"),
        ("$in.name", "Ada"),
        ({"name": "$in.name", "text": "{{ $vars.greet.result }}", "n": 3}, None),
        ("a plain literal", "a plain literal"),
    ],
)
def test_end_output_template(output: Any, expected: Any) -> None:
    doc = chain(node("greet", "prompt", prompt="Greet {{ $in.name }}"))
    doc["nodes"][0]["data"]["inputs"] = NAME_INPUTS
    doc["nodes"][-1]["data"]["output"] = output
    result = run_doc(doc, {"name": "Ada"}, provider=MockProvider({"greet": ["hello Ada"]}))
    assert result.status == "completed"
    if expected is None:
        expected = {"name": "Ada", "text": "hello Ada", "n": 3}
    assert result.output == expected


def test_end_without_output_returns_the_last_result() -> None:
    doc = chain(
        node("greet", "prompt", prompt="Greet {{ $in.name }}"),
        node("shout", "prompt", prompt="Shout it"),
    )
    doc["nodes"][0]["data"]["inputs"] = NAME_INPUTS
    provider = MockProvider({"greet": ["hello"], "shout": ["HELLO"]})
    assert run_doc(doc, {"name": "Ada"}, provider=provider).output == "HELLO"


def test_end_with_nothing_before_it_returns_null() -> None:
    result = run_doc(chain())
    assert result.status == "completed"
    assert result.output is None


def test_end_output_reading_a_missing_value_fails() -> None:
    doc = workflow(
        [
            node("start", "start"),
            node(
                "ask",
                "askUserQuestion",
                questionText="Which?",
                options=[{"label": "A"}, {"label": "B"}],
            ),
            node("set-a", "variableStore", operation="set", name="picked", value="a"),
            node("end", "end", output="$vars.picked"),
        ],
        [
            conn("start", "ask"),
            conn("ask", "set-a", "branch-0"),
            conn("ask", "end", "branch-1"),
            conn("set-a", "end"),
        ],
    )
    assert run_doc(doc, answers={"ask": "A"}).output == "a"
    result = run_doc(doc, answers={"ask": "B"})
    assert_failed(result, "missing_value")


def test_an_unconnected_branch_fails_the_run_naming_the_port() -> None:
    doc = workflow(
        [
            node("start", "start"),
            node(
                "q",
                "askUserQuestion",
                questionText="Which?",
                options=[{"label": "A"}, {"label": "B"}],
            ),
            node("end", "end", output="went A"),
        ],
        [conn("start", "q"), conn("q", "end", "branch-0")],
    )
    assert run_doc(doc, answers={"q": "A"}).output == "went A"
    result = run_doc(doc, answers={"q": "B"})
    assert_failed(result, "dead_end")
    assert result.failure is not None
    assert "'B'" in result.failure.summary


# -- loops ------------------------------------------------------------------------------


def infinite_loop() -> dict[str, Any]:
    return workflow(
        [
            node("start", "start"),
            node("inc", "variableStore", operation="increment", name="n"),
            node(
                "again",
                "ifElse",
                evaluationTarget="$vars.n",
                branches=[
                    {"label": "Never", "condition": "< 0"},
                    {"label": "Again", "condition": ""},
                ],
            ),
            node("end", "end"),
        ],
        [
            conn("start", "inc"),
            conn("inc", "again"),
            conn("again", "end", "branch-0"),
            conn("again", "inc", "branch-1"),
        ],
    )


def test_an_infinite_loop_fails_at_the_visit_limit() -> None:
    result = run_doc(infinite_loop(), limits=RunLimits(max_visits=3))
    assert_failed(result, "step_limit")
    assert result.vars["n"] == 3  # each op ran at most three times
    assert result.failure is not None
    assert result.failure.op_id == "inc"
    started = [e["op_id"] for e in events_of(result, "op_started")]
    assert started.count("inc") == 3
    assert started.count("again") == 3


def test_an_infinite_loop_fails_at_the_step_limit() -> None:
    result = run_doc(infinite_loop(), limits=RunLimits(max_steps=10))
    assert_failed(result, "step_limit")
    assert len(events_of(result, "op_started")) == 10


def test_the_default_limits_stop_an_infinite_loop() -> None:
    result = run_doc(infinite_loop())
    assert_failed(result, "step_limit")
    assert result.vars["n"] == RunLimits().max_visits


def test_a_bounded_loop_completes() -> None:
    doc = workflow(
        [
            node("start", "start"),
            node("inc", "variableStore", operation="increment", name="n"),
            node("log", "variableStore", operation="append", name="seen", value="$vars.n"),
            node(
                "more",
                "ifElse",
                evaluationTarget="$vars.n",
                branches=[
                    {"label": "More", "condition": "< 4"},
                    {"label": "Done", "condition": ""},
                ],
            ),
            node("end", "end", output="$vars.seen"),
        ],
        [
            conn("start", "inc"),
            conn("inc", "log"),
            conn("log", "more"),
            conn("more", "inc", "branch-0"),
            conn("more", "end", "branch-1"),
        ],
    )
    result = run_doc(doc, limits=RunLimits(max_visits=4))
    assert result.status == "completed"
    assert result.output == [1, 2, 3, 4]
    assert branches(result) == [("more", "More")] * 3 + [("more", "Done")]


# -- LLM_WRITE --------------------------------------------------------------------------

LABEL_SCHEMA = {
    "type": "object",
    "properties": {
        "label": {"type": "string", "enum": ["spam", "ham"]},
        "score": {"type": "number"},
    },
    "required": ["label", "score"],
    "additionalProperties": False,
}


def llm_doc(**data: Any) -> dict[str, Any]:
    doc = chain(node("p", "prompt", prompt="Classify {{ $in.text }}", **data))
    doc["nodes"][0]["data"]["inputs"] = {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    }
    return doc


@pytest.mark.parametrize(
    "completion",
    [
        {"label": "spam", "score": 0.75},
        '{"label": "spam", "score": 0.75}',
        '  \n{"label": "spam", "score": 0.75}\n',
        '```json\n{"label": "spam", "score": 0.75}\n```',
        '```\n{"label": "spam", "score": 0.75}\n```',
    ],
    ids=["json-value", "text", "whitespace", "fenced-json", "fenced-plain"],
)
def test_llm_op_with_output_schema_parses_json(completion: Any) -> None:
    provider = MockProvider({"p": [completion]})
    result = run_doc(llm_doc(outputSchema=LABEL_SCHEMA), {"text": "BUY NOW"}, provider=provider)
    assert result.status == "completed", result.failure
    assert result.vars["p"]["result"] == {"label": "spam", "score": 0.75}
    assert result.output == {"label": "spam", "score": 0.75}
    assert len(provider.calls) == 1
    request = provider.calls[0]
    assert request.node_id == "p"
    assert request.response_schema == LABEL_SCHEMA
    assert "Classify BUY NOW" in request.messages[-1].content
    assert request.messages[-1].role == "user"


def test_llm_op_free_text_is_stored_as_text() -> None:
    text = '  Some prose, with {"json": "inside"} and ```fences```.  '
    provider = MockProvider({"p": [text]})
    result = run_doc(llm_doc(), {"text": "hi"}, provider=provider)
    assert result.status == "completed"
    assert result.vars["p"]["result"] == text
    assert provider.calls[0].response_schema is None


def test_llm_events_carry_model_hash_tokens_and_latency() -> None:
    provider = MockProvider({"p": ["hello"]}, model="mock-xl")
    result = run_doc(llm_doc(), {"text": "hi"}, provider=provider)
    [request] = events_of(result, "llm_request")
    [response] = events_of(result, "llm_response")
    for event in (request, response):
        assert event["op_id"] == "p"
        assert event["node_id"] == "p"
        assert "model_class" in event["data"]
        assert len(event["data"]["prompt_hash"]) == 64
    assert request["data"]["prompt_hash"] == response["data"]["prompt_hash"]
    assert response["data"]["model"] == "mock-xl"
    assert response["data"]["output_tokens"] > 0
    assert response["data"]["input_tokens"] > 0
    assert response["data"]["latency_ms"] >= 0
    assert result.usage.calls == 1
    assert result.usage.by_model["mock-xl"]["calls"] == 1


def test_llm_prompt_hash_is_stable_across_runs() -> None:
    hashes = set()
    for _ in range(2):
        result = run_doc(llm_doc(), {"text": "same"}, provider=MockProvider({"p": ["x"]}))
        hashes |= {e["data"]["prompt_hash"] for e in events_of(result, "llm_request")}
    assert len(hashes) == 1


def test_mock_exhaustion_fails_the_run() -> None:
    result = run_doc(llm_doc(), {"text": "hi"}, provider=MockProvider({"p": []}))
    assert_failed(result, "mock_exhausted")
    assert result.failure is not None
    assert result.failure.node_id == "p"
    assert "p" in result.failure.summary
    assert "p" not in result.vars


def test_a_mock_without_the_node_and_without_default_fails() -> None:
    result = run_doc(llm_doc(), {"text": "hi"}, provider=MockProvider({"other": ["x"]}))
    assert_failed(result, "mock_exhausted")


def test_mock_default_answers_every_unlisted_node() -> None:
    doc = chain(node("a", "prompt", prompt="one"), node("b", "prompt", prompt="two"))
    provider = MockProvider({"a": ["from list"]}, default="from default")
    result = run_doc(doc, provider=provider)
    assert result.vars["a"]["result"] == "from list"
    assert result.vars["b"]["result"] == "from default"


def test_llm_result_feeds_a_later_prompt() -> None:
    doc = chain(
        node("first", "prompt", prompt="Name a colour"),
        node("second", "prompt", prompt="Describe {{ $vars.first.result }} in one word"),
    )
    provider = MockProvider({"first": ["teal"], "second": ["calm"]})
    result = run_doc(doc, provider=provider)
    assert result.output == "calm"
    assert "Describe teal in one word" in provider.calls[1].messages[-1].content


# -- failed ports -----------------------------------------------------------------------


def failed_port_doc(handler: dict[str, Any]) -> dict[str, Any]:
    return workflow(
        [
            node("start", "start"),
            node("p", "prompt", prompt="Summarise"),
            node("end", "end"),
            handler,
            node("end-failed", "end"),
        ],
        [
            conn("start", "p"),
            conn("p", "end"),
            conn("p", handler["id"], "failed"),
            conn(handler["id"], "end-failed"),
        ],
    )


def test_a_failed_port_routes_with_the_error_in_vars() -> None:
    doc = failed_port_doc(node("fallback", "dataTransform", expression="vars.p.error.category"))
    result = run_doc(doc, provider=MockProvider({"p": []}))
    assert result.status == "completed", result.failure
    assert result.failure is None
    assert result.output == "mock_exhausted"
    error = result.vars["p"]["error"]
    assert error["category"] == "mock_exhausted"
    assert error["node_id"] == "p"
    assert error["op_id"] == "p"
    assert error["run_id"] == result.run_id
    assert error["summary"]
    assert "result" not in result.vars["p"]
    finished = [e for e in events_of(result, "op_finished") if e["op_id"] == "p"]
    assert finished[0]["data"]["port"] == "failed"
    started = [e["op_id"] for e in events_of(result, "op_started")]
    assert started == ["start", "p", "fallback", "end-failed"]


def test_a_failed_port_is_not_taken_when_the_op_succeeds() -> None:
    doc = failed_port_doc(node("fallback", "dataTransform", expression="vars.p.error.category"))
    result = run_doc(doc, provider=MockProvider({"p": ["fine"]}))
    assert result.output == "fine"
    assert "error" not in result.vars["p"]


def test_a_failure_handler_can_template_the_error() -> None:
    doc = failed_port_doc(
        node(
            "fallback",
            "variableStore",
            operation="set",
            name="why",
            value="{{ $vars.p.error.category }}",
        )
    )
    result = run_doc(doc, provider=MockProvider({"p": []}))
    assert result.vars["why"] == "mock_exhausted"


# -- $tmp -------------------------------------------------------------------------------


def test_tmp_is_cleared_after_each_op(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each STATE op finds $tmp empty, scribbles in it, and the next op finds it empty again."""
    seen: list[dict[str, Any]] = []
    original = executors_module.EXECUTORS["STATE"]

    class Scribbler:
        def __init__(self, op: Any) -> None:
            self.inner = original(op)
            self.op = op

        async def run(self, ctx: Any) -> Any:
            seen.append(dict(ctx.state.tmp))
            ctx.state.write(f"$tmp.{self.op.id}", "scratch")
            return await self.inner.run(ctx)

    monkeypatch.setitem(executors_module.EXECUTORS, "STATE", Scribbler)
    doc = chain(
        node("a", "variableStore", operation="set", name="x", value=1),
        node("b", "variableStore", operation="set", name="y", value=2),
        node("c", "variableStore", operation="increment", name="x"),
    )
    result = run_doc(doc)
    assert result.status == "completed", result.failure
    assert seen == [{}, {}, {}]
    assert result.state["tmp"] == {}
    assert result.vars == {"x": 2, "y": 2}


def test_tmp_is_cleared_even_when_an_op_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    original = executors_module.EXECUTORS["STATE"]

    class ScribbleThenFail:
        def __init__(self, op: Any) -> None:
            self.inner = original(op)

        async def run(self, ctx: Any) -> Any:
            ctx.state.write("$tmp.half", "done")
            raise LatticeRunError("boom", error_type="state_error")

    monkeypatch.setitem(executors_module.EXECUTORS, "STATE", ScribbleThenFail)
    result = run_doc(chain(node("a", "variableStore", operation="set", name="x", value=1)))
    assert_failed(result, "state_error")
    assert result.state["tmp"] == {}


# -- state observers through the Runner -------------------------------------------------


def test_runner_subscribe_state_sees_every_write_of_every_run() -> None:
    doc = chain(
        node("a", "variableStore", operation="set", name="x", value=1),
        node("b", "variableStore", operation="increment", name="x"),
    )
    runner = Runner(lower(doc), provider=MockProvider(), store=RunStore(None))
    writes: list[tuple[str, Any]] = []
    runner.subscribe_state(lambda path, value: writes.append((path, value)))
    runner.run({})
    runner.run({})
    assert writes == [("$vars.x", 1), ("$vars.x", 2)] * 2


def test_result_state_is_json_and_matches_a_state_store() -> None:
    doc = chain(node("a", "variableStore", operation="set", name="x", value={"k": [1, 2]}))
    result = run_doc(doc)
    assert json.loads(json.dumps(result.state)) == result.state
    store = StateStore.from_snapshot(result.state)
    assert store.read("$vars.x.k[1]") == 2
    assert store.read("$ctx.run_id") == result.run_id


def test_a_jmespath_condition_that_fails_on_the_value_is_a_condition_error() -> None:
    """Found by bench/fuzz_documents.py: ``length(@)`` of null escaped as internal_error."""
    doc = workflow(
        [
            node("start", "start", inputs={"type": "object", "properties": {"x": {}}}),
            node(
                "check",
                "ifElse",
                evaluationTarget="$in.x",
                branches=[
                    {"label": "Long", "condition": "jmespath: length(@) > `1`"},
                    {"label": "Short"},
                ],
            ),
            node("long", "end", output="long"),
            node("short", "end", output="short"),
        ],
        [
            conn("start", "check"),
            conn("check", "long", "branch-0"),
            conn("check", "short", "branch-1"),
        ],
    )
    assert run_doc(doc, {"x": [1, 2]}).output == "long"
    result = run_doc(doc, {"x": None})
    assert_failed(result, "condition_error")
    assert result.failure is not None and "length(@)" in result.failure.summary

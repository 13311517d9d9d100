"""Mock scripts as a new user writes them: plain labels for classifiers, unlisted nodes
failing only when called (with the answer they expect), examples built from schemas."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from lattice.cli import main
from lattice.errors import LatticeRunError, LatticeUserError
from lattice.llm.base import LLMRequest, Message
from lattice.llm.examples import example_value
from lattice.llm.mock import MockProvider

CLASSIFIER = {
    "type": "object",
    "properties": {"branch": {"enum": ["Billing", "Bug", "Other"]}},
    "required": ["branch"],
    "additionalProperties": False,
}


def request(node: str, schema: dict[str, Any] | None = None) -> LLMRequest:
    return LLMRequest(
        messages=(Message("user", "hi"),), node_id=node, op_id=node, response_schema=schema
    )


def answer(provider: MockProvider, req: LLMRequest) -> str:
    return asyncio.run(provider.complete(req)).text


@pytest.mark.parametrize("given", ["Billing", "billing", " Bug ", {"branch": "Other"}])
def test_a_classifier_takes_its_plain_label(given: Any) -> None:
    text = answer(MockProvider({"route": [given]}), request("route", CLASSIFIER))
    assert json.loads(text)["branch"] in ("Billing", "Bug", "Other")


def test_a_plain_text_that_is_no_label_stays_text() -> None:
    assert answer(MockProvider({"route": ["Maybe"]}), request("route", CLASSIFIER)) == "Maybe"
    assert answer(MockProvider({"write": ["Billing"]}), request("write")) == "Billing"


def test_an_unlisted_classifier_names_its_labels() -> None:
    with pytest.raises(LatticeRunError) as raised:
        answer(MockProvider({}), request("route", CLASSIFIER))
    assert raised.value.error_type == "mock_exhausted"
    assert '"route": ["Billing"]' in raised.value.message
    assert "'Billing', 'Bug', 'Other'" in raised.value.message


def test_an_unlisted_structured_node_shows_a_valid_example() -> None:
    schema = {
        "type": "object",
        "properties": {
            "title": {"type": "string", "minLength": 10},
            "n": {"type": "integer", "minimum": 3},
        },
        "required": ["title", "n"],
    }
    with pytest.raises(LatticeRunError) as raised:
        answer(MockProvider({}), request("gen", schema))
    example = raised.value.message.split('"gen": [', 1)[1].rsplit("]", 1)[0]
    jsonschema.validate(json.loads(example), schema)


def test_a_used_up_list_shows_the_expected_shape_too() -> None:
    provider = MockProvider({"write": ["one"]})
    answer(provider, request("write"))
    with pytest.raises(
        LatticeRunError, match=r'1 given, call 2 asked.*"write": \["some text"\] \(free text\)'
    ):
        answer(provider, request("write"))


SCHEMAS = [
    {"type": "string", "format": "date"},
    {
        "type": "array",
        "items": {"type": "integer", "exclusiveMinimum": 5},
        "minItems": 2,
        "maxItems": 3,
    },
    {
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/A"}},
        "required": ["a"],
        "$defs": {"A": {"enum": ["x", "y"]}},
    },
    {"anyOf": [{"type": "null"}, {"type": "number", "maximum": -2}]},
    {
        "allOf": [
            {"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"]},
            {"properties": {"b": {"const": 3}}, "required": ["b"]},
        ]
    },
    {"type": ["string", "null"], "maxLength": 3},
]


@pytest.mark.parametrize("schema", SCHEMAS)
def test_examples_validate_against_their_schema(schema: dict[str, Any]) -> None:
    jsonschema.validate(example_value(schema), schema)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "minLength": 10**30},
        {"type": "string", "minLength": 10**9},
        {"type": "array", "minItems": 10**30, "items": {"type": "integer"}},
    ],
)
def test_an_example_for_a_schema_asking_for_a_huge_value_stays_small(
    schema: dict[str, Any],
) -> None:
    """Found by bench/fuzz_documents.py: ``mock init`` raised OverflowError (or built a
    gigabyte) for a document's ``"minLength": 1e30``."""
    value = example_value(schema)
    assert len(value) == 1000


def test_pieces_stream_an_answer_to_a_streaming_request_only() -> None:
    """``pieces`` passes a streaming request's answer on in that many pieces (the whole
    answer still comes back); a request that does not stream gets it whole."""
    answer = "a streamed answer of some length"
    provider = MockProvider({"n": [answer, answer]}, pieces=4)
    heard: list[str] = []
    streamed = asyncio.run(
        provider.complete(
            LLMRequest(messages=[Message("user", "hi")], node_id="n", on_delta=heard.append)
        )
    )
    assert streamed.text == answer
    assert len(heard) == 4 and "".join(heard) == answer
    whole = asyncio.run(
        provider.complete(LLMRequest(messages=[Message("user", "hi")], node_id="n"))
    )
    assert whole.text == answer and len(heard) == 4


def test_a_restored_cursor_goes_back_to_the_committed_one_only_for_an_edited_script() -> None:
    old = MockProvider({"a": ["x"], "b": [{"$error": "invalid_request"}]})
    old.restore({"a": 1})  # an older checkpoint: the bare cursor
    assert old.cursor == {"a": 1}
    with pytest.raises(LatticeRunError):
        answer(old, request("b"))
    failed = old.checkpoint()
    assert failed == {"script": old.digest, "cursor": {"a": 1, "b": 1}}

    same = MockProvider({"a": ["x"], "b": [{"$error": "invalid_request"}]})
    same.restore(failed, committed={"script": old.digest, "cursor": {"a": 1}})
    assert same.cursor == {"a": 1, "b": 1}  # goes on after the scripted failure

    edited = MockProvider({"a": ["x"], "b": ["fixed"]})
    edited.restore(failed, committed={"script": old.digest, "cursor": {"a": 1}})
    assert edited.cursor == {"a": 1}
    assert answer(edited, request("b")) == "fixed"

    edited.restore(failed)  # not after a failure: goes on from the state given
    assert edited.cursor == {"a": 1, "b": 1}


def test_nodes_the_run_never_calls_need_no_entry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/runtime.md and docs/mocks.md: a branch the run never takes needs no answers."""
    examples = Path(__file__).resolve().parents[2] / "workflows" / "examples"
    script = json.loads((examples / "support-triage.mock.json").read_text())
    classified = script["responses"]["classify"][0]
    assert classified["category"] == "billing"
    for unused in ("draft-bug", "draft-general"):
        del script["responses"][unused]
    mock = tmp_path / "triage.mock.json"
    mock.write_text(json.dumps(script))
    code = main(
        [
            "run",
            str(examples / "support-triage.json"),
            "--inputs",
            str(examples / "support-triage.inputs.json"),
            "--mock",
            str(mock),
            "--no-record",
        ]
    )
    assert code == 0, capsys.readouterr().err


@pytest.mark.parametrize(
    ("script", "message"),
    [
        (
            {"responses": {"greet": "hi"}},
            'mock script: responses["greet"] must be a list of completions, e.g. ["hi"]',
        ),
        (
            {"responses": {"greet": [{"$error": 5}]}},
            'mock script: responses["greet"][0]: "$error" must be an error type (text)',
        ),
        (
            {"responses": {"greet": [{"$error": "rate_limit_error", "retry_after": "2"}]}},
            '"retry_after" must be a number of seconds',
        ),
        ({"responses": {}, "rows": {}}, '"rows" (answers per dataset row) is for lattice batch'),
        ({"greet": ["hi"]}, "unknown keys ['greet']: a node's answers go under \"responses\""),
    ],
)
def test_a_malformed_script_names_the_key_at_fault(script: Any, message: str) -> None:
    with pytest.raises(LatticeUserError) as raised:
        MockProvider.from_script(script)
    assert message in raised.value.message
    assert raised.value.message.count("mock script") == 1


def test_a_script_file_error_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"responses": {"greet": "hi"}}))
    with pytest.raises(LatticeUserError, match=rf"^mock script {path}: responses\["):
        MockProvider.from_file(path)

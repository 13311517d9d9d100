"""Mock scripts as a new user writes them: plain labels for classifiers, unlisted nodes
failing only when called (with the answer they expect), examples built from schemas."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import jsonschema
import pytest

from lattice.errors import LatticeRunError
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

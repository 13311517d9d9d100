"""JSON extraction from model text (lattice.contracts.extract): the one artifact, or why not."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lattice.contracts.extract import ExtractionError, extract_json
from lattice.errors import LatticeRunError

OBJ = {"title": "Q3", "items": [1, 2, {"x": None}], "ok": True}


def error_of(text: str) -> ExtractionError:
    with pytest.raises(ExtractionError) as info:
        extract_json(text)
    assert isinstance(info.value, LatticeRunError)
    assert info.value.message
    return info.value


# -- accepted ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        (json.dumps(OBJ), OBJ),
        (json.dumps(OBJ, indent=2), OBJ),
        ("  \n" + json.dumps(OBJ) + "\n\n", OBJ),
        ("[1, 2, 3]", [1, 2, 3]),
        ('[{"a": 1}, {"a": 2}]', [{"a": 1}, {"a": 2}]),
        ("[]", []),
        ("{}", {}),
        ('"just a string"', "just a string"),
        ("42", 42),
        (
            '{"nested": {"deep": [{"x": "{not a brace}"}]}}',
            {"nested": {"deep": [{"x": "{not a brace}"}]}},
        ),
    ],
    ids=[
        "object",
        "indented",
        "padded",
        "array",
        "array-of-objects",
        "empty-array",
        "empty-object",
        "string",
        "number",
        "braces-in-strings",
    ],
)
def test_bare_json(text: str, value: Any) -> None:
    assert extract_json(text) == value


@pytest.mark.parametrize(
    "text",
    [
        "```json\n" + json.dumps(OBJ) + "\n```",
        "```json\n" + json.dumps(OBJ, indent=2) + "\n```",
        "```JSON\n" + json.dumps(OBJ) + "\n```",
        "```\n" + json.dumps(OBJ) + "\n```",
        "```json  \n" + json.dumps(OBJ) + "\n```",
        "```json\n" + json.dumps(OBJ) + "```",
        "\n\n```json\n" + json.dumps(OBJ) + "\n```\n\n",
    ],
    ids=[
        "json",
        "indented",
        "upper",
        "no-lang",
        "lang-trailing-space",
        "close-same-line",
        "padded",
    ],
)
def test_one_fence_and_nothing_else_is_accepted(text: str) -> None:
    assert extract_json(text) == OBJ


def test_fenced_array() -> None:
    assert extract_json("```json\n[1, 2, 3]\n```") == [1, 2, 3]


def test_fence_with_crlf_line_endings_is_accepted() -> None:
    text = "```json\r\n" + json.dumps(OBJ) + "\r\n```"
    assert extract_json(text) == OBJ


def test_fenced_artifact_may_contain_backticks_in_strings() -> None:
    value = {"readme": "Install:\n```bash\nnpm i lattice\n```\nDone."}
    text = "```json\n" + json.dumps(value, indent=2) + "\n```"
    assert extract_json(text) == value


def test_bare_artifact_may_contain_backticks_in_strings() -> None:
    value = {"readme": "Install:\n```bash\nnpm i lattice\n```\nDone."}
    assert extract_json(json.dumps(value)) == value


# -- explanatory text ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "Here is the artifact:\n" + json.dumps(OBJ),
        json.dumps(OBJ) + "\nLet me know if you need anything else.",
        "Sure!\n```json\n" + json.dumps(OBJ) + "\n```",
        "```json\n" + json.dumps(OBJ) + "\n```\nThis satisfies the schema.",
        "Result: [1, 2, 3]",
        "Use {curly} braces sparingly. " + json.dumps(OBJ),
    ],
    ids=["prefix", "suffix", "fence-prefix", "fence-suffix", "array", "stray-braces"],
)
def test_prose_around_one_value_is_explanatory_text(text: str) -> None:
    err = error_of(text)
    assert err.error_type == "explanatory_text"
    assert "extracted" in err.details  # what was found, for the repair packet


def test_explanatory_text_keeps_the_extracted_value() -> None:
    err = error_of("The answer is " + json.dumps(OBJ) + ", as requested.")
    assert err.details["extracted"] == OBJ


# -- multiple artifacts ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        json.dumps(OBJ) + "\n" + json.dumps(OBJ),
        '{"a": 1} {"b": 2}',
        'First: {"a": 1}\nSecond: {"b": 2}',
        '{"a": 1}\n[1, 2]',
        '```json\n{"a": 1}\n```\n```json\n{"b": 2}\n```',
        '```json\n{"a": 1}\n```\nand\n```\n{"b": 2}\n```',
        '```json\n{"a": 1}\n```\n```text\nnotes\n```',
    ],
    ids=[
        "two-objects",
        "one-line",
        "labelled",
        "object-and-array",
        "two-fences",
        "two-fences-prose",
        "fence-and-text-fence",
    ],
)
def test_several_values_are_multiple_artifacts(text: str) -> None:
    err = error_of(text)
    assert err.error_type == "multiple_artifacts"
    assert "2" in err.message


# -- not JSON ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   \n ",
        "I could not do that.",
        "{title: 'Q3'}",
        '{"title": "Q3",}',
        '{"title": "Q3"',
        '```json\n{"a": 1,}\n```',
        "```json\nnot json at all\n```",
        "{{ template }}",
    ],
    ids=[
        "empty",
        "blank",
        "prose",
        "js-object",
        "trailing-comma",
        "truncated",
        "fenced-trailing-comma",
        "fenced-prose",
        "template",
    ],
)
def test_garbage_is_json_error(text: str) -> None:
    err = error_of(text)
    assert err.error_type == "json_error"
    assert "line" in err.message  # where the parser gave up


def test_fenced_invalid_json_says_it_was_the_fence() -> None:
    err = error_of('```json\n{"a": 1,}\n```')
    assert "fenced block" in err.message


# -- properties --------------------------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
CONTAINERS = st.one_of(
    st.lists(JSON_VALUES, max_size=4), st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=4)
)


@given(JSON_VALUES, st.booleans())
def test_any_serialised_value_round_trips(value: Any, indent: bool) -> None:
    text = json.dumps(value, indent=2 if indent else None)
    assert extract_json(text) == value


@given(CONTAINERS)
def test_any_fenced_container_round_trips(value: Any) -> None:
    text = json.dumps(value, indent=2)
    if "```" in text:  # see test_fenced_artifact_may_contain_backticks_in_strings
        return
    assert extract_json(f"```json\n{text}\n```") == value


@given(CONTAINERS)
def test_any_container_with_a_prose_prefix_is_explanatory_text(value: Any) -> None:
    err = error_of("Here you go: " + json.dumps(value))
    assert err.error_type == "explanatory_text"
    assert err.details["extracted"] == value

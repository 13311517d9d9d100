"""JSON extraction from model text (lattice.contracts.extract): the one artifact, or why not."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lattice.contracts.extract import ExtractionError, extract, extract_json
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
        '```json\n{"a": 1}\n```\n```text\nnotes\n```',
        "See [the docs] first: " + json.dumps(OBJ),
    ],
    ids=[
        "prefix",
        "suffix",
        "fence-prefix",
        "fence-suffix",
        "array",
        "stray-braces",
        "fence-and-text-fence",
        "stray-brackets",
    ],
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
    ],
    ids=[
        "two-objects",
        "one-line",
        "labelled",
        "object-and-array",
        "two-fences",
        "two-fences-prose",
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


# -- broken JSON is json_error, with the parser's own words ----------------------------------

INCIDENT = {
    "service": {"name": "payments-api", "region": "eu-west-1", "owner": "team-pay"},
    "severity": "high",
    "actions": [{"owner": "ana", "task": "roll back 4.2.1"}, {"owner": "bo", "task": "page"}],
}
INCIDENT_TEXT = json.dumps(INCIDENT)


def test_truncated_json_is_json_error_not_explanatory_text() -> None:
    # the inner "service" object parses on its own; it must never be taken for the artifact
    text = INCIDENT_TEXT[: INCIDENT_TEXT.index('"page"')]
    err = error_of(text)
    assert err.error_type == "json_error"
    assert "extracted" not in err.details
    assert err.message.startswith("the output is cut off: the text ends inside")
    assert "a list and an object" in err.message
    assert "(the outermost opened at line 1, column 1)" in err.message
    column = len(text) + 1
    assert f"the parser stopped with 'Expecting value' at line 1, column {column}" in err.message
    assert err.details == {
        "parser_message": "Expecting value",
        "line": 1,
        "column": column,
        "excerpt": "…" + text[-40:] + "<<HERE>>",
        "cut_off": True,
    }


def test_trailing_comma_is_json_error_not_multiple_artifacts() -> None:
    text = INCIDENT_TEXT[:-1] + ",}"
    err = error_of(text)
    assert err.error_type == "json_error"
    column = len(text)
    assert err.message == (
        "the output is not valid JSON: Expecting property name enclosed in double quotes "
        f"at line 1, column {column}, near: …" + text[column - 1 - 40 : column - 1] + "<<HERE>>}"
    )
    assert err.details["cut_off"] is False
    assert (err.details["line"], err.details["column"]) == (1, column)


def test_trailing_comma_in_a_list_names_the_line_and_column_of_an_indented_document() -> None:
    text = json.dumps(INCIDENT, indent=2).replace('"page"\n    }\n  ]', '"page"\n    },\n  ]')
    err = error_of(text)
    assert err.error_type == "json_error"
    assert "Expecting value at line 17, column 3" in err.message
    assert err.details["excerpt"].endswith("},\\n  <<HERE>>]\\n}")


def test_truncated_fenced_json_is_json_error_with_lines_of_the_whole_output() -> None:
    text = "```json\n" + json.dumps(INCIDENT, indent=2)[:-30] + "\n```"
    err = error_of(text)
    assert err.error_type == "json_error"
    assert err.message.startswith("the fenced block is cut off")
    assert "(the outermost opened at line 2, column 1)" in err.message
    assert err.details["line"] > 2


def test_prose_around_broken_json_is_json_error() -> None:
    err = error_of("Here is the report:\n" + INCIDENT_TEXT[:-1] + ",}\nHope it helps!")
    assert err.error_type == "json_error"
    assert "line 2" in err.message


def test_a_mismatched_bracket_is_not_called_cut_off() -> None:
    err = error_of('{"a": [1, 2}')
    assert err.error_type == "json_error"
    assert err.message.startswith("the output is not valid JSON: Expecting ',' delimiter")
    assert err.details["cut_off"] is False


def test_no_json_at_all_quotes_the_start_of_the_output() -> None:
    err = error_of("I could not find an incident in this log.")
    assert err.message == (
        "the output holds no JSON object or array: Expecting value at line 1, column 1 "
        "(the output begins 'I could not find an incident in this log.')"
    )
    assert error_of("").message.endswith("(the output is empty)")


# -- what extract() reports around a value -----------------------------------------------------


@pytest.mark.parametrize(
    ("text", "stripped"),
    [
        (INCIDENT_TEXT, ()),
        ("```json\n" + INCIDENT_TEXT + "\n```", ()),
        ("Here it is:\n" + INCIDENT_TEXT, ("prose",)),
        (INCIDENT_TEXT + "\nDone.", ("prose",)),
        ("Here it is:\n```json\n" + INCIDENT_TEXT + "\n```\nDone.", ("fence", "prose")),
        ("```json\n" + INCIDENT_TEXT + "\n```\n", ()),
    ],
    ids=["bare", "fence", "prose-before", "prose-after", "prose-and-fence", "fence-newline"],
)
def test_extract_says_what_surrounded_the_value(text: str, stripped: tuple[str, ...]) -> None:
    found = extract(text)
    assert found.value == INCIDENT
    assert found.stripped == stripped
    assert json.loads(found.json_text) == INCIDENT


def test_extract_keeps_the_text_before_and_after() -> None:
    found = extract("Sure!\n```json\n" + INCIDENT_TEXT + "\n```\nAnything else?")
    assert found.before == "Sure!\n```json"
    assert found.after == "```\nAnything else?"
    assert found.json_text == INCIDENT_TEXT


@given(CONTAINERS, st.booleans(), st.data())
def test_any_document_with_a_suffix_cut_off_is_json_error(
    value: Any, indent: bool, data: st.DataObject
) -> None:
    text = json.dumps(value, indent=2 if indent else None)
    cut = data.draw(st.integers(min_value=1, max_value=len(text)), label="cut")
    err = error_of(text[: len(text) - cut])
    assert err.error_type == "json_error"
    assert "extracted" not in err.details


@given(CONTAINERS, st.sampled_from(["Here you go:\n", "Sure! ", ""]), st.data())
def test_any_cut_off_document_in_prose_or_a_fence_is_json_error(
    value: Any, prefix: str, data: st.DataObject
) -> None:
    text = json.dumps(value)
    cut = data.draw(st.integers(min_value=1, max_value=len(text) - 1), label="cut")
    fenced = data.draw(st.booleans(), label="fenced")
    body = text[: len(text) - cut]
    err = error_of(prefix + ("```json\n" + body + "\n```" if fenced else body))
    assert err.error_type == "json_error"


@given(CONTAINERS)
def test_any_container_with_prose_after_it_is_salvageable(value: Any) -> None:
    found = extract(json.dumps(value) + "\nLet me know if you need more.")
    assert found.value == value
    assert found.stripped == ("prose",)

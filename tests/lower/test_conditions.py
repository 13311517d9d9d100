"""The deterministic condition language of ifElse/switch branches (lattice.lower.conditions)."""

from __future__ import annotations

from typing import Any

import pytest

from lattice.ir.models import Condition
from lattice.lower.conditions import ConditionError, ParsedCondition, parse_condition


def _parsed(text: str) -> Condition:
    parsed = parse_condition(text)
    assert isinstance(parsed, ParsedCondition)
    assert parsed.text == text
    assert not parsed.is_natural_language, f"{text!r} was read as natural language"
    assert parsed.condition is not None
    return parsed.condition


@pytest.mark.parametrize(
    ("text", "op", "value"),
    [
        ('== "billing"', "eq", "billing"),
        ("==3", "eq", 3),
        ("== null", "eq", None),
        ("== true", "eq", True),
        ('== {"a": [1, 2]}', "eq", {"a": [1, 2]}),
        ("!= 3", "ne", 3),
        ('!= "x"', "ne", "x"),
        ("> 0.5", "gt", 0.5),
        (">= 10", "ge", 10),
        ("< -1", "lt", -1),
        ("<= 1e3", "le", 1000.0),
        ('in ["a", "b"]', "in", ["a", "b"]),
        ("in []", "in", []),
        ('not in ["x"]', "not_in", ["x"]),
        ('contains "urgent"', "contains", "urgent"),
        ("contains 3", "contains", 3),
        ('not contains "spam"', "not_contains", "spam"),
        ('matches "^ERR"', "matches", "^ERR"),
        ('matches "\\\\d+"', "matches", "\\d+"),
        ("exists", "exists", None),
        ("not exists", "not_exists", None),
        ("empty", "empty", None),
        ("is empty", "empty", None),
        ("not empty", "not_empty", None),
        ("is not empty", "not_empty", None),
        ("jmespath: length(items) > `2`", "jmespath", "length(items) > `2`"),
        ("jmespath:status == 'ok'", "jmespath", "status == 'ok'"),
    ],
)
def test_every_operator(text: str, op: str, value: Any) -> None:
    condition = _parsed(text)
    assert condition.op == op
    assert condition.value == value
    assert type(condition.value) is type(value)


@pytest.mark.parametrize(
    "text",
    ['  == "a"  ', "\t> 1\n", "  exists "],
)
def test_surrounding_whitespace_is_ignored(text: str) -> None:
    _parsed(text)


@pytest.mark.parametrize(
    ("text", "op"),
    [
        ("EXISTS", "exists"),
        ("Not Empty", "not_empty"),
        ('CONTAINS "x"', "contains"),
        ('Not In ["a"]', "not_in"),
        ('Matches "^a"', "matches"),
        ("JMESPath: a.b", "jmespath"),
    ],
)
def test_word_operators_ignore_case(text: str, op: str) -> None:
    assert _parsed(text).op == op


def test_jmespath_expression_is_compiled_then_kept_as_text() -> None:
    condition = _parsed("jmespath: items[?score > `3`] | length(@) > `0`")
    assert condition.value == "items[?score > `3`] | length(@) > `0`"


@pytest.mark.parametrize(
    "text",
    [
        "Passed",
        "Failed",
        "lines < 100",
        "100 <= lines <= 500",
        "lines > 500",
        "contains a bug",
        "contains a stack trace",
        "in progress",
        "matches the customer's tone",
        "not in the list of approved vendors",
        "The review found security issues",
        "index == 3",
        "is it urgent?",
        "existing customer",
        "emptyish",
        "",
        "   ",
    ],
)
def test_natural_language_fallbacks(text: str) -> None:
    parsed = parse_condition(text)
    assert parsed.is_natural_language
    assert parsed.condition is None
    assert parsed.text == text


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("== billing", 'e.g. == "billing"'),
        ("!= yes", "write it as JSON"),
        ("==", "write it as JSON"),
        ('== "a" or "b"', "write it as JSON"),
        ('> "x"', "compares with a number"),
        (">= true", "compares with a number"),
        ("< [1]", "compares with a number"),
        ("<= 500 lines", "write it as JSON"),
        ("in 3", "needs a JSON list"),
        ('in "abc"', "needs a JSON list"),
        ('not in {"a": 1}', "needs a JSON list"),
        ('matches "["', "invalid regular expression"),
        ('matches "(unclosed"', "invalid regular expression"),
        ("matches 42", "needs a regular expression"),
        ("jmespath: foo[", "invalid JMESPath"),
        ("jmespath: a ==", "invalid JMESPath"),
    ],
)
def test_malformed_deterministic_conditions_raise(text: str, fragment: str) -> None:
    with pytest.raises(ConditionError) as info:
        parse_condition(text)
    assert fragment in str(info.value)
    assert repr(text) in str(info.value) or text.strip() in str(info.value)


def test_condition_error_is_a_value_error() -> None:
    assert issubclass(ConditionError, ValueError)


@pytest.mark.parametrize("text", ["> Infinity", "== NaN", "< -Infinity", "!= [1, NaN]"])
def test_non_finite_numbers_are_rejected(text: str) -> None:
    """NaN/Infinity are not JSON; accepted, they would serialise as null in the IR."""
    with pytest.raises(ConditionError):
        parse_condition(text)


@pytest.mark.parametrize("text", ["contains NaN", "contains Infinity", "in [1, NaN]"])
def test_non_finite_after_word_operator_is_natural_language(text: str) -> None:
    assert parse_condition(text).is_natural_language

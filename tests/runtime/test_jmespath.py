"""Compiled JMESPath searches give what JMESPath's own interpreter gives."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import jmespath
import jmespath.visitor
import pytest
from jmespath.exceptions import JMESPathError

from lattice.runtime.conditions import compile_jmespath


class HasGet:
    """Not a dict, but has ``get``: JMESPath's field lookup calls it."""

    def get(self, key: str) -> str:
        return f"got {key}"


EXPRESSIONS = [
    "length(vars)",
    "length(@)",
    "length(vars.items)",
    "vars.name",
    "vars.a.b.c",
    "@",
    "length(vars.name)",
    "vars.items[0]",
    "vars.items[*].x",
    "keys(vars)",
    "length(keys(vars))",
    "vars.a || vars.name",
    "length(`[1, 2, 3]`)",
]
VALUES: list[Any] = [
    {"vars": {"name": "Ada", "items": [{"x": 1}, {"x": 2}], "a": {"b": {"c": 3}}}},
    {"vars": {"name": "naïve ☃", "items": [], "a": {"b": None}}},
    {"vars": OrderedDict(name="Ada", items=[1])},
    {"vars": HasGet()},
    {"vars": None},
    {"vars": 5},
    {"vars": "a text"},
    {"vars": [1, 2, 3]},
    {"vars": True},
    {"vars": {"name": 1.5, "items": "abc"}},
    [1, 2],
    "text",
    None,
]


def outcome(search: Any, value: Any) -> tuple[str, Any]:
    try:
        return "value", search(value)
    except JMESPathError as exc:
        return type(exc).__name__, str(exc)


@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_a_compiled_search_gives_what_the_interpreter_gives(expression: str) -> None:
    compiled = compile_jmespath(expression)
    for value in VALUES:
        expected = outcome(lambda v: jmespath.search(expression, v), value)
        assert outcome(compiled, value) == expected, (expression, value)


def test_fields_sub_expressions_and_length_do_not_go_through_the_interpreter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The shapes a dataTransform most often has are Python closures (the interpreter's
    visitors and JMESPath's type-checked function table cost about 1.5 µs an op)."""
    searches = [compile_jmespath(e) for e in ("length(vars)", "vars.a.b", "length(@)")]

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("went through the interpreter")

    monkeypatch.setattr(jmespath.visitor.TreeInterpreter, "visit", refused)
    value = {"vars": {"a": {"b": 2}, "c": 3}}
    assert [search(value) for search in searches] == [2, 2, 1]


def test_length_of_a_value_it_does_not_take_fails_as_jmespath_does() -> None:
    with pytest.raises(JMESPathError, match="length"):
        compile_jmespath("length(vars)")({"vars": 5})

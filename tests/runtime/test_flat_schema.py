"""The flat-schema fast path never accepts what jsonschema rejects."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lattice.runtime.flat_schema import flat_object_check

TYPES = ["string", "boolean", "integer", "number", "object", "array", "null"]
NAMES = st.sampled_from(["a", "b", "c", "topic", "n"])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=6,
)


@st.composite
def flat_schemas(draw: Any) -> dict[str, Any]:
    names = draw(st.lists(NAMES, unique=True, max_size=4))
    properties: dict[str, Any] = {}
    for name in names:
        sub = draw(
            st.one_of(
                st.just({}),
                st.builds(lambda t: {"type": t}, st.sampled_from(TYPES)),
                st.builds(lambda t: {"type": t, "description": "d"}, st.sampled_from(TYPES)),
            )
        )
        properties[name] = sub
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    schema["required"] = draw(st.lists(NAMES, unique=True, max_size=3))
    schema["additionalProperties"] = draw(st.booleans())
    return schema


@settings(max_examples=400, deadline=None)
@given(flat_schemas(), st.dictionaries(NAMES, json_values, max_size=5))
def test_the_fast_check_agrees_with_jsonschema_on_flat_schemas(
    schema: dict[str, Any], value: dict[str, Any]
) -> None:
    check = flat_object_check(schema)
    assert check is not None
    assert check(value) == jsonschema.Draft202012Validator(schema).is_valid(value)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"a": {"type": "string", "minLength": 2}}},
        {"type": "object", "properties": {"a": {"enum": [1, 2]}}},
        {"type": "object", "properties": {"a": {"type": ["string", "null"]}}},
        {"type": "object", "properties": {"a": {"type": None}}},
        {"type": "object", "minProperties": 1},
        {"type": "object", "patternProperties": {"^x": {"type": "string"}}},
        {"type": "array"},
        {"anyOf": [{"type": "object"}]},
    ],
)
def test_other_schemas_get_no_fast_check(schema: dict[str, Any]) -> None:
    assert flat_object_check(schema) is None


def test_an_empty_schema_accepts_anything_and_integers_follow_draft_2020() -> None:
    assert flat_object_check({})({"x": 1})  # type: ignore[misc]
    check = flat_object_check({"type": "object", "properties": {"n": {"type": "integer"}}})
    assert check is not None
    assert check({"n": 1.0}) and check({"n": 3})
    assert not check({"n": True}) and not check({"n": 1.5})

"""Violation wording (lattice.contracts.violations): the rule, the actual size, a short excerpt."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from lattice.contracts.validation import OutputValidator
from lattice.contracts.violations import schema_problems, short


def violations(schema: dict[str, Any], value: Any) -> list[dict[str, str]]:
    return OutputValidator(schema, ()).schema_violations(value)


def message(schema: dict[str, Any], value: Any) -> str:
    (violation,) = violations({"type": "object", "properties": {"x": schema}}, {"x": value})
    assert violation["pointer"] == "/x"
    return violation["message"]


LONG = "The outage began at 09:12 when the payments API started timing out. " * 6


@pytest.mark.parametrize(
    ("schema", "value", "expected"),
    [
        ({"maxItems": 4}, list(range(6)), "has 6 items, at most 4 allowed"),
        ({"minItems": 2}, [1], "has 1 item, at least 2 required"),
        ({"minItems": 1}, [], "has 0 items, at least 1 required"),
        (
            {"maxLength": 300},
            LONG,
            f"is {len(LONG)} characters, at most 300 allowed "
            "('The outage began at 09:12 when the payments API star…')",
        ),
        ({"minLength": 3}, "ab", "is 2 characters, at least 3 required ('ab')"),
        ({"maximum": 10}, 12, "is 12, at most 10 allowed"),
        ({"minimum": 0}, -1, "is -1, at least 0 required"),
        ({"exclusiveMaximum": 10}, 10, "is 10, must be less than 10"),
        ({"exclusiveMinimum": 0}, 0, "is 0, must be greater than 0"),
        ({"multipleOf": 5}, 7, "is 7, must be a multiple of 5"),
        ({"maxProperties": 1}, {"a": 1, "b": 2}, "has 2 properties, at most 1 allowed"),
        ({"enum": ["low", "high"]}, "urgent", "'urgent' is not one of ['low', 'high']"),
        ({"const": "v1"}, "v2", "must be 'v1', not 'v2'"),
        ({"type": "integer"}, "three", "'three' is not of type 'integer'"),
        ({"type": ["integer", "null"]}, "x", "'x' is not of type 'integer', 'null'"),
        ({"type": "string"}, list(range(50)), "a list of 50 items is not of type 'string'"),
        (
            {"pattern": "^[A-Z]+-[0-9]+$"},
            "inc 7",
            "'inc 7' does not match the pattern '^[A-Z]+-[0-9]+$'",
        ),
        ({"uniqueItems": True}, [1, 1], "has duplicate items (2 items); every item must be unique"),
    ],
    ids=lambda v: v if isinstance(v, str) and len(v) < 30 else None,
)
def test_each_rule_states_the_limit_and_the_actual_size(
    schema: dict[str, Any], value: Any, expected: str
) -> None:
    assert message(schema, value) == expected


def test_a_long_value_is_never_quoted_whole() -> None:
    actions = [{"owner": "ana", "task": LONG} for _ in range(6)]
    schema = {"type": "object", "properties": {"actions": {"type": "array", "maxItems": 4}}}
    (violation,) = violations(schema, {"actions": actions})
    assert violation == {"pointer": "/actions", "message": "has 6 items, at most 4 allowed"}
    assert "ana" not in violation["message"]


def test_required_and_additional_properties_keep_their_wording() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "string"}},
        "required": ["a"],
        "additionalProperties": False,
    }
    assert violations(schema, {"b": 1}) == [
        {"pointer": "/", "message": "'a' is a required property"},
        {"pointer": "/", "message": "Additional properties are not allowed ('b' was unexpected)"},
    ]


def test_any_of_names_the_closest_alternative() -> None:
    schema = {"anyOf": [{"type": "string", "maxLength": 3}, {"type": "null"}]}
    assert message(schema, "abcdef") == (
        "'abcdef' matches none of the allowed alternatives "
        "(closest: is 6 characters, at most 3 allowed ('abcdef'))"
    )


def test_short_excerpts() -> None:
    assert short("abc") == "'abc'"
    assert short("x" * 200) == "'" + "x" * 52 + "…'"
    assert short(list(range(100))) == "a list of 100 items"
    assert short({str(i): i for i in range(40)}) == "an object with keys '0', '1', '2', '3', …"


def test_terms_name_the_field_and_its_options() -> None:
    schema = {
        "type": "object",
        "$defs": {"Severity": {"enum": ["low", "high", "critical"]}},
        "properties": {
            "severity": {"$ref": "#/$defs/Severity"},
            "category": {"enum": ["network", "database"]},
            "tags": {"type": "array", "maxItems": 2},
            "summary": {"type": "string"},
        },
        "required": ["severity", "category", "summary"],
    }
    validator = jsonschema.Draft202012Validator(schema)

    def terms(value: Any) -> list[str]:
        return schema_problems(validator.iter_errors(value), schema).terms

    assert terms({"category": "network", "summary": "s"}) == ["severity", "low", "high", "critical"]
    assert terms({"severity": "low", "category": "disk", "summary": "s"}) == [
        "category",
        "network",
        "database",
    ]
    # what a model fixes from its own output needs no input
    assert (
        terms({"severity": "low", "category": "network", "summary": "s", "tags": [1, 2, 3]}) == []
    )
    assert terms({"severity": "low", "category": "network", "summary": 3}) == ["summary"]


CONFIG_CHANGE = {
    "type": "object",
    "properties": {
        "kind": {"const": "config_change", "type": "string"},
        "key": {"type": "string"},
        "new_value": {"type": "integer", "maximum": 1024},
    },
    "required": ["kind", "key", "new_value"],
}
DEPLOY = {
    "type": "object",
    "properties": {
        "kind": {"enum": ["deploy"], "type": "string"},
        "deploy_id": {"type": "string"},
        "service": {"type": "string"},
    },
    "required": ["kind", "deploy_id", "service"],
}
TAGGED = {  # what pydantic writes for Annotated[ConfigChange | Deploy, Field(discriminator="kind")]
    "$defs": {"ConfigChange": CONFIG_CHANGE, "Deploy": DEPLOY},
    "type": "object",
    "properties": {
        "action": {
            "discriminator": {
                "propertyName": "kind",
                "mapping": {"config_change": "#/$defs/ConfigChange", "deploy": "#/$defs/Deploy"},
            },
            "oneOf": [{"$ref": "#/$defs/ConfigChange"}, {"$ref": "#/$defs/Deploy"}],
        }
    },
    "required": ["action"],
}
UNTAGGED = {  # no discriminator keyword: the shared const property is the tag
    "type": "object",
    "properties": {"action": {"anyOf": [CONFIG_CHANGE, DEPLOY]}},
}


@pytest.mark.parametrize("schema", [TAGGED, UNTAGGED], ids=["discriminator", "const"])
def test_a_tagged_union_reports_the_alternative_its_tag_picks(schema: dict[str, Any]) -> None:
    value = {"action": {"kind": "config_change", "key": "k", "new_value": 4096}}
    assert violations(schema, value) == [
        {"pointer": "/action/new_value", "message": "is 4096, at most 1024 allowed"}
    ]
    value = {"action": {"kind": "deploy", "deploy_id": 7}}
    assert violations(schema, value) == [
        {"pointer": "/action", "message": "'service' is a required property"},
        {"pointer": "/action/deploy_id", "message": "7 is not of type 'string'"},
    ]


@pytest.mark.parametrize("schema", [TAGGED, UNTAGGED], ids=["discriminator", "const"])
def test_a_wrong_or_missing_tag_names_the_tags(schema: dict[str, Any]) -> None:
    value = {"action": {"kind": "config_chnage", "key": "k", "new_value": 4}}
    assert violations(schema, value) == [
        {
            "pointer": "/action/kind",
            "message": "'kind' is 'config_chnage', not one of the tags 'config_change', 'deploy'",
        }
    ]
    validator = jsonschema.Draft202012Validator(schema)
    problems = schema_problems(validator.iter_errors(value), schema)
    assert problems.terms == ["action", "kind", "config_change", "deploy"]
    assert violations(schema, {"action": {"key": "k"}}) == [
        {
            "pointer": "/action",
            "message": "has no 'kind', the tag that picks its kind: one of "
            "'config_change', 'deploy'",
        }
    ]


def test_alternatives_without_a_shared_tag_keep_the_closest() -> None:
    schema = {"anyOf": [{"properties": {"a": {"const": "x"}}, "required": ["b"]}, {"type": "null"}]}
    assert "matches none of the allowed alternatives" in message(schema, {"a": "y"})


def test_pydantics_tagged_union_schema_is_read_by_its_discriminator() -> None:
    from typing import Annotated, Literal

    from pydantic import BaseModel, Field

    class ConfigChange(BaseModel):
        kind: Literal["config_change"]
        new_value: int = Field(le=1024)

    class Deploy(BaseModel):
        kind: Literal["deploy"]
        deploy_id: str

    class Act(BaseModel):
        action: Annotated[ConfigChange | Deploy, Field(discriminator="kind")]

    schema = Act.model_json_schema()
    assert violations(schema, {"action": {"kind": "config_change", "new_value": 4096}}) == [
        {"pointer": "/action/new_value", "message": "is 4096, at most 1024 allowed"}
    ]

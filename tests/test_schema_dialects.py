"""A document's JSON Schemas mean what their dialect says: the draft ``$schema`` names
(an unknown one refused at its place), every reference the schema defines itself
(``$id``, ``$anchor``, URNs, relative URIs; never one that leads outside), patterns
checked by the engine that runs them, boolean schemas, and the common formats
asserted, a violation repaired like any other (issue 42, items 5-8)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.document_fuzzing import CountingServer
from lattice.config import LatticeConfig, load_config
from lattice.contracts.errors import OutputInvalid
from lattice.contracts.validation import OutputValidator
from lattice.errors import InputError, LatticeRunError
from lattice.llm.mock import MockProvider
from lattice.lower import lower, lower_document
from lattice.runtime import Runner, RunResult, RunStore
from lattice.runtime.settings import RuntimeSettings, settings_from_config
from lattice.schema_formats import ASSERTED_FORMATS
from lattice.schemas import schema_errors, schema_problems, schema_validator
from lattice.tools.mcp import argument_violations
from tests.builders import chain, node

DRAFT7 = "http://json-schema.org/draft-07/schema#"
DRAFT2019 = "https://json-schema.org/draft/2019-09/schema"


def output_doc(schema: Any) -> dict[str, Any]:
    return chain(node("draft", "prompt", prompt="Write", outputSchema=schema))


def inputs_doc(schema: Any) -> dict[str, Any]:
    doc = chain(node("draft", "prompt", prompt="Write about {{ topic }}"))
    doc["nodes"][0]["data"]["inputs"] = schema
    return doc


def diagnostics(doc: dict[str, Any]) -> list[tuple[str, str]]:
    return [(d.code, d.pointer) for d in lower_document(doc).errors]


def accepts(schema: Any, value: Any) -> bool:
    """The lowering check passes, and the output validator takes ``value``."""
    assert diagnostics(output_doc(schema)) == []
    try:
        OutputValidator(schema, ()).check(json.dumps(value))
    except OutputInvalid:
        return False
    return True


@pytest.fixture
def remote() -> Iterator[CountingServer]:
    server = CountingServer("/x.json")
    try:
        yield server
    finally:
        server.close()


# -- 5. the declared dialect ---------------------------------------------------------------


def test_a_draft_07_schema_is_checked_by_draft_07_rules() -> None:
    dependencies = {"$schema": DRAFT7, "type": "object", "dependencies": {"card": ["billing"]}}
    assert not accepts(dependencies, {"card": "4111"})  # 2020-12 ignores `dependencies`
    assert accepts(dependencies, {"card": "4111", "billing": "Main St"})
    siblings = {
        "$schema": DRAFT7,
        "definitions": {"name": {"type": "string"}},
        "properties": {"name": {"$ref": "#/definitions/name", "maxLength": 2}},
    }
    assert accepts(siblings, {"name": "a long name"})  # draft-07 ignores $ref's siblings
    assert not accepts({**siblings, "$schema": DRAFT2019}, {"name": "a long name"})


def test_the_inputs_of_a_run_are_checked_by_their_dialect() -> None:
    schema = {
        "$schema": DRAFT7,
        "type": "object",
        "properties": {"topic": {"type": "string"}, "lang": {"type": "string"}},
        "dependencies": {"lang": ["topic"]},
    }
    runner = Runner(lower(inputs_doc(schema)), provider=MockProvider({}), store=RunStore(None))
    with pytest.raises(InputError, match="'topic' is a dependency of 'lang'"):
        runner.validate_inputs({"lang": "en"})


def test_an_unknown_dialect_is_refused_at_its_place_never_replaced() -> None:
    schema = {"$schema": "https://example.com/my-dialect", "type": "object"}
    assert diagnostics(output_doc(schema)) == [
        ("schema-invalid", "/nodes/1/data/outputSchema/$schema")
    ]
    [problem] = schema_problems(schema)
    assert "names a dialect Lattice does not know" in problem.message
    with pytest.raises(LatticeRunError) as caught:
        schema_validator(schema)
    assert caught.value.error_type == "invalid_schema"
    [violation] = argument_violations(schema, {})
    assert "names a dialect Lattice does not know" in violation["message"]


# -- 6. references the schema defines ------------------------------------------------------


def test_references_to_what_the_schema_defines_resolve() -> None:
    schema = {
        "$id": "https://example.com/root.json",
        "type": "object",
        "properties": {
            "by_id": {"$ref": "item.json"},  # relative to the root's $id
            "by_urn": {"$ref": "urn:example:count"},
            "by_anchor": {"$ref": "#level"},
            "by_embedded_anchor": {"$ref": "item.json#name"},
        },
        "$defs": {
            "item": {
                "$id": "item.json",
                "type": "object",
                "required": ["name"],
                "properties": {"name": {"$anchor": "name", "type": "string"}},
            },
            "count": {"$id": "urn:example:count", "type": "integer"},
            "level": {"$anchor": "level", "enum": ["low", "high"]},
        },
    }
    good = {"by_id": {"name": "x"}, "by_urn": 3, "by_anchor": "low", "by_embedded_anchor": "y"}
    assert accepts(schema, good)
    for bad in ({"by_id": {}}, {"by_urn": "3"}, {"by_anchor": "mid"}, {"by_embedded_anchor": 1}):
        assert not accepts(schema, bad)


def test_an_mcp_tool_with_a_draft_07_plain_name_id_takes_its_arguments() -> None:
    schema = {
        "$schema": DRAFT7,
        "type": "object",
        "properties": {"city": {"$ref": "#city"}},
        "definitions": {"city": {"$id": "#city", "type": "string", "minLength": 2}},
    }
    assert argument_violations(schema, {"city": "Oslo"}) == []
    assert argument_violations(schema, {"city": "O"}) == [
        {"pointer": "/city", "message": "'O' is too short"}
    ]


def test_a_reference_that_leaves_the_schema_stays_refused_and_is_never_fetched(
    remote: CountingServer,
) -> None:
    base = remote.url.rsplit("/", 1)[0]  # http://127.0.0.1:<port>
    inside = {
        "$id": f"{base}/x.json",
        "properties": {"a": {"$ref": "#/$defs/a"}, "b": {"$ref": f"{base}/x.json#/$defs/a"}},
        "$defs": {"a": {"type": "integer"}},
    }
    assert accepts(inside, {"a": 1, "b": 2})
    assert not accepts(inside, {"b": "2"})
    outside = {"$id": f"{base}/x.json", "properties": {"a": {"$ref": "other.json"}}}
    assert diagnostics(output_doc(outside)) == [
        ("schema-ref-external", "/nodes/1/data/outputSchema/properties/a/$ref")
    ]
    with pytest.raises(LatticeRunError):
        schema_errors(schema_validator(outside), {"a": 1})
    assert remote.hits == []


# -- 7. patterns and boolean schemas -------------------------------------------------------


def test_a_pattern_is_checked_by_the_engine_that_runs_it() -> None:
    schema = {"type": "string", "pattern": r"^\p{Letter}+$"}
    assert accepts(schema, "Ångström")
    assert not accepts(schema, "R2-D2")
    assert diagnostics(output_doc({"type": "string", "pattern": "(unclosed"})) == [
        ("schema-invalid", "/nodes/1/data/outputSchema/pattern")
    ]


def test_a_2019_09_schema_matches_property_names_with_the_pattern_engine_too() -> None:
    """Draft 2019-09's own unevaluatedProperties matches patternProperties again: with
    Python's re it raised on \\p{…} (and ran without a time limit)."""
    schema = {
        "$schema": DRAFT2019,
        "type": "object",
        "patternProperties": {r"^\p{Letter}+$": {"type": "integer"}},
        "unevaluatedProperties": False,
    }
    assert accepts(schema, {"Ångström": 1})
    assert not accepts(schema, {"R2": 1})
    assert argument_violations(schema, {"Ångström": 1}) == []
    [violation] = argument_violations(schema, {"Ångström": 1, "R2": 2})
    assert "'R2' was unexpected" in violation["message"]
    victim = {"a" * 36 + "!": 1}
    timed = {**schema, "patternProperties": {"^(a|aa)+$": {}}}
    [error] = schema_errors(schema_validator(timed), victim)
    assert error.validator == "patternTimeout"


def test_boolean_schemas_are_accepted_where_the_spec_allows_them() -> None:
    assert accepts(True, {"anything": [1, "x"]})
    assert not accepts(False, {})
    assert not accepts({"properties": {"secret": False}}, {"secret": 1})
    assert diagnostics(output_doc(True)) == []
    runner = Runner(lower(inputs_doc(False)), provider=MockProvider({}), store=RunStore(None))
    with pytest.raises(InputError):
        runner.validate_inputs({"topic": "tea"})


# -- 8. formats ------------------------------------------------------------------------------

EVENT = {
    "type": "object",
    "properties": {
        "when": {"type": "string", "format": "date-time"},
        "contact": {"type": "string", "format": "email"},
        "id": {"type": "string", "format": "uuid"},
        "site": {"type": "string", "format": "uri"},
    },
    "required": ["when"],
}
GOOD_EVENT = {
    "when": "2024-05-01T09:30:00Z",
    "contact": "ana@example.com",
    "id": "123e4567-e89b-12d3-a456-426614174000",
    "site": "https://example.com/status",
}


def run_event(
    answers: list[Any], settings: RuntimeSettings | None = None, schema: Any = EVENT
) -> tuple[RunResult, MockProvider]:
    provider = MockProvider({"draft": answers})
    runner = Runner(
        lower(output_doc(schema)), provider=provider, store=RunStore(None), settings=settings
    )
    return runner.run({}), provider


@pytest.mark.parametrize(
    ("field", "bad"),
    [
        ("when", "2024-02-30T09:30:00Z"),
        ("when", "May 1st, 9:30"),
        ("contact", "ana at example"),
        ("id", "123e4567"),
        ("site", "not a uri"),
    ],
)
def test_a_format_violation_is_repaired_like_any_other(field: str, bad: str) -> None:
    result, provider = run_event([{**GOOD_EVENT, field: bad}, GOOD_EVENT])
    assert result.status == "completed"
    assert result.vars["draft"]["result"] == GOOD_EVENT
    [failed] = [e["data"] for e in result.events if e["type"] == "validation_failed"]
    assert failed["error_type"] == "schema_error"
    [violation] = failed["violations"]
    assert violation["pointer"] == f"/{field}"
    assert violation["message"].startswith(
        f"{bad!r} is not a valid {EVENT['properties'][field]['format']}"
    )
    packet = "\n".join(m.content for m in provider.calls[1].messages if m.role == "user")
    assert violation["message"] in packet


def test_the_inputs_of_a_run_are_held_to_their_formats() -> None:
    schema = {"type": "object", "properties": {"topic": {"type": "string", "format": "email"}}}
    runner = Runner(lower(inputs_doc(schema)), provider=MockProvider({}), store=RunStore(None))
    with pytest.raises(InputError, match="is not a valid email"):
        runner.validate_inputs({"topic": "tea"})
    runner.validate_inputs({"topic": "tea@example.com"})


def test_a_schema_or_the_config_can_keep_formats_annotations(tmp_path: Path) -> None:
    bad = {**GOOD_EVENT, "when": "yesterday"}
    result, provider = run_event([bad], schema={**EVENT, "x-lattice-formats": False})
    assert result.status == "completed" and len(provider.calls) == 1
    [call] = provider.calls  # the model and the provider see the schema without it
    assert call.response_schema == EVENT
    assert "x-lattice-formats" not in json.dumps([m.content for m in call.messages])
    config = tmp_path / "lattice.toml"
    config.write_text("[schemas]\nformats = false\n", encoding="utf-8")
    settings = settings_from_config(load_config(config))
    result, provider = run_event([bad], settings=settings)
    assert result.status == "completed" and len(provider.calls) == 1
    assert settings_from_config(LatticeConfig()).formats is True


def test_an_mcp_tool_is_the_judge_of_its_own_formats() -> None:
    schema = {"type": "object", "properties": {"when": {"type": "string", "format": "date"}}}
    assert argument_violations(schema, {"when": "tomorrow"}) == []


def test_only_the_documented_formats_are_asserted() -> None:
    assert set(ASSERTED_FORMATS) == {
        "date-time", "date", "time", "duration", "email", "hostname", "ipv4", "ipv6",
        "uri", "uri-reference", "uuid", "json-pointer", "regex",
    }  # fmt: skip
    for annotation in ("idn-email", "iri", "uri-template", "color", "my-format"):
        assert accepts({"format": annotation}, "anything at all")


def test_a_schema_of_many_embedded_ids_is_crawled_once_not_once_per_reference(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A lookup in an uncrawled registry crawls the whole schema: n references to
    embedded ``$id`` values took n² steps (2,000 of them: minutes, to lower or to check)."""
    import referencing

    crawls: list[int] = []
    crawl = referencing.Registry.crawl

    def counted(self: Any) -> Any:
        crawls.append(1)
        return crawl(self)

    monkeypatch.setattr(referencing.Registry, "crawl", counted)
    count = 60
    schema = {
        "type": "object",
        "properties": {f"p{i}": {"$ref": f"urn:example:{i}"} for i in range(count)},
        "$defs": {f"d{i}": {"$id": f"urn:example:{i}", "type": "integer"} for i in range(count)},
    }
    assert diagnostics(output_doc(schema)) == []
    checks = OutputValidator(schema, ())
    assert checks.schema_violations({f"p{i}": i for i in range(count)}) == []
    assert len(checks.schema_violations({f"p{i}": "x" for i in range(count)})) == count
    assert len(crawls) <= 3  # once to lower, once per validator built

"""The official JSON-Schema-Test-Suite (drafts 7, 2019-09 and 2020-12, vendored under
``data/``, see README.md) through Lattice's validator path: the lowering check
(``schema_problems``), ``schema_validator`` / ``schema_errors`` and the output
validator of contracts. Every test agrees, except:

- groups whose schema refers to the suite's remote server (``http://localhost:1234/…``,
  a place outside the schema) with a reference or as its ``$schema`` (a custom
  meta-schema): refused at lowering by design, at the place that refers there, counted
  in ``REMOTE_GROUPS``;
- the tests listed in ``DISAGREEMENTS``, each with its reason.

The draft's ``$schema`` is added to a schema that does not declare one (the suite runs
each folder under its draft; Lattice's default is 2020-12). ``format`` is an annotation
in the required tests (``formats=False``); ``optional/format`` runs with formats asserted.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from lattice.contracts.errors import OutputInvalid
from lattice.contracts.validation import OutputValidator
from lattice.schemas import SchemaProblem, schema_errors, schema_problems, schema_validator

DATA = Path(__file__).parent / "data"

DIALECTS = {
    "draft7": "http://json-schema.org/draft-07/schema#",
    "draft2019-09": "https://json-schema.org/draft/2019-09/schema",
    "draft2020-12": "https://json-schema.org/draft/2020-12/schema",
}

REMOTE = "localhost:1234"
"""The host of the suite's remote schemas: a reference there leads outside the schema."""

REMOTE_GROUPS = {"draft7": 11, "draft2019-09": 17, "draft2020-12": 22}
"""Groups refused at lowering because their schema refers to the remote server."""

DISAGREEMENTS = {
    "draft2019-09/unevaluatedProperties.json: unevaluatedProperties with adjacent non-bool "
    "additionalProperties / with additional properties": "jsonschema's Draft 2019-09 "
    "unevaluatedProperties does not count the properties a non-boolean additionalProperties "
    "evaluated (jsonschema 4.26 answers the same without Lattice; its 2020-12 keyword is right)",
}
"""``draft/file: group / test`` → why Lattice answers otherwise."""


def cases(folder: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{folder}/{path.name}", group)
        for path in sorted((DATA / folder).glob("*.json"))
        for group in json.loads(path.read_text(encoding="utf-8"))
    ]


@cache
def dialect_of(draft: str) -> str:
    return DIALECTS[draft.split("/")[0]]


def declared(schema: Any, draft: str) -> Any:
    if isinstance(schema, dict) and "$schema" not in schema:
        return {"$schema": dialect_of(draft), **schema}
    return schema


def refers_outside(problem: SchemaProblem) -> bool:
    return problem.code == "schema-ref-external" or problem.path == ("$schema",)


def run_group(name: str, group: dict[str, Any], *, formats: bool) -> tuple[list[str], bool]:
    """The disagreements of one group, and whether it was refused as remote."""
    schema = declared(group["schema"], name)
    problems = schema_problems(schema)
    remote = REMOTE in json.dumps(schema)
    if problems:
        if remote and all(refers_outside(p) for p in problems):
            return [], True
        return [f"{name}: {group['description']}: refused: {problems[0].message}"], False
    found: list[str] = []
    validator = schema_validator(schema, formats=formats)
    contract = OutputValidator(schema, (), formats=formats)
    for test in group["tests"]:
        key = f"{name}: {group['description']} / {test['description']}"
        if key in DISAGREEMENTS:
            continue
        valid = not schema_errors(validator, test["data"])
        try:
            contract.check(json.dumps(test["data"]))
            accepted = True
        except OutputInvalid:
            accepted = False
        if valid != test["valid"] or accepted != test["valid"]:
            found.append(
                f"{key}: expected valid={test['valid']}, validator {valid}, contract {accepted}"
            )
    return found, False


@pytest.mark.parametrize("draft", sorted(DIALECTS))
def test_the_suite_agrees(draft: str) -> None:
    disagreements: list[str] = []
    remote_groups = 0
    for name, group in cases(draft):
        found, remote = run_group(name, group, formats=False)
        disagreements += found
        remote_groups += remote
    assert disagreements == []
    assert remote_groups == REMOTE_GROUPS[draft]


def test_the_asserted_formats_agree() -> None:
    disagreements: list[str] = []
    for name, group in cases("draft2020-12/optional/format"):
        found, remote = run_group(name, group, formats=True)
        assert not remote
        disagreements += found
    assert disagreements == []

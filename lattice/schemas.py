"""JSON Schemas Lattice did not write: the one place their validators are built.

A workflow document's schemas (a start node's ``inputs``, an ``outputSchema``), an
ExecIR read back from a file, an MCP server's ``inputSchema`` and an ``LLMPrimitive``'s
``output_schema`` are all held to the same rules:

- ``schema_problems(schema)`` says, each at its JSON pointer inside the schema, what
  stops the schema from being used: it breaks the Draft 2020-12 meta-schema, a
  ``pattern`` does not compile (or is too large, ``lattice.patterns``), a ``$ref``
  points outside the schema (``http:``, ``file:``, a relative file, ``urn:``…), a
  local ``$ref`` points at nothing, or references loop back without reading into the
  value (validation would never end). Lowering reports these as located diagnostics.
- ``schema_validator(schema)`` builds the validator: references resolve only inside
  the schema (the reference registry refuses to retrieve anything, so no validator can
  reach the network or the file system), and ``pattern`` / ``patternProperties`` /
  ``additionalProperties`` / ``unevaluatedProperties`` match with ``lattice.patterns``
  (a time limit per match, the GIL released).
- ``schema_errors(validator, value)`` lists the errors, with ``VALIDATION_SECONDS`` of
  pattern matching in all; a value a pattern cannot decide in time is an error at its
  place (``validator == "patternTimeout"``), a value too deep to check is an error
  (``validator == "depth"``), a reference that cannot be resolved raises
  ``LatticeRunError(invalid_schema)``, never a traceback.

jsonschema and referencing are imported by the first schema (heavy modules).
"""

from __future__ import annotations

import functools
import json
import types
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lattice.errors import LatticeRunError
from lattice.patterns import PatternError, PatternTimeout, pattern_problem, search, time_budget

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError
    from jsonschema.protocols import Validator

__all__ = [
    "VALIDATION_SECONDS",
    "SchemaProblem",
    "schema_errors",
    "schema_problems",
    "schema_validator",
    "uses_patterns",
]

VALIDATION_SECONDS = 0.5
"""The CPU time the patterns of one validation may take together."""

PATTERN_TIMEOUT = "patternTimeout"
"""The ``validator`` of an error raised for a value a pattern could not decide in time."""

_DATA_KEYWORDS = frozenset({"enum", "const", "default", "examples"})
"""Keywords whose values are data, never schemas: a ``$ref`` inside them is a value."""

_NAMED_SCHEMAS = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}
)
"""Keywords whose values map names (which may be anything, ``$ref`` too) to schemas."""


@dataclass(frozen=True)
class SchemaProblem:
    """What stops a schema from being used, at ``path`` inside it."""

    code: str
    """``schema-invalid``, ``schema-ref-external``, ``schema-ref-dangling`` or
    ``schema-ref-cycle``."""
    message: str
    path: tuple[str | int, ...] = ()


# -- checking a schema ---------------------------------------------------------------------


def schema_problems(
    schema: Mapping[str, Any], *, meta_schema: bool = True
) -> tuple[SchemaProblem, ...]:
    """Every problem of ``schema`` (empty when it can be used): the Draft 2020-12
    meta-schema's first (unless ``meta_schema`` is False: a schema of another draft),
    then every pattern that does not compile and every ``$ref`` that leads outside the
    schema or to nothing. Cached by canonical JSON (documents repeat their schemas)."""
    return _problems(json.dumps(schema, sort_keys=True), meta_schema)


@functools.lru_cache(maxsize=1024)
def _problems(canonical: str, meta_schema: bool) -> tuple[SchemaProblem, ...]:
    import jsonschema

    schema = json.loads(canonical)
    try:
        if meta_schema:
            jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = tuple(exc.absolute_path)
        return (SchemaProblem("schema-invalid", f"invalid JSON Schema: {exc.message}", where),)
    if not isinstance(schema, dict):
        return ()
    problems: list[SchemaProblem] = []
    objects = list(_schema_objects(schema))
    for path, resource, node in objects:
        for key in ("$ref", "$dynamicRef"):
            ref = node.get(key)
            if isinstance(ref, str):
                problem = _reference_problem(key, ref, resource)
                if problem is not None:
                    problems.append(SchemaProblem(problem[0], problem[1], (*path, key)))
        pattern = node.get("pattern")
        if isinstance(pattern, str):
            problems += _pattern_problem(pattern, (*path, "pattern"))
        named = node.get("patternProperties")
        if isinstance(named, dict):
            for name in named:
                problems += _pattern_problem(name, (*path, "patternProperties", name))
    return tuple(problems + _cycle_problems(objects))


def _pattern_problem(pattern: str, path: tuple[str | int, ...]) -> list[SchemaProblem]:
    reason = pattern_problem(pattern)
    if reason is None:
        return []
    return [
        SchemaProblem("schema-invalid", f"invalid regular expression {pattern!r}: {reason}", path)
    ]


def _schema_objects(
    schema: Mapping[str, Any],
) -> Iterator[tuple[tuple[str | int, ...], Mapping[str, Any], Mapping[str, Any]]]:
    """``(path, resource, object)`` of every object in a schema position: ``resource`` is
    the innermost enclosing schema with an ``$id`` (the root otherwise), against which
    its local references resolve. Values of unknown keywords count as schemas (a pointer
    may lead into them); ``enum``, ``const``, ``default`` and ``examples`` do not."""
    stack: list[tuple[tuple[str | int, ...], Mapping[str, Any], Any]] = [((), schema, schema)]
    while stack:
        path, resource, node = stack.pop()
        if isinstance(node, list):
            stack += [((*path, i), resource, item) for i, item in enumerate(node)]
            continue
        if not isinstance(node, dict):
            continue
        if node is not schema and isinstance(node.get("$id"), str):
            resource = node
        yield path, resource, node
        for key, value in node.items():
            if key in _DATA_KEYWORDS:
                continue
            if key in _NAMED_SCHEMAS and isinstance(value, dict):
                stack += [((*path, key, name), resource, sub) for name, sub in value.items()]
            elif isinstance(value, dict | list):
                stack.append(((*path, key), resource, value))


def _reference_problem(key: str, ref: str, resource: Mapping[str, Any]) -> tuple[str, str] | None:
    if not ref.startswith("#"):
        return (
            "schema-ref-external",
            f"{key} {_short(ref)} points outside the document: a document's schemas may "
            "refer only to places inside themselves ('#/$defs/name')",
        )
    target = _local_target(ref, resource)
    if target is _NOWHERE:
        fragment = urllib.parse.unquote(ref[1:])
        if fragment == "" or fragment.startswith("/"):
            return ("schema-ref-dangling", f"{key} {_short(ref)} points at nothing in this schema")
        return (
            "schema-ref-dangling",
            f"{key} {_short(ref)}: no $anchor {fragment!r} in this schema",
        )
    if not isinstance(target, dict | bool):
        return (
            "schema-ref-dangling",
            f"{key} {_short(ref)} points at a value that is not a schema",
        )
    return None


_NOWHERE: Any = object()


def _local_target(ref: str, resource: Mapping[str, Any]) -> Any:
    """What a ``#…`` reference points at inside ``resource`` (a JSON pointer or an
    ``$anchor``), or ``_NOWHERE``."""
    fragment = urllib.parse.unquote(ref[1:])
    if fragment == "" or fragment.startswith("/"):
        return _pointer_target(resource, fragment)
    for _, owner, node in _schema_objects(resource):
        if owner is resource and fragment in (node.get("$anchor"), node.get("$dynamicAnchor")):
            return node
    return _NOWHERE


_IN_PLACE = ("allOf", "anyOf", "oneOf", "not", "if", "then", "else", "dependentSchemas")
"""Keywords whose subschemas apply to the same value (a loop through them never ends)."""


def _in_place(node: Mapping[str, Any], resource: Mapping[str, Any]) -> list[Any]:
    """The schemas ``node`` applies to the very value it checks: its in-place
    subschemas and what its local references point at."""
    out: list[Any] = []
    for key in _IN_PLACE:
        value = node.get(key)
        if isinstance(value, dict) and key == "dependentSchemas":
            out += value.values()
        elif isinstance(value, list):
            out += value
        elif isinstance(value, dict):
            out.append(value)
    for key in ("$ref", "$dynamicRef"):
        ref = node.get(key)
        if isinstance(ref, str) and ref.startswith("#"):
            out.append(_local_target(ref, resource))
    return [item for item in out if isinstance(item, dict)]


def _cycle_problems(
    objects: list[tuple[tuple[str | int, ...], Mapping[str, Any], Mapping[str, Any]]],
) -> list[SchemaProblem]:
    """A ``$ref`` that leads back to where it stands without reading into the value
    (``#/$defs/a`` → ``#/$defs/b`` → ``#/$defs/a``): validating would never end. A
    reference under ``properties`` or ``items`` (a tree's children) reads one level
    deeper each time, and is fine."""
    found = {id(node): (path, resource, node) for path, resource, node in objects}
    state: dict[int, bool] = {}  # False: on the current path; True: done
    problems: list[SchemaProblem] = []
    for start in found:
        if start in state:
            continue
        state[start] = False
        path_ids = [start]
        stack = [iter(_in_place(found[start][2], found[start][1]))]
        while stack:
            target = next(stack[-1], None)
            if target is None:
                state[path_ids.pop()] = True
                stack.pop()
                continue
            tid = id(target)
            if tid not in found or state.get(tid) is True:
                continue
            if tid not in state:
                state[tid] = False
                path_ids.append(tid)
                stack.append(iter(_in_place(target, found[tid][1])))
                continue
            cycle = path_ids[path_ids.index(tid) :]
            holder = next(i for i in reversed(cycle) if {"$ref", "$dynamicRef"} & set(found[i][2]))
            where, _, node = found[holder]
            key = "$ref" if "$ref" in node else "$dynamicRef"
            problems.append(
                SchemaProblem(
                    "schema-ref-cycle",
                    f"{key} {_short(str(node[key]))} leads back here without reading into the "
                    "value: checking a value against it would never end",
                    (*where, key),
                )
            )
    return problems


def _pointer_target(resource: Any, pointer: str) -> Any:
    node = resource
    for raw in pointer.split("/")[1:]:
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and (part == "0" or part[0] != "0"):
            index = int(part)
            if index >= len(node):
                return _NOWHERE
            node = node[index]
        else:
            return _NOWHERE
    return node


def _short(text: str) -> str:
    return repr(text if len(text) <= 80 else text[:79] + "…")


def uses_patterns(schema: Mapping[str, Any] | None) -> bool:
    """True when validating against ``schema`` may run a regular expression (it has a
    ``pattern`` or ``patternProperties``): a caller on an event loop then validates in
    a worker thread, so that a slow pattern never holds up the loop."""
    if not schema:
        return False
    return any(
        isinstance(node.get("pattern"), str) or "patternProperties" in node
        for _, _, node in _schema_objects(schema)
    )


# -- validating against a schema -----------------------------------------------------------


def schema_validator(schema: Mapping[str, Any], *, dialects: bool = False) -> Validator:
    """A Draft 2020-12 validator for ``schema`` that resolves references only inside it
    and matches patterns with a time limit (``dialects``: the draft the schema's
    ``$schema`` names, as for an MCP tool's inputSchema). Use it through ``schema_errors``."""
    import jsonschema

    base: type[Validator] = jsonschema.Draft202012Validator
    if dialects:
        base = jsonschema.validators.validator_for(schema, default=base)
    validator: Validator = _validator_class(base)(schema, registry=_refusing_registry())
    return validator


def schema_errors(validator: Validator, value: Any) -> list[ValidationError]:
    """Every error of ``value`` against ``validator``'s schema. A pattern that cannot
    decide in time is one of them; a reference that cannot be resolved raises
    ``LatticeRunError(invalid_schema)``."""
    import referencing.exceptions
    from jsonschema.exceptions import ValidationError

    try:
        with time_budget(VALIDATION_SECONDS):
            return list(validator.iter_errors(value))
    except PatternTimeout as exc:  # a property name against a patternProperties key
        return [ValidationError(str(exc), validator=PATTERN_TIMEOUT, validator_value=exc.pattern)]
    except RecursionError:
        message = "is nested too deeply to be checked against its schema"
        return [ValidationError(message, validator="depth", validator_value=None)]
    except referencing.exceptions.Unresolvable as exc:
        raise LatticeRunError(
            f"the schema's reference {_short(_as_reference(exc))} cannot be "
            "resolved: a schema may refer only to places inside itself",
            error_type="invalid_schema",
        ) from None
    except PatternError as exc:
        raise LatticeRunError(
            f"the schema holds a regular expression that cannot be used: {exc}",
            error_type="invalid_schema",
        ) from None


def _as_reference(exc: Exception) -> str:
    ref = str(getattr(exc, "ref", exc))
    return "#" + ref if ref.startswith("/") else ref  # a JSON pointer that led nowhere


@functools.cache
def _refusing_registry() -> Any:
    from referencing import Registry
    from referencing.exceptions import NoSuchResource

    def refuse(uri: str) -> Any:
        raise NoSuchResource(uri)

    return Registry(retrieve=refuse)  # type: ignore[call-arg]  # attrs alias of _retrieve


class _GuardedRe:
    """What jsonschema's keyword functions call as ``re``: ``search`` with a time limit."""

    @staticmethod
    def search(pattern: str, text: str) -> Any:
        return search(pattern, text)


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
    from jsonschema.exceptions import ValidationError

    if not validator.is_type(instance, "string"):
        return
    try:
        found = search(pattern, instance)
    except PatternTimeout as exc:
        yield ValidationError(str(exc), validator=PATTERN_TIMEOUT, validator_value=pattern)
        return
    if found is None:
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


@functools.cache
def _validator_class(base: Any) -> Any:
    """``base`` whose pattern keywords match through ``lattice.patterns``: jsonschema's
    own keyword functions, given ``_GuardedRe`` for ``re`` (same behaviour otherwise)."""
    import jsonschema
    from jsonschema import _keywords, _utils

    utils_scope = {**vars(_utils), "re": _GuardedRe}
    keywords_scope = {**vars(_keywords), "re": _GuardedRe}
    helpers = {
        name: types.FunctionType(getattr(_utils, name).__code__, utils_scope, name)
        for name in ("find_evaluated_property_keys_by_schema", "find_additional_properties")
    }
    utils_scope.update(helpers)  # the recursion, too, goes through the guarded copies
    keywords_scope.update(helpers)
    keywords = {
        name: types.FunctionType(getattr(_keywords, name).__code__, keywords_scope, name)
        for name in ("patternProperties", "additionalProperties", "unevaluatedProperties")
        if base.VALIDATORS.get(name) is getattr(_keywords, name)  # older drafts keep theirs
    }
    extend: Any = jsonschema.validators.extend
    return extend(base, validators={**keywords, "pattern": _pattern})

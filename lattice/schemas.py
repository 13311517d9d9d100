"""JSON Schemas Lattice did not write: the one place their validators are built.

A workflow document's schemas (a start node's ``inputs``, an ``outputSchema``), an
ExecIR read back from a file, an MCP server's ``inputSchema`` and an ``LLMPrimitive``'s
``output_schema`` are all held to the same rules:

Every schema is read in the dialect its ``$schema`` names (``dialect_of``: Draft
2020-12 without one; an unknown one is refused, never replaced by another).

- ``schema_problems(schema)`` says, each at its JSON pointer inside the schema, what
  stops the schema from being used: an unknown ``$schema``, a break of its dialect's
  meta-schema, a ``pattern`` the pattern engine cannot compile (or too large,
  ``lattice.patterns``), a reference to something the schema does not define
  (``http:``, ``file:``, a relative file, ``urn:``…: never looked up), a pointer or
  anchor that leads to nothing, or references that loop back without reading into
  the value (validation would never end). References are looked up as the validator
  looks them up (``referencing``: ``$id``, ``$anchor``, base URIs), in the schema only.
  Lowering reports these as located diagnostics.
- ``schema_validator(schema)`` builds the validator: references resolve only inside
  the schema (the reference registry refuses to retrieve anything, so no validator can
  reach the network or the file system), ``pattern`` / ``patternProperties`` /
  ``additionalProperties`` / ``unevaluatedProperties`` match with ``lattice.patterns``
  (a time limit per match, the GIL released), and ``format`` is asserted for the
  formats of ``lattice.schema_formats`` unless ``formats=False`` or the schema opts out.
- ``schema_errors(validator, value)`` lists the errors, with ``VALIDATION_SECONDS`` of
  pattern matching in all; a value a pattern cannot decide in time is an error at its
  place (``validator == "patternTimeout"``), a value too deep to check is an error
  (``validator == "depth"``), as is one whose check would follow more than
  ``MAX_REFERENCES_FOLLOWED`` references (``validator == "complexity"``); a reference
  that cannot be resolved raises ``LatticeRunError(invalid_schema)``, never a traceback.

jsonschema and referencing are imported by the first schema (heavy modules).
"""

from __future__ import annotations

import contextvars
import functools
import json
import types
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lattice.errors import ErrorType, LatticeRunError
from lattice.patterns import PatternError, PatternTimeout, pattern_problem, search, time_budget

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError
    from jsonschema.protocols import Validator

__all__ = [
    "DIALECTS",
    "VALIDATION_SECONDS",
    "SchemaProblem",
    "dialect_of",
    "schema_errors",
    "schema_problems",
    "schema_validator",
    "uses_patterns",
]

VALIDATION_SECONDS = 0.5
"""The CPU time the patterns of one validation may take together."""

MAX_REFERENCES_FOLLOWED = 20_000
"""References one validation may follow. Two references to one ``$defs`` entry per
level (``{"anyOf": [{"$ref": "#/$defs/d1"}, {"$ref": "#/$defs/d1"}]}``, 20 levels) make
a 1 KB schema that takes a million checks: past the cap, the value is an error at its
place (``validator == "complexity"``) instead of a stall."""

_references_left: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar(
    "_references_left", default=None
)


class _TooManyReferences(Exception):
    """A validation followed more than ``MAX_REFERENCES_FOLLOWED`` references."""


PATTERN_TIMEOUT = "patternTimeout"
"""The ``validator`` of an error raised for a value a pattern could not decide in time."""

_DATA_KEYWORDS = frozenset({"enum", "const", "default", "examples"})
"""Keywords whose values are data, never schemas."""

DIALECTS = (
    "https://json-schema.org/draft/2020-12/schema",
    "https://json-schema.org/draft/2019-09/schema",
    "http://json-schema.org/draft-07/schema#",
    "http://json-schema.org/draft-06/schema#",
    "http://json-schema.org/draft-04/schema#",
    "http://json-schema.org/draft-03/schema#",
)
"""The dialects a schema may declare with ``$schema`` (jsonschema's validator of each);
without ``$schema``, 2020-12."""


@dataclass(frozen=True)
class SchemaProblem:
    """What stops a schema from being used, at ``path`` inside it."""

    code: str
    """``schema-invalid``, ``schema-ref-external``, ``schema-ref-dangling`` or
    ``schema-ref-cycle``."""
    message: str
    path: tuple[str | int, ...] = ()


# -- checking a schema ---------------------------------------------------------------------


def dialect_of(schema: Any) -> type[Validator] | None:
    """The jsonschema validator class of the dialect ``schema``'s ``$schema`` names (Draft
    2020-12 when it names none, or the schema is a boolean), or None for a dialect
    jsonschema does not know: never another dialect in its place."""
    import jsonschema
    from jsonschema.validators import validator_for

    if not isinstance(schema, Mapping) or "$schema" not in schema:
        return jsonschema.Draft202012Validator
    declared = schema["$schema"]
    if not isinstance(declared, str):
        return None
    found: type[Validator] | None = validator_for(schema, default=None)  # type: ignore[arg-type]
    return found


def schema_problems(schema: Any, *, meta_schema: bool = True) -> tuple[SchemaProblem, ...]:
    """Every problem of ``schema`` (empty when it can be used): a ``$schema`` that names
    no known dialect, then the dialect's meta-schema's first error (unless ``meta_schema``
    is False: an MCP server's schema is taken as it is), then every pattern the pattern
    engine cannot compile and every reference that leads outside the schema, to nothing,
    or around a loop. Cached by canonical JSON (documents repeat their schemas)."""
    return _problems(json.dumps(schema, sort_keys=True), meta_schema)


@functools.lru_cache(maxsize=1024)
def _problems(canonical: str, meta_schema: bool) -> tuple[SchemaProblem, ...]:
    import jsonschema

    schema = json.loads(canonical)
    dialect: Any = dialect_of(
        schema
    )  # a jsonschema class: check_schema takes more than its protocol
    if dialect is None:
        message = (
            f"$schema {_short(str(schema['$schema']))} names a dialect Lattice does not know: "
            f"use one of {', '.join(DIALECTS)}, or none (2020-12)"
        )
        return (SchemaProblem("schema-invalid", message, ("$schema",)),)
    try:
        if meta_schema:
            # formats unchecked: patterns are checked below, by the engine that runs them
            dialect.check_schema(schema, format_checker=None)
    except jsonschema.SchemaError as exc:
        where = tuple(exc.absolute_path)
        return (SchemaProblem("schema-invalid", f"invalid JSON Schema: {exc.message}", where),)
    if not isinstance(schema, dict):
        return ()
    walk = _Walk(schema, dialect)
    return tuple(walk.problems + _cycle_problems(walk))


def _pattern_problem(pattern: str, path: tuple[str | int, ...]) -> list[SchemaProblem]:
    reason = pattern_problem(pattern)
    if reason is None:
        return []
    return [
        SchemaProblem("schema-invalid", f"invalid regular expression {pattern!r}: {reason}", path)
    ]


_REFERENCES = ("$ref", "$dynamicRef", "$recursiveRef")


class _Walk:
    """Every subschema of a schema, found as its dialect's validator finds them (the
    ``referencing`` library's idea of where subschemas are and which ``$id`` sets each
    one's base URI), with each reference looked up as the validator would look it up:
    in the schema itself, never anywhere else."""

    def __init__(self, schema: dict[str, Any], dialect: Any) -> None:
        self.specification: Any = _specification(dialect)
        self.nodes: dict[int, tuple[tuple[str | int, ...], dict[str, Any]]] = {}
        self.targets: dict[int, list[Any]] = {}
        """What the references of each node point at."""
        self.problems: list[SchemaProblem] = []
        keywords = set(_REFERENCES) & set(dialect.VALIDATORS)
        root = _root_resolver(schema, dialect)
        stack: list[tuple[tuple[str | int, ...], Any, Any]] = [((), root, schema)]
        while stack:
            path, resolver, node = stack.pop()
            if not isinstance(node, dict) or id(node) in self.nodes:
                continue
            resolver = resolver.in_subresource(self.specification.create_resource(node))
            self.nodes[id(node)] = (path, node)
            for key in keywords:
                if isinstance(node.get(key), str):
                    self._look_up(key, node, path, resolver)
            if isinstance(node.get("pattern"), str):
                self.problems += _pattern_problem(node["pattern"], (*path, "pattern"))
            if isinstance(node.get("patternProperties"), dict):
                for name in node["patternProperties"]:
                    self.problems += _pattern_problem(name, (*path, "patternProperties", name))
            stack += [(sub_path, resolver, sub) for sub_path, sub in self._children(node, path)]

    def _children(
        self, node: dict[str, Any], path: tuple[str | int, ...]
    ) -> Iterator[tuple[tuple[str | int, ...], Any]]:
        """The subschemas of ``node`` with their paths (by identity: ``referencing`` says
        which values are subschemas, not where they are)."""
        wanted = {id(sub) for sub in self.specification.subresources_of(node)}
        for key, value in node.items():
            if id(value) in wanted:
                yield (*path, key), value
            elif isinstance(value, dict):
                yield from (((*path, key, k), v) for k, v in value.items() if id(v) in wanted)
            elif isinstance(value, list):
                yield from (((*path, key, i), v) for i, v in enumerate(value) if id(v) in wanted)

    def _look_up(
        self, key: str, node: dict[str, Any], path: tuple[str | int, ...], resolver: Any
    ) -> None:
        import referencing.exceptions as failed

        ref = node[key]
        try:
            target = resolver.lookup(ref).contents
        except failed.PointerToNowhere:
            message = f"{key} {_short(ref)} points at nothing in this schema"
        except failed.NoSuchAnchor as exc:
            message = f"{key} {_short(ref)}: no anchor {exc.anchor!r} in this schema"
        except failed.Unresolvable:
            message = (
                f"{key} {_short(ref)} points outside the schema: a schema may refer only to "
                "places inside itself ('#/$defs/name', an $anchor or an $id it defines)"
            )
            self.problems.append(SchemaProblem("schema-ref-external", message, (*path, key)))
            return
        else:
            if isinstance(target, dict | bool):
                self.targets.setdefault(id(node), []).append(target)
                return
            message = f"{key} {_short(ref)} points at a value that is not a schema"
        self.problems.append(SchemaProblem("schema-ref-dangling", message, (*path, key)))


@functools.cache
def _search_registry() -> Any:
    """The meta-schemas jsonschema knows, and nothing retrievable (as a validator's)."""
    from jsonschema_specifications import REGISTRY  # type: ignore[import-untyped]

    return REGISTRY.combine(_refusing_registry())


@functools.cache
def _specification(dialect: Any) -> Any:
    """The ``referencing`` specification of ``dialect`` (where its subschemas and
    identifiers are), as jsonschema's validator class of it uses, except that only
    schemas count as subschemas: for draft-04/06/07 ``referencing`` 0.37 also gives the
    property lists of ``dependencies`` when its first value is a schema, and crawling
    them fails."""
    import attrs
    import referencing.jsonschema

    found: Any = referencing.jsonschema.specification_with(dialect.ID_OF(dialect.META_SCHEMA) or "")
    subresources_of = found.subresources_of

    def schemas_in(contents: Any) -> Iterator[Any]:
        return (sub for sub in subresources_of(contents) if isinstance(sub, Mapping | bool))

    return attrs.evolve(found, subresources_of=schemas_in)


def _root_resolver(schema: Any, dialect: Any) -> Any:
    """A resolver of references in ``schema``: its identifiers and anchors found once (a
    lookup in an uncrawled registry crawls the whole schema again: n references to
    embedded ``$id`` values took n² steps), nothing retrievable."""
    resource = _specification(dialect).create_resource(schema)
    uri = resource.id() or ""
    return _search_registry().with_resource(uri, resource).crawl().resolver(base_uri=uri)


_IN_PLACE = ("allOf", "anyOf", "oneOf", "not", "if", "then", "else")
"""Keywords whose subschemas apply to the same value (a loop through them never ends)."""

_IN_PLACE_BY_NAME = ("dependentSchemas", "dependencies")


def _in_place(node: Mapping[str, Any], walk: _Walk) -> list[Any]:
    """The schemas ``node`` applies to the very value it checks: its in-place
    subschemas and what its references point at."""
    out: list[Any] = list(walk.targets.get(id(node), ()))
    for key in _IN_PLACE:
        value = node.get(key)
        if isinstance(value, list):
            out += value
        elif isinstance(value, dict):
            out.append(value)
    for key in _IN_PLACE_BY_NAME:
        value = node.get(key)
        if isinstance(value, dict):
            out += value.values()
    return [item for item in out if isinstance(item, dict)]


def _cycle_problems(walk: _Walk) -> list[SchemaProblem]:
    """A reference that leads back to where it stands without reading into the value
    (``#/$defs/a`` → ``#/$defs/b`` → ``#/$defs/a``): validating would never end. A
    reference under ``properties`` or ``items`` (a tree's children) reads one level
    deeper each time, and is fine."""
    found = walk.nodes
    state: dict[int, bool] = {}  # False: on the current path; True: done
    problems: list[SchemaProblem] = []
    for start in found:
        if start in state:
            continue
        state[start] = False
        path_ids = [start]
        stack = [iter(_in_place(found[start][1], walk))]
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
                stack.append(iter(_in_place(target, walk)))
                continue
            cycle = path_ids[path_ids.index(tid) :]
            holder = next(i for i in reversed(cycle) if i in walk.targets)
            where, node = found[holder]
            key = next(k for k in _REFERENCES if k in node)
            problems.append(
                SchemaProblem(
                    "schema-ref-cycle",
                    f"{key} {_short(str(node[key]))} leads back here without reading into the "
                    "value: checking a value against it would never end",
                    (*where, key),
                )
            )
    return problems


def _short(text: str) -> str:
    return repr(text if len(text) <= 80 else text[:79] + "…")


def uses_patterns(schema: Any) -> bool:
    """True when validating against ``schema`` may run a regular expression (it has a
    ``pattern`` or ``patternProperties``): a caller on an event loop then validates in
    a worker thread, so that a slow pattern never holds up the loop."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack += node
        elif isinstance(node, dict):
            if isinstance(node.get("pattern"), str) or "patternProperties" in node:
                return True
            stack += [value for key, value in node.items() if key not in _DATA_KEYWORDS]
    return False


# -- validating against a schema -----------------------------------------------------------


def schema_validator(schema: Any, *, formats: bool = True) -> Validator:
    """A validator for ``schema`` in the dialect its ``$schema`` names (2020-12 when it
    names none) that resolves references only inside it, matches patterns with a time
    limit and, with ``formats`` (unless the schema's root says ``"x-lattice-formats":
    false``), asserts the formats of ``lattice.schema_formats``. Raises
    ``LatticeRunError(invalid_schema)`` for a dialect it does not know. Use it through
    ``schema_errors``."""
    dialect = dialect_of(schema)
    if dialect is None:
        raise LatticeRunError(
            f"the schema's $schema {_short(str(schema['$schema']))} names a dialect Lattice "
            f"does not know (known: {', '.join(DIALECTS)})",
            error_type=ErrorType.INVALID_SCHEMA,
        )
    checker = None
    if formats:
        from lattice.schema_formats import format_checker, formats_asserted

        checker = format_checker() if formats_asserted(schema) else None
    validator: Validator = _validator_class(dialect)(
        schema, format_checker=checker, _resolver=_root_resolver(schema, dialect)
    )
    return validator


def schema_errors(validator: Validator, value: Any) -> list[ValidationError]:
    """Every error of ``value`` against ``validator``'s schema. A pattern that cannot
    decide in time is one of them; a reference that cannot be resolved raises
    ``LatticeRunError(invalid_schema)``."""
    import referencing.exceptions
    from jsonschema.exceptions import ValidationError

    token = _references_left.set([MAX_REFERENCES_FOLLOWED])
    try:
        with time_budget(VALIDATION_SECONDS):
            return list(validator.iter_errors(value))
    except _TooManyReferences:
        message = (
            f"could not be checked: its schema's references branch into more than "
            f"{MAX_REFERENCES_FOLLOWED:,} checks"
        )
        return [ValidationError(message, validator="complexity", validator_value=None)]
    except PatternTimeout as exc:  # a property name against a patternProperties key
        return [ValidationError(str(exc), validator=PATTERN_TIMEOUT, validator_value=exc.pattern)]
    except RecursionError:
        message = "is nested too deeply to be checked against its schema"
        return [ValidationError(message, validator="depth", validator_value=None)]
    except referencing.exceptions.Unresolvable as exc:
        raise LatticeRunError(
            f"the schema's reference {_short(_as_reference(exc))} cannot be "
            "resolved: a schema may refer only to places inside itself",
            error_type=ErrorType.INVALID_SCHEMA,
        ) from None
    except PatternError as exc:
        raise LatticeRunError(
            f"the schema holds a regular expression that cannot be used: {exc}",
            error_type=ErrorType.INVALID_SCHEMA,
        ) from None
    finally:
        _references_left.reset(token)


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
    own keyword functions, given ``_GuardedRe`` for ``re`` (same behaviour otherwise),
    and whose references count against the validation's cap."""
    import jsonschema
    from jsonschema import _keywords, _legacy_keywords, _utils

    keywords: dict[str, Any] = {}
    for module, helper_module, names in (
        (_keywords, _utils, ("patternProperties", "additionalProperties", "unevaluatedProperties")),
        (_legacy_keywords, _legacy_keywords, ("unevaluatedProperties_draft2019",)),
    ):
        helper_scope = {**vars(helper_module), "re": _GuardedRe}
        scope = helper_scope if helper_module is module else {**vars(module), "re": _GuardedRe}
        helpers = {
            name: types.FunctionType(getattr(helper_module, name).__code__, helper_scope, name)
            for name in ("find_evaluated_property_keys_by_schema", "find_additional_properties")
            if hasattr(helper_module, name)
        }
        helper_scope.update(helpers)  # the recursion, too, goes through the guarded copies
        scope.update(helpers)
        for name in names:
            keyword = name.removesuffix("_draft2019")
            if base.VALIDATORS.get(keyword) is getattr(module, name):  # else: the draft's own
                keywords[keyword] = types.FunctionType(getattr(module, name).__code__, scope, name)
    for name in ("$ref", "$dynamicRef", "$recursiveRef"):
        if name in base.VALIDATORS:
            keywords[name] = _counted(base.VALIDATORS[name])
    extend: Any = jsonschema.validators.extend
    return extend(base, validators={**keywords, "pattern": _pattern})


def _counted(keyword: Any) -> Any:
    """``keyword`` (``$ref``, ``$dynamicRef``), counted against the validation's cap."""

    def follow(validator: Any, value: Any, instance: Any, schema: Any) -> Iterator[Any]:
        left = _references_left.get()
        if left is not None:
            left[0] -= 1
            if left[0] < 0:
                raise _TooManyReferences
        yield from keyword(validator, value, instance, schema)

    return follow

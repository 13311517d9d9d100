"""A fast acceptance check for flat object schemas, the usual shape of a workflow's inputs.

``jsonschema`` takes several microseconds to accept even ``{}`` against a small
object schema, which is most of a short run's set-up. ``flat_object_check`` compiles
a schema of the shape lowering emits for a start node (an object whose properties
each declare at most a single ``type``, plus ``required`` and ``additionalProperties``)
into a function that returns True only when the full validator would accept too.
Any other schema gets None; a False answer means "ask the full validator", which
then also explains every problem.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

FlatCheck = Callable[[Mapping[str, Any]], bool]

_ANNOTATIONS = frozenset({"title", "description", "$comment", "examples", "default"})
_OBJECT_KEYWORDS = frozenset(
    {"type", "properties", "required", "additionalProperties", "$schema", *_ANNOTATIONS}
)
_PROPERTY_KEYWORDS = frozenset({"type", *_ANNOTATIONS})


def _is_string(v: Any) -> bool:
    return isinstance(v, str)


def _is_boolean(v: Any) -> bool:
    return v is True or v is False


def _is_integer(v: Any) -> bool:  # Draft 2020-12: 1.0 is an integer, True is not
    if isinstance(v, bool):
        return False
    return isinstance(v, int) or (isinstance(v, float) and v.is_integer())


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_object(v: Any) -> bool:
    return isinstance(v, dict)


def _is_array(v: Any) -> bool:
    return isinstance(v, list)


def _is_null(v: Any) -> bool:
    return v is None


def _any(v: Any) -> bool:
    return True


_TYPE_CHECKS: dict[str, Callable[[Any], bool]] = {
    "string": _is_string,
    "boolean": _is_boolean,
    "integer": _is_integer,
    "number": _is_number,
    "object": _is_object,
    "array": _is_array,
    "null": _is_null,
}


def flat_object_check(schema: Mapping[str, Any] | None) -> FlatCheck | None:  # noqa: C901
    """A quick ``is_valid`` for a flat object schema, or None when the schema is not one."""
    if not schema:
        return lambda value: True
    if set(schema) - _OBJECT_KEYWORDS or schema.get("type") != "object":
        return None
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    additional = schema.get("additionalProperties", True)
    if not isinstance(properties, dict) or not isinstance(required, list):
        return None
    if not isinstance(additional, bool) or not all(isinstance(r, str) for r in required):
        return None
    checks: dict[str, Callable[[Any], bool]] = {}
    for name, sub in properties.items():
        if sub is True or sub == {}:
            checks[name] = _any
            continue
        if not isinstance(sub, dict) or set(sub) - _PROPERTY_KEYWORDS:
            return None
        if "type" not in sub:
            checks[name] = _any
            continue
        kind = sub["type"]
        if not (isinstance(kind, str) and kind in _TYPE_CHECKS):
            return None
        checks[name] = _TYPE_CHECKS[kind]
    needed = tuple(required)
    closed = not additional

    def check(value: Mapping[str, Any]) -> bool:
        if not isinstance(value, dict):
            return False
        for name in needed:
            if name not in value:
                return False
        for name, item in value.items():
            test = checks.get(name)
            if test is None:
                if closed:
                    return False
            elif not test(item):
                return False
        return True

    return check

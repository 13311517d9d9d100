"""Example values that satisfy a JSON Schema: what a mock answer for a structured node can
look like (``lattice mock init``, and the hint when a mock script has no answer)."""

from __future__ import annotations

from typing import Any

_MAX_DEPTH = 12
_MAX_SIZE = 1000
"""Items of an array, characters of a string an example holds at most: a schema that asks
for more (``"minLength": 1e30``) gets a shorter example, never a huge allocation."""


def example_value(schema: Any, *, root: Any = None, depth: int = 0) -> Any:  # noqa: C901
    """A small value valid against ``schema`` where the schema allows one simply (enums,
    consts, required properties, bounded strings, numbers and arrays, local ``$ref``s,
    the first branch of ``anyOf``/``oneOf``); a best effort for anything else."""
    root = schema if root is None else root
    if not isinstance(schema, dict) or depth > _MAX_DEPTH:
        return None
    if "$ref" in schema:
        return example_value(_resolve(root, schema["$ref"]), root=root, depth=depth + 1)
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    if "default" in schema:
        return schema["default"]
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return example_value(schema[key][0], root=root, depth=depth + 1)
    if isinstance(schema.get("allOf"), list):
        merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
        for part in schema["allOf"]:
            if isinstance(part, dict) and "if" not in part:
                merged = _merge(merged, part)
        return example_value(merged, root=root, depth=depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), kind[0] if kind else None)
    if kind is None and "properties" in schema:
        kind = "object"
    if kind == "object":
        properties = schema.get("properties") or {}
        required = schema.get("required") or list(properties)
        return {
            name: example_value(properties.get(name, {}), root=root, depth=depth + 1)
            for name in required
            if isinstance(name, str)
        }
    if kind == "array":
        count = min(max(int(schema.get("minItems") or 1), 1), _MAX_SIZE)
        if "maxItems" in schema:
            count = min(count, int(schema["maxItems"]))
        item = example_value(schema.get("items", {}), root=root, depth=depth + 1)
        return [item] * count
    if kind == "string":
        return _string(schema)
    if kind in ("integer", "number"):
        return _number(schema, integer=kind == "integer")
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return "example"


def _string(schema: dict[str, Any]) -> str:
    formats = {
        "date": "2026-01-01",
        "date-time": "2026-01-01T00:00:00Z",
        "email": "someone@example.com",
        "uri": "https://example.com/",
        "uuid": "00000000-0000-4000-8000-000000000000",
    }
    text = formats.get(str(schema.get("format")), "example")
    low = min(int(schema.get("minLength") or 0), _MAX_SIZE)
    high = schema.get("maxLength")
    if len(text) < low:
        text = text + "x" * (low - len(text))
    if isinstance(high, int) and len(text) > high:
        text = text[:high]
    return text


def _number(schema: dict[str, Any], *, integer: bool) -> int | float:
    low = schema.get("minimum", schema.get("exclusiveMinimum"))
    high = schema.get("maximum", schema.get("exclusiveMaximum"))
    value: float = 1
    if isinstance(low, int | float):
        value = low + (1 if "exclusiveMinimum" in schema and "minimum" not in schema else 0)
    if isinstance(high, int | float) and value > high:
        value = high
    return int(value) if integer else value


def _resolve(root: Any, ref: Any) -> Any:
    if not isinstance(ref, str) or not ref.startswith("#/"):
        return {}
    node = root
    for part in ref[2:].split("/"):
        if not isinstance(node, dict):
            return {}
        node = node.get(part.replace("~1", "/").replace("~0", "~"), {})
    return node


def _merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for key, value in b.items():
        if key == "properties" and isinstance(value, dict):
            out["properties"] = {**(out.get("properties") or {}), **value}
        elif key == "required" and isinstance(value, list):
            out["required"] = [*(out.get("required") or []), *value]
        else:
            out.setdefault(key, value)
    return out


def branch_labels(schema: Any) -> list[str] | None:
    """The labels of a classifier's schema (``{"branch": <enum>}``), else None."""
    if not isinstance(schema, dict):
        return None
    branch = (schema.get("properties") or {}).get("branch")
    if isinstance(branch, dict) and isinstance(branch.get("enum"), list):
        return [str(label) for label in branch["enum"]]
    return None

"""Typed reads of a node's ``data`` that report located diagnostics instead of raising."""

from __future__ import annotations

import functools
import json
from typing import Any

from lattice.document.models import Node
from lattice.lower.registry import LoweringContext

MISSING: Any = object()


@functools.lru_cache(maxsize=1024)
def _check_schema(canonical: str) -> None:
    """Meta-schema check, cached by canonical JSON (documents repeat their schemas);
    jsonschema, a heavy module, is imported by the first document that has a schema."""
    import jsonschema

    jsonschema.Draft202012Validator.check_schema(json.loads(canonical))


"""Sentinel: a field that is absent (distinct from an explicit null)."""


def get_str(
    ctx: LoweringContext,
    node: Node,
    key: str,
    *,
    required: bool = False,
    default: str | None = None,
) -> str | None:
    value = node.data.get(key, MISSING)
    if value is MISSING or value is None:
        if required:
            ctx.error(node, "missing-field", f"{node.type} node needs data.{key}", "data")
        return default
    if not isinstance(value, str):
        ctx.error(node, "invalid-field", f"data.{key} must be a string", "data", key)
        return default
    if required and not value.strip():
        ctx.error(node, "missing-field", f"data.{key} is empty", "data", key)
        return default
    return value


def get_number(
    ctx: LoweringContext,
    node: Node,
    key: str,
    *,
    integer: bool = False,
    minimum: float | None = None,
) -> Any:
    value = node.data.get(key)
    if value is None:
        return None
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if integer:
        ok = ok and float(value).is_integer()
    if not ok:
        kind = "an integer" if integer else "a number"
        ctx.error(node, "invalid-field", f"data.{key} must be {kind}", "data", key)
        return None
    if minimum is not None and value < minimum:
        ctx.error(node, "invalid-field", f"data.{key} must be >= {minimum}", "data", key)
        return None
    return int(value) if integer else value


def get_dict(ctx: LoweringContext, node: Node, key: str) -> dict[str, Any] | None:
    value = node.data.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        ctx.error(node, "invalid-field", f"data.{key} must be an object", "data", key)
        return None
    return value


def get_list(ctx: LoweringContext, node: Node, key: str) -> list[Any] | None:
    value = node.data.get(key)
    if value is None:
        return None
    if not isinstance(value, list):
        ctx.error(node, "invalid-field", f"data.{key} must be a list", "data", key)
        return None
    return value


def get_schema(ctx: LoweringContext, node: Node, key: str) -> dict[str, Any] | None:
    """A JSON Schema field, checked against the Draft 2020-12 meta-schema."""
    schema = get_dict(ctx, node, key)
    if schema is None:
        return None
    import jsonschema

    try:
        _check_schema(json.dumps(schema, sort_keys=True))
    except jsonschema.SchemaError as exc:
        where = [str(p) for p in exc.absolute_path]
        ctx.error(
            node, "schema-invalid", f"invalid JSON Schema: {exc.message}", "data", key, *where
        )
        return None
    return schema

"""Typed reads of a node's ``data`` that report located diagnostics instead of raising."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, overload

from lattice.document.models import Node
from lattice.lower.registry import LoweringContext
from lattice.schemas import schema_problems

MISSING: Any = object()
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


@overload
def get_choice(
    ctx: LoweringContext,
    node: Node,
    key: str,
    choices: Sequence[str],
    *,
    default: str,
    required: bool = False,
    fold: Callable[[str], str] | None = None,
) -> str: ...


@overload
def get_choice(
    ctx: LoweringContext,
    node: Node,
    key: str,
    choices: Sequence[str],
    *,
    default: None,
    required: bool = False,
    fold: Callable[[str], str] | None = None,
) -> str | None: ...


def get_choice(
    ctx: LoweringContext,
    node: Node,
    key: str,
    choices: Sequence[str],
    *,
    default: str | None,
    required: bool = False,
    fold: Callable[[str], str] | None = None,
) -> str | None:
    """One of ``choices`` (``fold`` applied first: ``str.upper`` for a case-blind field);
    ``default`` when the field is absent or names none of them (reported)."""
    value = get_str(ctx, node, key, required=required)
    if value is None:
        return default
    if fold is not None:
        value = fold(value)
    if value not in choices:
        message = f"data.{key} must be one of {', '.join(choices)}"
        ctx.error(node, "invalid-field", message, "data", key)
        return default
    return value


def get_number(
    ctx: LoweringContext,
    node: Node,
    key: str,
    *,
    integer: bool = False,
    minimum: float | None = None,
    maximum: float | None = None,
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
    if maximum is not None and value > maximum:
        ctx.error(node, "invalid-field", f"data.{key} must be <= {maximum}", "data", key)
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
    """A JSON Schema field: valid for its dialect, its patterns compile, and its
    references lead to places inside it (``lattice.schemas.schema_problems``). A boolean
    schema is its object form: ``true`` is ``{}`` (anything), ``false`` ``{"not": {}}``
    (nothing)."""
    raw = node.data.get(key)
    if isinstance(raw, bool):
        return {} if raw else {"not": {}}
    schema = get_dict(ctx, node, key)
    if schema is None:
        return None
    problems = schema_problems(schema)
    for problem in problems:
        ctx.error(node, problem.code, problem.message, "data", key, *problem.path)
    return None if problems else schema

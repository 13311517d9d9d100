"""Evaluation of parsed SWITCH conditions (the language is in ``lattice.lower.conditions``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import jmespath
import jmespath.functions
import jmespath.visitor
from jmespath.exceptions import JMESPathError

from lattice.errors import ErrorType, LatticeRunError
from lattice.patterns import PatternTimeout, compile_pattern, search

if TYPE_CHECKING:
    import regex

    from lattice.ir.models import Condition

Test = Callable[[Any], bool]


def compile_jmespath(expression: str) -> Callable[[Any], Any]:
    """``expression`` compiled once, searched with one interpreter kept with it (JMESPath's
    own ``search`` builds a new interpreter, method cache and function table on every
    call: about a fifth of a dataTransform op). Invalid expressions raise JMESPathError.

    Fields, sub-expressions (``a.b``), ``@`` and ``length(...)`` become Python closures
    that do what the interpreter's visitors do (its ``visit_field``, ``visit_subexpression``,
    ``visit_current``; ``length`` of an exact str, list or dict is ``len``, anything else
    goes through JMESPath's function table and its type check); every other node is
    handed to the interpreter whole."""
    parsed = jmespath.compile(expression).parsed
    interpreter = jmespath.visitor.TreeInterpreter()
    return _closure(parsed, interpreter, jmespath.functions.Functions().call_function)


_SIZED = (str, list, dict)


def _closure(
    node: dict[str, Any],
    interpreter: jmespath.visitor.TreeInterpreter,
    call_function: Callable[[str, list[Any]], Any],
) -> Callable[[Any], Any]:
    """A search for the JMESPath AST ``node`` (see ``compile_jmespath``)."""
    kind, children = node["type"], node.get("children") or []
    if kind == "field":
        key = node["value"]

        def field(value: Any) -> Any:
            try:
                return value.get(key)
            except AttributeError:
                return None

        return field
    if kind == "current":
        return lambda value: value
    if kind == "subexpression":
        steps = [_closure(child, interpreter, call_function) for child in children]

        def subexpression(value: Any) -> Any:
            for step in steps:
                value = step(value)
            return value

        return subexpression
    if kind == "function_expression" and node["value"] == "length" and len(children) == 1:
        argument = _closure(children[0], interpreter, call_function)

        def length(value: Any) -> Any:
            arg = argument(value)
            if type(arg) in _SIZED:
                return len(arg)
            return call_function("length", [arg])

        return length
    visit = interpreter.visit
    return lambda value: visit(node, value)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _compare(op: str, right: Any) -> Test:
    def test(left: Any) -> bool:
        if not _is_number(left):
            return False
        if op == "gt":
            return bool(left > right)
        if op == "ge":
            return bool(left >= right)
        if op == "lt":
            return bool(left < right)
        return bool(left <= right)

    return test


def same(left: Any, right: Any) -> bool:
    """JSON equality: ``true`` never equals ``1``; ``1`` equals ``1.0``."""
    if isinstance(left, bool) or isinstance(right, bool):
        return type(left) is type(right) and left == right
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(same(a, b) for a, b in zip(left, right, strict=True))
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(same(left[k], right[k]) for k in left)
    return bool(left == right)


def _contains(needle: Any) -> Test:
    def test(value: Any) -> bool:
        if isinstance(value, str):
            return isinstance(needle, str) and needle in value
        if isinstance(value, list | dict):
            return needle in value
        return False

    return test


def _matches(pattern: regex.Pattern[str]) -> Test:
    """A ``matches`` test: a search of at most ``MATCH_SECONDS``; a pattern that cannot
    decide in time fails the op (``pattern_timeout``) rather than stall the run."""

    def test(value: Any) -> bool:
        if not isinstance(value, str):
            return False
        try:
            return search(pattern, value) is not None
        except PatternTimeout as exc:
            raise LatticeRunError(
                f"a 'matches' condition: {exc}",
                error_type=ErrorType.PATTERN_TIMEOUT,
                details={"pattern": pattern.pattern, "text_chars": len(value)},
            ) from None

    return test


def _empty(value: Any) -> bool:
    return value is None or value == "" or value == [] or value == {}


def compile_condition(condition: Condition) -> Test:
    """A predicate for ``condition``; regexes and JMESPath are compiled here, once."""
    op, right = condition.op, condition.value
    if op == "eq":
        return lambda v: same(v, right)
    if op == "ne":
        return lambda v: not same(v, right)
    if op in ("gt", "ge", "lt", "le"):
        return _compare(op, right)
    if op == "in":
        return lambda v: any(same(v, item) for item in right)
    if op == "not_in":
        return lambda v: not any(same(v, item) for item in right)
    if op == "contains":
        return _contains(right)
    if op == "not_contains":
        contains = _contains(right)
        return lambda v: not contains(v)
    if op == "matches":
        return _matches(compile_pattern(right))
    if op == "exists":
        return lambda v: v is not None
    if op == "not_exists":
        return lambda v: v is None
    if op == "empty":
        return _empty
    if op == "not_empty":
        return lambda v: not _empty(v)
    return _jmespath_test(right)


def _jmespath_test(expression: str) -> Test:
    """A ``jmespath:`` test; an expression that fails on the value (``length(@)`` of
    null) fails the op as ``condition_error``, naming the expression."""
    search = compile_jmespath(expression)

    def test(value: Any) -> bool:
        try:
            return _truthy(search(value))
        except JMESPathError as exc:
            raise LatticeRunError(
                f"condition 'jmespath: {expression}' failed on the value: {exc}",
                error_type=ErrorType.CONDITION_ERROR,
            ) from None

    return test


def _truthy(value: Any) -> bool:
    """JMESPath truthiness: false, null, "", [] and {} are false; 0 is true."""
    return not (value is False or _empty(value))

"""The deterministic condition language of ifElse/switch branches.

A condition is tested against one value (the node's ``evaluationTarget``, or the
most recent result)::

    == <json>          != <json>          (equality; strings are "double-quoted")
    > <number>   >= <number>   < <number>   <= <number>
    in [<json>, ...]   not in [<json>, ...]
    contains <json>    not contains <json> (substring of a string, item of a list, key of an object)
    matches "<regex>"                      (Python regular expression, searched in a string)
    exists | not exists                    (the value is present and not null)
    empty | not empty                      (null, "", [] or {})
    jmespath: <expression>                 (truthiness of a JMESPath expression on the value)

Right-hand sides are JSON literals, so ``== billing`` (unquoted) is an error rather
than a guess; after a word operator (``contains a stack trace``) text that is not
JSON makes the whole condition natural language. Text that starts with none of these operators is a natural-language
condition, which lowering turns into an LLM classifier plus a SWITCH.
Nothing here evaluates code.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import jmespath
from jmespath.exceptions import JMESPathError

from lattice.document.limits import check_json_value
from lattice.ir.models import Condition
from lattice.patterns import pattern_problem

_UNARY = {
    "exists": "exists",
    "not exists": "not_exists",
    "empty": "empty",
    "is empty": "empty",
    "not empty": "not_empty",
    "is not empty": "not_empty",
}
_BINARY = (  # longest first, so ">=" is not read as ">"
    ("not contains", "not_contains"),
    ("not in", "not_in"),
    ("contains", "contains"),
    ("matches", "matches"),
    ("in", "in"),
    ("==", "eq"),
    ("!=", "ne"),
    (">=", "ge"),
    ("<=", "le"),
    (">", "gt"),
    ("<", "lt"),
)
_WORD_OPERATOR = re.compile(r"^(not contains|not in|contains|matches|in)(\s|$)")


class ConditionError(ValueError):
    """A condition that starts like a deterministic one but does not parse."""


@dataclass(frozen=True, slots=True)
class ParsedCondition:
    """``condition`` is None for natural language (then ``text`` goes to the classifier)."""

    text: str
    condition: Condition | None

    @property
    def is_natural_language(self) -> bool:
        return self.condition is None


def parse_condition(text: str) -> ParsedCondition:
    """Parse one branch condition; raise ConditionError for a malformed deterministic one."""
    stripped = text.strip()
    lowered = stripped.lower()
    if lowered in _UNARY:
        return ParsedCondition(text, Condition(op=_UNARY[lowered]))  # type: ignore[arg-type]
    if lowered.startswith("jmespath:"):
        expression = stripped[len("jmespath:") :].strip()
        try:
            jmespath.compile(expression)
        except JMESPathError as exc:
            raise ConditionError(f"invalid JMESPath in condition {text!r}: {exc}") from None
        except RecursionError:
            raise ConditionError(
                f"the JMESPath in condition {_short(text)} is nested too deeply"
            ) from None
        return ParsedCondition(text, Condition(op="jmespath", value=expression))
    for token, op in _BINARY:
        if token[0].isalpha():
            if not _WORD_OPERATOR.match(lowered) or not lowered.startswith(token):
                continue
        elif not stripped.startswith(token):
            continue
        rhs = stripped[len(token) :].strip()
        if token[0].isalpha() and not _is_json(rhs):
            # "contains a stack trace" is a sentence, not a malformed condition.
            return ParsedCondition(text, None)
        return ParsedCondition(text, Condition(op=op, value=_parse_operand(op, rhs, text)))  # type: ignore[arg-type]
    return ParsedCondition(text, None)


def _short(text: str, limit: int = 80) -> str:
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


def _is_json(text: str) -> bool:
    try:
        _strict_json(text)
    except (ValueError, RecursionError):
        return False
    return True


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def _strict_json(text: str) -> object:
    """JSON as the standard defines it (NaN and Infinity are not values), within the
    document limits (nesting, numbers, strings); a ValueError otherwise."""
    value = json.loads(text, parse_constant=_reject_constant)
    problems = check_json_value(value)
    if problems:
        raise ValueError(problems[0].message)
    return value


def _parse_operand(op: str, rhs: str, text: str) -> object:
    try:
        value = _strict_json(rhs)
    except (ValueError, RecursionError):
        raise ConditionError(
            f"cannot read the value in condition {text!r}: write it as JSON "
            f'(strings in double quotes, e.g. == "billing")'
        ) from None
    if op in ("gt", "ge", "lt", "le") and (
        not isinstance(value, int | float) or isinstance(value, bool)
    ):
        raise ConditionError(f"condition {text!r} compares with a number, got {rhs}")
    if op in ("in", "not_in") and not isinstance(value, list):
        raise ConditionError(f'condition {text!r} needs a JSON list, e.g. in ["a", "b"]')
    if op == "matches":
        if not isinstance(value, str):
            raise ConditionError(f"condition {text!r} needs a regular expression in quotes")
        problem = pattern_problem(value)
        if problem is not None:
            raise ConditionError(f"invalid regular expression in {_short(text)}: {problem}")
    return value

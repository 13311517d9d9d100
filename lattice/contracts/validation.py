"""Checking one completion against a contract.

The pipeline, each failure with its own error type:

1. JSON extraction (``json_error``, ``multiple_artifacts``; ``explanatory_text`` when the
   one value has prose around it and the contract is strict, ``lattice.contracts.extract``)
2. failure parser (``{"error": "missing_information"|"invalid_request", "details": ...}``)
3. JSON Schema (the dialect its ``$schema`` names, 2020-12 by default; the common
   formats asserted), every violation with its JSON pointer (``schema_error``;
   wording in ``lattice.contracts.violations``)
4. named invariants (``code_in_output``, ``invalid_diff``, ``invariant_error``)

Free-text contracts (no schema) skip 1-3. Without ``strict``, a reply that holds exactly one
JSON value with prose (or prose and fence markers) around it is *salvaged*: the value goes
through 2-4 as if it had been sent alone, and ``Checked.salvaged`` says what was taken away.

jsonschema is imported when the first contract with a schema is compiled (a lazy import
of a heavy module: about 65 ms that a free-text workflow never needs). Validators come
from ``lattice.schemas``: references stay inside the schema, patterns run with a time
limit (a value a pattern cannot decide in time is a ``schema_error`` at its pointer).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lattice.contracts.errors import NeedsHuman, OutputInvalid
from lattice.contracts.extract import Extracted, ExtractionError, explanatory_message, extract
from lattice.contracts.invariants import BoundInvariant
from lattice.contracts.violations import SchemaProblems, Violation, schema_problems
from lattice.errors import ErrorType, LatticeRunError
from lattice.schemas import schema_errors, schema_validator, uses_patterns

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

__all__ = ["Checked", "OutputValidator", "Violation"]

_AROUND = 120
"""Characters of the stripped text a ``salvaged`` record keeps, each side."""


@dataclass(frozen=True)
class Checked:
    """An accepted artifact, and what was stripped from around it (None: nothing)."""

    value: Any
    salvaged: dict[str, Any] | None = None


class OutputValidator:
    """A contract's checks, compiled once: ``check(text)`` returns the artifact or raises."""

    def __init__(
        self,
        schema: dict[str, Any] | bool | None,
        invariants: Sequence[BoundInvariant],
        *,
        formats: bool = True,
    ) -> None:
        """``formats``: assert ``format`` (``lattice.schema_formats``) unless the schema
        opts out."""
        self.schema = schema
        self.invariants = tuple(invariants)
        self.schema_validator: Validator | None = None
        self.uses_patterns = uses_patterns(schema)
        """Checking may run a document's regular expression (an event loop checks in a thread)."""
        self.takes_any_text = schema is None and not self.invariants
        """Free text with nothing to check: every answer is the artifact as it is."""
        if schema is not None:
            self.schema_validator = schema_validator(schema, formats=formats)

    def check(self, text: str, *, salvage: bool = False) -> Any:
        """The artifact in ``text``, or OutputInvalid / NeedsHuman / LatticeRunError(invalid_request)."""
        return self.inspect(text, salvage=salvage).value

    def inspect(self, text: str, *, salvage: bool = False) -> Checked:
        """Like ``check``, and say what was salvaged from around the artifact."""
        if self.schema_validator is None:
            self._invariants(text, None)
            return Checked(text)
        try:
            found = extract(text)
        except ExtractionError as exc:
            raise OutputInvalid(
                exc.message,
                error_type=exc.error_type,
                violations=[{"pointer": "/", "message": exc.message}],
                details={"parser": exc.details} if exc.error_type == ErrorType.JSON_ERROR else None,
            ) from None
        value = found.value
        if found.prose and not salvage:
            message = explanatory_message(found)
            problems = self.problems(value)  # tell the model everything wrong in one packet
            raise OutputInvalid(
                message,
                error_type=ErrorType.EXPLANATORY_TEXT,
                violations=[{"pointer": "/", "message": message}, *problems.violations],
                value=value,
                terms=problems.terms,
            )
        quoted = found.json_text if found.prose else None
        _failure_parser(value)
        problems = self.problems(value)
        if problems.violations:
            raise OutputInvalid(
                "the output does not match its schema: " + _listed(problems.violations),
                error_type=ErrorType.SCHEMA_ERROR,
                violations=problems.violations,
                value=value,
                quoted=quoted,
                terms=problems.terms,
            )
        self._invariants(value, quoted)
        return Checked(value, _salvaged(found) if found.prose else None)

    def _invariants(self, value: Any, quoted: str | None) -> None:
        for invariant in self.invariants:
            violations = invariant.check(value)
            if violations:
                # a check reported as schema_error (LLMPrimitive's pydantic model) names
                # fields whose values may come from the input
                schema_like = invariant.definition.error_type == ErrorType.SCHEMA_ERROR
                raise OutputInvalid(
                    f"invariant {invariant.definition.name} fails: " + _listed(violations),
                    error_type=invariant.definition.error_type,
                    violations=violations,
                    value=value,
                    quoted=quoted,
                    terms=_pointer_terms(violations) if schema_like else (),
                )

    def problems(self, value: Any) -> SchemaProblems:
        """Every way ``value`` breaks the schema (document order), and the terms to look up."""
        assert self.schema_validator is not None
        return schema_problems(schema_errors(self.schema_validator, value), self.schema)

    def schema_violations(self, value: Any) -> list[Violation]:
        """Every way ``value`` breaks the schema, in document order."""
        return self.problems(value).violations


def _pointer_terms(violations: list[Violation]) -> list[str]:
    """The field names of a model check's violations (the last name of each pointer)."""
    terms: list[str] = []
    for violation in violations:
        names = [p for p in violation["pointer"].split("/") if p and not p.isdigit()]
        if names and names[-1] not in terms:
            terms.append(names[-1])
    return terms


def _salvaged(found: Extracted) -> dict[str, Any]:
    def cut(text: str, tail: bool) -> str:
        if len(text) <= _AROUND:
            return text
        return "…" + text[-_AROUND:] if tail else text[:_AROUND] + "…"

    return {
        "stripped": list(found.stripped),
        "before": cut(found.before, tail=True),
        "after": cut(found.after, tail=False),
        "chars": len(found.before) + len(found.after),
    }


def _listed(violations: list[Violation]) -> str:
    return "; ".join(f"{v['pointer']}: {v['message']}" for v in violations[:5])


def _failure_parser(value: Any) -> None:
    """Raise when the model answered with an error object instead of the artifact."""
    if not (isinstance(value, dict) and set(value) <= {"error", "details"}):
        return
    kind = value.get("error")
    details = value.get("details")
    text = details if isinstance(details, str) else json.dumps(details, ensure_ascii=False)
    if kind == ErrorType.MISSING_INFORMATION:
        raise NeedsHuman(f"the model needs more information: {text}", details={"missing": details})
    if kind == ErrorType.INVALID_REQUEST:
        raise LatticeRunError(
            f"the model rejected the request: {text}",
            error_type=ErrorType.INVALID_REQUEST,
            details={"reason": details},
        )

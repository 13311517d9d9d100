"""Checking one completion against a contract.

The pipeline, each failure with its own error type:

1. JSON extraction (``json_error``, ``explanatory_text``, ``multiple_artifacts``)
2. failure parser (``{"error": "missing_information"|"invalid_request", "details": ...}``)
3. JSON Schema, Draft 2020-12, every violation with its JSON pointer (``schema_error``)
4. named invariants (``code_in_output``, ``invalid_diff``, ``invariant_error``)

Free-text contracts (no schema) skip 1-3.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import jsonschema

from lattice.contracts.errors import NeedsHuman, OutputInvalid
from lattice.contracts.extract import ExtractionError, extract_json
from lattice.contracts.invariants import BoundInvariant
from lattice.errors import LatticeRunError

Violation = dict[str, str]


class OutputValidator:
    """A contract's checks, compiled once: ``check(text)`` returns the artifact or raises."""

    def __init__(self, schema: dict[str, Any] | None, invariants: Sequence[BoundInvariant]) -> None:
        self.schema = schema
        self.invariants = tuple(invariants)
        self.schema_validator = (
            jsonschema.Draft202012Validator(schema) if schema is not None else None
        )

    def check(self, text: str) -> Any:
        """The artifact in ``text``, or OutputInvalid / NeedsHuman / LatticeRunError(invalid_request)."""
        if self.schema_validator is None:
            value: Any = text
        else:
            try:
                value = extract_json(text)
            except ExtractionError as exc:
                violations = [{"pointer": "/", "message": exc.message}]
                if "extracted" in exc.details:  # tell the model everything wrong in one packet
                    violations += self.schema_violations(exc.details["extracted"])
                raise OutputInvalid(
                    exc.message, error_type=exc.error_type, violations=violations
                ) from None
            _failure_parser(value)
            violations = self.schema_violations(value)
            if violations:
                raise OutputInvalid(
                    "the output does not match its schema: " + _listed(violations),
                    error_type="schema_error",
                    violations=violations,
                )
        for invariant in self.invariants:
            violations = invariant.check(value)
            if violations:
                raise OutputInvalid(
                    f"invariant {invariant.definition.name} fails: " + _listed(violations),
                    error_type=invariant.definition.error_type,
                    violations=violations,
                )
        return value

    def schema_violations(self, value: Any) -> list[Violation]:
        """Every way ``value`` breaks the schema, in document order."""
        assert self.schema_validator is not None
        errors = sorted(
            self.schema_validator.iter_errors(value), key=lambda e: list(e.absolute_path)
        )
        return [
            {"pointer": "/" + "/".join(str(p) for p in e.absolute_path), "message": e.message}
            for e in errors
        ]


def _listed(violations: list[Violation]) -> str:
    return "; ".join(f"{v['pointer']}: {v['message']}" for v in violations[:5])


def _failure_parser(value: Any) -> None:
    """Raise when the model answered with an error object instead of the artifact."""
    if not (isinstance(value, dict) and set(value) <= {"error", "details"}):
        return
    kind = value.get("error")
    details = value.get("details")
    text = details if isinstance(details, str) else json.dumps(details, ensure_ascii=False)
    if kind == "missing_information":
        raise NeedsHuman(f"the model needs more information: {text}", details={"missing": details})
    if kind == "invalid_request":
        raise LatticeRunError(
            f"the model rejected the request: {text}",
            error_type="invalid_request",
            details={"reason": details},
        )

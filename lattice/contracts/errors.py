"""The errors a contract raises about a completion (both are ``LatticeRunError``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lattice.errors import ErrorType, LatticeRunError

NO_VALUE: Any = object()
"""``OutputInvalid.value`` of a completion that held no single JSON value."""


class OutputInvalid(LatticeRunError):
    """A completion that breaks the contract; ``violations`` are ``{pointer, message}``.

    Beside the violations (and never serialised with them): ``value``, the completion's
    JSON value when it had one (``NO_VALUE`` otherwise); ``quoted``, the text a repair
    packet should quote when it is not the whole completion (the JSON of a reply whose
    prose was salvaged away); ``terms``, the words whose mentions in the input a repair
    needs (``lattice.contracts.violations``).
    """

    def __init__(
        self,
        message: str,
        *,
        error_type: str,
        violations: list[dict[str, str]],
        value: Any = NO_VALUE,
        quoted: str | None = None,
        terms: Sequence[str] = (),
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(
            message, error_type=error_type, details={**(details or {}), "violations": violations}
        )
        self.violations = violations
        self.value = value
        self.quoted = quoted
        self.terms = tuple(terms)

    @property
    def has_value(self) -> bool:
        return self.value is not NO_VALUE


class NeedsHuman(LatticeRunError):
    """The model answered ``missing_information``: a person must supply it."""

    error_type = ErrorType.MISSING_INFORMATION

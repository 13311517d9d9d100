"""The errors a contract raises about a completion (both are ``LatticeRunError``)."""

from __future__ import annotations

from lattice.errors import LatticeRunError


class OutputInvalid(LatticeRunError):
    """A completion that breaks the contract; ``violations`` are ``{pointer, message}``."""

    def __init__(self, message: str, *, error_type: str, violations: list[dict[str, str]]) -> None:
        super().__init__(message, error_type=error_type, details={"violations": violations})
        self.violations = violations


class NeedsHuman(LatticeRunError):
    """The model answered ``missing_information``: a person must supply it."""

    error_type = "missing_information"

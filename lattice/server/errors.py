"""Errors the API answers with: a status code and a JSON body, never a stack trace.

Every error body is ``{"error": "<type>", "message": "...", ...}``; document, input and
request problems add ``"diagnostics"``: ``[{"code", "severity", "message", "pointer",
"nodeId"?}]`` (the pointer locates the problem in the document or in the request body).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from lattice.errors import Diagnostic, DocumentError, InputError, LatticeUserError
from lattice.runs.ownership import RunOwned
from lattice.runtime.resume import NotResumable


class ApiError(Exception):
    """An answer other than success: ``status`` and the JSON body ``body()``."""

    def __init__(
        self,
        status: int,
        error: str,
        message: str,
        *,
        diagnostics: Iterable[Mapping[str, Any]] | None = None,
        headers: Mapping[str, str] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.error = error
        self.message = message
        self.diagnostics = list(diagnostics) if diagnostics is not None else None
        self.headers = dict(headers or {})
        self.extra = dict(extra or {})

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {"error": self.error, "message": self.message, **self.extra}
        if self.diagnostics is not None:
            out["diagnostics"] = self.diagnostics
        return out


def not_found(what: str) -> ApiError:
    return ApiError(404, "not_found", what)


def diagnostics_json(diagnostics: Iterable[Diagnostic]) -> list[dict[str, Any]]:
    return [d.to_json() for d in diagnostics]


def document_error(diagnostics: Iterable[Diagnostic], *, where: str) -> ApiError:
    """A document that cannot be lowered (422), with every diagnostic."""
    found = diagnostics_json(diagnostics)
    errors = sum(1 for d in found if d["severity"] == "error")
    return ApiError(
        422,
        "invalid_document",
        f"{where} has {errors} error(s); see diagnostics",
        diagnostics=found,
    )


def input_diagnostic(message: str, pointer: str) -> dict[str, Any]:
    return {"code": "invalid-input", "severity": "error", "message": message, "pointer": pointer}


def from_user_error(exc: LatticeUserError) -> ApiError:
    """The API error for a LatticeUserError raised while preparing or resuming a run:
    422 for a document, inputs or answers that do not fit (one diagnostic per problem,
    located in the request body), 409 for a run another process (or run) owns or whose
    failure a resume would repeat, 400 for other bad options."""
    if isinstance(exc, RunOwned):
        return ApiError(409, "conflict", exc.message, extra={"status": "running"})
    if isinstance(exc, NotResumable):
        return ApiError(409, exc.error_type, exc.message, extra={"status": "failed"})
    if isinstance(exc, DocumentError):
        return document_error(exc.diagnostics, where="the document")
    if isinstance(exc, InputError):
        head, *lines = exc.message.splitlines()
        field = "/answers" if head.startswith("invalid answers") else "/inputs"
        found = []
        for line in (text.strip() for text in lines):
            if not line:
                continue
            pointer = field
            if line.startswith("$in"):
                where, _, rest = line.partition(": ")
                pointer, line = "/inputs" + where[3:], rest or line
            found.append(input_diagnostic(line, pointer))
        return ApiError(
            422,
            exc.error_type,
            exc.message,
            diagnostics=found or [input_diagnostic(exc.message, field)],
        )
    return ApiError(400, exc.error_type, exc.message)

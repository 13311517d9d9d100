"""Errors the API answers with: a status code and a JSON body, never a stack trace.

Every error body is ``{"error": "<type>", "message": "...", ...}``; document, input and
request problems add ``"diagnostics"``: ``[{"code", "severity", "message", "pointer",
"nodeId"?}]`` (the pointer locates the problem in the document or in the request body).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import Response

from lattice.errors import Diagnostic, DocumentError, InputError, LatticeUserError
from lattice.runs.ownership import RunOwned
from lattice.runtime.resume import NotResumable

log = logging.getLogger("lattice.server")

Respond = Callable[..., Response]
"""``respond(status, data, headers=None)``: a JSON response, masked (``create_app``'s)."""


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


def add_error_handlers(app: FastAPI, respond: Callable[..., Response]) -> None:
    """Make every error of ``app`` a JSON answer (``respond``), never a stack trace: an
    ``ApiError`` as it says, a request FastAPI could not read as 400 (not JSON) or 422
    (each problem a diagnostic), Starlette's 404 and 405, and anything else 500 (logged)."""

    async def api_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        return respond(exc.status, exc.body(), exc.headers)

    async def invalid_request(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        problems = list(exc.errors())
        if any(p.get("type") == "json_invalid" for p in problems):
            return respond(
                400, {"error": "invalid_json", "message": "the request body is not valid JSON"}
            )
        diagnostics = [_request_diagnostic(p) for p in problems]
        return respond(
            422,
            {
                "error": "invalid_request",
                "message": "; ".join(f"{d['pointer'] or '/'}: {d['message']}" for d in diagnostics),
                "diagnostics": diagnostics,
            },
        )

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        kind = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return respond(
            exc.status_code, {"error": kind, "message": str(exc.detail)}, exc.headers or None
        )

    async def internal_error(request: Request, exc: Exception) -> Response:
        log.error("internal error on %s %s", request.method, request.url.path, exc_info=exc)
        return respond(
            500, {"error": "internal_error", "message": "internal error; see the server's log"}
        )

    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(RequestValidationError, invalid_request)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(Exception, internal_error)


def _request_diagnostic(problem: Mapping[str, Any]) -> dict[str, Any]:
    """A request body problem found by FastAPI, located by a JSON pointer into the body
    (``?name`` for a query parameter)."""
    loc = [str(part) for part in problem.get("loc", ())]
    if loc and loc[0] == "body":
        pointer = "".join(f"/{part}" for part in loc[1:])
    elif loc and loc[0] in ("query", "header", "path"):
        pointer = f"?{'.'.join(loc[1:])}" if loc[0] == "query" else ".".join(loc[1:])
    else:
        pointer = "".join(f"/{part}" for part in loc)
    return {
        "code": "invalid-request",
        "severity": "error",
        "message": str(problem.get("msg", "invalid")),
        "pointer": pointer,
    }

"""The workflow routes of ``lattice serve``: the workflows under ``--workflows`` and the
check of an inline document (docs/server.md)."""

from __future__ import annotations

from fastapi import FastAPI
from starlette.responses import Response

from lattice.server.bodies import CheckDocument
from lattice.server.errors import Respond, diagnostics_json
from lattice.server.workflows import WorkflowLibrary


def add_workflow_routes(app: FastAPI, library: WorkflowLibrary, respond: Respond) -> None:
    """Serve the workflows under ``--workflows`` and the check of an inline document
    (plain ``def``: their reads and lowering run in FastAPI's thread pool)."""

    @app.get("/v1/workflows", tags=["workflows"], summary="the workflows under --workflows")
    def list_workflows() -> Response:
        return respond(200, {"workflows": library.listing()})

    @app.get(
        "/v1/workflows/{name:path}",
        tags=["workflows"],
        summary="a workflow: its document, ExecIR and diagnostics",
    )
    def get_workflow(name: str) -> Response:
        return respond(200, library.load(name).describe(full=True))

    @app.post("/v1/check", tags=["workflows"], summary="the diagnostics of an inline document")
    def check(body: CheckDocument) -> Response:
        lowered = library.lower_inline(body.document)
        return respond(
            200,
            {
                "valid": lowered.ir is not None,
                "diagnostics": diagnostics_json(lowered.diagnostics),
            },
        )

"""The execution panel: the web page ``lattice serve`` answers at ``/`` (docs/panel.md),
its static files under ``/panel/``, and the JSON it needs beyond the run API.

The page and its files ship inside the package (``lattice/server/panel/``) and hold no
run data, so they are served without the bearer token (the page asks for it and sends
it with every API call); everything else below needs the token like any API route:

- ``GET /v1/runs/{id}/graph``: the canvas of the run's workflow (``graph.py``);
- ``GET /v1/runs/{id}/state``: the state the run started from (``?at=final``: where it
  stopped), for the state view's time travel;
- ``GET /v1/runs/{id}/ops``: the run's op records (``ops.jsonl``), an index a page at a
  time, or with ``?node=ID`` the full records of one node's latest ops (inputs,
  attempts, output);
- ``GET /v1/forms/{name}``: what the new-run form of a workflow needs (its inputs
  schema, example inputs, the mock scripts under ``--workflows``, its canvas, and the
  notes on fields of the document Lattice reads but does not act on);
- ``POST /v1/graph``: the canvas of an inline document;
- ``GET /v1/runs/{id}/compare/{other}``: what differs between two runs, as
  ``lattice runs diff --json`` says it, with both outputs.

A run's canvas, state and op records, and two runs compared, are asked of the gateway's
``Backend`` (``backend.py``): run folders, read off the event loop the runs share, or
what an engine keeps of a run (``lattice serve --engine temporal``: ``remote.py``), so
that the same routes answer both; comparing runs needs ``Capability.COMPARE``. The
routes that read workflow files are plain ``def`` (run in FastAPI's thread pool).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from fastapi import FastAPI, Query
from pydantic import BaseModel, ConfigDict
from starlette.responses import FileResponse, Response

from lattice.ir.serialize import ir_to_dict
from lattice.runs.oplog import OpEntry, label_key, safe_name
from lattice.server.backend import Backend, needs
from lattice.server.errors import ApiError, Respond, diagnostics_json, not_found
from lattice.server.graph import document_graph
from lattice.server.workflows import WorkflowLibrary
from lattice.service.backend import Capability

PANEL_DIR = Path(__file__).resolve().parent / "panel"
"""The page, its ES modules and styles (package data)."""

MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".txt": "text/plain; charset=utf-8",
}
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'"
)
"""The page loads nothing from elsewhere (no CDN): every asset is in the package."""
PAGE_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
MAX_RECORDS = 200
"""Op records of one node answered at most (the latest ones)."""
MAX_PAGE = 500
"""Entries of the op index answered at most in one page."""
LABEL = r"^[0-9]+(\.[0-9]+)*$"
"""An op record's label: ``0003``, ``0003.1.0001``."""


def is_public(path: str) -> bool:
    """The panel's page and static files: served without the token (no run data)."""
    return path == "/" or path.startswith("/panel/")


class GraphRequest(BaseModel):
    """``POST /v1/graph``."""

    model_config = ConfigDict(extra="forbid")

    document: dict[str, Any]


def mock_scripts(library: WorkflowLibrary) -> list[str]:
    """The mock scripts under the workflows folder (relative names)."""
    root = library.root
    if root is None:
        return []
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for file in sorted(files):
            if file.endswith(".mock.json"):
                path = Path(folder) / file
                if path.resolve().is_relative_to(root):
                    found.append(path.relative_to(root).as_posix())
    return found


def _side_file(library: WorkflowLibrary, name: str, suffix: str) -> str | None:
    """``flow.json`` → ``flow<suffix>`` when it exists beside it."""
    if not name.endswith(".json"):
        return None
    side = name[: -len(".json")] + suffix
    try:
        library.resolve(side, what="file")
    except ApiError:
        return None
    return side


def add_panel_routes(
    app: FastAPI, *, runs: Backend, library: WorkflowLibrary, respond: Respond
) -> None:
    """Serve the panel from ``app``, its runs read from ``runs``."""

    @app.api_route("/", methods=["GET", "HEAD"], include_in_schema=False)
    async def page() -> Response:
        return FileResponse(
            PANEL_DIR / "index.html", media_type=MEDIA_TYPES[".html"], headers=PAGE_HEADERS
        )

    @app.api_route("/panel/{path:path}", methods=["GET", "HEAD"], include_in_schema=False)
    def asset(path: str) -> Response:
        file = (PANEL_DIR / path).resolve()
        media = MEDIA_TYPES.get(file.suffix)
        if (
            media is None
            or "\x00" in path
            or not file.is_relative_to(PANEL_DIR)
            or not file.is_file()
        ):
            raise not_found(f"no panel file {path!r}")
        return FileResponse(file, media_type=media, headers=PAGE_HEADERS)

    @app.get(
        "/v1/runs/{run_id}/compare/{other_id}",
        tags=["panel"],
        summary="what differs between two runs (lattice runs diff)",
        dependencies=[needs(runs, Capability.COMPARE)],
    )
    async def compare_runs(run_id: str, other_id: str) -> Response:
        return respond(200, await runs.compare(run_id, other_id))

    @app.get("/v1/runs/{run_id}/graph", tags=["panel"], summary="the canvas of a run's workflow")
    async def graph_of_run(run_id: str) -> Response:
        return respond(200, await runs.canvas(run_id))

    @app.get("/v1/runs/{run_id}/state", tags=["panel"], summary="the state a run started from")
    async def state_of_run(
        run_id: str,
        at: Annotated[str, Query(pattern="^(initial|final)$")] = "initial",
    ) -> Response:
        return respond(200, await runs.state(run_id, at))

    @app.get("/v1/runs/{run_id}/ops", tags=["panel"], summary="a run's op records")
    async def ops_of_run(
        run_id: str,
        node: Annotated[str | None, Query(description="only the ops of this node")] = None,
        limit: Annotated[
            int, Query(ge=1, le=MAX_PAGE, description=f"at most {MAX_RECORDS} with node")
        ] = 50,
        after: Annotated[
            str | None, Query(pattern=LABEL, description="the previous page's next")
        ] = None,
    ) -> Response:
        if node is not None:
            check_records_limit(limit)
        entries, graph = await runs.op_entries(run_id, canvas=node is not None)
        if node is None:
            return respond(200, op_index(entries, after=after, limit=limit))
        assert graph is not None  # asked for
        return respond(200, await asyncio.to_thread(node_records, entries, graph, node, limit))

    @app.get("/v1/forms/{name:path}", tags=["panel"], summary="the new-run form of a workflow")
    def form(name: str) -> Response:
        loaded = library.load(name)
        ir = ir_to_dict(loaded.lowered.ir) if loaded.lowered.ir is not None else None
        example_inputs = _side_file(library, name, ".inputs.json")
        example_answers = _side_file(library, name, ".answers.json")
        out = loaded.describe(full=False)
        out.update(
            {
                "diagnostics": diagnostics_json(loaded.lowered.diagnostics),
                "inputs_schema": (ir or {}).get("inputsSchema"),
                "notes": (ir or {}).get("workflow", {}).get("notes") or [],
                "example_inputs": _read_side(library, example_inputs),
                "example_answers": _read_side(library, example_answers),
                "mocks": mock_scripts(library),
                "default_mock": _side_file(library, name, ".mock.json"),
                "graph": document_graph(loaded.document, ir),
            }
        )
        return respond(200, out)

    @app.post("/v1/graph", tags=["panel"], summary="the canvas of an inline document")
    def graph_of_document(body: GraphRequest) -> Response:  # lowering: in the thread pool
        lowered = library.lower_inline(body.document)
        ir = ir_to_dict(lowered.ir) if lowered.ir is not None else None
        graph = document_graph(body.document, ir)
        graph["diagnostics"] = diagnostics_json(lowered.diagnostics)
        return respond(200, graph)


def _read_side(library: WorkflowLibrary, name: str | None) -> Any:
    if name is None:
        return None
    try:
        return json.loads(library.resolve(name, what="file").read_text(encoding="utf-8"))
    except (OSError, ValueError, ApiError):
        return None


def op_index(entries: list[OpEntry], *, after: str | None, limit: int) -> dict[str, Any]:
    """A page of a run's op index: the summaries of the ``limit`` op records after label
    ``after`` (from the first when None), and ``next``, the ``after`` of the following
    page (None on the last). Only the page's records are parsed."""
    if after is not None:
        start = label_key(after)
        entries = [entry for entry in entries if label_key(entry.label) > start]
    page = entries[:limit]
    ops = []
    for entry in page:
        record = entry.record()
        if record is not None:
            ops.append(op_summary(entry.label, record))
    return {"ops": ops, "next": page[-1].label if len(entries) > limit else None}


def check_records_limit(limit: int) -> None:
    """Refuse a page of one node's records longer than ``MAX_RECORDS`` (422)."""
    if limit > MAX_RECORDS:
        raise ApiError(
            422,
            "invalid_request",
            f"?limit: at most {MAX_RECORDS} records of one node",
            diagnostics=[
                {
                    "code": "invalid-request",
                    "severity": "error",
                    "message": f"at most {MAX_RECORDS} with node",
                    "pointer": "?limit",
                }
            ],
        )


def node_records(
    entries: list[OpEntry], graph: Mapping[str, Any], node: str, limit: int
) -> dict[str, Any]:
    """The last ``limit`` op records of ``node`` (the run's ``graph`` says which ops are
    its), with how many it has."""
    ids = {op_id for op_id, entry in graph["ops"].items() if entry["node"] == node}
    mine = {safe_name(op_id) for op_id in ids}
    chosen = [entry for entry in entries if entry.name in mine]
    if any(safe_name(op_id) in mine for op_id in graph["ops"] if op_id not in ids):
        # another node's op has the same file-safe name (`a"b`, `a_b`): the records say whose
        chosen = [e for e in chosen if (r := e.record()) is not None and r.get("op_id") in ids]
    records = []
    for entry in chosen[-limit:]:
        record = entry.record()
        if record is not None:
            records.append({"label": entry.label, **record})
    return {"node": node, "total": len(chosen), "records": records}


def op_summary(label: str, record: Mapping[str, Any]) -> dict[str, Any]:
    attempts = record.get("attempts")
    error = record.get("error")
    return {
        "label": label,
        "op_id": record.get("op_id"),
        "node_id": record.get("node_id"),
        "kind": record.get("kind"),
        "branch": record.get("branch"),
        "port": record.get("port"),
        "duration_ms": record.get("duration_ms"),
        "attempts": len(attempts) if isinstance(attempts, list) else 0,
        "error": error.get("category") if isinstance(error, Mapping) else None,
    }

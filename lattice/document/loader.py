"""Read a workflow document from a file or a dict, collecting every structural problem.

Handles the shapes found in real cc-wf-studio files: wrapped samples
(``{"meta": ..., "workflow": {...}}``), unknown top-level keys (kept, ignored),
missing ``connections`` and per-item mistakes (reported, item skipped).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

import lattice.document.limits as document_limits
from lattice.document.limits import (
    MAX_JSON_DEPTH,
    check_json_value,
    node_id_at,
    pointer_join,
    text_depth_position,
)
from lattice.document.models import Connection, Node, SubAgentFlow, Workflow
from lattice.errors import Diagnostic, DocumentError

M = TypeVar("M", bound=BaseModel)

__all__ = ["load_workflow", "parse_workflow", "pointer_join", "read_json_file"]


def pydantic_diagnostics(
    exc: ValidationError, *, pointer: str, node_id: str | None = None, code: str
) -> list[Diagnostic]:
    """Turn every error of a pydantic ValidationError into a located Diagnostic."""
    out = []
    for err in exc.errors(include_url=False):
        where = pointer_join(pointer, *[p for p in err["loc"] if isinstance(p, str | int)])
        out.append(Diagnostic(code, err["msg"], node_id=node_id, pointer=where))
    return out


def read_json_file(path: Path, *, max_bytes: int | None = None) -> Any:
    """Parse a JSON file; unreadable, oversized or malformed files raise DocumentError
    with a location.

    At most ``max_bytes + 1`` bytes are read (a device or a growing file cannot exhaust
    memory; ``max_bytes`` defaults to MAX_DOCUMENT_BYTES); nesting too deep for the
    parser is reported with its line and column.
    """
    if max_bytes is None:
        max_bytes = document_limits.MAX_DOCUMENT_BYTES
    try:
        with path.open("rb") as handle:
            raw = handle.read(max_bytes + 1)
        if len(raw) > max_bytes:
            raise DocumentError(
                [
                    Diagnostic(
                        "document-too-large",
                        f"{path} is larger than {max_bytes:,} bytes, the largest document "
                        "Lattice reads",
                    )
                ],
                source=str(path),
            )
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise DocumentError(
            [Diagnostic("file-unreadable", f"cannot read {path}: {reason}")], source=str(path)
        ) from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        diag = Diagnostic(
            "invalid-json", f"not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        )
        raise DocumentError([diag], source=str(path)) from exc
    except RecursionError:
        where = text_depth_position(text)
        at = f" (line {where[0]}, column {where[1]})" if where else ""
        diag = Diagnostic(
            "document-too-deep",
            f"objects and arrays are nested more than {MAX_JSON_DEPTH} levels deep{at}",
        )
        raise DocumentError([diag], source=str(path)) from None
    except ValueError as exc:  # e.g. an integer literal past Python's digit limit
        diag = Diagnostic("invalid-json", f"not valid JSON: {exc}")
        raise DocumentError([diag], source=str(path)) from exc


def _validate_items(
    model: type[M], raw: Any, pointer: str, diagnostics: list[Diagnostic], code: str
) -> list[M]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        diagnostics.append(Diagnostic(code, "must be a list", pointer=pointer))
        return []
    items: list[M] = []
    for index, item in enumerate(raw):
        item_pointer = pointer_join(pointer, index)
        node_id = (
            item.get("id") if isinstance(item, dict) and isinstance(item.get("id"), str) else None
        )
        try:
            validated = model.model_validate(item)
            if hasattr(validated, "_pointer"):
                validated._pointer = item_pointer
            items.append(validated)
        except ValidationError as exc:
            diagnostics.extend(
                pydantic_diagnostics(exc, pointer=item_pointer, node_id=node_id, code=code)
            )
    return items


def _share_ids(nodes: list[Node], connections: list[Connection]) -> None:
    """Give each node id a string of its own, the ids made one after another, and let
    connections name their nodes with those same strings.

    Every pass of lowering looks nodes up by id in dicts: on a large document the ids
    as parsed lie spread over the whole heap (each among its node's data), and hashing
    one, or comparing a connection's copy with it, missed the CPU's caches; made
    together they fill a few pages, and one object each lets a lookup compare
    identities. The values do not change."""
    ids: dict[str, str] = {}
    for node in nodes:
        if node.id not in ids:
            ids[node.id] = node.id[:1] + node.id[1:]  # a new string (ids are not empty)
    for node in nodes:
        node.__dict__["id"] = ids[node.id]  # the same value: no validation to redo
    for conn in connections:
        fields = conn.__dict__
        fields["source"] = ids.get(conn.source, conn.source)
        fields["target"] = ids.get(conn.target, conn.target)


def parse_workflow(raw: Any) -> tuple[Workflow | None, list[Diagnostic]]:
    """Build a Workflow from parsed JSON, returning it with every structural diagnostic.

    The workflow is None when the envelope itself is unusable or the value breaks a
    document limit (depth, numbers, strings; see ``lattice.document.limits``).
    """
    if isinstance(raw, Mapping) and not isinstance(raw, dict):
        raw = dict(raw)
    problems = check_json_value(raw)
    if problems:
        return None, [replace(d, node_id=node_id_at(raw, d.pointer)) for d in problems]
    diagnostics: list[Diagnostic] = []
    base = ""
    if isinstance(raw, Mapping) and isinstance(raw.get("workflow"), Mapping) and "nodes" not in raw:
        raw, base = raw["workflow"], "/workflow"
    if not isinstance(raw, Mapping):
        return None, [Diagnostic("invalid-document", "a workflow document is a JSON object")]
    if "nodes" not in raw:
        diagnostics.append(
            Diagnostic("invalid-document", "the document has no 'nodes' list", pointer=base or "/")
        )
    links = "connections"
    if "edges" in raw and "connections" not in raw:
        links = "edges"  # read as connections, so that what follows is judged as if renamed
        diagnostics.append(
            Diagnostic(
                "invalid-document",
                "the document has 'edges' but no 'connections': Lattice reads the links "
                "between nodes from 'connections' only; rename 'edges' to 'connections' "
                '(each one {"from": node id, "to": node id, "fromPort": port})',
                pointer=pointer_join(base, "edges"),
            )
        )
    envelope = {k: v for k, v in raw.items() if k not in ("nodes", "connections", "subAgentFlows")}
    try:
        workflow = Workflow.model_validate(envelope)
    except ValidationError as exc:
        diagnostics.extend(pydantic_diagnostics(exc, pointer=base, code="invalid-document"))
        workflow = Workflow()
    workflow.pointer_base = base
    workflow.nodes = _validate_items(
        Node, raw.get("nodes"), pointer_join(base, "nodes"), diagnostics, "invalid-node"
    )
    workflow.connections = _validate_items(
        Connection,
        raw.get(links),
        pointer_join(base, links),
        diagnostics,
        "invalid-connection",
    )
    _share_ids(workflow.nodes, workflow.connections)
    workflow.sub_agent_flows = _validate_items(
        SubAgentFlow,
        raw.get("subAgentFlows"),
        pointer_join(base, "subAgentFlows"),
        diagnostics,
        "invalid-subflow",
    )
    for k, flow in enumerate(workflow.sub_agent_flows):
        flow_pointer = pointer_join(base, "subAgentFlows", k)
        for j, inner in enumerate(flow.nodes):
            inner._pointer = pointer_join(flow_pointer, "nodes", j)
        for j, conn in enumerate(flow.connections):
            conn._pointer = pointer_join(flow_pointer, "connections", j)
    return workflow, diagnostics


def load_workflow(source: str | Path | Mapping[str, Any]) -> Workflow:
    """Load a workflow document from a path or an already-parsed dict.

    Raises DocumentError (a LatticeUserError) listing every structural problem.
    Semantic checks (ports, references, schemas) happen when lowering.
    """
    label = None
    if isinstance(source, Mapping):
        raw: Any = source
    else:
        path = Path(source)
        label = str(path)
        raw = read_json_file(path)
    workflow, diagnostics = parse_workflow(raw)
    if workflow is None or any(d.is_error for d in diagnostics):
        raise DocumentError(diagnostics, source=label)
    return workflow

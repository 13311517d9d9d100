"""Read a workflow document from a file or a dict, collecting every structural problem.

Handles the shapes found in real cc-wf-studio files: wrapped samples
(``{"meta": ..., "workflow": {...}}``), unknown top-level keys (kept, ignored),
missing ``connections`` and per-item mistakes (reported, item skipped).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from lattice.document.models import Connection, Node, SubAgentFlow, Workflow
from lattice.errors import Diagnostic, DocumentError

M = TypeVar("M", bound=BaseModel)


def pointer_join(base: str, *parts: str | int) -> str:
    """Append ``parts`` to JSON pointer ``base``, escaping ``~`` and ``/``."""
    out = base
    for part in parts:
        out += "/" + str(part).replace("~", "~0").replace("/", "~1")
    return out


def pydantic_diagnostics(
    exc: ValidationError, *, pointer: str, node_id: str | None = None, code: str
) -> list[Diagnostic]:
    """Turn every error of a pydantic ValidationError into a located Diagnostic."""
    out = []
    for err in exc.errors(include_url=False):
        where = pointer_join(pointer, *[p for p in err["loc"] if isinstance(p, str | int)])
        out.append(Diagnostic(code, err["msg"], node_id=node_id, pointer=where))
    return out


def read_json_file(path: Path) -> Any:
    """Parse a JSON file; unreadable or malformed files raise DocumentError with a location."""
    try:
        text = path.read_text(encoding="utf-8")
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


def parse_workflow(raw: Any) -> tuple[Workflow | None, list[Diagnostic]]:
    """Build a Workflow from parsed JSON, returning it with every structural diagnostic.

    The workflow is None only when the envelope itself is unusable.
    """
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
        raw.get("connections"),
        pointer_join(base, "connections"),
        diagnostics,
        "invalid-connection",
    )
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

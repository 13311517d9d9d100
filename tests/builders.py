"""Small builders of workflow documents (plain dicts) and helpers to inspect lowering results."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from lattice.errors import Diagnostic
from lattice.ir import ExecIR, execir_json_schema, ir_to_dict
from lattice.lower import LoweringResult
from lattice.runs.oplog import op_entries, read_op_records

_IR_VALIDATOR: jsonschema.Draft202012Validator | None = None


def node(node_id: str, node_type: str, **data: Any) -> dict[str, Any]:
    """A cc-wf-studio node ``{id, type, name, position, data}``."""
    return {
        "id": node_id,
        "type": node_type,
        "name": node_id,
        "position": {"x": 0, "y": 0},
        "data": data,
    }


def conn(
    source: str, target: str, port: str | None = None, *, cid: str | None = None
) -> dict[str, Any]:
    """A connection ``source → target`` (``fromPort`` only when ``port`` is given)."""
    out: dict[str, Any] = {"id": cid or f"{source}->{target}", "from": source, "to": target}
    if port is not None:
        out["fromPort"] = port
    return out


def workflow(
    nodes: Sequence[dict[str, Any]],
    connections: Sequence[dict[str, Any]],
    **extra: Any,
) -> dict[str, Any]:
    """A whole document from explicit nodes and connections."""
    return {
        "id": "wf",
        "name": "test workflow",
        "version": "1.0.0",
        "nodes": list(nodes),
        "connections": list(connections),
        **extra,
    }


def chain(
    *middle: dict[str, Any],
    extra_nodes: Iterable[dict[str, Any]] = (),
    extra_connections: Iterable[dict[str, Any]] = (),
    **extra: Any,
) -> dict[str, Any]:
    """``start → middle[0] → … → end`` (connections ``c0``, ``c1``, … in that order).

    Nodes are ``start`` (index 0), the middle nodes (indexes 1..n) and ``end``
    (index n+1), then ``extra_nodes``; extra connections come after the chain's.
    """
    sequence = [node("start", "start"), *middle, node("end", "end")]
    ids = [n["id"] for n in sequence]
    connections = [conn(a, b, cid=f"c{i}") for i, (a, b) in enumerate(itertools.pairwise(ids))]
    return workflow([*sequence, *extra_nodes], [*connections, *extra_connections], **extra)


def recursive_subflow() -> dict[str, Any]:
    """``start → call → end`` where ``call`` runs sub-flow ``loop``, which calls itself from
    its node ``again`` (``/subAgentFlows/0/nodes/1``)."""
    flow = {
        "id": "loop",
        "name": "loop",
        "nodes": [
            node("fs", "start"),
            node("again", "subAgentFlow", subAgentFlowId="loop"),
            node("fe", "end"),
        ],
        "connections": [conn("fs", "again"), conn("again", "fe")],
    }
    return chain(node("call", "subAgentFlow", subAgentFlowId="loop"), subAgentFlows=[flow])


def wrap(doc: dict[str, Any]) -> dict[str, Any]:
    """The ``{"meta", "workflow"}`` shape of cc-wf-studio's shipped samples."""
    return {"meta": {"title": "wrapped sample", "version": 1}, "workflow": copy.deepcopy(doc)}


def find(result: LoweringResult, code: str) -> list[Diagnostic]:
    return [d for d in result.diagnostics if d.code == code]


def only(result: LoweringResult, code: str) -> Diagnostic:
    """The one diagnostic with ``code`` (fails listing every diagnostic otherwise)."""
    found = find(result, code)
    assert len(found) == 1, f"expected one {code!r}, got: {describe(result.diagnostics)}"
    return found[0]


def describe(diagnostics: Iterable[Diagnostic]) -> str:
    return "\n".join(d.format() for d in diagnostics) or "(no diagnostics)"


def validate_ir(ir: ExecIR) -> dict[str, Any]:
    """Check ``ir`` against the JSON Schema of ExecIR and its internal links; return its dict."""
    global _IR_VALIDATOR
    if _IR_VALIDATOR is None:
        _IR_VALIDATOR = jsonschema.Draft202012Validator(execir_json_schema())
    data = ir_to_dict(ir)
    errors = sorted(_IR_VALIDATOR.iter_errors(data), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)
    assert data["entry"] in data["ops"]
    for op_id, op in data["ops"].items():
        assert op["id"] == op_id
        for edge in op["next"]:
            assert edge["to"] in data["ops"], f"{op_id} -> {edge['to']} leads nowhere"
    return data


def lower_ok(doc: Any, **kwargs: Any) -> ExecIR:
    """Lower ``doc``; fail (listing diagnostics) unless there are no errors. Validates the IR."""
    from lattice.lower import lower_document

    result = lower_document(doc, **kwargs)
    assert not result.errors, describe(result.diagnostics)
    assert result.ir is not None
    validate_ir(result.ir)
    return result.ir


def short_name(path: Path) -> str:
    """A readable test id for a corpus file."""
    return path.stem.removeprefix("breaking-brake__cc-wf-studio__")


def corpus_params(files: Sequence[Path], corpus_dir: Path) -> list[Any]:
    """One pytest param per corpus file, or one skipped param saying the corpus is missing."""
    if not files:
        reason = f"corpus of real documents not found: {corpus_dir} is missing or has no *.json"
        return [pytest.param(None, id="corpus-missing", marks=pytest.mark.skip(reason=reason))]
    return [pytest.param(path, id=short_name(path)) for path in files]


def approval(inputs: dict[str, Any] | None = None) -> dict[str, Any]:
    """A question between two LLM nodes (``inputs``: the start node's inputs schema; by
    default one required, non-empty ``topic``)."""
    return workflow(
        [
            node(
                "start",
                "start",
                inputs=inputs
                or {
                    "type": "object",
                    "properties": {"topic": {"type": "string", "minLength": 1}},
                    "required": ["topic"],
                    "additionalProperties": False,
                },
            ),
            node("draft", "prompt", prompt="Draft a note about {{ $in.topic }}"),
            node(
                "approve",
                "askUserQuestion",
                questionText="Send the note?",
                options=[{"label": "Send"}, {"label": "Discard"}],
            ),
            node("polish", "prompt", prompt="Polish: {{ $vars.draft.result }}"),
            node("end", "end"),
            node("discarded", "end", output="discarded"),
        ],
        [
            conn("start", "draft"),
            conn("draft", "approve"),
            conn("approve", "polish", "branch-0"),
            conn("approve", "discarded", "branch-1"),
            conn("polish", "end"),
        ],
        id="approval",
    )


def op_records(folder: Path | None, op_id: str | None = None) -> list[dict[str, Any]]:
    """The op records of a run folder in op order (``lattice.runs.oplog``): all, or those
    of op ``op_id``."""
    assert folder is not None
    records = read_op_records(folder)
    return [r for r in records if op_id is None or r.get("op_id") == op_id]


def op_record(folder: Path | None, op_id: str) -> dict[str, Any]:
    """The one record of op ``op_id`` in a run folder."""
    (record,) = op_records(folder, op_id)
    return record


def op_names(folder: Path | None) -> list[str]:
    """``<label>-<op>`` of each op record of a run folder, in op order (what their files
    were named before ``ops.jsonl``)."""
    assert folder is not None
    return [f"{entry.label}-{entry.name}" for entry in op_entries(folder)]


def example_args(
    name: str, workspace: Path, runs: Path, *, mock: bool = True, answers: bool = False
) -> list[str]:
    """``lattice run`` of the shipped example ``name`` with its inputs (its mock script
    unless ``mock`` is off, its answers file with ``answers``), every tool granted over
    ``workspace``, its run folders in ``runs``."""
    from tests.conftest import EXAMPLES

    args = ["run", str(EXAMPLES / f"{name}.json")]
    if mock:
        args += ["--mock", str(EXAMPLES / f"{name}.mock.json")]
    args += ["--inputs", str(EXAMPLES / f"{name}.inputs.json")]
    if answers:
        args += ["--answers", str(EXAMPLES / f"{name}.answers.json")]
    return [
        *args,
        *("--workspace", str(workspace), "--allow", "read,write,shell", "--runs-dir", str(runs)),
    ]

"""``lattice runs export RUN --temporal HOST:PORT``: a run kept by Temporal as a run folder."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from temporalio.client import Client

from lattice.durable.temporal.client import check_key
from lattice.errors import ErrorType, LatticeUserError
from lattice.files import atomic_write_text
from lattice.runs.oplog import OPS_FILE, op_line, record_label
from lattice.runs.store import file_text


async def export_run(client: Client, run_id: str, folder: Path) -> Path:
    """Write run ``run_id``'s folder (events.jsonl, ops.jsonl, state_initial.json,
    state_final.json, result.json, execir.json, input.json, checkpoint.json, and
    workflow.json when the run was started with its document) under
    ``folder``, read from its workflow: ``lattice runs show`` and the inspector read it as
    any run folder. The folder must not exist yet."""
    await check_key(client, run_id)
    handle = client.get_workflow_handle(run_id)
    try:
        record: dict[str, Any] = await handle.query("record")
    except LatticeUserError:
        raise  # a key that does not read the run says so itself
    except Exception as exc:
        raise LatticeUserError(
            f"cannot read run {run_id!r} from Temporal: {exc}", error_type=ErrorType.TEMPORAL_ERROR
        ) from exc
    if folder.exists():
        raise LatticeUserError(f"{folder} exists; export into a new folder")
    folder.mkdir(parents=True)
    lines = "".join(
        json.dumps(event, ensure_ascii=False, default=str) + "\n" for event in record["events"]
    )
    atomic_write_text(folder / "events.jsonl", lines)
    atomic_write_text(folder / OPS_FILE, "".join(_op_lines(record["ops"])))
    atomic_write_text(folder / "execir.json", file_text(record["execir"]))
    if record.get("document") is not None:
        atomic_write_text(folder / "workflow.json", file_text(record["document"]))
    atomic_write_text(folder / "input.json", file_text(record["inputs"]))
    atomic_write_text(folder / "state_initial.json", file_text(record["state_initial"]))
    atomic_write_text(folder / "state_final.json", file_text(record["state"]))
    result = record["result"] or _unfinished(client, run_id, record)
    atomic_write_text(
        folder / "result.json",
        file_text({**result, "run_id": run_id, "workflow": record["workflow"]["id"]}),
    )
    atomic_write_text(
        folder / "checkpoint.json",
        file_text(
            {
                "run_id": run_id,
                "status": result["status"] if record["question"] is None else "halted",
                "engine": "temporal",
                "meta": {"workflow": record["workflow"]["id"]},
                **(
                    {"parent": record["parent"], "start_op": record["parent"]["op"]}
                    if record.get("parent")
                    else {}
                ),
            }
        ),
    )
    return folder


def _op_lines(ops: list[dict[str, Any]]) -> Iterator[str]:
    """The lines of ``ops.jsonl`` for the op records of a run, as a local run writes them."""
    for index, op in enumerate(ops):
        text = json.dumps(op, ensure_ascii=False, separators=(",", ":"), default=str)
        yield op_line(record_label(op.get("seq"), index), op["op_id"], text)


def _unfinished(client: Client, run_id: str, record: dict[str, Any]) -> dict[str, Any]:
    """The result of a run still going, waiting or stopped: its usage so far and, while
    it waits, the question as a local halted run's failure report, with the command that
    answers it (stopped: the one that resumes it)."""
    usage = record.get("usage")
    question = record["question"]
    if record.get("stopped"):  # stopped at an op boundary: resumable
        address = client.service_client.config.target_host
        failure = {
            **record["stopped"],
            "recovery_action": f"lattice resume {run_id} --temporal {address}",
        }
        return {"status": "interrupted", "usage": usage, "failure": failure}
    if question is None:
        return {"status": "running", "usage": usage}
    node_id = question.get("node_id")
    address = client.service_client.config.target_host
    failure = {
        "phase": "run",
        "run_id": run_id,
        "op_id": question.get("op_id"),
        "node_id": node_id,
        "category": question.get("reason", "waiting_for_answer"),
        "summary": question.get("summary", ""),
        "details": question.get("details") or {},
        "recovery_action": f"lattice resume {run_id} --temporal {address} --answer {node_id}=<answer>",
    }
    return {"status": "waiting", "usage": usage, "failure": failure}

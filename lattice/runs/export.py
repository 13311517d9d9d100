"""Training data from run folders: one example per accepted LLM op (``lattice export sft``).

Two formats (docs/export.md):

- ``chat`` (default): ``{"messages": [system?, user, assistant], "meta": {...}}``. The system
  and user messages are the op's *original* prompt (its first attempt), never a repair
  packet; the assistant message is the op's final, contract-valid output (JSON
  re-serialised from the validated value for schema ops, the text for free-text ops).
- ``validator``: one labelled example per accepted ValidatorDecision (an output with
  ``action`` and ``handoff_brief``): ``{"inputs", "messages", "label", "decision", "meta"}``,
  where ``inputs`` are the state values the validator read and ``label`` is its action.

An op is *accepted* when its record has an output and its last attempt validated. By
default only ops valid at their first answer are exported; ``include_repaired`` adds ops
that needed a repair or an escalation (still with the original prompt). Provider retries
(rate limits, timeouts) resend the same prompt and do not count as repairs.

Run folders are redacted when they are written; ``redact`` masks again whatever secrets
are known at export time, so an export never carries more than the folder did.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from lattice.errors import LatticeUserError
from lattice.runs.oplog import OPS_DIR, OPS_FILE, op_entries

Format = Literal["chat", "validator"]
FORMATS: tuple[Format, ...] = ("chat", "validator")
VALIDATOR_ACTIONS = ("accept", "retry", "reroute", "escalate", "abort")
_REPAIR_KINDS = ("repair", "escalation")


@dataclass
class ExportStats:
    """What an export read and why it left things out."""

    runs: int = 0
    llm_ops: int = 0
    examples: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    """Reason → count: ``run_not_completed``, ``op_failed``, ``repaired``, ``node_filtered``,
    ``not_a_validator_decision``."""

    def skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1

    def summary(self) -> str:
        skipped = ", ".join(f"{count} {reason}" for reason, count in sorted(self.skipped.items()))
        return f"{self.examples} example(s) from {self.llm_ops} LLM op(s) in {self.runs} run(s)" + (
            f"; skipped: {skipped}" if skipped else ""
        )


def is_run_folder(path: Path) -> bool:
    """A folder with op records (``ops.jsonl``, or an older folder's ``ops/``) and what
    ran: ``execir.json``, or a journal (whose first line holds its copy when a power cut
    lost the file)."""
    return (
        path.is_dir()
        and ((path / OPS_FILE).is_file() or (path / OPS_DIR).is_dir())
        and ((path / "execir.json").is_file() or (path / "journal.jsonl").is_file())
    )


def run_folders(paths: Iterable[Path]) -> list[Path]:
    """Each path as a run folder, or the run folders directly inside it (a runs directory)."""
    folders: list[Path] = []
    for path in paths:
        if is_run_folder(path):
            folders.append(path)
        elif path.is_dir() and (children := sorted(p for p in path.iterdir() if is_run_folder(p))):
            folders.extend(children)
        else:
            raise LatticeUserError(
                f"{path} is not a run folder (no {OPS_FILE} and execir.json) nor a folder of runs"
            )
    return folders


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise LatticeUserError(f"cannot read {path}: {exc}") from exc


def _run_info(folder: Path) -> dict[str, Any]:
    result = folder / "result.json"
    data = _read_json(result) if result.is_file() else {}
    return {
        "run_id": data.get("run_id") or folder.name,
        "status": data.get("status", "unknown"),
        "workflow": data.get("workflow"),
    }


def _op_records(folder: Path) -> Iterator[dict[str, Any]]:
    for entry in op_entries(folder):
        record = entry.record()
        if record is None:
            raise LatticeUserError(
                f"{folder}: cannot read the record of op {entry.label}-{entry.name} (not JSON)"
            )
        if record.get("kind") == "LLM_WRITE":
            yield record


def _accepted(record: dict[str, Any]) -> bool:
    attempts = record.get("attempts") or []
    return (
        "output" in record
        and "error" not in record
        and bool(attempts)
        and bool(attempts[-1].get("ok"))
    )


def _repaired(record: dict[str, Any]) -> bool:
    return any(a.get("kind") in _REPAIR_KINDS for a in record.get("attempts") or [])


def _assistant_text(output: Any) -> str:
    return output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)


def _original_messages(record: dict[str, Any]) -> list[dict[str, str]]:
    first = record["attempts"][0]
    return [
        {"role": m["role"], "content": m["content"]}
        for m in first.get("messages") or []
        if m.get("role") in ("system", "user")
    ]


def _meta(run: dict[str, Any], record: dict[str, Any]) -> dict[str, Any]:
    attempts = record["attempts"]
    final = attempts[-1]
    return {
        "run_id": run["run_id"],
        "workflow": run["workflow"],
        "node_id": record.get("node_id"),
        "op_id": record.get("op_id"),
        "seq": record.get("seq"),
        "model": final.get("model"),
        "model_class": final.get("model_class"),
        "attempts": len(attempts),
        "repaired": _repaired(record),
        "prompt_hash": attempts[0].get("prompt_hash"),
    }


def is_validator_decision(output: Any) -> bool:
    return (
        isinstance(output, dict)
        and output.get("action") in VALIDATOR_ACTIONS
        and isinstance(output.get("handoff_brief"), dict)
    )


def export_examples(
    paths: Sequence[Path],
    *,
    fmt: Format = "chat",
    nodes: Collection[str] = (),
    include_repaired: bool = False,
    only_completed: bool = False,
    stats: ExportStats | None = None,
) -> Iterator[dict[str, Any]]:
    """Examples from the run folders in ``paths`` (or folders of runs), in run and op order."""
    if fmt not in FORMATS:
        raise LatticeUserError(
            f"unknown export format {fmt!r}; choose one of: {', '.join(FORMATS)}"
        )
    stats = stats if stats is not None else ExportStats()
    for folder in run_folders(paths):
        run = _run_info(folder)
        stats.runs += 1
        if only_completed and run["status"] != "completed":
            stats.skip("run_not_completed")
            continue
        for record in _op_records(folder):
            stats.llm_ops += 1
            if nodes and record.get("node_id") not in nodes:
                stats.skip("node_filtered")
            elif not _accepted(record):
                stats.skip("op_failed")
            elif fmt == "validator" and not is_validator_decision(record["output"]):
                stats.skip("not_a_validator_decision")
            elif _repaired(record) and not include_repaired:
                stats.skip("repaired")
            else:
                stats.examples += 1
                yield _example(fmt, run, record)


def _example(fmt: Format, run: dict[str, Any], record: dict[str, Any]) -> dict[str, Any]:
    messages = _original_messages(record)
    output = record["output"]
    if fmt == "validator":
        return {
            "inputs": record.get("inputs") or {},
            "messages": messages,
            "label": output["action"],
            "decision": output,
            "meta": _meta(run, record),
        }
    return {
        "messages": [*messages, {"role": "assistant", "content": _assistant_text(output)}],
        "meta": _meta(run, record),
    }


def to_jsonl(
    examples: Iterable[dict[str, Any]], *, redact: Callable[[str], str] | None = None
) -> str:
    """One compact JSON object a line (non-ASCII kept), each line passed through ``redact``."""
    mask = redact or (lambda text: text)
    return "".join(
        mask(json.dumps(example, ensure_ascii=False, separators=(",", ":"))) + "\n"
        for example in examples
    )

"""Readable summaries of run folders for ``lattice runs list`` and ``lattice runs show``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lattice.errors import LatticeUserError
from lattice.runs.checkpoint import status_of


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def list_runs(root: Path) -> str:
    """One line per run folder under ``root``, newest first."""
    if not root.is_dir():
        return f"no runs under {root}\n"
    rows = []
    for folder in sorted((p for p in root.iterdir() if p.is_dir()), reverse=True):
        result = _load(folder / "result.json") or {}
        checkpoint = _load(folder / "checkpoint.json")
        usage = result.get("usage") or {}
        failure = result.get("failure") or {}
        status = status_of(checkpoint) if checkpoint is not None else result.get("status", "?")
        if status in ("running", "interrupted"):
            failure = {}
        extra = f"  [{failure.get('category')}] {failure.get('node_id')}" if failure else ""
        rows.append(
            f"{folder.name}  {status:<9}  {result.get('workflow', '?'):<30}  "
            f"{usage.get('calls', 0):>3} calls{extra}"
        )
    return ("\n".join(rows) + "\n") if rows else f"no runs under {root}\n"


def show_run(folder: Path) -> str:
    """Ops in order with ports (branch choices), durations and model calls, then the outcome."""
    if not (folder / "events.jsonl").is_file():
        raise LatticeUserError(f"{folder} is not a run folder (no events.jsonl)")
    result = _load(folder / "result.json") or {}
    checkpoint = _load(folder / "checkpoint.json")
    status = status_of(checkpoint) if checkpoint is not None else result.get("status", "?")
    lines = [f"run {folder.name}: {status} ({result.get('workflow', '?')})"]
    for record_path in sorted((folder / "ops").glob("*.json")):
        record = _load(record_path) or {}
        attempts = record.get("attempts") or []
        calls = f"  {len(attempts)} call(s)" if attempts else ""
        transcript = record.get("transcript")
        if isinstance(transcript, dict):  # an agent: its turns (requests) and tool calls
            turns = len(transcript.get("turns") or [])
            calls = f"  {turns} turn(s), {transcript.get('tool_calls', 0)} tool call(s)"
        port = record.get("port")
        branch = f"  → {port}" if port not in (None, "", "default") else ""
        error = record.get("error")
        failed = ""
        if error:
            kind = error.get("error_type") or error.get("category")
            failed = f"  ✗ {kind}: {(error.get('message') or error.get('summary') or '')[:100]}"
        seq = str(record.get("seq", 0))
        depth = seq.count(".") // 2  # 0005.2.0003: op 3 of branch 2 of the fork at op 5
        where = f"{'  ' * depth}{'↳ ' if depth else ''}{seq.rsplit('.', 1)[-1] if depth else seq}"
        in_branch = f"  [branch {record['branch']}]" if record.get("branch") else ""
        lines.append(
            f"  {where:>6}  {record.get('kind', '?'):<10} {record.get('op_id', '?'):<40}"
            f" {record.get('duration_ms', 0):>9.2f} ms{calls}{branch}{failed}{in_branch}"
        )
    usage = result.get("usage") or {}
    lines.append(
        f"usage: {usage.get('calls', 0)} calls, {usage.get('input_tokens', 0)} input + "
        f"{usage.get('output_tokens', 0)} output tokens"
    )
    changes = result.get("changes") or []
    if changes:
        verb = "changed" if all(c.get("applied", True) for c in changes) else "changed (or patched)"
        lines.append(f"files agents {verb}:")
        for change in changes:
            state = "" if change.get("applied", True) else "  (patch only, not applied)"
            lines.append(
                f"  {change.get('path')}  by {change.get('op')}  diff: {change.get('diff_file')}"
                f"{state}"
            )
    failure = result.get("failure")
    if failure:
        lines.append(
            f"failure [{failure.get('category')}] at {failure.get('node_id')}: {failure.get('summary')}"
        )
        lines.append(f"next: {failure.get('recovery_action')}")
    elif result.get("status") == "completed":
        lines.append("output: " + json.dumps(result.get("output"), ensure_ascii=False)[:500])
    return "\n".join(lines) + "\n"

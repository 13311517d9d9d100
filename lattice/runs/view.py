"""Readable summaries of run folders for ``lattice runs list`` and ``lattice runs show``."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from lattice.errors import LatticeUserError
from lattice.runs.checkpoint import load_checkpoint, status_of
from lattice.runs.oplog import read_op_records


def terminal_text(text: str, indent: str = "  ") -> str:
    """``text`` as a terminal should show it: its lines after the first indented by
    ``indent`` (blank ones left empty), and every control character but a tab written
    as an escape (``\\x1b``): a run's text (a question, a model's answer) never moves
    the cursor or recolours the terminal."""
    lines = ["".join(_visible(c) for c in line) for line in text.split("\n")]
    return "\n".join([lines[0], *(indent + line if line.strip() else "" for line in lines[1:])])


def _visible(char: str) -> str:
    if char == "\t" or char.isprintable():
        return char
    return repr(char)[1:-1]


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def run_folders(root: Path) -> list[Path]:
    """The run folders under ``root``, newest first (a run id starts with its start time;
    hidden folders, such as the webhooks' ``.deliveries`` and the schedules'
    ``.schedules``, are not runs)."""
    if not root.is_dir():
        return []
    folders = (p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    return sorted(folders, reverse=True)


def version_ref(version: Any) -> str | None:
    """A run's ``meta.workflow_version`` as ``NAME@VERSION`` (None when it has none)."""
    if not isinstance(version, dict) or "name" not in version or "version" not in version:
        return None
    return f"{version['name']}@{version['version']}"


def of_workflow(ref: str, *, names: tuple[Any, ...], version: Any) -> bool:
    """Whether a run is of workflow ``ref``: ``NAME`` (any of ``names``: the workflow's
    id, name or file, or its deployed version's name) or ``NAME@VERSION`` (that deployed
    version only; ``NAME@latest`` is not a fixed version and is refused upstream)."""
    name, at, number = ref.rpartition("@")
    if not at:
        kept = version.get("name") if isinstance(version, dict) else None
        return ref in (*names, kept)
    return version_ref(version) == f"{name}@{number}"


def list_runs(
    root: Path, limit: int | None = None, *, waiting: bool = False, workflow: str | None = None
) -> str:
    """One line per run folder under ``root``, newest first (the ``limit`` newest; all
    of them when it is None); with ``waiting``, only the runs halted until a person
    answers, each followed by what it waits for; with ``workflow`` (``NAME`` or
    ``NAME@VERSION``), only that workflow's runs (``of_workflow``)."""
    of = f"of {workflow} " if workflow else ""
    nothing = f"no runs {of}{'waiting for a person ' if waiting else ''}under {root}\n"
    if not root.is_dir():
        return nothing
    rows = []
    listed = 0
    filtered = waiting or workflow is not None
    for folder in run_folders(root) if filtered else run_folders(root)[:limit]:
        if limit is not None and listed >= limit:
            break
        result = _load(folder / "result.json") or {}
        checkpoint = load_checkpoint(folder)
        usage = result.get("usage") or {}
        failure = result.get("failure") or {}
        status = status_of(checkpoint) if checkpoint is not None else result.get("status", "?")
        if status in ("running", "interrupted"):
            failure = {}
        if waiting and status != "halted":
            continue
        meta = (checkpoint or {}).get("meta") or {}
        version = meta.get("workflow_version") or result.get("workflow_version")
        names = (result.get("workflow"), meta.get("workflow_name"))
        if workflow is not None and not of_workflow(workflow, names=names, version=version):
            continue
        extra = f"  [{failure.get('category')}] {failure.get('node_id')}" if failure else ""
        listed += 1
        shown = version_ref(version) or result.get("workflow", "?")
        rows.append(
            f"{folder.name}  {status:<9}  {shown:<30}  {usage.get('calls', 0):>3} calls{extra}"
        )
        if waiting:
            rows.extend(f"    {line}" for line in waits_for(failure))
    return ("\n".join(rows) + "\n") if rows else nothing


def approvals_waiting(folder: Path) -> list[str] | None:
    """The ids of the tool calls a halted run waits to have approved (empty when it waits
    for a question's answer); None when the run is not halted."""
    checkpoint = load_checkpoint(folder)
    if checkpoint is None or status_of(checkpoint) != "halted":
        return None
    failure = (_load(folder / "result.json") or {}).get("failure") or {}
    approvals = (failure.get("details") or {}).get("approvals")
    return [str(item.get("id")) for item in approvals] if isinstance(approvals, list) else []


def waits_for(failure: dict[str, Any]) -> list[str]:
    """What a halted run waits for, a line each: the tool calls to approve (their command
    on one line, control characters as escapes), or the question."""
    details = failure.get("details") or {}
    approvals = details.get("approvals")
    if isinstance(approvals, list):
        lines = []
        for item in approvals:
            said = item.get("command") or (item.get("arguments") or {}).get("file_path") or ""
            said = "".join(_visible(c) for c in str(said))  # a newline or escape hides nothing
            lines.append(f"approve {item.get('id')}: {item.get('tool')} {said}".rstrip())
        return lines
    question = details.get("question") or failure.get("summary") or ""
    return [f"answer: {str(question).splitlines()[0] if question else '?'}"]


def count_calls(calls: int, requests: int) -> str:
    """``N model call(s)``, with the requests sent when some went unanswered: a call is
    an answered request, as in the run's usage and ``lattice run``'s summary."""
    text = f"{calls} model call{'' if calls == 1 else 's'}"
    if requests > calls:
        text += f" ({requests} request{'' if requests == 1 else 's'})"
    return text


def _calls(attempts: list[dict[str, Any]]) -> str:
    """An op's model calls, counted as its run's usage counts them."""
    sent = [a for a in attempts if "prompt_hash" in a]
    if not sent:
        return ""
    return "  " + count_calls(sum(1 for a in sent if "model" in a), len(sent))


_SEGMENT_STARTS = ("run_started", "run_resumed")


def _duration(events: Path) -> float | None:
    """Seconds the run ran: from each start or resume to the last event before the next,
    added up (the pause of a halted run until its resume is not counted)."""
    total = 0.0
    first = last = None
    try:
        with events.open("rb") as lines:
            for line in lines:
                try:
                    event = json.loads(line)
                    stamp = datetime.fromisoformat(event["ts"].replace("Z", "+00:00"))
                except (ValueError, KeyError, TypeError, AttributeError):
                    continue
                if first is None or event.get("type") in _SEGMENT_STARTS:
                    if first is not None and last is not None:
                        total += (last - first).total_seconds()
                    first = stamp
                last = stamp
    except OSError:
        return None
    if first is None or last is None:
        return None
    return max(0.0, total + (last - first).total_seconds())


def started_by_text(meta: dict[str, Any]) -> str | None:
    """How a run was started, in words (None for a run that does not say: older ones)."""
    started = meta.get("started_by")
    if not isinstance(started, dict):
        return None
    via = started.get("via")
    if via == "cli":
        return "lattice run"
    if via == "library":
        return "the Python library (Runner)"
    if via == "api":
        return "the HTTP API (POST /v1/runs)"
    if via == "mcp":
        return f"MCP tool {started.get('tool')}"
    if via == "webhook":
        return f"webhook {started.get('trigger')} (delivery {started.get('delivery')})"
    if via == "schedule":
        return f"schedule {started.get('schedule')} (tick {started.get('tick')})"
    return str(via)


# long: the run's report, printed top to bottom
def show_run(folder: Path) -> str:
    """Ops in order with ports (branch choices), durations and model calls, then the outcome."""
    if not (folder / "events.jsonl").is_file():
        raise LatticeUserError(f"{folder} is not a run folder (no events.jsonl)")
    result = _load(folder / "result.json") or {}
    checkpoint = load_checkpoint(folder)
    status = status_of(checkpoint) if checkpoint is not None else result.get("status", "?")
    took = _duration(folder / "events.jsonl")
    took_text = f" in {took:.2f}s" if took is not None else ""
    dead_end = result.get("dead_end") if status == "completed" else None
    if dead_end:
        status = f"completed at a dead end (node {dead_end!r} has no way on; no end node reached)"
    lines = [f"run {folder.name}: {status}{took_text} ({result.get('workflow', '?')})"]
    for record in read_op_records(folder):
        calls = _calls(record.get("attempts") or [])
        transcript = record.get("transcript")
        if isinstance(transcript, dict):  # an agent: its turns (requests) and tool calls
            turns = transcript.get("turns") or []
            refused = sum(
                1 for turn in turns for call in turn.get("tool_calls") or [] if call.get("is_error")
            )
            failed_calls = f" ({refused} answered with an error)" if refused else ""
            calls = (
                f"  {len(turns)} turn(s), {transcript.get('tool_calls', 0)} tool call(s)"
                f"{failed_calls}"
            )
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
        f"usage: {count_calls(usage.get('calls', 0), usage.get('requests', 0))}, "
        f"{usage.get('input_tokens', 0)} input + {usage.get('output_tokens', 0)} output tokens"
    )
    meta = (checkpoint or {}).get("meta") or {}
    started_by = started_by_text(meta)
    if started_by:
        lines.append(terminal_text(f"started by {started_by}"))
    version = meta.get("workflow_version") or result.get("workflow_version")
    ref = version_ref(version)
    if ref is not None and isinstance(version, dict):
        lines.append(terminal_text(f"workflow {ref} (document {version.get('digest')})"))
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
    toolless = result.get("without_tools") or []
    if toolless:
        lines.append(
            f"without tools: {len(toolless)} node(s) Claude Code would give tools ran as one "
            "model call each:"
        )
        for item in toolless:
            words = item.get("words")
            said = f", asks to act: {', '.join(map(repr, words))}" if words else ""
            lines.append(
                terminal_text(f"  {item.get('node')} ({item.get('kind')}{said})  to grant: ")
                + terminal_text(str(item.get("grant")))
            )
    failure = result.get("failure")
    if failure:
        lines.append(
            terminal_text(
                f"failure [{failure.get('category')}] at {failure.get('node_id')}: "
                f"{failure.get('summary')}"
            )
        )
        lines.append(f"next: {failure.get('recovery_action')}")
    elif result.get("status") == "completed":
        lines.append("output: " + json.dumps(result.get("output"), ensure_ascii=False)[:500])
    return "\n".join(lines) + "\n"

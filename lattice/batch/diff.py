"""Comparing two batches (``lattice batch diff OLD NEW``) and two runs (``lattice runs diff
A B``): what changed, as JSON differences a person can read and a program can use.

A JSON difference is a list of ``{"path", "old", "new"}`` (``path`` a JSON pointer;
``old`` or ``new`` missing when the value was added or removed).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lattice.batch.results import read_results
from lattice.batch.rows import id_order
from lattice.errors import LatticeUserError
from lattice.runs.checkpoint import load_checkpoint
from lattice.runs.oplog import read_op_records

_MISSING: Any = object()


def _pointer(path: str, key: Any) -> str:
    return f"{path}/{str(key).replace('~', '~0').replace('/', '~1')}"


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) else a == b


def json_diff(old: Any, new: Any, path: str = "") -> list[dict[str, Any]]:
    """Where ``new`` differs from ``old``: ``[{"path", "old"?, "new"?}, …]`` (``[]``: equal)."""
    if isinstance(old, dict) and isinstance(new, dict):
        changes: list[dict[str, Any]] = []
        for key in [*old, *(k for k in new if k not in old)]:
            changes += json_diff(
                old.get(key, _MISSING), new.get(key, _MISSING), _pointer(path, key)
            )
        return changes
    if isinstance(old, list) and isinstance(new, list):
        changes = []
        for index in range(max(len(old), len(new))):
            changes += json_diff(
                old[index] if index < len(old) else _MISSING,
                new[index] if index < len(new) else _MISSING,
                _pointer(path, index),
            )
        return changes
    if old is _MISSING and new is _MISSING:
        return []
    if old is _MISSING:
        return [{"path": path, "new": new}]
    if new is _MISSING:
        return [{"path": path, "old": old}]
    if _same(old, new):
        return []
    return [{"path": path, "old": old, "new": new}]


def _value(value: Any, limit: int = 80) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def render_changes(
    changes: list[dict[str, Any]], indent: str = "    ", limit: int = 20
) -> list[str]:
    out = []
    for change in changes[:limit]:
        where = change["path"] or "(the whole value)"
        if "old" not in change:
            out.append(f"{indent}{where}: added {_value(change['new'])}")
        elif "new" not in change:
            out.append(f"{indent}{where}: removed (was {_value(change['old'])})")
        else:
            out.append(f"{indent}{where}: {_value(change['old'])} → {_value(change['new'])}")
    if len(changes) > limit:
        out.append(f"{indent}… and {len(changes) - limit} more")
    return out


# -- batches ------------------------------------------------------------------------------


@dataclass
class RowChange:
    """How one row differs between two results files."""

    id: Any
    change: str
    """``added`` (only in NEW), ``removed`` (only in OLD), ``status``, ``error`` (same
    status, another error type) or ``result``."""
    old_status: str | None = None
    new_status: str | None = None
    old_error_type: str | None = None
    new_error_type: str | None = None
    diff: list[dict[str, Any]] = field(default_factory=list)
    """The JSON difference of the rows' results."""
    error: str | None = None
    """NEW's error message, when NEW did not complete."""

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "change": self.change,
            "old_status": self.old_status,
            "new_status": self.new_status,
            "old_error_type": self.old_error_type,
            "new_error_type": self.new_error_type,
            "diff": self.diff,
            "error": self.error,
        }


@dataclass
class BatchDiff:
    rows: list[RowChange]
    counts: dict[str, int]

    @property
    def changed(self) -> bool:
        return bool(self.rows)

    def to_json(self) -> dict[str, Any]:
        return {"counts": self.counts, "rows": [row.to_json() for row in self.rows]}

    def render(self, *, limit: int | None = 50) -> str:
        out: list[str] = []
        shown = self.rows if limit is None else self.rows[:limit]
        for row in shown:
            if row.change == "added":
                out.append(f"row {row.id!r}: only in NEW ({row.new_status})")
            elif row.change == "removed":
                out.append(f"row {row.id!r}: only in OLD ({row.old_status})")
            elif row.change in ("status", "error"):
                old = f"{row.old_status}" + (
                    f" [{row.old_error_type}]" if row.old_error_type else ""
                )
                new = f"{row.new_status}" + (
                    f" [{row.new_error_type}]" if row.new_error_type else ""
                )
                message = f": {row.error}" if row.error else ""
                out.append(f"row {row.id!r}: {old} → {new}{message}")
                out += render_changes(row.diff)
            else:
                out.append(f"row {row.id!r}: result changed")
                out += render_changes(row.diff)
        if limit is not None and len(self.rows) > limit:
            out.append(f"… and {len(self.rows) - limit} more rows (--all shows every one)")
        c = self.counts
        out.append(
            f"{c['rows']} rows: {c['unchanged']} unchanged, {c['status']} status changed, "
            f"{c['error']} error changed, {c['result']} result changed, "
            f"{c['added']} only in NEW, {c['removed']} only in OLD"
        )
        return "\n".join(out) + "\n"


def diff_results(
    old: Mapping[str, Mapping[str, Any]], new: Mapping[str, Mapping[str, Any]]
) -> BatchDiff:
    """Rows whose status, error type or result differ (by row id; the last line of each)."""
    changes: list[RowChange] = []
    counts: Counter[str] = Counter()
    keys = [*old, *(k for k in new if k not in old)]
    for key in keys:
        a, b = old.get(key), new.get(key)
        if a is None and b is not None:
            changes.append(RowChange(b.get("id"), "added", new_status=b.get("status")))
            counts["added"] += 1
            continue
        if b is None and a is not None:
            changes.append(RowChange(a.get("id"), "removed", old_status=a.get("status")))
            counts["removed"] += 1
            continue
        assert a is not None and b is not None
        diff = json_diff(a.get("result"), b.get("result"))
        kind = None
        if a.get("status") != b.get("status"):
            kind = "status"
        elif a.get("error_type") != b.get("error_type"):
            kind = "error"
        elif diff:
            kind = "result"
        if kind is None:
            counts["unchanged"] += 1
            continue
        counts[kind] += 1
        changes.append(
            RowChange(
                b.get("id"),
                kind,
                old_status=a.get("status"),
                new_status=b.get("status"),
                old_error_type=a.get("error_type"),
                new_error_type=b.get("error_type"),
                diff=diff,
                error=b.get("error") if b.get("status") != "completed" else None,
            )
        )
    changes.sort(key=lambda change: id_order(change.id))
    total = {"rows": len(keys)}
    for kind in ("unchanged", "status", "error", "result", "added", "removed"):
        total[kind] = counts[kind]
    return BatchDiff(changes, total)


def diff_batches(old: Path, new: Path) -> BatchDiff:
    """``lattice batch diff OLD NEW``."""
    return diff_results(read_results(old), read_results(new))


# -- runs ---------------------------------------------------------------------------------


@dataclass
class RunView:
    """What a run folder says about a run, for comparing."""

    folder: Path
    status: str
    output: Any
    usage: dict[str, Any]
    path: list[str]
    """The main walk's ops in order, each as ``op_id`` or ``op_id → port``."""
    outputs: dict[str, list[Any]]
    """Node → the outputs of its ops, in order (a node on a loop has several)."""
    calls: dict[str, dict[str, int]]
    """Node → ``calls`` (model requests) and ``repairs``, ``escalations``, ``tokens``."""
    failure: dict[str, Any] | None
    run_id: str = ""
    parent: dict[str, Any] | None = None
    """For a re-run: the run, op and visit it started from (``run_id``, ``op``, ``visit``)."""
    inherited: list[str] = field(default_factory=list)
    """The steps before ``since`` (left out of ``path``, ``outputs`` and ``calls``)."""
    inherited_nodes: list[str] = field(default_factory=list)
    """The nodes of those steps that no step from ``since`` on went through."""


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def read_run(folder: Path, since: tuple[str, int] | None = None) -> RunView:
    """A run folder, for comparing; with ``since`` (an op and a visit of it), only from
    that visit of that op on: the steps before it are ``inherited`` (what a re-run from
    there took over from this run)."""
    if not (folder / "checkpoint.json").is_file() and not (folder / "result.json").is_file():
        raise LatticeUserError(f"{folder} is not a run folder (no checkpoint.json)")
    result = _json(folder / "result.json") or {}
    checkpoint = load_checkpoint(folder) or {}
    status = str(result.get("status") or checkpoint.get("status") or "?")
    records = read_op_records(folder)
    walk: list[str] = []
    outputs: dict[str, list[Any]] = {}
    calls: dict[str, dict[str, int]] = {}
    inherited: list[str] = []
    before: set[str] = set()
    visits = 0
    for record in records:
        node = str(record.get("node_id") or record.get("op_id"))
        if since is not None and visits < since[1]:
            if not record.get("branch") and record.get("op_id") == since[0]:
                visits += 1
            if visits < since[1]:
                if not record.get("branch"):
                    inherited.append(str(record.get("op_id")))
                before.add(node)
                continue
        if not record.get("branch"):
            port = record.get("port")
            walk.append(
                str(record.get("op_id"))
                + (f" → {port}" if port not in (None, "", "default") else "")
            )
        if "output" in record:
            outputs.setdefault(node, []).append(record.get("output"))
        attempts = record.get("attempts") or []
        if attempts:
            row = calls.setdefault(node, {"calls": 0, "repairs": 0, "escalations": 0, "tokens": 0})
            for attempt in attempts:
                row["calls"] += 1
                kind = attempt.get("kind")
                if kind == "repair":
                    row["repairs"] += 1
                elif kind == "escalation":
                    row["escalations"] += 1
                row["tokens"] += int(attempt.get("input_tokens") or 0) + int(
                    attempt.get("output_tokens") or 0
                )
    return RunView(
        folder=folder,
        status=status,
        output=result.get("output"),
        usage=result.get("usage") or checkpoint.get("usage") or {},
        path=walk,
        outputs=outputs,
        calls=calls,
        failure=result.get("failure"),
        run_id=str(checkpoint.get("run_id") or folder.name),
        parent=checkpoint.get("parent") if isinstance(checkpoint.get("parent"), dict) else None,
        inherited=inherited,
        inherited_nodes=sorted(
            before - set(outputs) - set(calls) - {p.split(" → ")[0] for p in walk}
        ),
    )


@dataclass
class RunDiff:
    a: RunView
    b: RunView
    output: list[dict[str, Any]]
    path_same: bool
    diverges_at: int | None
    """The first step (1-based) where the paths differ."""
    nodes: dict[str, dict[str, Any]]
    """Node → ``outputs`` (JSON difference of its outputs) and/or ``calls`` (A's and B's)."""
    rerun: dict[str, Any] | None = None
    """When one run is a re-run of the other: which (``a`` or ``b``), the ``op`` and
    ``visit`` it started from, and the parent's ``steps`` and ``nodes`` before that,
    which the re-run inherited (left out of the comparison)."""

    @property
    def changed(self) -> bool:
        return (
            self.a.status != self.b.status
            or bool(self.output)
            or not self.path_same
            or bool(self.nodes)
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "a": str(self.a.folder),
            "b": str(self.b.folder),
            "status": {"a": self.a.status, "b": self.b.status},
            "output": self.output,
            "path": {
                "same": self.path_same,
                "diverges_at": self.diverges_at,
                "a": self.a.path,
                "b": self.b.path,
            },
            "nodes": self.nodes,
            "rerun": self.rerun,
            "usage": {
                "a": {k: self.a.usage.get(k) for k in ("calls", "input_tokens", "output_tokens")},
                "b": {k: self.b.usage.get(k) for k in ("calls", "input_tokens", "output_tokens")},
            },
        }

    def render(self) -> str:
        a, b = self.a, self.b
        out = [f"A {a.folder}", f"B {b.folder}"]
        if a.status != b.status:
            out.append(f"status: {a.status} → {b.status}")
        else:
            out.append(f"status: {a.status} (both)")
        for side, view in (("A", a), ("B", b)):
            if view.failure:
                out.append(
                    f"  {side} [{view.failure.get('category')}] at {view.failure.get('node_id')}: "
                    f"{view.failure.get('summary')}"
                )
        if self.rerun is not None:
            parent = a if self.rerun["run"] == "b" else b
            side = self.rerun["run"].upper()
            steps = len(self.rerun["steps"])
            out.append(
                f"{side} is a re-run of {parent.run_id} from {self.rerun['op']}"
                f" (visit {self.rerun['visit']}): the {steps} step{'s' if steps != 1 else ''}"
                " before it are inherited, compared from there on"
            )
        if self.output:
            out.append("output:")
            out += render_changes(self.output)
        else:
            out.append("output: same")
        if self.path_same:
            out.append(f"path: same ({len(a.path)} ops)")
        else:
            step = self.diverges_at or 1
            out.append(f"path: differs from step {step} ({len(a.path)} ops → {len(b.path)} ops)")
            out.append("  A: " + " · ".join(a.path[step - 1 : step + 5]))
            out.append("  B: " + " · ".join(b.path[step - 1 : step + 5]))
        for node, info in self.nodes.items():
            parts = []
            if "calls" in info:
                ca, cb = info["calls"]["a"], info["calls"]["b"]
                parts.append(
                    f"calls {ca.get('calls', 0)} → {cb.get('calls', 0)}"
                    f" (repairs {ca.get('repairs', 0)} → {cb.get('repairs', 0)}, "
                    f"escalations {ca.get('escalations', 0)} → {cb.get('escalations', 0)})"
                )
            if "outputs" in info:
                parts.append("output changed")
            out.append(f"node {node}: " + "; ".join(parts))
            if "outputs" in info:
                out += render_changes(info["outputs"], indent="    ", limit=10)
        ua, ub = a.usage, b.usage
        out.append(
            f"usage: {ua.get('calls', 0)} → {ub.get('calls', 0)} calls, "
            f"{(ua.get('input_tokens') or 0) + (ua.get('output_tokens') or 0)} → "
            f"{(ub.get('input_tokens') or 0) + (ub.get('output_tokens') or 0)} tokens"
        )
        return "\n".join(out) + "\n"


def diff_runs(a_folder: Path, b_folder: Path) -> RunDiff:
    """``lattice runs diff A B``: status, output, path taken, each node's outputs and calls."""
    a, b = read_run(a_folder), read_run(b_folder)
    rerun = None
    for child, parent, name in ((b, a, "b"), (a, b, "a")):
        start = child.parent
        if start is not None and start.get("run_id") == parent.run_id and start.get("op"):
            since = (str(start["op"]), int(start.get("visit") or 1))
            trimmed = read_run(parent.folder, since)
            if name == "b":
                a = trimmed
            else:
                b = trimmed
            rerun = {
                "run": name,
                "op": since[0],
                "visit": since[1],
                "steps": trimmed.inherited,
                "nodes": trimmed.inherited_nodes,
            }
            break
    diverges = None
    for index in range(max(len(a.path), len(b.path))):
        left = a.path[index] if index < len(a.path) else None
        right = b.path[index] if index < len(b.path) else None
        if left != right:
            diverges = index + 1
            break
    nodes: dict[str, dict[str, Any]] = {}
    for node in [*a.outputs, *(n for n in b.outputs if n not in a.outputs)]:
        changes = json_diff(a.outputs.get(node, []), b.outputs.get(node, []))
        if changes:
            nodes.setdefault(node, {})["outputs"] = changes
    empty = {"calls": 0, "repairs": 0, "escalations": 0, "tokens": 0}
    for node in [*a.calls, *(n for n in b.calls if n not in a.calls)]:
        ca, cb = a.calls.get(node, empty), b.calls.get(node, empty)
        if (ca["calls"], ca["repairs"], ca["escalations"]) != (
            cb["calls"],
            cb["repairs"],
            cb["escalations"],
        ):
            nodes.setdefault(node, {})["calls"] = {"a": ca, "b": cb}
    return RunDiff(
        a=a,
        b=b,
        output=json_diff(a.output, b.output),
        path_same=diverges is None,
        diverges_at=diverges,
        nodes=nodes,
        rerun=rerun,
    )

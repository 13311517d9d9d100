"""Scoring a variant's results, and comparing two variants row by row.

A variant's results are ``lattice batch`` results lines (by row key). Each row is scored
by every scorer of the dataset and the command line and by its own assertions:

- a row that did not complete (failed, halted, interrupted, or with no line at all)
  scores 0 under every scorer, the reason as the detail;
- a scorer with ``node`` scores that node's result (its last output, read from the
  row's run folder), else the run's output; ``actual``/``expected`` pick parts.

Two variants A and B are compared on the rows both have: a row **regressed** when a
scorer gave it less in B than in A, **improved** when some scorer gave it more and
none less.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jmespath.exceptions import JMESPathError

from lattice.batch.diff import json_diff
from lattice.batch.rows import Row
from lattice.evals.dataset import Dataset
from lattice.evals.scorers import Case, Score, Scorer, ScorerSpec
from lattice.evals.stats import Interval, interval
from lattice.runs.oplog import read_op_records
from lattice.runtime.conditions import compile_jmespath

_NOTHING = object()


@dataclass
class RowScores:
    """One row of one variant: what the run did and each scorer's score."""

    id: Any
    key: str
    status: str
    error: str | None
    output: Any
    run_dir: str | None
    latency_ms: float | None
    cost_usd: float | None
    calls: int
    scores: dict[str, Score] = field(default_factory=dict)

    def passed(self, specs: Mapping[str, ScorerSpec]) -> bool:
        """Whether every scorer that scored the row gave it at least its ``pass``."""
        return all(
            score.value is None or score.value >= specs[name].pass_at
            for name, score in self.scores.items()
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "status": self.status,
            "error": self.error,
            "output": self.output,
            "run_dir": self.run_dir,
            "latency_ms": self.latency_ms,
            "cost_usd": self.cost_usd,
            "calls": self.calls,
            "scores": {name: score.to_json() for name, score in self.scores.items()},
        }


@dataclass
class ScorerResult:
    """A scorer over one variant: its mean and interval, and whether it meets its threshold."""

    name: str
    interval: Interval | None
    threshold: float | None

    @property
    def passed(self) -> bool | None:
        if self.threshold is None:
            return None
        return self.interval is not None and self.interval.mean >= self.threshold

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            **(self.interval.to_json() if self.interval else {"mean": None, "n": 0}),
            "threshold": self.threshold,
            "passed": self.passed,
        }


@dataclass
class Change:
    """A row scored differently by two variants."""

    id: Any
    key: str
    scores: dict[str, tuple[float | None, float | None]]
    """Scorer name → (A's score, B's score), for the scorers whose score changed."""
    diff: list[dict[str, Any]]
    """The JSON difference of the row's outputs (``lattice batch diff``'s)."""
    regressed: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "regressed": self.regressed,
            "scores": {name: list(pair) for name, pair in self.scores.items()},
            "diff": self.diff,
        }


def node_output(run_dir: str | None, node: str) -> Any:
    """The last output a node wrote in a run folder (``_NOTHING`` when it wrote none)."""
    if run_dir is None or not Path(run_dir).is_dir():
        return _NOTHING
    found: Any = _NOTHING
    for record in read_op_records(Path(run_dir)):
        if record.get("node_id") == node and "output" in record:
            found = record["output"]
    return found


def _pick(expression: str | None, value: Any) -> Any:
    if expression is None:
        return value
    try:
        return compile_jmespath(expression)(value)
    except JMESPathError:
        return None


def row_scores(line: Mapping[str, Any] | None, row: Row) -> RowScores:
    """A row's run as its results line says (no line: ``not run``)."""
    if line is None:
        return RowScores(
            row.id, row.key, "not run", "the row has no result", None, None, None, None, 0
        )
    usage = line.get("usage") or {}
    return RowScores(
        id=row.id,
        key=row.key,
        status=str(line.get("status")),
        error=line.get("error"),
        output=line.get("result"),
        run_dir=line.get("run_dir"),
        latency_ms=line.get("latency_ms"),
        cost_usd=usage.get("estimated_cost_usd"),
        calls=int(usage.get("calls") or 0),
    )


async def _score_one(scorer: Scorer, spec: ScorerSpec, scored: RowScores, case: Case) -> Score:
    if scored.status != "completed":
        why = scored.error or scored.status
        return Score(0.0, f"the run {scored.status}: {why}" if scored.status != "not run" else why)
    if spec.node is not None:
        value = node_output(scored.run_dir, spec.node)
        if value is _NOTHING:
            return Score(0.0, f"node {spec.node!r} wrote no result in the row's run")
        case = Case(case.row_id, value, case.expected, case.has_expected, case.inputs)
    case = Case(
        case.row_id,
        _pick(spec.actual, case.actual),
        _pick(spec.expected, case.expected) if case.has_expected else None,
        case.has_expected,
        case.inputs,
    )
    result = scorer(case)
    if inspect.isawaitable(result):
        result = await result
    assert isinstance(result, Score)
    return result


async def score_variant(
    dataset: Dataset,
    lines: Mapping[str, Mapping[str, Any]],
    scorers: Sequence[Scorer],
    row_scorers: Mapping[str, Sequence[Scorer]],
    *,
    concurrency: int = 16,
) -> dict[str, RowScores]:
    """Every row of ``dataset`` scored from its results line in ``lines`` by ``scorers``
    and its own ``row_scorers``; up to ``concurrency`` rows at once (judges call models)."""
    gate = asyncio.Semaphore(concurrency)

    async def one(row: Row) -> RowScores:
        expectation = dataset.expectations[row.key]
        scored = row_scores(lines.get(row.key), row)
        case = Case(
            row.id, scored.output, expectation.expected, expectation.has_expected, row.inputs
        )
        async with gate:
            for scorer in [*scorers, *row_scorers.get(row.key, ())]:
                spec = scorer.spec
                scored.scores[spec.name] = await _score_one(scorer, spec, scored, case)
        return scored

    done = await asyncio.gather(*(one(row) for row in dataset.rows))
    return {scored.key: scored for scored in done}


def summarize_scores(
    rows: Mapping[str, RowScores], names: Sequence[str], thresholds: Mapping[str, float]
) -> list[ScorerResult]:
    """Per scorer: the mean and 95% interval of the rows it scored, and its threshold."""
    out = []
    for name in names:
        values = [
            r.scores[name].value
            for r in rows.values()
            if name in r.scores and r.scores[name].value is not None
        ]
        out.append(
            ScorerResult(name, interval([v for v in values if v is not None]), thresholds.get(name))
        )
    return out


def compare(a: Mapping[str, RowScores], b: Mapping[str, RowScores]) -> list[Change]:
    """The rows both variants have whose scores differ, in A's order."""
    changes = []
    for key, left in a.items():
        right = b.get(key)
        if right is None:
            continue
        moved: dict[str, tuple[float | None, float | None]] = {}
        for name in [*left.scores, *(n for n in right.scores if n not in left.scores)]:
            old = left.scores.get(name)
            new = right.scores.get(name)
            old_value = old.value if old else None
            new_value = new.value if new else None
            if old_value != new_value:
                moved[name] = (old_value, new_value)
        if not moved:
            continue
        regressed = any(
            old is not None and (new is None or new < old) for old, new in moved.values()
        )
        diff = json_diff(left.output, right.output)
        if left.status != right.status:
            diff.insert(0, {"path": "status", "old": left.status, "new": right.status})
        changes.append(Change(left.id, key, moved, diff, regressed))
    return changes


def regressed_rows(changes: Sequence[Change]) -> list[Change]:
    return [change for change in changes if change.regressed]

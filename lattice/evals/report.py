"""The text report of an evaluation (what ``lattice eval`` prints)."""

from __future__ import annotations

from typing import Any

from lattice.batch.diff import render_changes
from lattice.evals.run import EvalReport, VariantReport
from lattice.evals.scoring import ScorerResult

SHOWN_CHANGES = 50


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _cell(result: ScorerResult) -> str:
    if result.interval is None:
        return "-"
    i = result.interval
    mark = {True: " ✓", False: " ✗", None: ""}[result.passed]
    return f"{i.mean:.3f} [{i.low:.3f}, {i.high:.3f}]{mark}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} ms"


def _usd(value: float | None) -> str:
    return "-" if value is None else f"${value:.4f}"


def _passed_rows(report: EvalReport, variant: VariantReport) -> str:
    specs = {s.name: s for s in report.scorers}
    rows = variant.rows.values()
    return f"{sum(1 for r in rows if r.passed(specs))}/{len(variant.rows)}"


def table(report: EvalReport) -> list[list[str]]:
    """The table's rows (the first is the header)."""
    header = ["scorer", "threshold", *(v.variant.label for v in report.variants)]
    rows = [header]
    for spec in report.scorers:
        results = [v.scorer(spec.name) for v in report.variants]
        threshold = results[0].threshold
        rows.append(
            [
                spec.name,
                "-" if threshold is None else f"≥ {threshold:g}",
                *(_cell(result) for result in results),
            ]
        )
    totals = [v.totals() for v in report.variants]
    rows.append(["rows passed", "", *(_passed_rows(report, v) for v in report.variants)])
    rows.append(["model calls", "", *(str(t["calls"]) for t in totals)])
    rows.append(["cost per row", "", *(_usd(t["cost_per_row_usd"]) for t in totals)])
    rows.append(["latency per row", "", *(f"{_ms(t['latency_ms_mean'])} mean" for t in totals)])
    return rows


def _aligned(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


def _scores(pairs: dict[str, tuple[float | None, float | None]]) -> str:
    return ", ".join(f"{name} {_number(a)} → {_number(b)}" for name, (a, b) in pairs.items())


def _row_line(report: EvalReport, key: str) -> str:
    parts = []
    for variant in report.variants:
        row = variant.rows.get(key)
        if row is not None:
            cost = "" if row.cost_usd is None else f", {_usd(row.cost_usd)}"
            parts.append(f"{variant.variant.label}: {row.status}, {_ms(row.latency_ms)}{cost}")
    return "; ".join(parts)


def render(report: EvalReport, *, show_all: bool = False) -> str:
    """The report as text: the variants, the table, the changed rows with their
    differences, and the verdict."""
    out = [f"lattice eval: {report.dataset}, {len(report.candidate.rows)} rows"]
    for variant in report.variants:
        out.append(f"  {variant.variant.label}: {variant.variant.describe()}")
    out.append("")
    out += _aligned(table(report))
    notes = [
        f"{variant.variant.label}: the batch stopped: {variant.summary.stopped} (its rows "
        "that did not run score 0; run the same command again to go on)"
        for variant in report.variants
        if variant.summary is not None and variant.summary.stopped
    ]
    if report.reused_calls is not None:
        notes.append(f"cache: {report.reused_calls} model calls reused, {report.sent_calls} sent")
    if report.judge_calls:
        notes.append(f"judge: {report.judge_calls} model calls ({report.judge_repairs} repairs)")
    if notes:
        out += ["", *notes]
    out += _changes(report, show_all)
    out += ["", verdict(report)]
    return "\n".join(out) + "\n"


def _changes(report: EvalReport, show_all: bool) -> list[str]:
    if len(report.variants) < 2:
        return []
    regressed = report.regressions
    improved = [c for c in report.changes if not c.regressed]
    out = [""]
    a, b = (v.variant.label for v in report.variants)
    if regressed:
        ids = ", ".join(str(c.id) for c in regressed)
        out.append(f"{_rows(len(regressed))} regressed ({b} scores lower than {a}): {ids}")
    else:
        out.append(f"no row regressed ({b} scores no row lower than {a})")
    if improved:
        out.append(f"{_rows(len(improved))} improved: {', '.join(str(c.id) for c in improved)}")
    shown = report.changes if show_all else report.changes[:SHOWN_CHANGES]
    for change in shown:
        word = "regressed" if change.regressed else "improved"
        out.append(
            f"row {change.id!r} {word}: {_scores(change.scores)} ({_row_line(report, change.key)})"
        )
        out += render_changes(change.diff, limit=8)
    if len(shown) < len(report.changes):
        out.append(f"… {len(report.changes) - len(shown)} more changed rows (--all lists them)")
    return out


def _rows(count: int) -> str:
    return f"{count} row" if count == 1 else f"{count} rows"


def verdict(report: EvalReport) -> str:
    """``PASS``, or ``FAIL: `` and every reason (thresholds missed, rows regressed)."""
    reasons: list[Any] = []
    candidate = report.candidate
    for result in candidate.scorers:
        if result.passed is False:
            mean = "no score" if result.interval is None else f"{result.interval.mean:.3f}"
            reasons.append(
                f"{result.name} is below its threshold {result.threshold:g} in "
                f"{candidate.variant.label} ({mean})"
            )
    if len(report.regressions) > report.max_regressions:
        reasons.append(
            f"{_rows(len(report.regressions))} regressed (allowed {report.max_regressions})"
        )
    if reasons:
        return "FAIL: " + "; ".join(reasons)
    return "PASS"

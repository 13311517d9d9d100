"""The HTML report of an evaluation (``lattice eval --html FILE``).

One self-contained file: its style is inline and it has no script, no font, no image
and no link to anything but the runs in the panel (``panel_url``/#/runs/<run id>, for
rows that have a run folder), so it opens offline and can be kept as a CI artifact.
It shows what the text report shows: the variants, the table, the verdict, the rows
that changed with their differences, then every row with its scores, cost and latency.
"""

from __future__ import annotations

from html import escape
from pathlib import Path
from urllib.parse import quote

from lattice.batch.diff import render_changes
from lattice.evals.report import table, verdict
from lattice.evals.run import EvalReport
from lattice.evals.scoring import RowScores

STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em;color:#1d2330;background:#fff}
h1{font-size:1.4em;margin:0 0 .3em}h2{font-size:1.1em;margin:1.6em 0 .5em}
table{border-collapse:collapse;margin:.4em 0}
th,td{border:1px solid #d5d9e0;padding:.25em .6em;text-align:left;vertical-align:top}
th{background:#f3f5f8}td.num{font-variant-numeric:tabular-nums}
.verdict{display:inline-block;padding:.3em .8em;border-radius:4px;font-weight:600}
.pass{background:#e3f6e8;color:#125c2a}.fail{background:#fde8e8;color:#8a1616}
.regressed{color:#8a1616}.improved{color:#125c2a}
pre{margin:.2em 0;white-space:pre-wrap;font-size:12px;color:#3a4150}
.muted{color:#6b7280}tr>td:first-child{white-space:nowrap}
"""


def _run_link(row: RowScores, panel_url: str) -> str:
    if not row.run_dir:
        return '<span class="muted">no run folder</span>'
    run_id = Path(row.run_dir).name
    href = f"{panel_url.rstrip('/')}/#/runs/{quote(run_id, safe='')}"
    return f'<a href="{escape(href)}">{escape(run_id)}</a>'


def _score(row: RowScores | None, name: str) -> str:
    if row is None or name not in row.scores or row.scores[name].value is None:
        return "-"
    score = row.scores[name]
    title = f' title="{escape(score.detail)}"' if score.detail else ""
    return f"<span{title}>{score.value:.3f}</span>"


def _table(report: EvalReport) -> str:
    rows = table(report)
    head = "".join(f"<th>{escape(cell)}</th>" for cell in rows[0])
    body = "".join(
        "<tr>" + "".join(f'<td class="num">{escape(cell)}</td>' for cell in row) + "</tr>"
        for row in rows[1:]
    )
    return f'<table id="scores"><tr>{head}</tr>{body}</table>'


def _changes(report: EvalReport, panel_url: str) -> str:
    if len(report.variants) < 2:
        return ""
    a, b = report.variants
    regressed = report.regressions
    ids = ", ".join(str(c.id) for c in regressed) or "none"
    parts = [
        '<h2 id="regressed">Rows that regressed '
        f"({escape(b.variant.label)} scores lower than {escape(a.variant.label)}): "
        f'{len(regressed)}</h2><p class="regressed" id="regressed-ids">{escape(ids)}</p>',
        '<h2>Rows that changed</h2><table id="changes"><tr><th>row</th><th>change</th>'
        f"<th>scores</th><th>run {escape(a.variant.label)}</th>"
        f"<th>run {escape(b.variant.label)}</th><th>difference</th></tr>",
    ]
    for change in report.changes:
        word = "regressed" if change.regressed else "improved"
        scores = "<br>".join(
            f"{escape(name)}: {'-' if x is None else f'{x:.3f}'} → {'-' if y is None else f'{y:.3f}'}"
            for name, (x, y) in change.scores.items()
        )
        diff = escape("\n".join(render_changes(change.diff, indent="", limit=12)))
        parts.append(
            f'<tr data-row="{escape(str(change.id))}" class="{word}"><td>{escape(str(change.id))}</td>'
            f'<td class="{word}">{word}</td><td>{scores}</td>'
            f"<td>{_run_link(a.rows[change.key], panel_url)}</td>"
            f"<td>{_run_link(b.rows[change.key], panel_url)}</td><td><pre>{diff}</pre></td></tr>"
        )
    parts.append("</table>")
    return "".join(parts)


def _all_rows(report: EvalReport, panel_url: str) -> str:
    names = [spec.name for spec in report.scorers]
    head = "<th>row</th>"
    for variant in report.variants:
        label = escape(variant.variant.label)
        head += f"<th>{label}: status</th>" + "".join(
            f"<th>{label}: {escape(n)}</th>" for n in names
        )
        head += f"<th>{label}: latency</th><th>{label}: cost</th><th>{label}: run</th>"
    body = []
    for key, first in report.variants[0].rows.items():
        cells = f"<td>{escape(str(first.id))}</td>"
        for variant in report.variants:
            row = variant.rows.get(key)
            if row is None:
                cells += "<td>-</td>" * (len(names) + 4)
                continue
            latency = "-" if row.latency_ms is None else f"{row.latency_ms:.0f} ms"
            cost = "-" if row.cost_usd is None else f"${row.cost_usd:.4f}"
            cells += f"<td>{escape(row.status)}</td>"
            cells += "".join(f'<td class="num">{_score(row, n)}</td>' for n in names)
            cells += f'<td class="num">{latency}</td><td class="num">{cost}</td>'
            cells += f"<td>{_run_link(row, panel_url)}</td>"
        body.append(f'<tr data-row="{escape(str(first.id))}">{cells}</tr>')
    return (
        f'<h2>Every row</h2><table id="rows"><tr>{head}</tr>{"".join(body)}</table>'
        '<p class="muted">A score\'s reason shows when the pointer rests on it.</p>'
    )


def html_report(report: EvalReport, *, panel_url: str = "http://127.0.0.1:8600") -> str:
    """The report as one self-contained HTML page (see the module docstring)."""
    text = verdict(report)
    kind = "pass" if text == "PASS" else "fail"
    variants = "".join(
        f"<li><b>{escape(v.variant.label)}</b>: {escape(v.variant.describe())}</li>"
        for v in report.variants
    )
    notes = []
    if report.reused_calls is not None:
        notes.append(f"cache: {report.reused_calls} model calls reused, {report.sent_calls} sent")
    if report.judge_calls:
        notes.append(f"judge: {report.judge_calls} model calls ({report.judge_repairs} repairs)")
    notes_html = "".join(f"<p>{escape(note)}</p>" for note in notes)
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'\">"
        f"<title>lattice eval: {escape(report.dataset)}</title><style>{STYLE}</style></head><body>"
        f"<h1>lattice eval: {escape(report.dataset)}</h1>"
        f"<p>{len(report.candidate.rows)} rows</p><ul>{variants}</ul>"
        f'<p><span class="verdict {kind}" id="verdict">{escape(text)}</span></p>'
        f"{_table(report)}{notes_html}{_changes(report, panel_url)}{_all_rows(report, panel_url)}"
        '<p class="muted">Links open each row\'s run in the panel: '
        "<code>lattice serve --runs-dir OUT/runs</code>.</p></body></html>\n"
    )

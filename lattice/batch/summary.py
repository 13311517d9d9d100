"""The summary of a batch: rows by status, failures by error type (an example row each),
rows waiting for answers, run latency, repairs and escalations, tokens and cost.

It is made from the results file as it stands at the end (every row of the inputs that
has a line, whichever invocation wrote it), plus what this invocation did (rows run,
rows skipped, time, why it stopped).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lattice.batch.progress import format_tokens
from lattice.batch.rows import InvalidLine, Row

STATUSES = ("completed", "failed", "halted", "interrupted")
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_HALTED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


def percentile(values: list[float], q: float) -> float | None:
    """The ``q`` percentile (0-100) of ``values`` by the nearest-rank method."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass
class BatchSummary:
    """What a batch did (``lattice batch`` prints it; ``--summary-json`` writes ``to_json()``)."""

    workflow: str
    output: str
    engine: str
    rows: dict[str, int]
    """``total`` valid rows in the inputs, one count per status, ``not_run`` and ``invalid``."""
    ran: int = 0
    """Rows this invocation ran (or resumed)."""
    skipped: dict[str, int] = field(default_factory=dict)
    """Rows this invocation left as the results file had them, by their status."""
    elapsed_s: float = 0.0
    failures: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Error type → ``count``, an ``example`` row id and its ``message``."""
    halts: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Node waiting for an answer → ``count``, an ``example`` row id and its ``message``."""
    latency_ms: dict[str, float | None] = field(default_factory=dict)
    repairs: dict[str, float] = field(default_factory=dict)
    escalations: dict[str, float] = field(default_factory=dict)
    retries: dict[str, float] = field(default_factory=dict)
    usage: dict[str, Any] = field(default_factory=dict)
    invalid: list[dict[str, Any]] = field(default_factory=list)
    stopped: str | None = None
    """Why the batch stopped before its last row (a budget), if it did."""
    interrupted: bool = False
    """True when the batch was interrupted (Ctrl-C) before its end."""
    limiter: dict[str, Any] | None = None
    dropped_torn_line: bool = False
    interrupted_example: Any = None
    """An interrupted row (by the budget, or a batch stopped while it ran)."""

    @property
    def rows_per_second(self) -> float | None:
        return round(self.ran / self.elapsed_s, 2) if self.ran and self.elapsed_s > 0 else None

    @property
    def exit_code(self) -> int:
        """130 interrupted; 2 when no line of the inputs was a valid row; 1 when a row
        failed, a line was invalid or a budget stopped the batch; 3 when rows wait for
        answers; else 0."""
        if self.interrupted:
            return EXIT_INTERRUPTED
        rows = self.rows
        if rows.get("invalid") and not rows.get("total"):
            return EXIT_USAGE
        if rows.get("failed") or rows.get("invalid") or self.stopped or rows.get("interrupted"):
            return EXIT_FAILED
        if rows.get("halted"):
            return EXIT_HALTED
        if rows.get("not_run"):
            return EXIT_FAILED
        return EXIT_OK

    def to_json(self) -> dict[str, Any]:
        return {
            "workflow": self.workflow,
            "output": self.output,
            "engine": self.engine,
            "rows": dict(self.rows),
            "ran": self.ran,
            "skipped": dict(self.skipped),
            "elapsed_s": round(self.elapsed_s, 3),
            "rows_per_second": self.rows_per_second,
            "failures": self.failures,
            "halts": self.halts,
            "latency_ms": self.latency_ms,
            "repairs": self.repairs,
            "escalations": self.escalations,
            "retries": self.retries,
            "usage": self.usage,
            "invalid": self.invalid,
            "stopped": self.stopped,
            "interrupted": self.interrupted,
            "limiter": self.limiter,
            "dropped_torn_line": self.dropped_torn_line,
            "interrupted_example": self.interrupted_example,
            "exit_code": self.exit_code,
        }

    def render(self) -> str:
        """The summary as lines for a person."""
        rows = self.rows
        counts = ", ".join(f"{rows.get(s, 0)} {s}" for s in STATUSES if rows.get(s))
        extra = []
        if rows.get("not_run"):
            extra.append(f"{rows['not_run']} not run")
        if rows.get("invalid"):
            extra.append(f"{rows['invalid']} invalid line{'s' if rows['invalid'] != 1 else ''}")
        verb = "interrupted" if self.interrupted else "stopped" if self.stopped else "finished"
        out = [
            f"batch {verb} in {self.elapsed_s:.1f}s: {rows.get('total', 0)} rows"
            + (f": {counts}" if counts else "")
            + (f"; {', '.join(extra)}" if extra else "")
        ]
        skipped = sum(self.skipped.values())
        rate = f" ({self.rows_per_second:g} rows/s)" if self.rows_per_second else ""
        out.append(
            f"  ran {self.ran} row{'s' if self.ran != 1 else ''} this time{rate}"
            + (f"; {skipped} already in {self.output}" if skipped else "")
        )
        if self.stopped:
            out.append(f"  stopped: {self.stopped}")
            out.append(
                "  the rows it did not finish run with the same command (each run has the whole budget)"
            )
        if self.failures:
            out.append("  failures by error type:")
            width = max(len(k) for k in self.failures)
            for error_type, info in sorted(self.failures.items(), key=lambda kv: -kv[1]["count"]):
                message = _short(info.get("message"))
                out.append(
                    f"    {error_type:<{width}}  {info['count']:>5}  e.g. row {info['example']!r}"
                    + (f": {message}" if message else "")
                )
        if self.halts:
            out.append("  waiting for answers (answer with --answers FILE):")
            for node, info in sorted(self.halts.items(), key=lambda kv: -kv[1]["count"]):
                out.append(
                    f"    {node}  {info['count']:>5}  e.g. row {info['example']!r}: "
                    f"{_short(info.get('message'))}"
                )
        if rows.get("interrupted"):
            out.append(
                f"  {rows['interrupted']} rows interrupted (e.g. row "
                f"{self.interrupted_example!r}): they go on where they stopped next time"
            )
        latency = self.latency_ms
        if latency.get("p50") is not None:
            out.append(
                f"  latency per row: p50 {latency['p50']:.0f} ms, p95 {latency['p95']:.0f} ms, "
                f"max {latency['max']:.0f} ms"
            )
        out.append(
            f"  repairs {_count(self.repairs)}, escalations {_count(self.escalations)}, "
            f"retries {_count(self.retries)}"
        )
        usage = self.usage
        cost = usage.get("estimated_cost_usd")
        cost_text = f", estimated cost ${cost:.4f}" if cost is not None else ""
        if cost is not None and usage.get("rows_without_cost"):
            cost_text += f" ({usage['rows_without_cost']} rows used models without a price)"
        out.append(
            f"  usage: {usage.get('calls', 0)} model calls ({usage.get('requests', 0)} requests), "
            f"{_tokens(usage.get('input_tokens', 0))} input + "
            f"{_tokens(usage.get('output_tokens', 0))} output tokens{cost_text}"
        )
        if self.dropped_torn_line:
            out.append(f"  dropped a line cut short by a crash at the end of {self.output}")
        return "\n".join(out)


def _short(text: Any, limit: int = 120) -> str:
    if not text:
        return ""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _count(stats: Mapping[str, float]) -> str:
    total = int(stats.get("total", 0))
    if not total:
        return "0"
    return f"{total} ({int(stats.get('rows', 0))} rows, max {int(stats.get('max', 0))} in one)"


def _tokens(n: int) -> str:
    return format_tokens(n, thousands_from=10_000)


def _per_row(lines: list[dict[str, Any]], key: str) -> dict[str, float]:
    values = [int(line.get(key) or 0) for line in lines]
    total = sum(values)
    return {
        "total": total,
        "rows": sum(1 for v in values if v),
        "max": max(values, default=0),
        "per_row": round(total / len(values), 4) if values else 0.0,
    }


# long: one pass over the rows' last lines, adding up every figure of the summary
def summarize(
    *,
    workflow: str,
    output: str,
    engine: str,
    rows: Iterable[Row],
    latest: Mapping[str, dict[str, Any]],
    invalid: list[InvalidLine],
    ran: int,
    skipped: Mapping[str, int],
    elapsed_s: float,
    stopped: str | None = None,
    interrupted: bool = False,
    limiter: dict[str, Any] | None = None,
    dropped_torn_line: bool = False,
) -> BatchSummary:
    """The summary of the rows of the inputs, from their last results lines."""
    lines: list[dict[str, Any]] = []
    not_run = 0
    total = 0
    for row in rows:
        total += 1
        line = latest.get(row.key)
        if line is None:
            not_run += 1
        else:
            lines.append(line)
    counts: dict[str, int] = {"total": total}
    for status in STATUSES:
        counts[status] = 0
    failures: dict[str, dict[str, Any]] = {}
    halts: dict[str, dict[str, Any]] = {}
    latencies: list[float] = []
    usage = {"calls": 0, "requests": 0, "input_tokens": 0, "output_tokens": 0}
    cost = 0.0
    priced = 0
    interrupted_example: Any = None
    for line in lines:
        status = str(line.get("status"))
        counts[status] = counts.get(status, 0) + 1
        if status == "failed":
            error_type = str(line.get("error_type") or "unknown")
            info = failures.setdefault(
                error_type, {"count": 0, "example": line.get("id"), "message": line.get("error")}
            )
            info["count"] += 1
        elif status == "interrupted" and interrupted_example is None:
            interrupted_example = line.get("id")
        elif status == "halted":
            node = str(line.get("node_id") or "?")
            info = halts.setdefault(
                node, {"count": 0, "example": line.get("id"), "message": line.get("error")}
            )
            info["count"] += 1
        latency = line.get("latency_ms")
        if isinstance(latency, int | float):
            latencies.append(float(latency))
        row_usage = line.get("usage") or {}
        for key in usage:
            usage[key] += int(row_usage.get(key) or 0)
        row_cost = row_usage.get("estimated_cost_usd")
        if isinstance(row_cost, int | float):
            cost += row_cost
            priced += 1
    counts["not_run"] = not_run
    counts["invalid"] = len(invalid)
    return BatchSummary(
        workflow=workflow,
        output=output,
        engine=engine,
        rows=counts,
        ran=ran,
        skipped={k: v for k, v in skipped.items() if v},
        elapsed_s=elapsed_s,
        failures=failures,
        halts=halts,
        latency_ms={
            "p50": percentile(latencies, 50),
            "p95": percentile(latencies, 95),
            "max": max(latencies, default=None),
        },
        repairs=_per_row(lines, "repairs"),
        escalations=_per_row(lines, "escalations"),
        retries=_per_row(lines, "retries"),
        usage={
            **usage,
            "total_tokens": usage["input_tokens"] + usage["output_tokens"],
            "estimated_cost_usd": round(cost, 6) if priced else None,
            "rows_without_cost": len(lines) - priced if priced else None,
        },
        invalid=[item.to_json() for item in invalid],
        stopped=stopped,
        interrupted=interrupted,
        limiter=limiter,
        dropped_torn_line=dropped_torn_line,
        interrupted_example=interrupted_example,
    )

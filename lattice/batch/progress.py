"""Live progress of a batch: a rich line on a terminal, plain periodic lines otherwise.

Both read a ``Tracker``, which the driver feeds with every results line: rows done by
status, rows per second, the time left at that pace, tokens and estimated cost so far.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import IO, Any, Protocol


class Tracker:
    """Counts of this invocation's rows, updated as each row's line is written."""

    def __init__(self, total: int, *, clock: Callable[[], float] = time.perf_counter) -> None:
        self.total = total
        self.clock = clock
        self.started = clock()
        self.done = 0
        self.by_status: dict[str, int] = {}
        self.input_tokens = 0
        self.output_tokens = 0
        self.cost = 0.0
        self.priced = False
        self.stopping: str | None = None

    def add(self, line: dict[str, Any]) -> None:
        self.done += 1
        status = line.get("status") or "?"
        self.by_status[status] = self.by_status.get(status, 0) + 1
        usage = line.get("usage") or {}
        self.input_tokens += usage.get("input_tokens") or 0
        self.output_tokens += usage.get("output_tokens") or 0
        cost = usage.get("estimated_cost_usd")
        if cost is not None:
            self.cost += cost
            self.priced = True

    @property
    def elapsed(self) -> float:
        return max(self.clock() - self.started, 1e-9)

    @property
    def rate(self) -> float:
        """Rows per second so far."""
        return self.done / self.elapsed

    @property
    def eta(self) -> float | None:
        """Seconds left at the pace so far (None before the first row)."""
        if not self.done:
            return None
        return max(self.total - self.done, 0) / self.rate

    def describe(self) -> str:
        """``612/1000 rows: 580 completed, 20 failed, 12 halted · 152.3 rows/s · ETA 2s · …``"""
        statuses = ", ".join(
            f"{self.by_status[s]} {s}"
            for s in ("completed", "failed", "halted", "interrupted")
            if self.by_status.get(s)
        )
        parts = [f"{self.done}/{self.total} rows" + (f": {statuses}" if statuses else "")]
        parts.append(f"{self.rate:.1f} rows/s")
        eta = self.eta
        if eta is not None and self.done < self.total:
            parts.append(f"ETA {format_duration(eta)}")
        parts.append(f"{format_tokens(self.input_tokens + self.output_tokens)} tokens")
        if self.priced:
            parts.append(f"${self.cost:.4f}")
        if self.stopping:
            parts.append(f"stopping: {self.stopping}")
        return " · ".join(parts)


def format_duration(seconds: float) -> str:
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    minutes, rest = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m{rest:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def format_tokens(n: int, *, thousands_from: int = 1_000) -> str:
    """``n`` tokens, short: ``1.25M``, ``12.3k`` (from ``thousands_from``), ``987``."""
    if n >= 1_000_000:
        return f"{n / 1_000_000:.2f}M"
    if n >= thousands_from:
        return f"{n / 1_000:.1f}k"
    return str(n)


class ProgressView(Protocol):
    """Shows a tracker: ``tick`` is called every ``interval`` seconds while rows run."""

    interval: float

    def start(self, tracker: Tracker) -> None: ...

    def tick(self) -> None: ...

    def stop(self) -> None: ...


class NoProgress:
    interval = 3600.0

    def start(self, tracker: Tracker) -> None:
        pass

    def tick(self) -> None:
        pass

    def stop(self) -> None:
        pass


class PlainProgress:
    """A ``lattice: batch …`` line every ``interval`` seconds (logs, CI, pipes)."""

    def __init__(self, stream: IO[str] | None = None, *, interval: float = 10.0) -> None:
        self.stream = stream
        self.interval = interval
        self.tracker: Tracker | None = None

    def start(self, tracker: Tracker) -> None:
        self.tracker = tracker

    def tick(self) -> None:
        if self.tracker is not None:
            stream = self.stream or sys.stderr
            print(f"lattice: batch {self.tracker.describe()}", file=stream, flush=True)

    def stop(self) -> None:
        self.tracker = None


class _Line:
    """A rich renderable of the tracker (read at each refresh, from rich's thread)."""

    def __init__(self, tracker: Tracker) -> None:
        self.tracker = tracker

    def __rich__(self) -> Any:
        from rich.progress_bar import ProgressBar
        from rich.table import Table

        tracker = self.tracker
        grid = Table.grid(padding=(0, 1))
        grid.add_column(width=30)
        grid.add_column()
        grid.add_row(
            ProgressBar(total=max(tracker.total, 1), completed=tracker.done, width=30),
            tracker.describe(),
        )
        return grid


class RichProgress:
    """A live line on the terminal (stderr), refreshed four times a second."""

    interval = 3600.0  # rich refreshes by itself

    def __init__(self) -> None:
        self._live: Any = None

    def start(self, tracker: Tracker) -> None:
        from rich.console import Console
        from rich.live import Live

        self._live = Live(
            _Line(tracker), console=Console(stderr=True), refresh_per_second=4, transient=False
        )
        self._live.start()

    def tick(self) -> None:
        pass

    def stop(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None


def choose_view(kind: str | bool | None, *, interval: float = 10.0) -> ProgressView:
    """``"rich"``, ``"plain"``, ``"none"``; True/``"auto"``: rich on a terminal, else plain;
    False/None: none."""
    if kind in (None, False, "none"):
        return NoProgress()
    if kind in (True, "auto"):
        kind = "rich" if sys.stderr.isatty() else "plain"
    if kind == "rich":
        return RichProgress()
    return PlainProgress(interval=interval)

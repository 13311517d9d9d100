"""Schedules: cron expressions with time zones that start a workflow."""

from __future__ import annotations

from typing import Protocol


class Clock(Protocol):
    """Placeholder."""

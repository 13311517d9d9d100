"""What the walk keeps for a whole run beside the run's context: its counters, the
provider its branches wrap, the journal's branches a resume goes on with, the bound on
ops that run at once, where the main walk forces its journal to disk, and where the
run is made durable (its ``Persistence``).

One ``WalkState`` per run, on the main context (``RunContext.walk``); the walk
(``lattice.runtime.walk``) reads and sets it, the Runner makes it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from lattice.llm.base import LLMProvider
from lattice.runtime.durability import EPHEMERAL, Persistence


@dataclass
class Counters:
    """Limits count across every track of a run."""

    steps: int = 0
    visits: dict[str, int] = field(default_factory=dict)


@dataclass
class BranchResume:
    """A branch's progress read back from the journal (``lattice.runtime.resume``)."""

    lines: list[dict[str, Any]]
    """Its committed op lines, in order."""
    answers: list[dict[str, Any]] = field(default_factory=list)
    """Model answers its op in flight had received."""


@dataclass
class WalkState:
    """The walk's own part of a run (see the module's docstring)."""

    counters: Counters = field(default_factory=Counters)
    """Steps and visits of every track of the run."""
    base_provider: LLMProvider | None = None
    """The run's provider itself (each branch wraps it for its own journal lines)."""
    resume_branches: dict[str, BranchResume] = field(default_factory=dict)
    """Branch id → its progress in the journal, for a resumed run's forks."""
    limiter: asyncio.Semaphore | None = None
    """Bounds the ops that branches run at once (``[runtime] max_parallel``); made by the
    first branch (most runs have none)."""
    persistence: Persistence = EPHEMERAL
    """Where the walk journals and commits ops, keeps op records and looks up recorded
    calls: the run folder (``FolderJournal``) or a durable engine's history."""
    dead_end: str | None = None
    """The node the main walk stopped at because it had no way on (no end node reached)."""
    commit_here: bool = False
    """The main walk forces the journal to disk on the loop's thread: the loop is the
    run's own (``Runner.run``) and waits for nothing else meanwhile."""

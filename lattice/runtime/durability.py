"""What makes a run durable, as the walk sees it: one interface, several engines.

The walk (``lattice.runtime.walk``) calls a ``Durability`` at op boundaries: it journals
each op's line (the state changes it made, where the walk goes next), commits the
journal before the next op starts, writes the op's record, and wraps the run's provider
so that a model or tool call whose answer was recorded is looked up instead of being
made again. It never learns where any of that goes.

- The run folder (``lattice.runtime.journaled.FolderJournal``) is the first
  implementation: the journal is the folder's, committed to disk, and a resumed run
  reads its recorded model answers and tool results back from it.
- Temporal's history is the second (``lattice.durable.temporal``): an op that does I/O is
  an activity whose result the history records, so the walk journals nothing and a
  replayed workflow is given each op's recorded result instead of running it again.

``EPHEMERAL`` keeps nothing (a run without a folder).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from lattice.llm.base import LLMProvider
from lattice.runs.oplog import OpRecord


class Durability(Protocol):
    """Where a run's progress is made durable (see the module docstring)."""

    journals: bool
    """Whether the walk writes journal lines and commits them (``journal``, ``commit``)."""
    keeps_records: bool
    """Whether the walk builds op records for ``write_op``."""

    def journal(self, line: dict[str, Any]) -> None:
        """Keep one journal line (``lattice.runs.journal``: an op committed, failed or halted)."""
        ...

    async def commit(self, *, here: bool = False) -> None:
        """Make the journal durable before the next op starts; ``here``: on the loop's own
        thread (a synchronous run whose loop has nothing else to do)."""
        ...

    def write_op(self, label: str, op_id: str, record: OpRecord) -> None:
        """Keep an op's record (``label``: ``0007``, or ``0005.2.0003`` in a branch)."""
        ...

    def provider(
        self,
        inner: LLMProvider,
        recorded: Iterable[dict[str, Any]] = (),
        *,
        branch: str | None = None,
    ) -> LLMProvider:
        """The provider a track's model and tool calls go through: ``inner``, journaling
        each call and answering from ``recorded`` (the journal's lines of the op in flight)
        what was already answered."""
        ...


class Ephemeral:
    """Keeps nothing: a run without a folder (tests, benchmarks, embedded use)."""

    journals = False
    keeps_records = False

    def journal(self, line: dict[str, Any]) -> None:
        pass

    async def commit(self, *, here: bool = False) -> None:
        pass

    def write_op(self, label: str, op_id: str, record: OpRecord) -> None:
        pass

    def provider(
        self,
        inner: LLMProvider,
        recorded: Iterable[dict[str, Any]] = (),
        *,
        branch: str | None = None,
    ) -> LLMProvider:
        return inner


EPHEMERAL = Ephemeral()

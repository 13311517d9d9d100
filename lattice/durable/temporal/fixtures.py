"""``--fixtures FILE`` (and ``--record``) on Temporal: fixtures that travel with the run.

A local run reads its fixtures file, and appends what it records to it, on its own
machine. On Temporal the ops run on workers, so the table (prompt hash → fixture line)
travels with the run instead: the starting process reads the file, the workflow's input
holds it, and an op's request names it by digest only; a worker asks the workflow for it
once (its ``fixtures`` query) and keeps it (``FixtureTables``), as it keeps a run's
ExecIR. When recording, a worker calls its own live provider (its configuration: keys,
addresses) for a prompt the table lacks and returns the new lines with the op's result;
the workflow keeps them (the ``record`` query's ``fixtures_recorded``), and the process
that started the run appends them to its fixtures file when the run stops.

This module does not import ``temporalio``.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from lattice.llm.base import LLMProvider
from lattice.llm.fixture import FixtureProvider

CACHED_TABLES = 16
"""Fixture tables a worker keeps (by digest)."""

LoadTable = Callable[[], Awaitable[dict[str, dict[str, Any]]]]


def table_digest(table: dict[str, dict[str, Any]]) -> str:
    """The digest an op's request names a run's fixture table by."""
    text = json.dumps(table, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class RunFixtures(FixtureProvider):
    """A run's fixture table on a worker: replays it; with ``record_with``, calls that
    provider for a prompt it lacks and keeps the new line in ``recorded`` (not a file)."""

    def __init__(
        self, table: dict[str, dict[str, Any]], *, record_with: LLMProvider | None = None
    ) -> None:
        self.path = Path("fixtures.jsonl")  # named in messages only: lines go to ``recorded``
        self.record_with = record_with
        self.table = dict(table)
        self.recorded: list[dict[str, Any]] = []

    def keep(self, entry: dict[str, Any]) -> None:
        self.recorded.append(entry)


class FixtureTables:
    """The fixture tables of the runs a worker serves, by digest, each read once."""

    def __init__(self) -> None:
        self._tables: OrderedDict[str, dict[str, dict[str, Any]]] = OrderedDict()

    async def table(self, digest: str, load: LoadTable) -> dict[str, dict[str, Any]]:
        table = self._tables.get(digest)
        if table is None:
            table = await load()
            self._tables[digest] = table
            while len(self._tables) > CACHED_TABLES:
                self._tables.popitem(last=False)
        else:
            self._tables.move_to_end(digest)
        return table


def append_recorded(path: Path, lines: list[dict[str, Any]]) -> int:
    """Append the lines a run recorded on its workers to the fixtures file ``path``;
    how many."""
    if not lines:
        return 0
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        for line in lines:
            handle.write(json.dumps(line, ensure_ascii=False) + "\n")
    return len(lines)

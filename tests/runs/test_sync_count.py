"""How many times a durable run forces something to disk, per op (docs/performance.md).

Every sync Lattice makes goes through ``lattice.files`` (the last test holds that no
other module calls ``os.fsync`` or ``os.fdatasync``); the counter wraps those two calls
for the length of one run. Under ``durability="fsync"`` a chain of N model calls (N + 2
ops with its start and end ops) makes one sync per op boundary that matters and two for
its new folder: N + 3 in all, at most 1.1 per op; a chain of N ops that only compute
makes three, whatever N (a resume after a power cut redoes them).
"""

from __future__ import annotations

import ast
import asyncio
import os
import threading
from pathlib import Path
from typing import Any

import pytest

import lattice
from lattice.llm.mock import MockProvider
from lattice.lower import lower
from lattice.runs.journal import read_journal
from lattice.runtime import Runner, RunStore
from tests.builders import chain, node


class SyncCounter:
    """Counts ``os.fsync`` and ``os.fdatasync`` calls from any thread."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        self._lock = threading.Lock()
        for name in ("fsync", "fdatasync"):
            monkeypatch.setattr(os, name, self._counting(getattr(os, name)))

    def _counting(self, real: Any) -> Any:
        def counted(fd: int) -> None:
            with self._lock:
                self.calls += 1
            real(fd)

        return counted


def counter_chain(n: int) -> Runner:
    ops = [node(f"n{i}", "variableStore", operation="increment", name="count") for i in range(n)]
    return Runner(lower(chain(*ops)))


def model_chain(n: int) -> Runner:
    ops = [node(f"n{i}", "prompt", prompt=f"step {i}") for i in range(n)]
    return Runner(lower(chain(*ops)), provider=MockProvider(default="ok"))


@pytest.mark.parametrize("n", [10, 100])
@pytest.mark.parametrize("entry", ["run", "arun"])
def test_a_durable_run_makes_at_most_1_1_syncs_per_op_that_reaches_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, n: int, entry: str
) -> None:
    runner = model_chain(n)
    runner.store = RunStore(tmp_path / "runs", durability="fsync")
    counter = SyncCounter(monkeypatch)
    result = runner.run() if entry == "run" else asyncio.run(runner.arun())
    assert result.status == "completed"
    assert result.run_dir is not None
    journal = read_journal(result.run_dir)
    assert journal is not None
    ops = len(journal.ops)
    assert ops == n + 2  # the start and end ops count
    assert counter.calls / ops <= 1.1, f"{counter.calls} syncs for {ops} ops"
    assert counter.calls == n + 3


@pytest.mark.parametrize("n", [10, 100])
def test_ops_that_only_compute_are_synced_with_the_run_not_one_by_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, n: int
) -> None:
    runner = counter_chain(n)
    runner.store = RunStore(tmp_path / "runs", durability="fsync")
    counter = SyncCounter(monkeypatch)
    result = runner.run()
    assert result.status == "completed" and result.vars["count"] == n
    assert result.run_dir is not None
    # the journal as the run stops, its folder and the runs folder's entry
    assert counter.calls == 3
    journal = read_journal(result.run_dir)
    assert journal is not None and len(journal.ops) == n + 2


def test_a_run_under_os_durability_makes_no_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = counter_chain(10)
    runner.store = RunStore(tmp_path / "runs", durability="os")
    counter = SyncCounter(monkeypatch)
    assert runner.run().status == "completed"
    assert counter.calls == 0


def test_only_lattice_files_forces_anything_to_disk() -> None:
    """The counter above sees every sync because ``lattice/files.py`` is the one module
    that calls ``os.fsync`` or ``os.fdatasync``."""
    package = Path(lattice.__file__).parent
    callers = []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for item in ast.walk(tree):
            if (
                isinstance(item, ast.Attribute)
                and item.attr in ("fsync", "fdatasync")
                and isinstance(item.value, ast.Name)
                and item.value.id == "os"
            ):
                callers.append(f"{path.relative_to(package)}:{item.lineno}")
    assert callers and all(c.startswith("files.py:") for c in callers), callers

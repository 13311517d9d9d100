"""``lattice batch``: one workflow over a dataset, resumable, on one machine or a Ray cluster.

The package is engine-neutral at its core and keeps each concern in a module of its own:

- ``rows``: the inputs file (JSON lines: an inputs object, or ``{"id", "inputs",
  "answers"}``) read into rows, with bad lines reported by line number;
- ``results``: the results file, appended and flushed per row, forced to disk in the
  background, read back (a torn last line dropped) to resume;
- ``mocks``: a mock script for a batch (every row runs against its own copy; ``rows``
  overrides the answers of chosen rows);
- ``limits``: what the whole batch may spend (calls, cost) and how fast it may call
  (requests and tokens per minute), shared by every run in flight;
- ``worker``: what runs rows, in this process or in a Ray actor (``BatchWorker``);
- ``engine``: the driver: plans which rows to run, runs them on an engine (``local``:
  this process's event loop; ``ray``: ``ray_engine``), writes the results, keeps the
  progress and makes the summary;
- ``progress``, ``summary``, ``diff``: the live view, the summary at the end, and
  comparing two batches (or two runs).

``batch`` and ``abatch`` here are the Python entry points (``lattice.batch``,
``lattice.abatch``): they stand in for ``lattice.batch.api``'s and import it on their first
call, so that importing this package (as ``import lattice`` does) imports no engine.
Nothing here imports Ray unless the ``ray`` engine is chosen.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack

if TYPE_CHECKING:
    from lattice.batch.api import BatchArguments
    from lattice.batch.summary import BatchSummary
    from lattice.ir.models import ExecIR


async def abatch(
    workflow: str | Path | Mapping[str, Any] | ExecIR,
    inputs: str | Path | Iterable[Any],
    **arguments: Unpack[BatchArguments],
) -> BatchSummary:
    """Run ``workflow`` once per row of ``inputs`` on the caller's event loop, appending one
    results line per row to ``output``; rows already there are skipped (see ``batch``)."""
    from lattice.batch import api

    return await api.abatch(workflow, inputs, **arguments)


def batch(
    workflow: str | Path | Mapping[str, Any] | ExecIR,
    inputs: str | Path | Iterable[Any],
    **arguments: Unpack[BatchArguments],
) -> BatchSummary:
    """Run ``workflow`` (a path, a document or an ExecIR) once per row of ``inputs`` (a
    JSON-lines file, or rows: inputs objects or ``{"id", "inputs", "answers"}``) and
    append one line per row to ``output``: ``{"id", "status", "result", "error_type",
    "error", "node_id", "usage", "run_dir", …}``.

    Running it again skips the rows already in ``output``; ``retry_failed`` runs failed
    rows again, ``answers`` answers halted rows. ``runs_dir=None`` keeps runs in memory.
    The provider is ``mock`` (a script every row runs against from its start), ``fixtures``,
    ``provider`` (a name, or an ``LLMProvider`` every row shares; local engine only) or the
    configuration's. ``max_calls_total``, ``max_cost``, ``requests_per_minute`` and
    ``tokens_per_minute`` hold the whole batch; ``max_calls`` and ``max_tokens_total`` each
    run. ``engine="ray"`` spreads the rows over a Ray cluster (``ray_address``; a local
    one by default). Returns the ``BatchSummary`` (also written to ``summary_json``).
    Bad options raise ``LatticeUserError``; a row never raises, it has a status.
    The keyword arguments are ``BatchArguments``.
    """
    from lattice.batch import api

    return api.batch(workflow, inputs, **arguments)

"""``lattice.batch(...)`` and ``await lattice.abatch(...)``: a workflow over a dataset from
Python, with what ``lattice batch`` does on the command line (docs/python.md)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from lattice.batch.engine import BatchOptions, BatchRun, EngineName
from lattice.batch.limits import BatchLimits
from lattice.batch.rows import InvalidLine
from lattice.batch.summary import BatchSummary
from lattice.config import LatticeConfig
from lattice.ir.models import ExecIR
from lattice.llm.base import LLMProvider
from lattice.runtime.sync import run_sync


def _options(
    workflow: str | Path | Mapping[str, Any] | ExecIR,
    inputs: str | Path | Iterable[Any],
    **kwargs: Any,
) -> BatchOptions:
    limits = BatchLimits(
        max_calls_total=kwargs.pop("max_calls_total"),
        max_cost_usd=kwargs.pop("max_cost"),
        requests_per_minute=kwargs.pop("requests_per_minute"),
        tokens_per_minute=kwargs.pop("tokens_per_minute"),
    )
    return BatchOptions(workflow=workflow, inputs=inputs, limits=limits, **kwargs)


async def abatch(
    workflow: str | Path | Mapping[str, Any] | ExecIR,
    inputs: str | Path | Iterable[Any],
    *,
    output: str | Path,
    concurrency: int = 16,
    runs_dir: str | Path | None = "runs",
    provider: str | LLMProvider | None = None,
    mock: str | Path | Mapping[str, Any] | None = None,
    mock_latency: float = 0.0,
    fixtures: str | Path | None = None,
    config: str | Path | LatticeConfig | None = None,
    durability: Literal["fsync", "os"] | None = None,
    answers: Mapping[str, Any] | str | Path | None = None,
    retry_failed: bool = False,
    max_calls: int | None = None,
    max_tokens_total: int | None = None,
    max_steps: int | None = None,
    max_visits: int | None = None,
    repo: str | Path | None = None,
    max_calls_total: int | None = None,
    max_cost: float | None = None,
    requests_per_minute: int | None = None,
    tokens_per_minute: int | None = None,
    engine: EngineName = "local",
    ray_address: str | None = None,
    ray_actors: int | None = None,
    summary_json: str | Path | None = None,
    progress: str | bool | None = None,
    on_invalid: Callable[[InvalidLine], None] | None = None,
) -> BatchSummary:
    """Run ``workflow`` once per row of ``inputs`` on the caller's event loop, appending one
    results line per row to ``output``; rows already there are skipped (see ``batch``)."""
    options = _options(
        workflow,
        inputs,
        output=output,
        concurrency=concurrency,
        runs_dir=runs_dir,
        provider=provider,
        mock=mock,
        mock_latency=mock_latency,
        fixtures=fixtures,
        config=config,
        durability=durability,
        answers=answers,
        retry_failed=retry_failed,
        max_calls=max_calls,
        max_tokens_total=max_tokens_total,
        max_steps=max_steps,
        max_visits=max_visits,
        repo=repo,
        max_calls_total=max_calls_total,
        max_cost=max_cost,
        requests_per_minute=requests_per_minute,
        tokens_per_minute=tokens_per_minute,
        engine=engine,
        ray_address=ray_address,
        ray_actors=ray_actors,
        summary_json=summary_json,
        progress=progress,
        on_invalid=on_invalid,
    )
    return await BatchRun(options).arun()


def batch(
    workflow: str | Path | Mapping[str, Any] | ExecIR,
    inputs: str | Path | Iterable[Any],
    *,
    output: str | Path,
    concurrency: int = 16,
    runs_dir: str | Path | None = "runs",
    provider: str | LLMProvider | None = None,
    mock: str | Path | Mapping[str, Any] | None = None,
    mock_latency: float = 0.0,
    fixtures: str | Path | None = None,
    config: str | Path | LatticeConfig | None = None,
    durability: Literal["fsync", "os"] | None = None,
    answers: Mapping[str, Any] | str | Path | None = None,
    retry_failed: bool = False,
    max_calls: int | None = None,
    max_tokens_total: int | None = None,
    max_steps: int | None = None,
    max_visits: int | None = None,
    repo: str | Path | None = None,
    max_calls_total: int | None = None,
    max_cost: float | None = None,
    requests_per_minute: int | None = None,
    tokens_per_minute: int | None = None,
    engine: EngineName = "local",
    ray_address: str | None = None,
    ray_actors: int | None = None,
    summary_json: str | Path | None = None,
    progress: str | bool | None = None,
    on_invalid: Callable[[InvalidLine], None] | None = None,
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
    """
    options = _options(
        workflow,
        inputs,
        output=output,
        concurrency=concurrency,
        runs_dir=runs_dir,
        provider=provider,
        mock=mock,
        mock_latency=mock_latency,
        fixtures=fixtures,
        config=config,
        durability=durability,
        answers=answers,
        retry_failed=retry_failed,
        max_calls=max_calls,
        max_tokens_total=max_tokens_total,
        max_steps=max_steps,
        max_visits=max_visits,
        repo=repo,
        max_calls_total=max_calls_total,
        max_cost=max_cost,
        requests_per_minute=requests_per_minute,
        tokens_per_minute=tokens_per_minute,
        engine=engine,
        ray_address=ray_address,
        ray_actors=ray_actors,
        summary_json=summary_json,
        progress=progress,
        on_invalid=on_invalid,
    )
    run = BatchRun(options)
    return run_sync(run.arun, what="await lattice.abatch(...)")

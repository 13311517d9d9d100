"""``lattice.batch(...)`` and ``await lattice.abatch(...)``: a workflow over a dataset from
Python, with what ``lattice batch`` does on the command line (docs/python.md). The
package's ``batch`` and ``abatch`` stand in for these and import this module when called."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, Required, TypedDict, Unpack

from lattice.batch.engine import BatchOptions, BatchRun, EngineName
from lattice.batch.limits import BatchLimits
from lattice.batch.rows import InvalidLine
from lattice.batch.summary import BatchSummary
from lattice.config import LatticeConfig
from lattice.ir.models import ExecIR
from lattice.llm.base import LLMProvider
from lattice.runtime.sync import run_sync


class BatchArguments(TypedDict, total=False):
    """The keyword arguments of ``batch`` and ``abatch`` (``lattice batch``'s options):
    ``output`` is required, the others default as ``BatchOptions``'s fields do."""

    output: Required[str | Path]
    concurrency: int
    runs_dir: str | Path | None
    provider: str | LLMProvider | None
    mock: str | Path | Mapping[str, Any] | None
    mock_latency: float
    fixtures: str | Path | None
    config: str | Path | LatticeConfig | None
    durability: Literal["fsync", "os"] | None
    answers: Mapping[str, Any] | str | Path | None
    retry_failed: bool
    max_calls: int | None
    max_tokens_total: int | None
    max_steps: int | None
    max_visits: int | None
    repo: str | Path | None
    max_calls_total: int | None
    max_cost: float | None
    requests_per_minute: int | None
    tokens_per_minute: int | None
    engine: EngineName
    ray_address: str | None
    ray_actors: int | None
    summary_json: str | Path | None
    progress: str | bool | None
    on_invalid: Callable[[InvalidLine], None] | None


_LIMITS = {
    "max_calls_total": "max_calls_total",
    "max_cost": "max_cost_usd",
    "requests_per_minute": "requests_per_minute",
    "tokens_per_minute": "tokens_per_minute",
}
"""The arguments that hold the whole batch → their ``BatchLimits`` field."""


def _options(
    workflow: str | Path | Mapping[str, Any] | ExecIR,
    inputs: str | Path | Iterable[Any],
    arguments: BatchArguments,
) -> BatchOptions:
    given: dict[str, Any] = dict(arguments)
    unknown = given.keys() - BatchArguments.__required_keys__ - BatchArguments.__optional_keys__
    if unknown:
        raise TypeError(f"batch() got unexpected keyword arguments: {', '.join(sorted(unknown))}")
    limits = BatchLimits(**{_LIMITS[name]: given.pop(name) for name in _LIMITS if name in given})
    return BatchOptions(workflow=workflow, inputs=inputs, limits=limits, **given)


async def abatch(
    workflow: str | Path | Mapping[str, Any] | ExecIR,
    inputs: str | Path | Iterable[Any],
    **arguments: Unpack[BatchArguments],
) -> BatchSummary:
    """``lattice.abatch`` (documented there, in ``lattice/batch/__init__.py``)."""
    return await BatchRun(_options(workflow, inputs, arguments)).arun()


def batch(
    workflow: str | Path | Mapping[str, Any] | ExecIR,
    inputs: str | Path | Iterable[Any],
    **arguments: Unpack[BatchArguments],
) -> BatchSummary:
    """``lattice.batch`` (documented there, in ``lattice/batch/__init__.py``)."""
    run = BatchRun(_options(workflow, inputs, arguments))
    return run_sync(run.arun, what="await lattice.abatch(...)")

"""What runs a batch's rows: a ``BatchWorker`` holds the workflow's Runners, the
provider and the limiter's gate, and turns a ``RowTask`` into its results line.

The same worker runs in the driver's process (the ``local`` engine) and in every Ray
actor (the ``ray`` engine): it is built from a ``WorkerSpec``, plain data that travels
to other machines (the ExecIR, the document, the configuration, the mock script or the
fixtures' text, the run options), so that both engines run rows the same way.

One Runner serves every row with the same answers (a Runner compiles its ops once; its
answers and run metadata are its own); rows with answers of their own, or answers of
their own in the mock script, get a Runner each (kept in a small cache). Each row runs
in its own task, with its own ``RowState`` in a context variable: the provider every
Runner shares (``BatchProvider``) sends the row's calls to the row's own mock (a fresh
copy of the script) or to the shared provider, through the batch's gate.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import tempfile
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lattice.batch.limits import BUDGET_ERROR, LIMITER_LOST, Gate, LimiterLost
from lattice.batch.mocks import BatchMock
from lattice.batch.rows import RowId, row_key
from lattice.config import LatticeConfig
from lattice.contracts.usage import Usage
from lattice.errors import ErrorType, LatticeError, LatticeRunError
from lattice.events import EventKind
from lattice.ir.serialize import ir_from_json
from lattice.llm.base import (
    LLMProvider,
    LLMRequest,
    LLMResponse,
    close_loop_clients,
    provider_checkpoint,
    restore_provider,
)
from lattice.runs.checkpoint import load_checkpoint
from lattice.runs.redaction import make_redactor, secret_values
from lattice.runs.store import RunStore
from lattice.runtime.context import Interrupted
from lattice.runtime.results import RunResult
from lattice.runtime.runner import RunLimits, Runner
from lattice.runtime.settings import settings_from_config
from lattice.service.providers import ProviderChoice

RUNNER_CACHE = 64
"""Runners kept for rows with answers of their own (each compiles the workflow's ops)."""


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker needs to run rows, as plain data (it travels to Ray actors)."""

    ir: dict[str, Any]
    workflow: dict[str, Any] | None
    config: dict[str, Any]
    config_source: str | None
    meta: dict[str, Any]
    """What every run folder's checkpoint records (as ``lattice run`` records it)."""
    runs_dir: str | None
    mock: dict[str, Any] | None = None
    """The mock script (with its ``rows``), when the batch runs on one."""
    mock_latency: float = 0.0
    choice: ProviderChoice | None = None
    """The provider otherwise (``--provider``, ``--fixtures``, ``--record``)."""
    fixtures_text: str | None = None
    """The fixtures' content, for a worker on a machine that lacks the file."""
    max_calls: int | None = None
    max_tokens_total: int | None = None
    max_steps: int | None = None
    max_visits: int | None = None
    repo: str | None = None


@dataclass(slots=True)
class RowTask:
    """One row to run: from its start, or (``resume_dir``) by resuming its run folder."""

    id: RowId
    line: int
    inputs: dict[str, Any]
    answers: dict[str, Any] = field(default_factory=dict)
    resume_dir: str | None = None
    resume_answers: dict[str, Any] | None = None
    """Answers for the resumed run's next questions."""
    run_id: str | None = None
    """The id of a new run's folder (chosen by the driver, which can then name the folder
    of a row it interrupted)."""
    carried: dict[str, int] | None = None
    """Repairs, escalations and retries of the run's earlier attempts (a resumed row)."""


@dataclass(slots=True)
class RowState:
    """A row's run, as the provider sees it: its own mock, what stopped it before a call
    (``BUDGET_ERROR``: the budget refused the call; ``LIMITER_LOST``: the limiter could
    not be asked), if anything did, and what its calls spent (counted as the run counts
    them: every request, and each answer's tokens)."""

    provider: LLMProvider | None
    stopped_by: str | None = None
    usage: Usage = field(default_factory=Usage)


_ROW: contextvars.ContextVar[RowState] = contextvars.ContextVar("lattice_batch_row")


class BatchProvider:
    """The provider of every Runner of a worker: a row's calls go to its own mock (or to
    the shared provider), through the batch's gate when the batch has limits."""

    def __init__(self, shared: LLMProvider | None, gate: Gate | None, name: str) -> None:
        self.shared = shared
        self.gate = gate
        self.name = name

    def _inner(self) -> LLMProvider:
        row = _ROW.get(None)
        provider = row.provider if row is not None else None
        provider = provider or self.shared
        if provider is None:  # pragma: no cover - a worker always sets the row's state
            raise LatticeRunError("no provider for this row", error_type=ErrorType.INTERNAL_ERROR)
        return provider

    async def complete(self, request: LLMRequest) -> LLMResponse:
        inner = self._inner()
        row = _ROW.get(None)
        if row is not None:
            row.usage.requests += 1
        if self.gate is None:
            response = await inner.complete(request)
        else:
            response = await self._gated(inner, request, self.gate)
        if row is not None:
            row.usage.add(response.model, request.model_class, response.usage)
        return response

    async def _gated(self, inner: LLMProvider, request: LLMRequest, gate: Gate) -> LLMResponse:
        """``inner``'s answer, once the batch's limiter lets the request go."""
        estimate = (request.size_chars() + 3) // 4
        # Interrupted, not failed: the op takes no ``failed`` route, the run stops before
        # it (its folder resumes from that op) and the row is run again later.
        try:
            delay = await gate.acquire(estimate)
        except LimiterLost as exc:
            _stop_row(LIMITER_LOST)
            raise Interrupted(
                f"{exc}: this row stopped before this model call and goes on with the next "
                "lattice batch"
            ) from None
        if delay is None:
            _stop_row(BUDGET_ERROR)
            raise Interrupted(
                "the batch's budget is spent: this row stopped before this model call and "
                "goes on with the next lattice batch that has budget left"
            )
        if delay > 0:
            await asyncio.sleep(delay)
        response = await inner.complete(request)
        gate.record(
            response.model,
            response.usage.input_tokens,
            response.usage.output_tokens,
            estimate,
        )
        return response

    def checkpoint(self) -> Any:
        return provider_checkpoint(self._inner())

    def restore(self, state: Any, *, committed: Any = None) -> None:
        """Hand a resumed run's provider state to the row's provider (its mock)."""
        restore_provider(self._inner(), state, committed=committed)

    async def aclose_loop_clients(self) -> None:
        await close_loop_clients(self.shared)


def _stop_row(reason: str) -> None:
    """Mark the running row as stopped before a call, for ``reason`` (its error type)."""
    row = _ROW.get(None)
    if row is not None:
        row.stopped_by = reason


def compact_usage(usage: Usage) -> dict[str, Any]:
    """A results line's ``usage``: totals, cost and tokens per model."""
    return {
        "calls": usage.calls,
        "requests": usage.requests,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "estimated_cost_usd": usage.estimated_cost_usd,
        "by_model": {k: dict(v) for k, v in usage.by_model.items()},
    }


class BatchWorker:
    """Runs rows of one batch (many at once, on the caller's event loop)."""

    def __init__(
        self,
        spec: WorkerSpec,
        *,
        gate: Gate | None = None,
        provider: LLMProvider | None = None,
    ) -> None:
        self.spec = spec
        self.ir = ir_from_json(spec.ir)
        config = LatticeConfig.model_validate(spec.config)
        config.source = spec.config_source
        self.config = config
        self.settings = settings_from_config(
            config,
            max_calls=spec.max_calls,
            max_tokens_total=spec.max_tokens_total,
            repo_root=Path(spec.repo) if spec.repo else None,
        )
        self.mock = (
            BatchMock.from_data(spec.mock, latency=spec.mock_latency)
            if spec.mock is not None
            else None
        )
        self._fixtures_copy: Any = None
        if provider is None and self.mock is None:
            provider = self._build_shared(spec, config)
        name = provider.name if provider is not None else "mock"
        self.provider = BatchProvider(provider, gate, name)
        self.store = RunStore(
            Path(spec.runs_dir) if spec.runs_dir else None, durability=config.runs.durability
        )
        self.limits = RunLimits(
            max_steps=spec.max_steps or config.runtime.max_steps,
            max_visits=spec.max_visits or config.runtime.max_visits,
        )
        secret_names = self.settings.secret_names()
        self._redact = make_redactor(secret_names)
        self._masks = bool(secret_values(secret_names))
        self._runners: OrderedDict[str, Runner] = OrderedDict()
        self.stopped_usage: dict[str, dict[str, Any]] = {}
        """What each row cancelled part-way had spent (by row key; see ``_spent``)."""

    def _build_shared(self, spec: WorkerSpec, config: LatticeConfig) -> LLMProvider:
        choice = spec.choice or ProviderChoice()
        if (
            choice.fixtures
            and spec.fixtures_text is not None
            and not Path(choice.fixtures).is_file()
        ):
            # a worker on another machine: the fixtures travelled as text
            self._fixtures_copy = tempfile.NamedTemporaryFile(  # noqa: SIM115 - lives as long as the worker
                "w", suffix=".jsonl", encoding="utf-8", delete=True
            )
            self._fixtures_copy.write(spec.fixtures_text)
            self._fixtures_copy.flush()
            choice = ProviderChoice(
                name=choice.name,
                mock=choice.mock,
                fixtures=self._fixtures_copy.name,
                record=choice.record,
            )
        return choice.build(config)

    # -- runners ----------------------------------------------------------------------

    def runner_for(self, row_id: RowId, answers: dict[str, Any]) -> Runner:
        """The Runner of a row: shared by every row with the same answers, unless the mock
        script gives the row answers of its own."""
        own_script = self.mock is not None and self.mock.overridden(row_id)
        key = json.dumps(answers, sort_keys=True, ensure_ascii=False) if answers else ""
        if own_script:
            key += "\0" + str(row_id)
        runner = self._runners.get(key)
        if runner is not None:
            self._runners.move_to_end(key)
            return runner
        meta = dict(self.spec.meta)
        if own_script and self.mock is not None:
            meta["mock"] = None
            meta["mock_script"] = self.mock.script_for(row_id)
        runner = Runner(
            self.ir,
            provider=self.provider,
            store=self.store,
            limits=self.limits,
            answers=answers,
            workflow=self.spec.workflow,
            meta=meta,
            settings=self.settings,
        )
        self._runners[key] = runner
        if len(self._runners) > RUNNER_CACHE:
            self._runners.popitem(last=False)
        return runner

    # -- rows -------------------------------------------------------------------------

    async def run_row(self, task: RowTask) -> dict[str, Any]:
        """Run one row to its end; its results line (never raises, but for cancellation)."""
        state = RowState(self.mock.for_row(task.id) if self.mock is not None else None)
        token = _ROW.set(state)
        started = time.perf_counter()
        try:
            folder = Path(task.resume_dir) if task.resume_dir is not None else None
            if folder is not None and _completed(folder):
                # the run ended after the batch last saw it (an interrupted batch)
                result = _result_of(folder)
            elif folder is not None and (folder / "checkpoint.json").is_file():
                result = await Runner.aresume(
                    folder,
                    answers=task.resume_answers,
                    provider=self.provider,
                    settings=self.settings,
                    store=self.store
                    if self.store.root is not None
                    else RunStore(folder.parent, durability=self.store.durability),
                )
            else:
                runner = self.runner_for(task.id, task.answers)
                run_id = task.run_id if self.store.root is not None else None
                result = await runner.arun(task.inputs, run_id=run_id)
        except asyncio.CancelledError:
            self.stopped_usage[row_key(task.id)] = self._spent(task, state)
            raise
        except LatticeError as exc:
            return self._error_line(task, exc, started, state)
        except Exception as exc:  # a bug must not end the batch: the row says what it was
            return self._error_line(task, exc, started, state)
        finally:
            _ROW.reset(token)
        return self._line(task, result, state, started)

    def _spent(self, task: RowTask, state: RowState) -> dict[str, Any]:
        """The usage of a row stopped part-way: its run's, as its folder recorded it when
        it stopped (earlier attempts of a resumed run included), or, without a folder,
        what this attempt's calls spent."""
        folder = task.resume_dir
        if folder is None and self.store.root is not None and task.run_id is not None:
            folder = str(self.store.root / task.run_id)
        usage = (_recorded_usage(Path(folder)) if folder is not None else None) or state.usage
        usage.estimate_cost(self.settings.prices)
        return compact_usage(usage)

    def _line(
        self, task: RowTask, result: RunResult, state: RowState, started: float
    ) -> dict[str, Any]:
        failure = result.failure
        status: str = result.status
        error_type = failure.category if failure is not None else None
        if state.stopped_by is not None:
            status, error_type = "interrupted", state.stopped_by
        counts = result.count_events(EventKind.REPAIR_ATTEMPT, EventKind.ESCALATED, EventKind.RETRY)
        repairs, escalations = counts[EventKind.REPAIR_ATTEMPT], counts[EventKind.ESCALATED]
        retries = counts[EventKind.RETRY]
        if task.carried:
            repairs += task.carried.get("repairs", 0)
            escalations += task.carried.get("escalations", 0)
            retries += task.carried.get("retries", 0)
        line = {
            "id": task.id,
            "status": status,
            "result": result.output if status == "completed" else None,
            "error_type": error_type,
            "error": failure.summary if failure is not None and status != "completed" else None,
            "node_id": failure.node_id if failure is not None and status != "completed" else None,
            "usage": compact_usage(result.usage),
            "run_dir": str(result.run_dir) if result.run_dir is not None else None,
            "line": task.line,
            "latency_ms": round((time.perf_counter() - started) * 1000, 2),
            "repairs": repairs,
            "escalations": escalations,
            "retries": retries,
        }
        return self._masked(line) if self._masks else line

    def _error_line(
        self, task: RowTask, exc: Exception, started: float, state: RowState
    ) -> dict[str, Any]:
        """The line of a row that raised instead of ending (a folder that cannot be resumed,
        bad answers): ``failed``, with the error's type and message."""
        if isinstance(exc, LatticeError):
            error_type, message = exc.error_type, exc.message
        else:
            error_type, message = ErrorType.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}"
        line = {
            "id": task.id,
            "status": "interrupted" if state.stopped_by is not None else "failed",
            "result": None,
            "error_type": state.stopped_by or error_type,
            "error": message,
            "node_id": None,
            "usage": compact_usage(Usage()),
            "run_dir": task.resume_dir,
            "line": task.line,
            "latency_ms": round((time.perf_counter() - started) * 1000, 2),
            "repairs": 0,
            "escalations": 0,
            "retries": 0,
        }
        return self._masked(line) if self._masks else line

    def _masked(self, line: dict[str, Any]) -> dict[str, Any]:
        """The line with secrets masked, as ``lattice run`` masks what it prints."""
        text = json.dumps(line, ensure_ascii=False, default=str)
        masked = self._redact(text)
        return line if masked == text else dict(json.loads(masked))


def _completed(folder: Path) -> bool:
    checkpoint = load_checkpoint(folder)
    return checkpoint is not None and checkpoint.get("status") == "completed"


def _recorded_usage(folder: Path) -> Usage | None:
    """The usage a run folder's checkpoint records (None without a readable one)."""
    try:
        return Usage.from_json((load_checkpoint(folder) or {})["usage"])
    except (ValueError, KeyError, TypeError):
        return None


def _result_of(folder: Path) -> RunResult:
    """The result a completed run folder recorded (``result.json``)."""
    data = json.loads((folder / "result.json").read_text(encoding="utf-8"))
    return RunResult(
        status="completed",
        output=data.get("output"),
        state={"vars": data.get("vars") or {}},
        run_id=str(data.get("run_id") or folder.name),
        run_dir=folder,
        usage=Usage.from_json(data.get("usage")),
    )

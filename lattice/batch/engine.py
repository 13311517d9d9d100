"""The batch driver: plans which rows to run, runs them on an engine, writes each row's
results line as it ends, keeps the progress and makes the summary.

Resuming is planning: the results file says what happened to each row before.

| the row's last line | this invocation |
|---|---|
| none | runs the row (with the answers given for every row, its own, and those given for it) |
| ``completed`` | skips it |
| ``failed`` | skips it; with ``retry_failed``, resumes its run folder (or runs it again) |
| ``halted`` | skips it, unless the answers given answer the question it waits on: then resumes its run folder with them (or runs it again with them) |
| ``interrupted`` (the budget, or the batch, stopped it) | resumes its run folder (or runs it again) |

Engines (``Engine``): ``local`` (``lattice.batch.local``) and ``ray``
(``lattice.batch.ray_engine``, imported only when chosen). Only the driver writes the
results file and shows progress; workers return results lines.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import Counter
from collections.abc import AsyncGenerator, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Protocol

from lattice.batch.limits import BUDGET_ERROR, BatchLimits
from lattice.batch.mocks import BatchMock
from lattice.batch.progress import ProgressView, Tracker, choose_view
from lattice.batch.results import ResultsFile, WorkflowStamp, workflow_digest
from lattice.batch.rows import (
    GivenAnswers,
    InvalidLine,
    Row,
    read_answers,
    read_rows,
    row_key,
)
from lattice.batch.summary import BatchSummary, summarize
from lattice.batch.worker import RowTask, WorkerSpec
from lattice.config import LatticeConfig, RunsConfig, load_config
from lattice.document.loader import read_json_file
from lattice.errors import LatticeUserError
from lattice.files import atomic_write_text
from lattice.ir.models import ExecIR
from lattice.ir.serialize import ir_to_dict
from lattice.llm.base import LIVE_PROVIDERS, LLMProvider
from lattice.lower import lower
from lattice.runs.store import RunStore, new_run_id
from lattice.runtime.runner import Runner, check_answers
from lattice.runtime.settings import settings_from_config
from lattice.service.mocks import check_script_nodes, check_tool_keys
from lattice.service.providers import ProviderChoice
from lattice.service.runs import ProviderSpec, repo_root

EngineName = Literal["local", "ray"]


@dataclass
class BatchOptions:
    """Everything a batch is told (``lattice batch`` flags, ``lattice.batch(...)`` arguments)."""

    workflow: str | Path | Mapping[str, Any] | ExecIR
    inputs: str | Path | Iterable[Any]
    output: str | Path
    document: Mapping[str, Any] | None = None
    """The workflow document recorded in run folders (read from ``workflow`` when it is a
    path or a document)."""
    concurrency: int = 16
    runs_dir: str | Path | None = "runs"
    provider: str | LLMProvider | None = None
    mock: str | Path | Mapping[str, Any] | None = None
    mock_latency: float = 0.0
    fixtures: str | Path | None = None
    record: bool = False
    config: str | Path | LatticeConfig | None = None
    durability: Literal["fsync", "os"] | None = None
    """Overrides ``[runs] durability`` for run folders and the results file."""
    answers: Mapping[str, Any] | str | Path | None = None
    retry_failed: bool = False
    max_calls: int | None = None
    max_tokens_total: int | None = None
    max_steps: int | None = None
    max_visits: int | None = None
    repo: str | Path | None = None
    limits: BatchLimits = field(default_factory=BatchLimits)
    engine: EngineName = "local"
    ray_address: str | None = None
    ray_actors: int | None = None
    summary_json: str | Path | None = None
    progress: str | bool | None = None
    """``"rich"``, ``"plain"``, ``"none"``, or True (rich on a terminal, else plain)."""
    progress_interval: float = 10.0
    on_invalid: Callable[[InvalidLine], None] | None = None
    """Called with each skipped input line as it is found."""
    on_warning: Callable[[str], None] | None = None
    """Called with each warning about the batch's options (e.g. its mock script)."""


class Engine(Protocol):
    """Where rows run. ``run`` yields each row's results line as the row ends."""

    name: str

    @property
    def stopped_usage(self) -> Mapping[str, dict[str, Any]]:
        """What each row the engine stopped part-way had spent, by row key (once closed)."""
        ...

    async def start(self) -> None: ...

    def run(self, tasks: Iterable[RowTask]) -> AsyncGenerator[dict[str, Any], None]: ...

    def stop(self) -> None: ...

    async def stop_reason(self) -> str | None: ...

    async def close(self) -> dict[str, Any] | None: ...


@dataclass
class Prepared:
    """A batch checked and ready to run."""

    ir: ExecIR
    config: LatticeConfig
    spec: WorkerSpec
    provider: LLMProvider | None
    """The provider instance rows share (local engine)."""
    prices: dict[str, tuple[float, float]]
    check: Callable[[Row], None]
    given: GivenAnswers
    limits: BatchLimits = field(default_factory=BatchLimits)
    """The batch's limits: the options', and on Ray the provider's configured
    ``requests_per_minute`` (each worker's own provider only holds itself to it)."""


def _lowered(options: BatchOptions) -> tuple[ExecIR, Mapping[str, Any] | None]:
    workflow = options.workflow
    if isinstance(workflow, ExecIR):
        return workflow, options.document
    if isinstance(workflow, Mapping):
        return lower(dict(workflow)), options.document or workflow
    path = Path(workflow)
    return lower(path), options.document or read_json_file(path)


def _config(options: BatchOptions) -> tuple[LatticeConfig, str | None]:
    if isinstance(options.config, LatticeConfig):
        config, path = options.config, options.config.source
    else:
        path = str(options.config) if options.config is not None else None
        config = load_config(path)
    if options.durability is not None and options.durability != config.runs.durability:
        source = config.source
        config = config.model_copy(update={"runs": RunsConfig(durability=options.durability)})
        config.source = source
    return config, path


def prepare(options: BatchOptions) -> Prepared:
    """Check the options, lower the workflow, choose the provider; user errors raise here."""
    if options.concurrency < 1:
        raise LatticeUserError("concurrency is at least 1")
    if options.engine not in ("local", "ray"):
        raise LatticeUserError(f"unknown engine {options.engine!r}; choose local or ray")
    config, config_path = _config(options)
    ir, document = _lowered(options)
    repo = repo_root(str(options.repo)) if options.repo else None
    settings = settings_from_config(config, repo_root=repo)
    if options.limits.max_cost_usd is not None and not settings.prices:
        raise LatticeUserError(
            '--max-cost needs the models\' prices: add [prices."<model>"] input = …, '
            "output = … (USD per million tokens) to lattice.toml"
        )
    provider: LLMProvider | None = None
    mock_data: dict[str, Any] | None = None
    choice: ProviderChoice | None = None
    fixtures_text: str | None = None
    given_provider = options.provider
    if given_provider is not None and not isinstance(given_provider, str):
        if options.mock is not None or options.fixtures is not None:
            raise LatticeUserError("give a provider object, or mock/fixtures, not both")
        if options.engine == "ray":
            raise LatticeUserError(
                "the ray engine builds providers on its workers: give provider by name "
                "(or mock=, fixtures=), not as an object"
            )
        provider = given_provider
        meta = {"provider_arg": getattr(provider, "name", None)}
    elif options.mock is not None:
        mock_data, meta = _mock_script(options, options.mock, ir)
    else:
        if options.mock_latency:
            raise LatticeUserError(
                "mock latency applies to mock scripts only", error_type="mock_error"
            )
        choice = ProviderChoice(
            name=given_provider,
            fixtures=str(options.fixtures) if options.fixtures is not None else None,
            record=options.record,
        )
        if options.record and options.engine == "ray":
            raise LatticeUserError("--record appends to one fixtures file: use the local engine")
        provider = choice.build(config)  # a bad choice or a missing key fails now
        if options.engine == "ray" and choice.fixtures:
            fixtures_text = Path(choice.fixtures).read_text(encoding="utf-8")
        meta = ProviderSpec(choice).to_meta()
    runs_dir = Path(options.runs_dir).resolve() if options.runs_dir is not None else None
    meta = {
        **meta,
        "config": config_path,
        "max_calls": options.max_calls,
        "max_tokens_total": options.max_tokens_total,
        "repo": str(repo) if repo else None,
        "workflow": ir.workflow.id,
        "batch": {"output": str(Path(options.output).resolve())},
    }
    spec = WorkerSpec(
        ir=ir_to_dict(ir),
        workflow=dict(document) if document is not None else None,
        config=config.model_dump(mode="json"),
        config_source=config.source,
        meta=meta,
        runs_dir=str(runs_dir) if runs_dir is not None else None,
        mock=mock_data,
        mock_latency=options.mock_latency,
        choice=choice,
        fixtures_text=fixtures_text,
        max_calls=options.max_calls,
        max_tokens_total=options.max_tokens_total,
        max_steps=options.max_steps,
        max_visits=options.max_visits,
        repo=str(repo) if repo else None,
    )
    given = _given_answers(options.answers, ir)
    limits = _limits(options, choice, config)
    return Prepared(
        ir, config, spec, provider, dict(settings.prices), _row_check(ir), given, limits
    )


def _row_check(ir: ExecIR) -> Callable[[Row], None]:
    """What checks a row before it runs: its inputs against the workflow's, its answers."""
    validator = Runner(ir, store=RunStore(None))

    def check(row: Row) -> None:
        validator.validate_inputs(row.inputs)
        if row.answers:
            check_answers(ir, row.answers)

    return check


def _limits(
    options: BatchOptions, choice: ProviderChoice | None, config: LatticeConfig
) -> BatchLimits:
    """The batch's limits; on Ray, requests per minute default to the live provider's."""
    limits = options.limits
    if options.engine == "ray" and limits.requests_per_minute is None and choice is not None:
        live = choice.name or config.llm.provider
        if live in LIVE_PROVIDERS and config.provider_config(live).requests_per_minute:
            limits = replace(
                limits, requests_per_minute=config.provider_config(live).requests_per_minute
            )
    return limits


def _mock_script(
    options: BatchOptions, given: str | Path | Mapping[str, Any], ir: ExecIR
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The batch's mock script (``given``: the script or its file), checked against ``ir``,
    and the provider its runs record in their meta."""
    if options.provider not in (None, "mock") or options.fixtures is not None or options.record:
        raise LatticeUserError(
            "--mock is used alone in a batch (it implies --provider mock; to record "
            "fixtures from a mock script, use lattice run --record)",
            error_type="mock_error",
        )
    if isinstance(given, Mapping):
        mock_data = dict(given)
    else:
        try:
            mock_data = json.loads(Path(given).read_text(encoding="utf-8"))
        except OSError as exc:
            raise LatticeUserError(
                f"cannot read mock script {given}: {exc.strerror}",
                error_type="mock_error",
            ) from exc
        except (json.JSONDecodeError, RecursionError) as exc:
            raise LatticeUserError(
                f"mock script {given} is not valid JSON: {exc}", error_type="mock_error"
            ) from None
    mock = BatchMock.from_data(mock_data, latency=options.mock_latency)
    named = "mock script" if isinstance(given, Mapping) else f"mock script {given}"
    check_script_nodes(ir, mock.script.get("responses") or {}, where=named)
    check_tool_keys(ir, mock.script.get("tools") or {}, where=named)
    for row_id, override in mock.rows.items():
        where = f"{named}: rows[{json.dumps(row_id, ensure_ascii=False)}]"
        check_script_nodes(ir, override.get("responses") or {}, where=where)
        check_tool_keys(ir, override.get("tools") or {}, where=where)
    if "rows" in mock_data or isinstance(given, Mapping):
        # each run folder records the script it ran against (lattice run cannot read
        # a script with rows)
        meta = ProviderSpec(script=mock.script, latency=options.mock_latency).to_meta()
    else:
        meta = ProviderSpec(ProviderChoice(mock=str(given)), latency=options.mock_latency).to_meta()
    return mock_data, meta


def _given_answers(answers: Mapping[str, Any] | str | Path | None, ir: ExecIR) -> GivenAnswers:
    if answers is None:
        return GivenAnswers()
    given = (
        GivenAnswers(every_row=dict(answers))
        if isinstance(answers, Mapping)
        else read_answers(Path(answers))
    )
    what = "answers" if isinstance(answers, Mapping) else f"answers in {answers}"
    check_answers(ir, given.every_row, what)
    for key, row_answers in given.by_row.items():
        check_answers(ir, row_answers, f"{what} for row {key}")
    return given


def _carried(line: Mapping[str, Any]) -> dict[str, int]:
    return {k: int(line.get(k) or 0) for k in ("repairs", "escalations", "retries")}


def plan(
    rows: Iterable[Row],
    latest: Mapping[str, Mapping[str, Any]],
    *,
    retry_failed: bool,
    given: GivenAnswers,
) -> tuple[list[RowTask], Counter[str]]:
    """The rows to run now (``RowTask``s), and the rows left as they are, by status."""
    tasks: list[RowTask] = []
    skipped: Counter[str] = Counter()
    for row in rows:
        previous = latest.get(row.key)
        if previous is None:
            tasks.append(RowTask(row.id, row.line, row.inputs, given.merged(row)))
            continue
        status = previous.get("status")
        run_dir = previous.get("run_dir")
        resume_answers: dict[str, Any] | None = None
        if status == "completed":
            skipped["completed"] += 1
            continue
        if status == "failed" and not retry_failed:
            skipped["failed"] += 1
            continue
        if status == "halted":
            resume_answers = given.for_row(row.key)
            node = previous.get("node_id")
            if not resume_answers or (node is not None and node not in resume_answers):
                skipped["halted"] += 1
                continue
        answers = {**given.merged(row), **(resume_answers or {})}
        if run_dir:
            tasks.append(
                RowTask(
                    row.id,
                    row.line,
                    row.inputs,
                    answers,
                    resume_dir=str(run_dir),
                    resume_answers=resume_answers,
                    carried=_carried(previous),
                )
            )
        else:
            tasks.append(RowTask(row.id, row.line, row.inputs, answers))
    return tasks, skipped


def _dispatched(
    tasks: Iterable[RowTask],
    in_flight: dict[str, RowTask],
    runs_dir: str | None,
    results: ResultsFile,
) -> Iterator[RowTask]:
    """The tasks as the engine takes them: a new run gets its folder's id now, and counts
    as in flight until its line comes back. With run folders, the row's ``interrupted``
    line (naming its folder) is written before it starts: if the batch is killed, the
    next one resumes that folder instead of running the row again from its start; the
    row's own line, when it ends, supersedes it."""
    for task in tasks:
        if runs_dir is not None and (
            task.resume_dir is None or not (Path(task.resume_dir) / "checkpoint.json").is_file()
        ):
            task.run_id = new_run_id()  # unless the row resumes a folder
        in_flight[row_key(task.id)] = task
        if runs_dir is not None:
            results.append(_interrupted_line(task, runs_dir))
        yield task


def _interrupted_line(
    task: RowTask, runs_dir: str | None, usage: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The line of a row that was running when the batch was interrupted: its folder (if
    it has one) is resumed by the next batch; ``usage``: what it had spent, when known."""
    folders = [task.resume_dir]
    if runs_dir is not None and task.run_id is not None:
        folders.insert(0, str(Path(runs_dir) / task.run_id))
    known = [f for f in folders if f is not None]
    run_dir = next((f for f in known if (Path(f) / "checkpoint.json").is_file()), None)
    run_dir = run_dir or (known[0] if known else None)
    carried = task.carried or {}
    return {
        "id": task.id,
        "status": "interrupted",
        "result": None,
        "error_type": "interrupted",
        "error": "the batch stopped while this row ran; the next batch goes on with it",
        "node_id": None,
        "usage": usage,
        "run_dir": run_dir,
        "line": task.line,
        "latency_ms": None,
        "repairs": carried.get("repairs", 0),
        "escalations": carried.get("escalations", 0),
        "retries": carried.get("retries", 0),
    }


def make_engine(options: BatchOptions, prepared: Prepared) -> Engine:
    if options.engine == "ray":
        from lattice.batch.ray_engine import RayEngine

        return RayEngine(
            prepared.spec,
            concurrency=options.concurrency,
            limits=prepared.limits,
            prices=prepared.prices,
            address=options.ray_address,
            actors=options.ray_actors,
        )
    from lattice.batch.local import LocalEngine

    return LocalEngine(
        prepared.spec,
        concurrency=options.concurrency,
        limits=options.limits,
        prices=prepared.prices,
        provider=prepared.provider,
    )


class BatchRun:
    """One invocation of a batch. ``summary`` is set when it ends, interrupted or not."""

    def __init__(
        self,
        options: BatchOptions,
        *,
        engine: Engine | None = None,
        view: ProgressView | None = None,
    ) -> None:
        self.options = options
        self.prepared = prepare(options)
        self.engine = engine
        self.view = view or choose_view(options.progress, interval=options.progress_interval)
        self.summary: BatchSummary | None = None

    # long: the driver's one try/finally: start the engine, write each row's line as it ends, stop, close
    async def arun(self) -> BatchSummary:
        options, prepared = self.options, self.prepared
        output = Path(options.output)
        if (
            isinstance(options.inputs, str | Path)
            and Path(options.inputs).resolve() == output.resolve()
        ):
            raise LatticeUserError("the results file (-o) must not be the inputs file")
        stamp = WorkflowStamp(
            prepared.ir.workflow.id, workflow_digest(prepared.ir, prepared.spec.workflow)
        )
        source = Path(options.inputs) if isinstance(options.inputs, str | Path) else options.inputs
        # read before the results file is made: inputs refused leave no file behind
        rows, invalid = read_rows(source, prepared.check)
        results = ResultsFile(output, durability=prepared.config.runs.durability, workflow=stamp)
        interrupted = False
        ran = 0
        stopped: str | None = None
        skipped: Counter[str] = Counter()
        limiter: dict[str, Any] | None = None
        started = time.perf_counter()
        try:
            self._warn_unknown_mock_rows(rows)
            if options.on_invalid is not None:
                for item in invalid:
                    options.on_invalid(item)
            tasks, skipped = plan(
                rows, results.latest, retry_failed=options.retry_failed, given=prepared.given
            )
            engine = self.engine or make_engine(options, prepared)
            tracker = Tracker(len(tasks))
            in_flight: dict[str, RowTask] = {}
            runs_dir = prepared.spec.runs_dir
            ticker: asyncio.Task[None] | None = None
            try:
                if tasks:
                    await engine.start()
                    self.view.start(tracker)
                    ticker = asyncio.create_task(self._tick())
                    started = time.perf_counter()
                    tracker.started = tracker.clock()
                    async with contextlib.aclosing(
                        engine.run(_dispatched(tasks, in_flight, runs_dir, results))
                    ) as lines:
                        async for line in lines:
                            in_flight.pop(row_key(line["id"]), None)
                            results.append(line)
                            tracker.add(line)
                            ran += 1
                            if line.get("error_type") == BUDGET_ERROR and tracker.stopping is None:
                                engine.stop()
                                tracker.stopping = await engine.stop_reason() or "budget spent"
                    reason = await engine.stop_reason()
                    if reason and (ran < len(tasks) or tracker.by_status.get("interrupted")):
                        stopped = reason
            except asyncio.CancelledError:
                interrupted = True
                raise
            finally:
                if ticker is not None:
                    ticker.cancel()
                self.view.stop()
                limiter = await engine.close()
                for key, task in in_flight.items():  # stopped part-way: run next time
                    usage = engine.stopped_usage.get(key)
                    # with folders, a line was written as the row started: this one says
                    # what the row spent
                    if usage is not None or runs_dir is None:
                        results.append(_interrupted_line(task, runs_dir, usage))
        except asyncio.CancelledError:
            interrupted = True
            raise
        finally:
            results.close(compact=not interrupted)
            self.summary = summarize(
                workflow=prepared.ir.workflow.id,
                output=str(output),
                engine=options.engine,
                rows=rows,
                latest=results.latest,
                invalid=invalid,
                ran=ran,
                skipped=skipped,
                elapsed_s=time.perf_counter() - started,
                stopped=stopped,
                interrupted=interrupted,
                limiter=limiter,
                dropped_torn_line=results.dropped_torn_line,
            )
            if options.summary_json is not None:
                atomic_write_text(
                    Path(options.summary_json),
                    json.dumps(self.summary.to_json(), indent=2, ensure_ascii=False, default=str)
                    + "\n",
                )
        return self.summary

    def _warn_unknown_mock_rows(self, rows: list[Row]) -> None:
        """Warn (``on_warning``) about the mock script's ``rows`` that name no row of the
        inputs: their answers are never used (a typo, or another dataset's ids)."""
        mock = self.prepared.spec.mock or {}
        ids = {str(row.id) for row in rows}
        unknown = sorted(str(key) for key in mock.get("rows") or {} if str(key) not in ids)
        if unknown and self.options.on_warning is not None:
            shown = ", ".join(repr(key) for key in unknown[:5])
            more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
            self.options.on_warning(
                f"the mock script's rows name ids the inputs do not have: {shown}{more} "
                "(their answers are not used)"
            )

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self.view.interval)
            self.view.tick()

"""Starting, following and answering the runs of a catalog's workflows, wherever they
run: in this process (``lattice mcp serve``) or on the gateway's run manager
(``lattice serve``), each behind ``RunHost``.

A run started here is an ordinary durable run folder, prepared by ``lattice.service.runs``
as ``lattice run`` prepares its runs, and it records how it was started
(``meta.started_by``: the MCP tool, the webhook and its delivery id, the schedule and its
tick).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from lattice.config import LatticeConfig, ScheduleConfig
from lattice.errors import ErrorType, LatticeUserError
from lattice.llm.base import close_loop_clients
from lattice.runs.redaction import Redactor, make_redactor
from lattice.runs.store import RunStore, new_run_id
from lattice.runtime.context import EventListener
from lattice.runtime.results import RunResult
from lattice.runtime.runner import Runner
from lattice.runtime.settings import settings_from_config
from lattice.service.providers import ProviderChoice
from lattice.service.runs import (
    PreparedResume,
    PreparedRun,
    ProviderSpec,
    RunOptions,
    prepare_resume,
    prepare_run,
)
from lattice.services.catalog import Catalog, Workflow

QUESTION_CATEGORIES = ("waiting_for_answer", ErrorType.MISSING_INFORMATION)
"""Failure categories of a run halted until a person answers."""


@dataclass(frozen=True)
class StartedBy:
    """How a run was started, as its ``meta.started_by`` records it: ``via`` one of
    ``cli``, ``library``, ``api``, ``mcp``, ``webhook``, ``schedule``, with what names
    the start (the tool; the trigger and its delivery id; the schedule and its tick)."""

    via: str
    details: Mapping[str, Any] = field(default_factory=dict)

    def to_meta(self) -> dict[str, Any]:
        return {"started_by": {"via": self.via, **self.details}}


@dataclass
class HostedRun:
    """A run going on: its id, its end (the RunResult) and a way to stop it at its next
    op boundary (False when it is not running any more)."""

    run_id: str
    done: Callable[[], Awaitable[RunResult]]
    """Waits for the run's end."""
    stop: Callable[[], bool]


@dataclass(frozen=True)
class Launch:
    """What a host that keeps runs elsewhere (an engine's workers) needs of a run besides
    its ``PreparedRun``: the workflow and the provider it runs with."""

    workflow: Workflow
    provider: ProviderSpec


class RunHost(Protocol):
    """Where runs go on: their folders' parent (None: an engine keeps them) and how they
    are driven."""

    @property
    def runs_dir(self) -> Path | None:
        """Where its run folders are (None: an engine keeps the runs)."""
        ...

    @property
    def store_type(self) -> type[RunStore]:
        """What writes its run folders."""
        ...

    async def start(
        self, prepared: PreparedRun, *, run_id: str | None, launch: Launch
    ) -> HostedRun:
        """Start ``prepared`` (as ``run_id`` when given) in the background; a conflict
        LatticeUserError when run ``run_id`` exists already."""
        ...

    async def answer(
        self,
        run_id: str,
        answers: Mapping[str, Any],
        *,
        config: LatticeConfig,
        on_event: EventListener | None,
    ) -> HostedRun:
        """Continue the halted run ``run_id`` with ``answers`` in the background."""
        ...


class FolderHost(Protocol):
    """A host of run folders: it continues a run folder a ``PreparedResume`` names."""

    runs_dir: Path
    store_type: type[RunStore]

    async def resume(
        self, run_id: str, prepared: PreparedResume, *, on_event: EventListener | None
    ) -> HostedRun:
        """Continue the run folder ``prepared`` names in the background."""
        ...


async def answer_folder(
    host: FolderHost,
    run_id: str,
    answers: Mapping[str, Any],
    *,
    config: LatticeConfig,
    on_event: EventListener | None,
) -> HostedRun:
    """Resume the halted run folder ``run_id`` under ``host.runs_dir`` with ``answers``."""
    folder = host.runs_dir / run_id
    if "/" in run_id or run_id.startswith(".") or not folder.is_dir():
        raise LatticeUserError(f"no run {run_id!r} under {host.runs_dir}")
    prepared = await asyncio.to_thread(
        prepare_resume, folder, answers=answers, config=config, store_type=host.store_type
    )
    return await host.resume(run_id, prepared, on_event=on_event)


class LocalHost:
    """Runs as tasks of the running event loop, written with a plain ``RunStore``."""

    store_type: type[RunStore] = RunStore

    def __init__(self, runs_dir: Path) -> None:
        self.runs_dir = runs_dir.resolve()
        self.tasks: set[asyncio.Task[RunResult]] = set()

    async def start(
        self, prepared: PreparedRun, *, run_id: str | None, launch: Launch
    ) -> HostedRun:
        if run_id is not None and (self.runs_dir / run_id).exists():
            raise LatticeUserError(f"run {run_id} exists already", error_type=ErrorType.CONFLICT)
        run_id = run_id or new_run_id()
        task = asyncio.create_task(prepared.arun(run_id=run_id), name=f"run {run_id}")
        self._keep(task)
        return HostedRun(run_id, lambda: task, lambda: prepared.runner.request_stop(run_id))

    async def answer(
        self,
        run_id: str,
        answers: Mapping[str, Any],
        *,
        config: LatticeConfig,
        on_event: EventListener | None,
    ) -> HostedRun:
        return await answer_folder(self, run_id, answers, config=config, on_event=on_event)

    async def resume(
        self, run_id: str, prepared: PreparedResume, *, on_event: EventListener | None
    ) -> HostedRun:
        runners: list[Runner] = []
        task = asyncio.create_task(
            prepared.arun(on_event=on_event, on_runner=runners.append), name=f"run {run_id}"
        )
        self._keep(task)
        return HostedRun(
            run_id, lambda: task, lambda: bool(runners) and runners[0].request_stop(run_id)
        )

    def _keep(self, task: asyncio.Task[RunResult]) -> None:
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)


class WorkflowRuns:
    """The runs of ``catalog``'s workflows on ``host``, with one provider for all
    (``mocks``: each workflow's ``NAME.mock.json`` instead)."""

    def __init__(
        self,
        catalog: Catalog,
        host: RunHost,
        *,
        config: LatticeConfig,
        config_path: str | None = None,
        provider: ProviderSpec | None = None,
        mocks: bool = False,
        max_calls: int | None = None,
        max_tokens_total: int | None = None,
    ) -> None:
        self.catalog = catalog
        self.host = host
        self.config = config
        self.config_path = config_path
        self.provider = provider or ProviderSpec()
        self.mocks = mocks
        self.max_calls = max_calls
        self.max_tokens_total = max_tokens_total
        self.redact: Redactor = make_redactor(settings_from_config(config).secret_names())
        """Masks secret values in what a caller is told (as the gateway's responses are)."""

    def provider_for(self, workflow: Workflow) -> ProviderSpec:
        if not self.mocks:
            return self.provider
        if not workflow.mock_path.is_file():
            raise LatticeUserError(
                f"workflow {workflow.name!r} has no mock script {workflow.mock_path.name} "
                "beside it (served with --mocks)",
                error_type=ErrorType.MOCK_ERROR,
            )
        choice = ProviderChoice(mock=str(workflow.mock_path))
        return ProviderSpec(choice, latency=self.provider.latency)

    def launch(self, workflow: Workflow) -> Launch:
        """What a host needs of a run of ``workflow`` besides its ``PreparedRun``."""
        return Launch(workflow, self.provider_for(workflow))

    def prepare(
        self,
        workflow: Workflow,
        inputs: Mapping[str, Any],
        started_by: StartedBy,
        *,
        answers: Mapping[str, Any] | None = None,
    ) -> PreparedRun:
        """The run of ``workflow`` with ``inputs``; InputError when they do not fit."""
        return prepare_run(
            workflow.ir,
            config=self.config,
            options=RunOptions(
                provider=self.provider_for(workflow),
                config_path=self.config_path,
                max_calls=self.max_calls,
                max_tokens_total=self.max_tokens_total,
                meta={
                    "workflow_name": workflow.name,
                    **started_by.to_meta(),
                    **version_meta(workflow),
                },
            ),
            inputs=inputs,
            answers=answers,
            workflow=workflow.document,
            runs_dir=self.host.runs_dir,
            store_type=self.host.store_type,
        )

    async def start(
        self,
        workflow: Workflow,
        inputs: Mapping[str, Any],
        started_by: StartedBy,
        *,
        run_id: str | None = None,
        on_event: EventListener | None = None,
    ) -> HostedRun:
        """Start a run of ``workflow``; it goes on in the background."""
        prepared = await asyncio.to_thread(self.prepare, workflow, inputs, started_by)
        if on_event is not None:
            prepared.runner.subscribe(on_event)
        try:
            return await self.host.start(prepared, run_id=run_id, launch=self.launch(workflow))
        except BaseException:
            await close_loop_clients(prepared.runner.provider)
            raise

    async def start_tick(
        self, name: str, schedule: ScheduleConfig, tick: datetime, run_id: str
    ) -> None:
        """Start the run of schedule ``name``'s tick as ``run_id`` (nothing when that run
        exists: the tick was started before)."""
        workflow = await asyncio.to_thread(self.catalog.resolve, schedule.workflow)
        started_by = StartedBy("schedule", {"schedule": name, "tick": tick.isoformat()})
        try:
            await self.start(workflow, schedule.inputs, started_by, run_id=run_id)
        except LatticeUserError as exc:
            if exc.error_type != ErrorType.CONFLICT:
                raise

    async def answer(
        self,
        run_id: str,
        answers: Mapping[str, Any],
        *,
        on_event: EventListener | None = None,
    ) -> HostedRun:
        """Resume the halted run ``run_id`` with ``answers`` (by question node id)."""
        return await self.host.answer(run_id, answers, config=self.config, on_event=on_event)


def version_meta(workflow: Workflow) -> dict[str, Any]:
    """What a run of ``workflow`` records of its deployed version (nothing when the
    catalog keeps no versions): ``meta.workflow_version``."""
    if workflow.version is None:
        return {}
    return {"workflow_version": workflow.version.to_meta()}


def outcome(result: RunResult) -> dict[str, Any]:
    """What a caller is told of a run that stopped: its output, or what it waits for, or
    why it failed."""
    failure = result.failure.to_json() if result.failure else None
    out: dict[str, Any] = {"run_id": result.run_id, "status": result.status}
    if result.status == "completed":
        out["output"] = result.output
    question = waiting_for(failure) if result.status == "halted" else None
    if question is not None:
        out["question"] = question
    elif failure is not None:
        out["failure"] = failure
    return out


def waiting_for(failure: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The question a halted run waits on (its node, text and options), or None."""
    if not failure or failure.get("category") not in QUESTION_CATEGORIES:
        return None
    details = failure.get("details") or {}
    return {
        "node_id": failure.get("node_id"),
        "question": details.get("question") or failure.get("summary"),
        "options": list(details.get("options") or []),
        "multi_select": bool(details.get("multiSelect")),
    }

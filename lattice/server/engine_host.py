"""The services' runs on an engine's backend (``lattice serve --engine temporal``): a run
that ``/mcp`` or a webhook starts is an engine run like one ``POST /v1/runs`` starts,
followed by asking the backend for its status until it stops (``RunHost``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from lattice.config import LatticeConfig
from lattice.contracts.report import FailureReport
from lattice.contracts.usage import Usage
from lattice.errors import ErrorType, LatticeUserError
from lattice.llm.base import close_loop_clients
from lattice.runs.redaction import make_redactor
from lattice.runs.store import RunStore, new_run_id, refuse_secret_answers
from lattice.runtime.context import EventListener
from lattice.runtime.results import RunResult
from lattice.runtime.settings import settings_from_config
from lattice.service.backend import NewRun, RunBackend, RunConflict, RunView
from lattice.service.runs import PreparedRun, ProviderSpec
from lattice.services.runs import HostedRun, Launch

POLL_SECONDS = 0.25
"""How often a followed run is asked whether it stopped."""
GOING = ("running", "pending")
"""The statuses of a run that has not stopped."""
REPORT_FIELDS = frozenset(item.name for item in fields(FailureReport))


class EngineHost:
    """Runs of the services on ``backend`` (``RunHost``); nothing of them is kept here."""

    runs_dir = None
    store_type: type[RunStore] = RunStore

    def __init__(self, backend: RunBackend) -> None:
        self.backend = backend
        self.stopping: set[asyncio.Task[None]] = set()

    async def start(
        self, prepared: PreparedRun, *, run_id: str | None, launch: Launch
    ) -> HostedRun:
        runner = prepared.runner
        await close_loop_clients(runner.provider)  # the engine's workers call the model
        run = NewRun(
            run_id=run_id or new_run_id(),
            ir=runner.ir,
            inputs=prepared.inputs,
            answers={},
            provider=engine_provider(launch.provider),
            settings=prepared.settings,
            limits={"max_steps": runner.limits.max_steps, "max_visits": runner.limits.max_visits},
            workflow_name=launch.workflow.name,  # as a local run of the services records it
            document=launch.workflow.document,
        )
        try:
            await self.backend.start(run)
        except RunConflict as exc:
            raise LatticeUserError(exc.message, error_type=ErrorType.CONFLICT) from None
        return self._hosted(run.run_id, after=None)

    async def answer(
        self,
        run_id: str,
        answers: Mapping[str, Any],
        *,
        config: LatticeConfig,
        on_event: EventListener | None,
    ) -> HostedRun:
        refuse_secret_answers(
            dict(answers), make_redactor(settings_from_config(config).secret_names())
        )
        before = await self.backend.describe(run_id)
        await self.backend.answer(run_id, dict(answers))
        return self._hosted(run_id, after=before)

    def _hosted(self, run_id: str, *, after: RunView | None) -> HostedRun:
        async def done() -> RunResult:
            view = await self._until_stopped(run_id, after)
            return result_of(view)

        def stop() -> bool:
            task = asyncio.ensure_future(self._cancel(run_id))
            self.stopping.add(task)
            task.add_done_callback(self.stopping.discard)
            return True

        return HostedRun(run_id, done, stop)

    async def _until_stopped(self, run_id: str, answered: RunView | None) -> RunView:
        """The run once it stopped (not on the question ``answered`` halted it on: an
        answer's update returns before the run shows it goes on)."""
        while True:
            view = await self.backend.describe(run_id)
            if view.status not in GOING and not _same_halt(view, answered):
                return view
            await asyncio.sleep(POLL_SECONDS)

    async def _cancel(self, run_id: str) -> None:
        with contextlib.suppress(RunConflict):  # it stopped by itself meanwhile
            await self.backend.cancel(run_id)


def _same_halt(view: RunView, answered: RunView | None) -> bool:
    if answered is None or view.status != "halted" or answered.status != "halted":
        return False
    return view.failure == answered.failure


def result_of(view: RunView) -> RunResult:
    """A stopped run on the engine as a ``RunResult`` (what the services tell a caller)."""
    failure = None
    if isinstance(view.failure, dict) and view.status != "completed":
        report = {key: value for key, value in view.failure.items() if key in REPORT_FIELDS}
        failure = FailureReport(**report)
    return RunResult(
        status=view.status,  # type: ignore[arg-type]
        output=view.output,
        state={},
        run_id=view.run_id,
        run_dir=None,
        usage=Usage.from_json(view.usage),
        failure=failure,
    )


def engine_provider(spec: ProviderSpec) -> dict[str, Any]:
    """A run's provider as an engine's workers build it: a mock script travels inline (a
    worker may be on another machine and has no workflows folder); a live provider is
    built from the workers' configuration."""
    choice = spec.choice
    if choice.mock:
        script = json.loads(Path(choice.mock).read_text(encoding="utf-8"))
        return ProviderSpec(script=script, latency=spec.latency, pieces=spec.pieces).to_meta()
    if spec.script is not None:
        return spec.to_meta()
    return ProviderSpec().to_meta() | {"provider_arg": choice.name}

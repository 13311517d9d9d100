"""Where a gateway's runs live when they are not run folders of its own process.

``lattice serve`` keeps a run as a folder under its runs folder, driven by a task on its
event loop. A ``RunBackend`` is the other kind of home: an engine that holds every run
itself (Temporal: ``lattice.durable.temporal.backend``), so that any number of gateway
processes, on any machines, start, show, stream, answer and cancel the same runs. A
backend keeps no run's state in the process: everything it answers is read from the
engine when asked.

Statuses are the API's: ``running``, ``halted`` (waiting for an answer), ``completed``,
``failed``, ``interrupted``.

Every backend starts, shows, lists, streams, answers and cancels runs. What some do
besides is a ``Capability``: a backend lists those it has (``RunBackend.capabilities``),
and the gateway refuses the others, in one place (``lattice.server.backend``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from lattice.errors import ErrorType, LatticeUserError
from lattice.ir.models import ExecIR
from lattice.runs.redaction import Redactor
from lattice.runtime.settings import RuntimeSettings


class Capability(StrEnum):
    """What a gateway's runs may be asked besides start, show, list, stream, answer and
    cancel (which every backend does)."""

    RESUME = "resume"
    """``POST /v1/runs/{id}/resume``: a failed or interrupted run goes on."""
    RERUN = "rerun"
    """``GET``/``POST /v1/runs/{id}/rerun``: a new run from a step of this one."""
    COMPARE = "compare"
    """``GET /v1/runs/{id}/compare/{other}``: what differs between two runs."""
    FIXTURES = "fixtures"
    """``"fixtures"`` in a run's request: recorded answers as its provider."""
    DELTAS = "deltas"
    """``?deltas=1`` on the event stream: model answers piece by piece as they arrive."""
    SEARCH = "search"
    """``?q=`` on ``GET /v1/runs``: runs found by words (without it, ``q`` is ignored)."""
    SERVICES = "services"
    """The schedules, started by the gateway itself (``/mcp`` and the webhooks start runs
    on every backend)."""


EVERY_CAPABILITY = frozenset(Capability)
"""What run folders can do (``lattice serve``'s own runs)."""


class RunNotFound(LatticeUserError):
    """No run has this id on the backend."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"no run {run_id!r}", error_type=ErrorType.NOT_FOUND)


class RunConflict(LatticeUserError):
    """What was asked does not fit the run's status (answering a run that does not wait)."""

    def __init__(self, message: str, status: str) -> None:
        super().__init__(message, error_type=ErrorType.CONFLICT)
        self.status = status


@dataclass(frozen=True)
class NewRun:
    """A run to start, checked by the gateway (document lowered, inputs and answers fit)."""

    run_id: str
    ir: ExecIR
    inputs: dict[str, Any]
    answers: dict[str, Any]
    provider: dict[str, Any]
    """The provider as ``ProviderSpec.to_meta`` gives it (a mock script inline)."""
    settings: RuntimeSettings
    budgets: dict[str, Any] = field(default_factory=dict)
    limits: dict[str, int] = field(default_factory=dict)
    workflow_name: str | None = None
    """The workflow's file name under the gateway's workflows folder, when started by name."""
    document: dict[str, Any] | None = None
    """The workflow document ``ir`` was lowered from (the panel draws the run on it)."""


@dataclass(frozen=True)
class RunView:
    """One run as the gateway shows it."""

    run_id: str
    status: str
    workflow: str | None = None
    workflow_name: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    output: Any = None
    usage: dict[str, Any] | None = None
    failure: dict[str, Any] | None = None
    """The FailureReport (JSON) of a failed, halted or interrupted run."""
    resumable: bool = False
    """Whether ``resume`` goes on with the run (a stopped run on Temporal)."""
    parent: dict[str, Any] | None = None
    """The run (``run_id``), op and visit a re-run started from."""
    rerunnable: bool = False
    """Whether a new run can start from one of this run's steps (``rerun``)."""


@dataclass(frozen=True)
class RunEvents:
    """A run's events after some sequence number, and its status when they were read."""

    events: list[dict[str, Any]]
    status: str


@dataclass(frozen=True)
class RunRecord:
    """What a run folder holds that the panel reads besides events: the ExecIR, the
    state the run started from and the state it has now, its op records (in order), and
    the workflow document when the run was started with one."""

    execir: dict[str, Any]
    state_initial: dict[str, Any]
    state_final: dict[str, Any]
    ops: list[dict[str, Any]]
    document: dict[str, Any] | None = None


@dataclass(frozen=True)
class RunPage:
    """A page of runs, newest first; ``next`` is the ``before`` of the following page."""

    runs: list[RunView]
    next: str | None


class RunBackend(ABC):
    """An engine that holds a gateway's runs (the module docstring says which)."""

    name: str
    """What ``/healthz`` and the log call it (``temporal``)."""
    capabilities: frozenset[Capability] = frozenset()
    """What its runs can do besides the methods below; the gateway refuses the rest
    (``lattice.server.backend``). The one place that says what a backend cannot do yet."""

    @abstractmethod
    def where(self) -> str:
        """Where the runs are, in a sentence's words (``Temporal at 127.0.0.1:7233``)."""

    @abstractmethod
    async def start(self, run: NewRun) -> None:
        """Start ``run``; a secret's value in what would be sent is a LatticeUserError."""

    @abstractmethod
    async def describe(self, run_id: str) -> RunView:
        """Run ``run_id`` (RunNotFound when there is none)."""

    @abstractmethod
    async def list_runs(
        self, *, status: str | None, workflow: str | None, limit: int, before: str | None
    ) -> RunPage:
        """Runs newest first, filtered by status and workflow (id or file name)."""

    @abstractmethod
    async def events(self, run_id: str, after: int) -> RunEvents:
        """The run's events after sequence number ``after``."""

    @abstractmethod
    async def record(self, run_id: str) -> RunRecord:
        """The run's ExecIR, states and op records."""

    @abstractmethod
    async def answer(self, run_id: str, answers: dict[str, Any]) -> None:
        """Answer the question the run waits on, and decide its tool calls waiting for
        approval (``answers["$approvals"]``: by approval id) (RunConflict when it waits on
        none; an answer that fits none of the options is an InputError, and is not sent)."""

    @abstractmethod
    async def cancel(self, run_id: str) -> None:
        """Stop the run at its next op boundary (it shows ``interrupted``); RunConflict
        when it is over."""

    async def resume(self, run_id: str) -> None:
        """Resume a stopped run where it stopped; RunConflict when it is not stopped (or
        the backend cannot)."""
        raise RunConflict(f"runs on {self.name} are not resumed", "unknown")

    async def rerun_point(self, run_id: str, op: str, visit: int | None) -> dict[str, Any]:
        """The state before visit ``visit`` of ``op`` of run ``run_id`` (``{"op", "visit",
        "visits", "state"}``, as ``lattice.service.rerun.RerunPoint`` gives it)."""
        raise RunConflict(f"runs on {self.name} are not re-run from a step", "unknown")

    async def rerun(
        self,
        run_id: str,
        *,
        op: str,
        visit: int | None,
        state: dict[str, Any] | None,
        provider: dict[str, Any] | None,
        redact: Redactor,
    ) -> tuple[str, dict[str, Any]]:
        """Start a new run from that step, with that state edited by ``state`` (the
        parent's provider unless ``provider``; ``redact`` refuses a state holding a
        secret's value); its id and ``parent``."""
        raise RunConflict(f"runs on {self.name} are not re-run from a step", "unknown")

    async def live(self, run_id: str) -> list[dict[str, Any]]:
        """What the run's ops in flight have done so far (``{"op_id", "attempt", "events",
        "text"}`` each: their events, and the model answer being streamed); none when the
        backend cannot tell."""
        return []

    async def export(self, run_id: str, folder: Path) -> None:
        """Write run ``run_id`` as a run folder at ``folder`` (which must not exist)."""
        raise RunConflict(f"runs on {self.name} are not exported", "unknown")

    async def close(self) -> None:
        """Let go of connections (the gateway stops)."""
        return None

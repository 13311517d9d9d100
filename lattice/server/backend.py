"""The runs a gateway serves, wherever they live: the one interface that its run routes
(``run_routes.py``) and the panel's (``panel_api.py``) ask.

Two backends answer it: the run folders under ``--runs-dir``, run by this process
(``folder_backend.py``: ``FolderBackend``, over the run manager), and an engine that
keeps every run itself (``remote.py``: ``EngineBackend``, over a ``RunBackend``;
``--engine temporal``). A backend answers in the API's shapes (docs/server.md): the JSON
bodies of the routes, the event stream's bytes; the routes add the status codes, the
links and the ``Location`` header.

Every backend starts, lists, shows, streams, answers and cancels runs, and gives the
panel a run's canvas, states and op records. What only some can do is a ``Capability``
(``lattice.service.backend``) that the backend lists in ``capabilities``; this module
says, once, what the gateway answers for one it lacks (``NOT_YET``): a route that needs
it is ``409 not_supported`` (``needs``), before its request is read.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from fastapi import Depends
from starlette.responses import Response

from lattice.runs.oplog import OpEntry
from lattice.server.bodies import AnswerRun, RerunRun, ResumeRun, StartRun
from lattice.server.errors import ApiError, Respond
from lattice.server.manager import links
from lattice.service.backend import Capability

NOT_YET: dict[Capability, str] = {
    Capability.RESUME: "resuming is not available for runs on {name}: a halted run is "
    "answered (POST /v1/runs/{run_id}/answers); a failed or interrupted run is started again",
    Capability.RERUN: "re-running is not available for runs on {name}: a halted run is "
    "answered (POST /v1/runs/{run_id}/answers); a failed or interrupted run is started again",
    Capability.COMPARE: "comparing runs is not available for runs on {name}: export both "
    "(lattice runs export RUN --temporal HOST:PORT -o DIR) and use lattice runs diff",
    Capability.FIXTURES: "fixtures are not supported for runs on {name} yet",
    Capability.SERVICES: "schedules are not served with --engine {name} yet (Temporal "
    "Schedules are not built)",
}
"""What the gateway says of a capability its backend lacks (``DELTAS`` and ``SEARCH``
are not refused: without them ``?deltas=1`` streams no pieces and ``?q=`` is ignored)."""


def not_yet(capability: Capability, name: str, run_id: str = "") -> str:
    """The sentence that says backend ``name`` cannot do ``capability``."""
    return NOT_YET[capability].format(name=name, run_id=run_id)


@dataclass(frozen=True)
class Accepted:
    """A run that a request started or set going again: the 202's body, but its links."""

    run_id: str
    status: str
    fields: Mapping[str, Any] = field(default_factory=dict)
    """What the route says besides (``warnings`` of a start, ``parent`` of a re-run)."""


def accepted(respond: Respond, run_id: str, fields: Mapping[str, Any]) -> Response:
    """``202`` for run ``run_id``: ``fields``, its links and its ``Location``."""
    return respond(
        202,
        {"run_id": run_id, **fields, "links": links(run_id)},
        {"Location": f"/v1/runs/{run_id}"},
    )


@dataclass(frozen=True)
class RunQuery:
    """``GET /v1/runs``'s query: runs of a status, of a workflow, found by words
    (``search``: only a backend with ``Capability.SEARCH`` is given it), ``limit`` of them
    started before the run ``before``."""

    status: str | None = None
    workflow: str | None = None
    limit: int = 50
    before: str | None = None
    search: str | None = None


class Backend(ABC):
    """The runs of a gateway (the module docstring says which)."""

    name: str
    """``local`` (run folders) or the engine's (``temporal``): refusals name it."""
    capabilities: frozenset[Capability]
    """What its runs can do besides the abstract methods below."""

    # -- what every backend does ----------------------------------------------------

    @abstractmethod
    async def start(self, body: StartRun) -> Accepted:
        """Start the run ``body`` asks for (``check_start`` passed); its ``warnings``."""

    @abstractmethod
    async def list_runs(self, query: RunQuery) -> dict[str, Any]:
        """``GET /v1/runs``: ``{"runs": [...], "next": ...}``, newest first."""

    @abstractmethod
    async def describe(self, run_id: str) -> dict[str, Any]:
        """``GET /v1/runs/{id}`` (404 when there is none)."""

    @abstractmethod
    async def events(
        self, run_id: str, cursor: int, *, timing: bool, deltas: bool
    ) -> AsyncIterator[bytes]:
        """The run's events after ``cursor`` as Server-Sent Events, until the run stops
        or the client leaves; 404 (raised here, before the stream) when there is none."""

    @abstractmethod
    async def answer(self, run_id: str, body: AnswerRun, door: str) -> Accepted:
        """Answer the question run ``run_id`` waits on (approvals coming by ``door``)."""

    @abstractmethod
    async def cancel(self, run_id: str) -> None:
        """Ask run ``run_id`` to stop (409 when it does not run)."""

    # -- the panel's reads of a run ---------------------------------------------------

    @abstractmethod
    async def canvas(self, run_id: str) -> dict[str, Any]:
        """The canvas of the run's workflow (``graph.run_graph``)."""

    @abstractmethod
    async def state(self, run_id: str, at: str) -> Any:
        """The state the run started from (``at="initial"``) or has now (``"final"``)."""

    @abstractmethod
    async def op_entries(
        self, run_id: str, *, canvas: bool
    ) -> tuple[list[OpEntry], dict[str, Any] | None]:
        """The run's op records in op order and, when ``canvas``, its canvas (which says
        whose ops they are)."""

    # -- capabilities: asked only when listed in ``capabilities`` ------------------

    async def resume(self, run_id: str, body: ResumeRun) -> Accepted:
        """``Capability.RESUME``: set a failed or interrupted run going again."""
        raise refusal(self, Capability.RESUME, run_id)

    async def rerun_point(self, run_id: str, op: str, visit: int | None) -> dict[str, Any]:
        """``Capability.RERUN``: the state a re-run from ``op`` (its ``visit``) starts with."""
        raise refusal(self, Capability.RERUN, run_id)

    async def rerun(self, run_id: str, body: RerunRun) -> Accepted:
        """``Capability.RERUN``: start a new run from a step of run ``run_id``."""
        raise refusal(self, Capability.RERUN, run_id)

    async def compare(self, run_id: str, other_id: str) -> dict[str, Any]:
        """``Capability.COMPARE``: what differs between two runs (``lattice runs diff``)."""
        raise refusal(self, Capability.COMPARE, run_id)

    async def live(self, run_id: str) -> list[dict[str, Any]]:
        """What the run's ops in flight have done so far, read from where they run (an
        engine's workers); none when the backend learns of an op's events as they come
        (run folders: their event stream has them)."""
        return []

    async def close(self) -> None:
        """Let go of what the backend holds (the gateway stops)."""
        return None


def refusal(runs: Backend, capability: Capability, run_id: str) -> ApiError:
    """``409 not_supported``: ``runs`` cannot do ``capability``."""
    return ApiError(409, "not_supported", not_yet(capability, runs.name, run_id))


def needs(runs: Backend, capability: Capability) -> Any:
    """A route's dependency: the route is ``409 not_supported`` unless ``runs`` can do
    ``capability``, whatever its request holds (FastAPI solves it before the body)."""

    async def check(run_id: str) -> None:
        if capability not in runs.capabilities:
            raise refusal(runs, capability, run_id)

    return Depends(check)

"""Run folders as a gateway's backend: the runs under ``--runs-dir``, started and resumed
on this process's event loop by its run manager (``manager.py``), and every folder there
read back, whoever wrote it. It can do every ``Capability``.

Reading a run folder (a run, the list, a re-run's point, two runs compared, the panel's
reads) is done in a worker thread, so that file reads never hold up the loop every run
and event stream shares. Starting and resuming a run prepare its folder on the loop;
starting one lowers its document and checks its inputs (its schemas' patterns) in a
worker thread."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

from starlette.concurrency import run_in_threadpool

from lattice.batch.diff import diff_runs
from lattice.errors import LatticeUserError
from lattice.llm.disabled import DisabledProvider
from lattice.runs.folder import load_run_json
from lattice.runs.oplog import OpEntry, op_entries
from lattice.server.backend import Accepted, Backend, RunQuery
from lattice.server.bodies import AnswerRun, RerunRun, ResumeRun, StartRun
from lattice.server.errors import ApiError, diagnostics_json, from_user_error, not_found
from lattice.server.events import FolderTails, stream
from lattice.server.graph import run_graph
from lattice.server.manager import RunManager
from lattice.server.start import Gateway, Requested, requested_workflow, run_options
from lattice.server.store import LoopStore
from lattice.service.backend import EVERY_CAPABILITY
from lattice.service.rerun import note_rerun, prepare_rerun, rerun_point
from lattice.service.runs import PreparedRun, ProviderSpec, prepare_resume, prepare_run

API_HOW_TO_CONFIGURE = (
    'no LLM provider is configured. Run offline with "mock" (a mock script under the '
    'server\'s workflows folder) or "mock_script" (an inline script) in the request body, '
    'or choose a real provider with "provider": "openai", "anthropic" or "litellm" (keys '
    "come from the server's OPENAI_API_KEY / ANTHROPIC_API_KEY)"
)


def api_hint(provider: object) -> None:
    """Make a run without a provider say what to send the API (not the CLI's flags)."""
    if isinstance(provider, DisabledProvider):
        provider.how_to = API_HOW_TO_CONFIGURE


STOPPED = ("completed", "failed", "halted", "interrupted")


def resumed_only(run_id: str) -> str:
    """Why only a failed or interrupted run ``run_id`` can be resumed."""
    return (
        "only a failed or interrupted run can be resumed (a halted one is answered: "
        f"POST /v1/runs/{run_id}/answers)"
    )


class FolderBackend(Backend):
    """The run folders of ``manager``'s runs folder."""

    name = "local"
    capabilities = EVERY_CAPABILITY

    def __init__(self, manager: RunManager, gateway: Gateway) -> None:
        self.manager = manager
        self.gateway = gateway
        self.library = gateway.library
        self.config = gateway.config
        self.redact = gateway.redact
        self.tails = FolderTails(
            status=manager.status, closing=lambda: manager.closing, redact=gateway.redact
        )

    # -- starting, answering, resuming, re-running, stopping ------------------------

    async def start(self, body: StartRun) -> Accepted:
        manager = self.manager
        async with manager.starting:
            manager.check_capacity()
            # Lowering (CPU work that grows with the document) and checking the inputs
            # (their schema's patterns): in a worker thread; the loop answers meanwhile.
            requested, prepared = await asyncio.to_thread(self._prepare, body)
            api_hint(prepared.runner.provider)
            active = await manager.start(prepared)
            warnings = diagnostics_json(requested.lowered.warnings)
            return Accepted(active.run_id, manager.status(active.run_id), {"warnings": warnings})

    def _prepare(self, body: StartRun) -> tuple[Requested, PreparedRun]:
        requested = requested_workflow(body, self.gateway)
        try:
            prepared = prepare_run(
                requested.ir,
                config=self.config,
                options=run_options(
                    body, body.spec(self.library), self.gateway, meta=requested.meta
                ),
                inputs=body.inputs,
                answers=body.answers,
                workflow=requested.document,
                runs_dir=self.manager.runs_dir,
                store_type=LoopStore,
            )
        except LatticeUserError as exc:
            raise from_user_error(exc) from None
        return requested, prepared

    async def answer(self, run_id: str, body: AnswerRun, door: str) -> Accepted:
        manager = self.manager
        folder = manager.folder(run_id)
        async with manager.starting:
            manager.check_resumable(
                run_id, ("halted",), "only a halted run waits for answers (see its question)"
            )
            if body.approvals.keys() - {"*"}:
                self._check_waiting(run_id, body.approvals)
            return await self._resume(run_id, folder, ProviderSpec(), body.all_answers(door))

    def _check_waiting(self, run_id: str, approvals: Mapping[str, Any]) -> None:
        """409 for a decision on a call the run does not wait for (decided already by
        another door, or never asked): a page showing an earlier halt is not taken for
        an answer to this one."""
        question = self.manager.describe(run_id).get("question") or {}
        waiting = [item.get("id") for item in question.get("approvals") or []]
        stale = sorted(set(approvals) - {"*"} - set(waiting))
        if stale:
            raise ApiError(
                409,
                "conflict",
                f"{', '.join(stale)}: not waiting for a decision (decided already, or never "
                f"asked); the run waits for: {', '.join(map(str, waiting)) or 'no approval'}",
                extra={"waiting": waiting},
            )

    async def resume(self, run_id: str, body: ResumeRun) -> Accepted:
        manager = self.manager
        folder, spec = manager.folder(run_id), body.spec(self.library)
        async with manager.starting:
            manager.check_resumable(run_id, ("failed", "interrupted"), resumed_only(run_id))
            return await self._resume(run_id, folder, spec, body.answers, body.accept_changed)

    async def _resume(
        self,
        run_id: str,
        folder: Path,
        spec: ProviderSpec,
        answers: dict[str, Any],
        accept_changed: bool = False,
    ) -> Accepted:
        manager = self.manager
        manager.check_capacity()
        try:
            prepared = prepare_resume(
                folder,
                provider=spec,
                answers=answers,
                accept_changed=accept_changed,
                config=self.config,
                store_type=LoopStore,
            )
        except LatticeUserError as exc:
            raise from_user_error(exc) from None
        api_hint(prepared.provider)
        active = await manager.resume(run_id, prepared)
        return Accepted(run_id, manager.status(active.run_id))

    async def rerun_point(self, run_id: str, op: str, visit: int | None) -> dict[str, Any]:
        def point() -> dict[str, Any]:
            folder = self.manager.folder(run_id)
            try:
                return rerun_point(folder, op, visit).to_json()
            except LatticeUserError as exc:
                raise from_user_error(exc) from None

        return await run_in_threadpool(point)

    async def rerun(self, run_id: str, body: RerunRun) -> Accepted:
        manager = self.manager
        folder, spec = manager.folder(run_id), body.spec(self.library)
        async with manager.starting:
            manager.check_resumable(
                run_id, STOPPED, "a run is re-run from a step once it has stopped"
            )
            manager.check_capacity()
            try:
                prepared = await run_in_threadpool(
                    lambda: prepare_rerun(
                        folder,
                        op=body.op,
                        visit=body.visit,
                        state=body.state,
                        provider=spec,
                        config=self.config,
                        runs_dir=manager.runs_dir,
                        store_type=LoopStore,
                    )
                )
            except LatticeUserError as exc:
                raise from_user_error(exc) from None
            api_hint(prepared.runner.provider)
            active = await manager.start(prepared)
        assert prepared.start is not None
        await run_in_threadpool(note_rerun, folder, prepared.start, active.run_id)
        return Accepted(
            active.run_id, manager.status(active.run_id), {"parent": prepared.start.parent}
        )

    async def cancel(self, run_id: str) -> None:
        self.manager.folder(run_id)
        self.manager.cancel(run_id)

    # -- reading runs back ----------------------------------------------------------

    async def list_runs(self, query: RunQuery) -> dict[str, Any]:
        return await run_in_threadpool(
            lambda: self.manager.list_runs(
                status=query.status,
                workflow=query.workflow,
                limit=query.limit,
                before=query.before,
                search=query.search,
            )
        )

    async def describe(self, run_id: str) -> dict[str, Any]:
        return await run_in_threadpool(self.manager.describe, run_id)

    async def events(
        self, run_id: str, cursor: int, *, timing: bool, deltas: bool
    ) -> AsyncIterator[bytes]:
        manager = self.manager
        return stream(
            manager.folder(run_id),
            cursor,
            channel=lambda: manager.channel(run_id),
            tails=self.tails,
            timing=timing,
            redact=self.redact,
            deltas=deltas,
        )

    async def compare(self, run_id: str, other_id: str) -> dict[str, Any]:
        a, b = self.manager.folder(run_id), self.manager.folder(other_id)
        return await run_in_threadpool(compare_json, a, b, run_id, other_id)

    # -- the panel's reads ----------------------------------------------------------

    def _canvas(self, folder: Path, run_id: str) -> dict[str, Any]:
        document = load_run_json(folder, "workflow.json")
        ir = load_run_json(folder, "execir.json")
        if document is None and ir is None:
            raise not_found(f"run {run_id} has neither workflow.json nor execir.json")
        return run_graph(document, ir)

    async def canvas(self, run_id: str) -> dict[str, Any]:
        return await asyncio.to_thread(self._canvas, self.manager.folder(run_id), run_id)

    async def state(self, run_id: str, at: str) -> Any:
        folder = self.manager.folder(run_id)
        state = await asyncio.to_thread(load_run_json, folder, f"state_{at}.json")
        if state is None:
            raise not_found(f"run {run_id} has no state_{at}.json (yet)")
        return state

    async def op_entries(
        self, run_id: str, *, canvas: bool
    ) -> tuple[list[OpEntry], dict[str, Any] | None]:
        folder = self.manager.folder(run_id)

        def read() -> tuple[list[OpEntry], dict[str, Any] | None]:
            graph = None
            if canvas:
                document = load_run_json(folder, "workflow.json")
                graph = run_graph(document, load_run_json(folder, "execir.json"))
            return op_entries(folder), graph

        return await asyncio.to_thread(read)


def compare_json(a: Path, b: Path, a_id: str, b_id: str) -> dict[str, Any]:
    """``GET /v1/runs/{a}/compare/{b}`` of the run folders ``a`` and ``b``: what
    ``lattice runs diff --json`` says, with both outputs."""
    diff = diff_runs(a, b)
    out = diff.to_json()
    out["a"], out["b"] = a_id, b_id
    out["output"] = {"changes": out["output"], "a": diff.a.output, "b": diff.b.output}
    out["changed"] = diff.changed
    return out

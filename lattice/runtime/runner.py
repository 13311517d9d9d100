"""The graph-walking Runner.

It walks ``next`` edges dynamically from the entry op, one op at a time, over an
explicit StateStore, and records the run (events, op records, snapshots) through
a RunRecorder. Loops are bounded by ``RunLimits``. A run ends ``completed`` (an
END op, or an op with no way on), ``failed`` (a LatticeRunError with no ``failed``
route), ``halted`` (waiting for a human) or ``interrupted`` (cancelled, or stopped
at an op boundary on request). A run with a folder commits every op to the folder's
journal before the next op starts (``lattice.runs.journal``), so any run that did not
complete, killed ones included, can be resumed without re-running completed ops or
re-sending model calls whose answers were recorded.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lattice.contracts.usage import Usage
from lattice.contracts.violations import message_of
from lattice.document.limits import check_json_value
from lattice.errors import InputError, InvalidInputs, LatticeRunError, LatticeUserError
from lattice.llm.base import (
    LLMProvider,
    close_loop_clients,
    keeps_loop_clients,
    provider_checkpoint,
    restore_provider,
)
from lattice.llm.disabled import DisabledProvider
from lattice.masking import MIN_MASKED_LENGTH, maskable
from lattice.permissions.approvals import APPROVALS, check_approvals
from lattice.runs.checkpoint import (
    file_digests,
    owner,
    read_checkpoint,
    status_of,
)
from lattice.runs.folder import read_run_json, restore_journaled_files
from lattice.runs.journal import JournalState, read_journal
from lattice.runs.oplog import read_op_records
from lattice.runs.ownership import Ownership, claim
from lattice.runs.redaction import Redactor, make_redactor
from lattice.runs.store import (
    RunFolderExists,
    RunRecorder,
    RunStore,
    file_text,
    new_run_id,
    refuse_secrets_in,
)
from lattice.runtime.answers import normalize_answer
from lattice.runtime.context import AskHuman, EventListener, Interrupted, RunContext
from lattice.runtime.durability import EPHEMERAL, Durability
from lattice.runtime.events import utc_now
from lattice.runtime.executors import build_executor
from lattice.runtime.flat_schema import flat_object_check
from lattice.runtime.gc_pacing import gc_pacing
from lattice.runtime.journaled import FolderJournal
from lattice.runtime.op_record import record_changes
from lattice.runtime.results import RunResult
from lattice.runtime.resume import (
    Position,
    StartFrom,
    journal_position,
    legacy_position,
    refuse_unresumable,
    resumable_ir,
)
from lattice.runtime.settings import RuntimeSettings
from lattice.runtime.state import StateListener, StateStore
from lattice.runtime.sync import run_sync
from lattice.runtime.walk import Track, Walker, op_reads, walk_steps
from lattice.runtime.walk_end import WalkEnd, walk_end
from lattice.runtime.walk_state import Counters, WalkState
from lattice.schemas import schema_errors, schema_validator
from lattice.text import holds_lone_surrogate
from lattice.tools.builtin import BuiltinTools
from lattice.tools.mcp import ToolSessions
from lattice.workspace.grants import refused_tools

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError
    from jsonschema.protocols import Validator

    from lattice.ir.models import ExecIR
    from lattice.lower.acting import Toolless


STARTED_BY_LIBRARY = {"via": "library"}
CANCELLED = "the run was cancelled while an op was running"
"""Why a run whose task was cancelled (Ctrl-C) stopped."""
"""How a run records it was started when its front door did not say (``Runner`` called
from Python); ``lattice run``, the gateway, ``/mcp``, webhooks and schedules say
(``meta.started_by``, docs/runs.md)."""


@dataclass(frozen=True)
class RunLimits:
    """Bounds on a run. ``max_steps``: ops executed in total (default 10,000);
    ``max_visits``: executions of any single op, loops included (default 1,000)."""

    max_steps: int = 10_000
    max_visits: int = 1_000


class Runner:
    """Runs one ExecIR. Build once, run many times (concurrently too).

    ``provider``: the LLMProvider (default: DisabledProvider, which fails clearly).
    ``store``: a RunStore (default ``RunStore("runs")``; ``RunStore(None)`` keeps runs in memory).
    ``answers``: answers to ASK nodes by node id (label, index or text).
    ``ask_human``: called for an ASK without an answer (the op, its question rendered);
    return None to halt.
    ``workflow``: the source document, copied into the run folder when given.
    ``settings``: model map, attempts, recovery policies, retries, budgets (RuntimeSettings).
    """

    def __init__(
        self,
        ir: ExecIR,
        *,
        provider: LLMProvider | None = None,
        store: RunStore | None = None,
        limits: RunLimits | None = None,
        answers: Mapping[str, Any] | None = None,
        ask_human: AskHuman | None = None,
        workflow: Mapping[str, Any] | None = None,
        meta: Mapping[str, Any] | None = None,
        settings: RuntimeSettings | None = None,
    ) -> None:
        from lattice.ir.models import AgentOp, ContractOpBase

        self.settings = settings or RuntimeSettings()
        if self.settings.agents.grant.every_tool():  # prompt steps act under a grant
            from lattice.lower.main_agent import under_grant

            ir = under_grant(ir, self.settings.agents.grant)
        self.ir = ir
        self.provider: LLMProvider = provider or DisabledProvider()
        self.store = store if store is not None else RunStore()
        self.limits = limits or RunLimits()
        self.answers = dict(answers or {})
        self.ask_human = ask_human
        self.workflow = dict(workflow) if workflow is not None else None
        self.meta = dict(meta or {})
        self._walker = Walker(
            ir,
            walk_steps(ir, lambda op: build_executor(op, self.settings)),
            op_reads(ir),
            max_steps=self.limits.max_steps,
            max_visits=self.limits.max_visits,
            max_parallel=self.settings.max_parallel,
        )
        self._input_validator: Validator | None = None
        """Made when an input first needs jsonschema (a heavy import; flat schemas never do)."""
        self._inputs_accepted = flat_object_check(ir.inputs_schema)
        properties = (ir.inputs_schema or {}).get("properties")
        self._input_defaults = {
            name: copy.deepcopy(prop["default"])
            for name, prop in (properties.items() if isinstance(properties, dict) else ())
            if isinstance(prop, dict) and "default" in prop
        }
        """Values of the inputs schema's top-level ``default``s, for inputs not given."""
        self._model_classes = sorted(
            {op.model_class for op in ir.ops.values() if isinstance(op, ContractOpBase)}
        )
        self._has_agents = any(isinstance(op, AgentOp) for op in ir.ops.values())
        self._toolless: list[Toolless] | None = None
        """The nodes meant to act that this Runner's grant leaves without tools (made
        when a run first ends)."""
        self._event_listeners: list[EventListener] = self.settings.run_listeners(
            self.provider, workflow=ir.workflow.id
        )
        self._state_listeners: list[StateListener] = []
        self._active: dict[str, RunContext] = {}
        self._execir_text: str | None = None
        self._secret_names = self.settings.secret_names()
        self._secret_reader = functools.partial(read_secret, self.settings)
        """Made once: every run's state holds it (a bound method made per run is one more
        object alive through the run)."""
        check_answers(ir, self.answers)

    def subscribe(self, listener: EventListener) -> None:
        """Call ``listener(event)`` for every event of every run of this Runner."""
        self._event_listeners.append(listener)

    def request_stop(self, run_id: str) -> bool:
        """Ask the active run ``run_id`` to stop at its next op boundary (it ends
        ``interrupted``, resumable); False when no such run is active."""
        ctx = self._active.get(run_id)
        if ctx is None:
            return False
        ctx.stop_requested = True
        return True

    def subscribe_state(self, listener: StateListener) -> None:
        """Call ``listener(path, value)`` after every state write of every run."""
        self._state_listeners.append(listener)

    # -- entry points -----------------------------------------------------------------

    def run(
        self,
        inputs: Mapping[str, Any] | None = None,
        *,
        run_id: str | None = None,
        start: StartFrom | None = None,
    ) -> RunResult:
        """Synchronous ``arun``, on this thread's reused event loop (``lattice.runtime.sync``);
        the provider's clients bound to that loop are closed after the run."""
        provider = self.provider
        if not keeps_loop_clients(provider):  # most providers: no wrapping coroutine
            return run_sync(
                lambda: self._start(inputs, run_id, start, own_loop=True),
                what="await runner.arun(...)",
            )
        return run_sync(
            lambda: _closing_loop_clients(
                provider, self._start(inputs, run_id, start, own_loop=True)
            ),
            what="await runner.arun(...)",
        )

    async def arun(
        self,
        inputs: Mapping[str, Any] | None = None,
        *,
        run_id: str | None = None,
        start: StartFrom | None = None,
    ) -> RunResult:
        """Run from the entry op. Inputs that fail the inputs schema raise InputError before
        anything is written. ``start`` makes it a re-run: from that op, with that state
        (its ``in`` are the inputs), linked to the run it came from."""
        return await self._start(inputs, run_id, start, own_loop=False)

    async def _start(
        self,
        inputs: Mapping[str, Any] | None,
        run_id: str | None,
        start: StartFrom | None,
        *,
        own_loop: bool,
    ) -> RunResult:
        """``arun``; ``own_loop``: the loop runs nothing but this run (``run``), so the
        journal is forced to disk on the loop's thread instead of a worker's."""
        if start is not None:
            if start.op not in self.ir.ops:
                raise LatticeUserError(
                    f"cannot start from {start.op!r}: the workflow has no such op"
                )
            inputs = start.state.get("in") or {}
        inputs = {**self._input_defaults, **(inputs or {})}
        self.validate_inputs(inputs)
        redact = self._redactor() if self.store.root is not None else None
        documents: dict[str, str] = {}
        if redact is not None:
            refuse_unwritable(inputs)  # before the folder is made: it could not record them
            if self.workflow is not None:
                documents["workflow.json"] = file_text(self.workflow)
            if self._execir_text is None:  # the same for every run
                from lattice.ir.serialize import ir_to_dict

                self._execir_text = file_text(ir_to_dict(self.ir))
            documents["execir.json"] = self._execir_text
            refuse_secrets_in(documents, redact)  # before the folder is made
        run_id, recorder = self._open_recorder(run_id, redact)
        state = StateStore(
            inputs,
            ctx=self._ctx(run_id),
            vars=copy.deepcopy(start.state.get("vars") or {}) if start is not None else None,
            secrets=self._secret_reader,
        )
        ctx = self._context(run_id, state, recorder, Usage(), seq=0, redact=redact)
        try:
            if recorder.run_dir is not None:
                for name, text in documents.items():
                    recorder.write_text(name, text)
                recorder.write_json("input.json", inputs)
                recorder.write_json("state_initial.json", state.snapshot())
                ctx.checkpoint = self._started(ctx, recorder.run_dir)
                if start is not None:
                    ctx.checkpoint |= {"start_op": start.op, "parent": start.parent}
                recorder.write_json("checkpoint.json", ctx.checkpoint)
                await recorder.sync_started()
            started: dict[str, Any] = {"workflow": self.ir.workflow.id, "inputs": inputs}
            if start is not None:
                started |= {"start_op": start.op, "parent": start.parent}
            ctx.emit("run_started", started, op=False)
            del started  # not held by this frame for the whole walk
            for refused in (
                refused_tools(self.ir, self.settings.agents.grant) if self._has_agents else ()
            ):
                ctx.emit(
                    "agent_tool_refused",
                    {"node": refused.node, "tools": list(refused.tools), "grant": refused.setting},
                    op=False,
                )
        except BaseException:
            _abandon(ctx)
            raise
        ctx.walk.commit_here = own_loop
        # the run's usage, not a Position's own (an object held for the whole walk)
        position = Position(start.op if start else self.ir.entry, usage=ctx.usage)
        if not self.settings.gc_pacing:  # nothing held across the walk
            return await self._walk(ctx, position)
        with gc_pacing():
            return await self._walk(ctx, position)

    def _without_tools(self, visits: Mapping[str, int]) -> list[dict[str, Any]]:
        """The visited nodes Claude Code would run with tools that ran without them."""
        from lattice.lower.acting import toolless_nodes

        if self._toolless is None:
            self._toolless = toolless_nodes(self.ir, self.settings.agents.grant)
        return [t.to_json() for t in self._toolless if visits.get(t.op)]

    def _changes(self, ctx: RunContext) -> list[dict[str, Any]]:
        """The files the run's agent ops changed: from the op records of its folder (a
        resumed run's earlier segments included), else as this process saw them."""
        folder = ctx.recorder.run_dir
        if folder is None or not self._has_agents:
            return list(ctx.changes)
        return record_changes(read_op_records(folder))

    def _started(self, ctx: RunContext, folder: Path) -> dict[str, Any]:
        """The checkpoint of a run that has just started."""
        return {
            "run_id": ctx.run_id,
            "status": "running",
            "owner": owner(),
            "started_at": ctx.state.ctx.get("started_at"),
            "digests": file_digests(folder),
            "initial_answers": ctx.answers,
            "meta": {"started_by": STARTED_BY_LIBRARY, **self.meta},
            "limits": {"max_steps": self.limits.max_steps, "max_visits": self.limits.max_visits},
        }

    def _open_recorder(
        self, run_id: str | None, redact: Redactor | None
    ) -> tuple[str, RunRecorder]:
        """The run's id and recorder; a generated id whose folder exists is drawn again."""
        if self.store.root is None:
            run_id = run_id or new_run_id()
            return run_id, self.store.open(run_id, redact=None)
        if run_id is not None:
            return run_id, self.store.open(run_id, redact=redact)
        for _ in range(4):
            run_id = new_run_id()
            try:
                return run_id, self.store.open(run_id, redact=redact)
            except RunFolderExists:
                continue
        raise LatticeUserError(f"cannot find a free run id under {self.store.root}")

    def validate_inputs(self, inputs: Mapping[str, Any]) -> None:
        """Raise InputError listing every way ``inputs`` breaks the inputs schema."""
        accepted = self._inputs_accepted
        if accepted is not None and accepted(inputs):
            return
        validator = self._input_validator
        if validator is None:
            validator = schema_validator(self.ir.inputs_schema or {}, formats=self.settings.formats)
            self._input_validator = validator
        errors = sorted(schema_errors(validator, dict(inputs)), key=lambda e: list(e.absolute_path))
        if errors:
            lines = []
            for err in errors:
                where = "/".join(str(p) for p in err.absolute_path)
                lines.append(f"{'$in/' + where if where else '$in'}: {_input_message(err)}")
            raise InvalidInputs("invalid inputs:\n  " + "\n  ".join(lines))

    @classmethod
    def resume(
        cls,
        run_dir: Path | str,
        *,
        answers: Mapping[str, Any] | None = None,
        provider: LLMProvider | None = None,
        ask_human: AskHuman | None = None,
        limits: RunLimits | None = None,
        on_event: EventListener | None = None,
        settings: RuntimeSettings | None = None,
        accept_changed: bool = False,
        store: RunStore | None = None,
    ) -> RunResult:
        """Continue a run that did not complete, from its folder (synchronous ``aresume``)."""
        return run_sync(
            lambda: _closing_loop_clients(
                provider,
                cls.aresume(
                    run_dir,
                    answers=answers,
                    provider=provider,
                    ask_human=ask_human,
                    limits=limits,
                    on_event=on_event,
                    settings=settings,
                    accept_changed=accept_changed,
                    store=store,
                ),
            ),
            what="await Runner.aresume(...)",
        )

    @classmethod
    async def aresume(
        cls,
        run_dir: Path | str,
        *,
        answers: Mapping[str, Any] | None = None,
        provider: LLMProvider | None = None,
        ask_human: AskHuman | None = None,
        limits: RunLimits | None = None,
        on_event: EventListener | None = None,
        settings: RuntimeSettings | None = None,
        accept_changed: bool = False,
        store: RunStore | None = None,
    ) -> RunResult:
        """Continue a halted, failed or interrupted run (a killed one too). Completed ops
        are not executed again, and model answers the folder recorded are not asked again.

        ``answers`` given here answer the next visit of their question only. A folder whose
        ``workflow.json`` or ``execir.json`` changed since the run started is refused unless
        ``accept_changed`` (then the document is lowered again, and every op the run
        completed must keep its id). ``store`` sets the durability of the writes (the
        folder itself stays where it is).
        """
        reopened = cls.reopen(
            run_dir,
            answers=answers,
            provider=provider,
            ask_human=ask_human,
            limits=limits,
            settings=settings,
            accept_changed=accept_changed,
            store=store,
        )
        if on_event is not None:
            reopened.runner.subscribe(on_event)
        return await reopened.arun()

    @classmethod
    def reopen(
        cls,
        run_dir: Path | str,
        *,
        answers: Mapping[str, Any] | None = None,
        provider: LLMProvider | None = None,
        ask_human: AskHuman | None = None,
        limits: RunLimits | None = None,
        settings: RuntimeSettings | None = None,
        accept_changed: bool = False,
        store: RunStore | None = None,
    ) -> ReopenedRun:
        """Read a run folder back and build the Runner that continues it, without running
        it yet: subscribe to it or keep it (to ``request_stop`` the run), then
        ``await reopened.arun()``. The arguments are ``aresume``'s."""
        folder = Path(run_dir)
        if not folder.is_dir():
            raise LatticeUserError(f"{folder} is not a resumable run folder (no such folder)")
        # Owned before anything is read: what a resume reads is what no one else writes.
        ownership = claim(folder)
        try:
            return cls._reopen_owned(
                folder,
                ownership,
                answers=answers,
                provider=provider,
                ask_human=ask_human,
                limits=limits,
                settings=settings,
                accept_changed=accept_changed,
                store=store,
            )
        except BaseException:
            ownership.release()
            raise

    @classmethod
    def _reopen_owned(
        cls,
        folder: Path,
        ownership: Ownership,
        *,
        answers: Mapping[str, Any] | None,
        provider: LLMProvider | None,
        ask_human: AskHuman | None,
        limits: RunLimits | None,
        settings: RuntimeSettings | None,
        accept_changed: bool,
        store: RunStore | None,
    ) -> ReopenedRun:
        """``reopen``, once this process owns ``folder``."""
        restore_journaled_files(folder)
        checkpoint = read_checkpoint(folder)
        if checkpoint.get("status") == "completed":
            raise LatticeUserError(f"run {folder.name} already completed; nothing to resume")
        refuse_unresumable(folder, checkpoint)
        journal = read_journal(folder)
        ir = resumable_ir(folder, checkpoint, journal, accept_changed=accept_changed)
        committed_state: Any = None
        if journal is None:
            position, base_answers, state_data = legacy_position(folder, checkpoint)
            pending: list[dict[str, Any]] = []
            provider_state = checkpoint.get("provider_state")
        else:
            position, base_answers = journal_position(ir, journal, checkpoint)
            state_data = read_run_json(folder, "state_initial.json")
            pending = journal.pending.get(None, [])
            provider_state = journal.provider_state
            if not any(journal.pending.values()):
                # the ops to run again start afresh: none of their answers replay
                committed_state = journal.committed_provider_state or {}
        multi = {op.source_node for op in ir.ops.values() if op.kind == "ASK" and op.multi_select}
        once = {k: v if k in multi or k == APPROVALS else [v] for k, v in (answers or {}).items()}
        runner = cls(
            ir,
            provider=provider,
            store=store if store is not None else RunStore(folder.parent),
            limits=limits or RunLimits(**checkpoint.get("limits", {})),
            answers={**base_answers, **once},
            ask_human=ask_human,
            meta=checkpoint.get("meta"),
            settings=settings,
        )
        if provider_state is not None:
            # a mock whose script was edited since goes back to committed_state
            restore_provider(runner.provider, provider_state, committed=committed_state)

        async def go() -> RunResult:
            return await runner._continue(
                folder, ownership, checkpoint, journal, position, state_data, pending
            )

        return ReopenedRun(runner, go, ownership)

    async def _continue(
        self,
        folder: Path,
        ownership: Ownership,
        checkpoint: dict[str, Any],
        journal: JournalState | None,
        position: Position,
        state_data: dict[str, Any],
        pending: list[dict[str, Any]],
    ) -> RunResult:
        """Rebuild a reopened run's state and context, then walk on from its position
        (the recorder takes ``ownership`` over and lets it go when the run stops)."""
        try:
            state = StateStore.from_snapshot(state_data, secrets=self._secret_reader)
            if journal is not None:
                for line in journal.ops:
                    for change in line.get("changes") or ():
                        state.apply(change)
            state.clear_tmp()
            redact = self._redactor()
            recorder = self.store.reopen(folder, redact=redact, ownership=ownership)
        except BaseException:
            ownership.release()
            raise
        last_seq, last_segment = recorder.event_summary()
        ctx = self._context(
            checkpoint.get("run_id", folder.name),
            state,
            recorder,
            position.usage,
            seq=last_seq,
            redact=redact,
            recorded_answers=pending,
        )
        ctx.last_result = position.last_result
        try:
            ctx.checkpoint = {
                **{k: v for k, v in checkpoint.items() if k in _CHECKPOINT_BASE},
                "status": "running",
                "owner": owner(),
                "digests": file_digests(folder),
            }
            recorder.write_json("checkpoint.json", ctx.checkpoint)
            ctx.emit(
                "run_resumed",
                {
                    "segment": last_segment + 1,
                    "from_op": position.current,
                    "after": status_of(checkpoint),
                    "replayable_answers": len(pending),
                    **({"dropped_torn_lines": recorder.torn} if recorder.torn else {}),
                },
                op=False,
            )
        except BaseException:
            _abandon(ctx)
            raise
        if not self.settings.gc_pacing:
            return await self._walk(ctx, position)
        with gc_pacing():
            return await self._walk(ctx, position)

    # -- secrets --------------------------------------------------------------------------

    def _redactor(self) -> Redactor:
        """Replaces the values of every secret name (``RuntimeSettings.secret_names``) and of
        the provider API keys with ``***``."""
        return make_redactor(self._secret_names)

    # -- the walk -----------------------------------------------------------------------

    def _ctx(self, run_id: str) -> dict[str, Any]:
        return {
            "run_id": run_id,
            "started_at": utc_now(),
            "workflow_id": self.ir.workflow.id,
            "workflow_name": self.ir.workflow.name,
            "model_classes": list(self._model_classes),
        }

    def _context(
        self,
        run_id: str,
        state: StateStore,
        recorder: RunRecorder,
        usage: Usage,
        *,
        seq: int,
        redact: Redactor | None,
        recorded_answers: list[dict[str, Any]] | None = None,
    ) -> RunContext:
        for listener in self._state_listeners:
            state.subscribe(listener)
        durability: Durability = EPHEMERAL
        if recorder.run_dir is not None:
            durability = FolderJournal(recorder)
            state.changes = []
        provider = durability.provider(self.provider, recorded_answers or ())
        state.limit(self.settings.state_limits)
        ctx = RunContext(
            run_id=run_id,
            state=state,
            recorder=recorder,
            answers=copy.deepcopy(self.answers) if self.answers else {},
            ask_human=self.ask_human,
            listeners=self._event_listeners,
            llm=self.settings.call_env(provider, usage=usage),
            http=self.settings.http,
            tools=functools.partial(self._tool_sessions, recorder.run_dir, redact),
            seq=seq,
            redact=redact,
            secret_names=self._secret_names,
        )
        ctx.walk = WalkState(base_provider=self.provider, durability=durability)
        ctx.llm.records = durability.keeps_records  # op records hold a call's attempts
        return ctx

    def _tool_sessions(self, run_dir: Path | None, redact: Redactor | None) -> ToolSessions:
        """A run's tool servers (made by its first tool call; a partial of this, not a
        closure, is what each run holds until then: two objects instead of five)."""
        return ToolSessions(
            self.settings.mcp_servers,
            builtin=BuiltinTools(repo_root=self.settings.repo_root),
            log_dir=None if run_dir is None else run_dir / "mcp",
            redact=redact,
        )

    async def _walk(self, ctx: RunContext, position: Position) -> RunResult:
        counters: Counters = ctx.walk.counters
        counters.steps, counters.visits = position.steps, position.visits
        ctx.walk.resume_branches = position.branches
        track = Track(ctx, position.current, op_seq=position.op_seq)
        self._active[ctx.run_id] = ctx
        recorder = ctx.recorder
        try:
            try:
                if track.current is None:  # resumed after its end
                    output = position.output
                else:
                    output = (await self._walker.run_track(track)).output
            except LatticeRunError as stopped:
                end = walk_end(track, stopped=stopped)
            except asyncio.CancelledError:  # the folder says so, and stays resumable
                self._finish(ctx, walk_end(track, stopped=Interrupted(CANCELLED), cancelled=True))
                raise
            else:
                end = walk_end(track, output)
            return self._finish(ctx, end)
        finally:
            self._active.pop(ctx.run_id, None)
            try:
                await ctx.aclose()
                # the stop: the journal's last lines (the end op's, the final checkpoint)
                await recorder.commit(here=ctx.walk.commit_here)
            finally:
                recorder.close()
                ctx.detach()

    def _finish(self, ctx: RunContext, end: WalkEnd) -> RunResult:
        failure = end.failure
        counters = ctx.walk.counters
        ctx.usage.estimate_cost(self.settings.prices)
        recorder = ctx.recorder
        # The store is not used after the run, so the result may own its dicts.
        snapshot = ctx.state.snapshot() if recorder.run_dir is not None else ctx.state.as_dict()
        result = end.result(
            ctx,
            state=snapshot,
            run_dir=recorder.run_dir,
            changes=self._changes(ctx),
            without_tools=self._without_tools,
        )
        if recorder.run_dir is None:
            return result
        recorder.write_json("state_final.json", snapshot)
        recorder.write_json(
            "result.json",
            {
                **result.to_json(),
                "workflow": self.ir.workflow.id,
                **{k: self.meta[k] for k in ("workflow_version",) if k in self.meta},
                "finished_at": utc_now(),
            },
        )
        if failure is not None:
            recorder.write_json("failure_report.json", failure.to_json())
        else:  # a resumed run that now completed
            (recorder.run_dir / "failure_report.json").unlink(missing_ok=True)
        recorder.write_json(
            "checkpoint.json",
            {
                **ctx.checkpoint,
                "status": end.status,
                "next_op": end.next_op,
                "steps": counters.steps,
                "visits": counters.visits,
                "op_seq": end.op_seq,
                "seq": ctx.seq,
                "last_result": ctx.last_result,
                "usage": ctx.usage.to_json(),
                "answers": ctx.answers,
                "provider_state": provider_checkpoint(self.provider),
            },
        )
        return result


@dataclass
class ReopenedRun:
    """A run folder read back and owned by this process, ready to go on
    (``Runner.reopen``). ``arun`` lets the folder go when the run stops; a reopened run
    that is not run must be ``release``d."""

    runner: Runner
    """The Runner that continues it (subscribe to it, or ``request_stop`` the run)."""
    _go: Callable[[], Awaitable[RunResult]]
    ownership: Ownership

    async def arun(self) -> RunResult:
        """Continue the run to its end (or its next halt or failure)."""
        return await self._go()

    def release(self) -> None:
        """Give the folder up without running it (after ``arun``, nothing to do)."""
        self.ownership.release()


_CHECKPOINT_BASE = (
    "run_id",
    "started_at",
    "initial_answers",
    "meta",
    "limits",
    "start_op",
    "parent",
)
"""What a run's checkpoint keeps from its start through every resume."""


def _abandon(ctx: RunContext) -> None:
    """Close a run that failed before its walk began (nothing was opened yet but the recorder)."""
    ctx.recorder.close()
    ctx.detach()


async def _closing_loop_clients(
    provider: LLMProvider | None, coro: Awaitable[RunResult]
) -> RunResult:
    """Await ``coro``, then close the provider's HTTP clients bound to this (private) loop."""
    try:
        return await coro
    finally:
        await close_loop_clients(provider)


def read_secret(settings: RuntimeSettings, name: str) -> str:
    """The value of ``$secrets.NAME`` from the environment: a name ``[secrets] allow``
    lists, set, and long and varied enough to be masked; otherwise a ``secret_error``."""
    if name not in settings.secrets_allow:
        raise LatticeRunError(
            f"$secrets.{name} is not allowed: add it to [secrets] allow in lattice.toml",
            error_type="secret_error",
        )
    value = os.environ.get(name)
    if value is None:
        raise LatticeRunError(
            f"$secrets.{name}: the environment variable {name} is not set",
            error_type="secret_error",
        )
    if not maskable(value):  # it could not be masked in what the run records
        raise LatticeRunError(
            f"$secrets.{name}: the value of {name} is too short or too plain to be kept "
            f"out of run records (at least {MIN_MASKED_LENGTH} characters, not only "
            "words or digits)",
            error_type="secret_error",
        )
    return value


def _input_message(err: ValidationError) -> str:
    if err.validator == "additionalProperties":
        return (
            f"{err.message} (unknown input; the workflow's inputs are declared by its start node)"
        )
    if err.validator == "format":  # the form it should have, as a repair packet says it
        return message_of(err)
    return err.message


def check_answers(ir: ExecIR, answers: Mapping[str, Any], what: str = "answers") -> None:
    """Raise InputError when answers name unknown ASK nodes or options none of them has;
    its message starts ``invalid <what>:``."""
    from lattice.ir.models import AskOp, ContractOpBase

    asks = {op.source_node: op for op in ir.ops.values() if isinstance(op, AskOp)}
    llm_nodes = {op.source_node for op in ir.ops.values() if isinstance(op, ContractOpBase)}
    problems = []
    for node_id, answer in answers.items():
        if node_id == APPROVALS:
            problems.extend(check_approvals(answer))
            continue
        op = asks.get(node_id)
        if op is None and node_id in llm_nodes:  # information for a model that asked for it
            continue
        if op is None:
            problems.append(
                f"{node_id!r} is not a question node (questions: {', '.join(asks) or 'none'})"
            )
            continue
        queue = answer if isinstance(answer, list) and not op.multi_select else [answer]
        for item in queue:
            try:
                normalize_answer(op, item)
            except LatticeRunError as exc:
                problems.append(exc.message)
    if problems:
        raise InputError(f"invalid {what}:\n  " + "\n  ".join(problems))


def refuse_unwritable(inputs: Mapping[str, Any]) -> None:
    """Raise InvalidInputs when ``inputs`` hold a string no run folder can record: one
    with a lone surrogate (``"\\ud800"`` in JSON, which Python's ``json`` reads). The
    schema lets it through; the folder's first write would fail with a traceback."""
    if not holds_lone_surrogate(inputs):  # (the common case: the walk below is slower)
        return
    problems = [p for p in check_json_value(dict(inputs)) if p.code == "invalid-string"]
    if problems:
        lines = [f"$in{p.pointer if p.pointer != '/' else ''}: {p.message}" for p in problems]
        raise InvalidInputs("invalid inputs:\n  " + "\n  ".join(lines))

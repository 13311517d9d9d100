"""The walk: ops one after another along ``next`` edges, and branches that run at once.

A *track* is one line of execution: the run's main walk, or one branch of a FORK (or one
item of a FOR_EACH). ``Walker.run_track`` executes a track's ops until it ends (END, an
op with no way on) or arrives at the JOIN its branch stops at. Each op is recorded,
committed with the state changes it made, and only then is the next op started: where
records and commits go is the run's ``Durability`` (``lattice.runtime.durability``: the
run folder's journal, or a durable engine's history), which the walk does not know.
Two lines wait for a later commit: the entry op's (it does nothing; the first op's
commit carries it) and the line of a track's last op (the join's commit, or the run's
stop, carries it).

A FORK starts one track per branch over a fork of the state (``StateStore.fork``), waits
for all of them, and merges their changes in branch order: the result does not depend
on which branch finished first, and all or nothing: a change that fails (the state
limit) leaves the state as it was before the join. Two branches that changed the same
variable are a ``state_conflict``. A FOR_EACH runs its body once per item in the same way, at most
``max_concurrency`` at a time, and keeps only each item's output.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from lattice.contracts.calls import discard_event
from lattice.contracts.report import FailureReport, failure_report
from lattice.errors import LatticeRunError
from lattice.ir.kinds import CONTROL_KINDS, FAILED_PORT
from lattice.ir.templates import StatePath, ValueTemplate, parse_path, path_text
from lattice.llm.base import CheckpointedProvider
from lattice.runs.redaction import redact_value
from lattice.runtime.context import HaltRun, Interrupted, Outcome, RunContext
from lattice.runtime.executors import Executor, PureExecutor
from lattice.runtime.op_record import op_record, read_inputs
from lattice.runtime.walk_state import BranchResume, Counters

if TYPE_CHECKING:
    from lattice.ir.models import ExecIR, ForEachOp, ForkOp, Op

ENDED = "ended"
"""The port a FORK leaves through when no branch reached its JOIN: the run ends there."""
YIELD_EVERY = 64
"""A run gives the event loop a turn at least every this many ops: ops that never wait
(state, transforms, conditions) would otherwise hold a loop other runs share."""


class Step:
    """What the walk needs of one op, gathered once per Runner."""

    __slots__ = (
        "control",
        "edges",
        "executor",
        "is_end",
        "kind",
        "node",
        "now",
        "op",
        "recomputable",
    )

    def __init__(self, op: Op, executor: Executor | None, edges: dict[str, str]) -> None:
        self.op = op
        self.executor = executor
        self.edges = edges
        self.node = op.source_node
        self.kind = op.kind
        self.is_end = op.kind == "END"
        self.recomputable: bool = getattr(executor, "recomputable", False)
        """Its line needs no sync of its own: a resume after a power cut redoes it from the
        last synced op, and it reaches the disk with the next op that does something
        outside the run (a model, a tool, a person), before that op's effect is kept."""
        self.control = op.kind in CONTROL_KINDS
        """The walk runs it itself: it starts tracks of its own."""
        self.now = executor.now if isinstance(executor, PureExecutor) else None
        """The op never waits: called as it is, without a coroutine of its own."""


@dataclass
class Track:
    """One line of execution: the main walk, a branch of a fork or an item of a for-each."""

    ctx: RunContext
    current: str | None
    op_seq: int = 0
    stop_at: str | None = None
    """The JOIN op the branch ends at."""
    changes: list[list[Any]] = field(default_factory=list)
    """A branch's state changes so far, in order (merged into the parent at the join)."""
    writers: dict[str, str] = field(default_factory=dict)
    """A branch's written ``$vars`` entries → the op that first wrote each."""
    resumed_output: Any = None
    """The output of a branch that had already ended when the run was resumed."""

    @property
    def label(self) -> str:
        """The op records' prefix: ``0005.2.0003`` is op 3 of branch 2 of the fork at op 5."""
        prefix = f"{self.ctx.branch}." if self.ctx.branch else ""
        return f"{prefix}{self.op_seq:04d}"


@dataclass
class TrackEnd:
    """How a track ended."""

    how: Literal["end", "arrived"]
    output: Any = None


class Walker:
    """Runs tracks over one Runner's compiled ops."""

    def __init__(
        self,
        ir: ExecIR,
        steps: dict[str, Step],
        reads: dict[str, list[StatePath]],
        *,
        max_steps: int,
        max_visits: int,
        max_parallel: int,
        clock: Callable[[], float] = time.perf_counter,
        wait: Callable[..., Any] = asyncio.wait,
    ) -> None:
        """``clock`` times ops (seconds) and ``wait`` waits for a fork's branches
        (``asyncio.wait``'s signature): a durable engine whose walk must replay the same
        gives its own deterministic ones."""
        self.clock = clock
        self.wait = wait
        self.ir = ir
        self.steps = steps
        self.reads = reads
        self.max_steps = max_steps
        self.max_visits = max_visits
        self.max_parallel = max_parallel

    # -- one track -------------------------------------------------------------------

    async def run_track(self, track: Track) -> TrackEnd:  # noqa: C901
        """Walk ``track`` from its current op until it ends (or arrives at ``stop_at``):
        each op is entered, executed, routed and committed in turn.

        The loop inlines what every op does (counting it, its two events, routing along
        an edge, the boundary checks); the rarer cases are the methods below."""
        ctx = track.ctx
        root = ctx.root
        counters: Counters = root.walk.counters
        visits = counters.visits
        durability = root.walk.durability
        journaled = durability.journals
        keeps_records = durability.keeps_records
        in_branch = ctx.branch is not None
        state = ctx.state
        clock = self.clock
        steps = self.steps
        stop_at = track.stop_at
        max_steps, max_visits = self.max_steps, self.max_visits
        task = asyncio.current_task()
        current = track.current
        while current is not None:
            if current == stop_at:
                return TrackEnd("arrived")
            step = steps[current]
            # entered: counted against the limits, the track's op, said so
            counters.steps += 1
            count = visits[current] = visits.get(current, 0) + 1
            ctx.current_op, ctx.current_node = current, step.node
            if counters.steps > max_steps or count > max_visits:
                raise _limit_error(max_steps, max_visits, current, counters.steps, count)
            track.current = current
            track.op_seq += 1
            ctx.emit1("op_started", "kind", step.kind)
            started = clock()
            calls_before = ctx.usage.requests
            try:
                if step.control or in_branch:
                    outcome = await self._execute(track, step)
                elif step.now is not None:
                    outcome = step.now(ctx)
                else:  # a main-walk op that may wait, without a coroutine of the walk's
                    outcome = await step.executor.run(ctx)  # type: ignore[union-attr]
            except HaltRun as halt:
                self._halted(track, step, current, halt, journaled)
                raise
            except Exception as raised:
                outcome = self._failed(track, step, current, started, raised, journaled)
            finally:
                if state.tmp:
                    state.clear_tmp()
            duration_ms = round((clock() - started) * 1000, 3)
            port = outcome.port
            ctx.emit2("op_finished", "duration_ms", duration_ms, "port", port)
            if keeps_records:  # op_record inline: one call less per op of a run with a folder
                label = track.label
                durability.write_op(
                    label,
                    current,
                    op_record(
                        step.op,
                        label,
                        ctx.branch,
                        duration_ms,
                        read_inputs(state, self.reads[current]),
                        port,
                        outcome.output,
                        outcome.record,
                    ),
                )
            if step.is_end or port == ENDED:
                nxt, output = None, outcome.output
            else:
                nxt, output = step.edges.get(port), None
                if nxt is None:
                    output = self._no_edge(ctx, step, current, port)
            if journaled:
                self._journal(track, step, outcome, nxt, counters, calls_before, output)
                if nxt is not None and not step.recomputable:
                    await durability.commit(here=root.walk.commit_here and not in_branch)
            elif state.changes:
                self._keep_changes(track)
            del outcome  # not held while the next op waits (its record may be large)
            if nxt is None:
                return TrackEnd("end", output)
            current = nxt
            if root.stop_requested or (task is not None and task.cancelling()):
                self._check_stopped(ctx, task)
            if not counters.steps % YIELD_EVERY:
                await asyncio.sleep(0)  # ops that never wait leave the loop to others too
            if in_branch and ctx.stopped_by_sibling():
                raise Interrupted("a sibling branch failed, so this branch stopped")
        return TrackEnd("end", None)

    async def _execute(self, track: Track, step: Step) -> Outcome:
        """Run a fork or forEach here, or a branch's op through its executor within the
        run's limit of ops running at once."""
        ctx = track.ctx
        if step.control:
            return await self._control(track, step.op)
        if ctx.branch is None:
            return await step.executor.run(ctx)  # type: ignore[union-attr]
        walk = ctx.root.walk
        if walk.limiter is None:  # made by the first branch (most runs have none)
            walk.limiter = asyncio.Semaphore(self.max_parallel)
        async with walk.limiter:
            return await step.executor.run(ctx)  # type: ignore[union-attr]

    def _halted(
        self, track: Track, step: Step, current: str, halt: HaltRun, journaled: bool
    ) -> None:
        """Name the op a question halted at; a branch journals its halted op here."""
        ctx = track.ctx
        halt.op_id = halt.op_id or current
        halt.node_id = halt.node_id or step.node
        if journaled and ctx.branch is not None and not step.control and not halt.keeps_journal:
            # The main walk journals its own halted op (Runner); a branch's gets its line
            # here, or the answers it had would count as still to be replayed, though the
            # resumed op asks again (with the answer given).
            ctx.root.walk.durability.journal(stopped_line(ctx, track.op_seq, current))

    def _failed(
        self,
        track: Track,
        step: Step,
        current: str,
        started: float,
        raised: Exception,
        journaled: bool,
    ) -> Outcome:
        """The op failed: its ``failed`` route when it has one (the report in its state),
        else the error, recorded and raised."""
        ctx = track.ctx
        exc = as_run_error(raised, current)
        exc.op_id = exc.op_id or current
        exc.node_id = exc.node_id or step.node
        if FAILED_PORT not in step.edges or isinstance(exc, Interrupted):
            self._record_failed(ctx, track, current, started, exc)
            # An interrupted op leaves no line, as a cancelled one: the answers it had are
            # replayed when it runs again. A failed fork's number is used again: its
            # branches keep their ids.
            if journaled and not isinstance(exc, Interrupted):
                seq = track.op_seq - 1 if step.control else track.op_seq
                ctx.root.walk.durability.journal(stopped_line(ctx, seq, current))
            raise exc from (None if exc is raised else raised)
        # Masked: the report goes into state, where a later node may send it on.
        report = redact_value(run_failure(ctx, exc, phase="op").to_json(), ctx.redact)
        ctx.state.write(f"$vars.{step.node}.error", report)
        return Outcome(port=FAILED_PORT, record={"error": report})

    @staticmethod
    def _no_edge(ctx: RunContext, step: Step, current: str, port: str) -> Any:
        """The op left through ``port``, which has no edge: an error when the op has
        other ways on, else a dead end (lowering warned) that ends the track with the
        last result as its output."""
        if step.op.next and port != "default":
            raise LatticeRunError(
                f"op {current!r} left through port {port!r}, which leads nowhere",
                error_type="dead_end",
                op_id=current,
                node_id=step.node,
            )
        if ctx.branch is None:
            ctx.root.walk.dead_end = step.node
        return ctx.state.read(ctx.last_result) if ctx.last_result else None

    def _journal(
        self,
        track: Track,
        step: Step,
        outcome: Outcome,
        nxt: str | None,
        counters: Counters,
        calls_before: int,
        output: Any,
    ) -> None:
        """Keep a branch's writes for its join, and write the op's journal line."""
        ctx = track.ctx
        if ctx.branch is not None and ctx.state.changes:
            self._keep_for_join(track)
        ctx.root.walk.durability.journal(
            _commit_line(ctx, step, track.op_seq, outcome, nxt, counters, calls_before, output)
        )

    def _keep_changes(self, track: Track) -> None:
        """Without a journal: keep a branch's writes for its join, then start the next
        op's list afresh."""
        ctx = track.ctx
        if not ctx.state.changes:
            return
        if ctx.branch is not None:
            self._keep_for_join(track)
        ctx.state.changes = []

    @staticmethod
    def _keep_for_join(track: Track) -> None:
        changes = track.ctx.state.changes
        current = track.current
        assert changes is not None and current is not None
        track.changes.extend(changes)
        for change in changes:
            track.writers.setdefault(_entry(change[1]), current)

    @staticmethod
    def _check_stopped(ctx: RunContext, task: asyncio.Task[Any] | None) -> None:
        """Stop at this op boundary when the run was asked to, or was cancelled."""
        if ctx.root.stop_requested:
            raise Interrupted("the run was stopped at an op boundary, as asked")
        if task is not None and task.cancelling():
            # Cancelled (Ctrl-C) during ops that never wait: the cancellation is delivered
            # at an await, and a loop of deterministic ops may have none.
            raise asyncio.CancelledError

    # -- forks and for-each ------------------------------------------------------------

    async def _control(self, track: Track, op: Op) -> Outcome:
        if op.kind == "FORK":
            return await self._fork(track, op)
        assert op.kind == "FOR_EACH"
        return await self._for_each(track, op)

    async def _fork(self, track: Track, op: ForkOp) -> Outcome:
        ctx = track.ctx
        key = track.label
        branches = [
            self._branch(ctx, f"{key}.{i}", entry, stop_at=op.join)
            for i, entry in enumerate(op.branches, 1)
        ]
        ctx.emit("fork_started", {"branches": [b.ctx.branch for b in branches]})
        ends = await self._run_all(branches, fail_fast=op.fail_fast, concurrency=None)
        owners: dict[str, tuple[str, str]] = {}
        for branch in branches:
            for entry, writer in branch.writers.items():
                if entry in owners and owners[entry][0] != branch.ctx.branch:
                    other_branch, other_op = owners[entry]
                    raise LatticeRunError(
                        f"branches {other_branch} and {branch.ctx.branch} both changed "
                        f"$vars.{entry} (ops {other_op!r} and {writer!r}); give each branch "
                        "its own variables",
                        error_type="state_conflict",
                        details={"variable": entry, "ops": [other_op, writer]},
                    )
                owners.setdefault(entry, (str(branch.ctx.branch), writer))
        ctx.state.merge([change for branch in branches for change in branch.changes])
        arrived = [
            b.ctx.branch for b, end in zip(branches, ends, strict=True) if end.how == "arrived"
        ]
        ctx.emit(
            "fork_joined",
            {"branches": len(branches), "arrived": arrived, "ended": len(branches) - len(arrived)},
        )
        if arrived and op.join is not None:
            last = [b for b, end in zip(branches, ends, strict=True) if end.how == "arrived"][-1]
            if last.ctx.last_result is not None:  # "the last result" after the join
                ctx.last_result = last.ctx.last_result
            return Outcome(output={"arrived": arrived})
        ended = next((end.output for end in ends if end.how == "end"), None)
        return Outcome(port=ENDED, output=ended)

    async def _for_each(self, track: Track, op: ForEachOp) -> Outcome:
        ctx = track.ctx
        items = ValueTemplate(op.items).render(ctx.state.resolve)
        if not isinstance(items, list):
            raise LatticeRunError(
                f"forEach {op.source_node!r}: {op.items} is not a list ({type(items).__name__})",
                error_type="state_error",
            )
        key = track.label
        node = op.source_node
        bodies = []
        for index, item in enumerate(items):
            branch = self._branch(ctx, f"{key}.{index + 1}", op.body, stop_at=None)
            branch.ctx.state.write(path_text("$vars", node, "item"), item)
            branch.ctx.state.write(path_text("$vars", node, "index"), index)
            branch.ctx.state.changes = []
            bodies.append(branch)
        ctx.emit("for_each_started", {"items": len(items), "max_concurrency": op.max_concurrency})
        collect = op.on_item_error == "collect"
        ends = await self._run_all(
            bodies, fail_fast=not collect, concurrency=op.max_concurrency, collect=collect
        )
        results = [end.output if isinstance(end, TrackEnd) else end for end in ends]
        failed = sum(1 for end in ends if not isinstance(end, TrackEnd))
        ctx.emit("for_each_finished", {"branches": len(ends), "failed": failed})
        ctx.write_result(op.writes, results)
        return Outcome(output={"items": len(results)})

    def _branch(self, ctx: RunContext, branch_id: str, entry: str, *, stop_at: str | None) -> Track:
        """A track for one branch, over a fork of ``ctx``'s state, picking up where the
        journal says it was when the run is a resumed one."""
        root = ctx.root
        resume: BranchResume | None = root.walk.resume_branches.pop(branch_id, None)
        state = ctx.state.fork()
        base = root.walk.base_provider
        assert base is not None  # set by the Runner before the walk
        provider = root.walk.durability.provider(
            base, resume.answers if resume else (), branch=branch_id
        )
        child = ctx.branch_context(state, branch_id, replace(root.llm, provider=provider))
        track = Track(child, entry, stop_at=stop_at)
        if resume is not None and resume.lines:
            for line in resume.lines:
                for change in line.get("changes") or ():
                    state.apply(change)
                    track.writers.setdefault(_entry(change[1]), str(line.get("op_id")))
            last = resume.lines[-1]
            track.op_seq = int(last.get("op_seq", len(resume.lines)))
            track.current = last.get("next")
            child.last_result = last.get("last_result")
            track.resumed_output = last.get("output")
        track.changes = list(state.changes or [])
        state.changes = []
        return track

    async def _run_all(  # noqa: C901
        self,
        tracks: list[Track],
        *,
        fail_fast: bool,
        concurrency: int | None,
        collect: bool = False,
    ) -> list[Any]:
        """Run every track; their ends in track order. A failure fails the whole unless
        ``collect`` (then its slot holds the FailureReport). With ``fail_fast`` the first
        failure stops the others at their next op boundary."""
        limit = asyncio.Semaphore(concurrency) if concurrency else None

        async def one(track: Track) -> TrackEnd:
            if track.current is None:  # resumed: it had already ended
                return TrackEnd("end", track.resumed_output)
            if limit is None:
                return await self.run_track(track)
            async with limit:
                if track.ctx.stopped_by_sibling():
                    raise Interrupted("a sibling branch failed, so this branch stopped")
                return await self.run_track(track)

        tasks = [asyncio.ensure_future(one(track)) for track in tracks]
        try:
            pending = list(tasks)  # in order: a deterministic ``wait`` keeps it
            while pending:
                done, pending = await self.wait(pending, return_when=asyncio.FIRST_EXCEPTION)
                failed = any(t.exception() is not None for t in done)
                if failed and fail_fast:
                    for track in tracks:
                        track.ctx.cancelled = True
        finally:
            for task in tasks:
                if not task.done():
                    task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for track in tracks:
                track.ctx.llm.emit = discard_event  # no cycle between branch and its CallEnv
        ends: list[Any] = []
        first: BaseException | None = None
        for track, task in zip(tracks, tasks, strict=True):
            error = task.exception()
            if error is None:
                ends.append(task.result())
            elif (
                collect
                and isinstance(error, LatticeRunError)
                and not isinstance(error, HaltRun | Interrupted)
            ):
                ends.append({"error": run_failure(track.ctx, error, phase="op").to_json()})
            else:
                ends.append(None)
                if first is None or (
                    isinstance(first, Interrupted) and not isinstance(error, Interrupted)
                ):
                    first = error
        if first is not None:
            raise first
        return ends

    # -- records -----------------------------------------------------------------------

    def _record_failed(
        self, ctx: RunContext, track: Track, op_id: str, started: float, error: LatticeRunError
    ) -> None:
        """The ``op_finished`` event and the record of an op that failed with no
        ``failed`` route (an op that finished is recorded in ``run_track``)."""
        duration_ms = round((self.clock() - started) * 1000, 3)
        ctx.emit("op_finished", {"duration_ms": duration_ms, "error_type": error.error_type})
        if ctx.root.walk.durability.keeps_records:
            self._write_record(ctx, track, op_id, duration_ms, None, error=error)

    def _write_record(
        self,
        ctx: RunContext,
        track: Track,
        op_id: str,
        duration_ms: float,
        outcome: Outcome | None,
        *,
        error: LatticeRunError | None = None,
    ) -> None:
        """Hand the op's record (``op_record``) to the run's durability (which keeps records)."""
        label = track.label
        record = op_record(
            self.ir.ops[op_id],
            label,
            ctx.branch,
            duration_ms,
            read_inputs(ctx.state, self.reads[op_id]),
            None if outcome is None else outcome.port,
            None if outcome is None else outcome.output,
            None if outcome is None else outcome.record,
            error,
        )
        ctx.root.walk.durability.write_op(label, op_id, record)


def run_failure(ctx: RunContext, exc: LatticeRunError, *, phase: str) -> FailureReport:
    """The FailureReport of ``exc``: ``phase`` ``op`` for an op whose ``failed`` route is
    taken, ``run`` when the run stops; its recovery action names the run's folder, unless
    the error names its own (``details["recovery_action"]``: a resume cannot help)."""
    folder = ctx.recorder.run_dir
    own = exc.details.get("recovery_action")
    if isinstance(own, str):
        action = own
    elif folder is None:
        action = "fix the cause and run again (this run kept no folder to resume)"
    elif isinstance(exc, Interrupted):
        action = f"lattice resume {folder} (completed ops do not run again)"
    else:
        action = (
            f"fix the cause, then: lattice resume {folder} "
            "(the failed op runs again; completed ops do not)"
        )
    return failure_report(
        exc,
        phase=phase,
        run_id=ctx.run_id,
        op_id=ctx.current_op,
        node_id=ctx.current_node,
        blocking=phase == "run",
        recovery_action=action,
    )


def _entry(path: str) -> str:
    """The ``$vars`` entry a state path is under (``$vars.a.b`` → ``a``)."""
    return path.split(".", 2)[1] if path.count(".") else path


def _commit_line(
    ctx: RunContext,
    step: Step,
    op_seq: int,
    outcome: Outcome,
    nxt: str | None,
    counters: Counters,
    calls_before: int,
    output: Any,
) -> dict[str, Any]:
    """The journal line that commits one op (``lattice.runs.journal``)."""
    state = ctx.state
    line: dict[str, Any] = {
        "kind": "op",
        "op_seq": op_seq,
        "op_id": step.op.id,
        "port": outcome.port,
        "next": nxt,
        "steps": counters.steps,
        "changes": state.changes,
        "last_result": ctx.last_result,
    }
    if ctx.branch is not None:
        line["branch"] = ctx.branch
    state.changes = []
    if ctx.usage.requests != calls_before:
        line["usage"] = ctx.usage.to_json()
    if step.kind == "ASK":
        line["answers"] = ctx.answers
    if nxt is None:
        line["output"] = output
    return line


def stopped_line(ctx: RunContext, op_seq: int, op_id: str | None) -> dict[str, Any]:
    """The journal line of an op that failed or halted: no state changes, but what its
    model calls cost, and where a scripted provider stands after them (its failures
    included: a resume goes on after them)."""
    ctx.state.changes = []
    line: dict[str, Any] = {
        "kind": "op_failed",
        "op_seq": op_seq,
        "op_id": op_id,
        "usage": ctx.usage.to_json(),
    }
    if ctx.branch is not None:
        line["branch"] = ctx.branch
    provider = ctx.root.walk.base_provider
    if isinstance(provider, CheckpointedProvider):
        line["provider_state"] = provider.checkpoint()
    return line


def _limit_error(
    max_steps: int, max_visits: int, op_id: str, steps: int, visits: int
) -> LatticeRunError:
    over_steps = steps > max_steps
    which = "steps" if over_steps else f"visits of {op_id!r}"
    flag = "--max-steps" if over_steps else "--max-visits"
    return LatticeRunError(
        f"the run exceeded its limit of {which} "
        f"({max_steps if over_steps else max_visits}); a loop may not "
        f"terminate (if it is meant to run longer, raise {flag}, [runtime] "
        f"{flag[2:].replace('-', '_')} or RunLimits)",
        error_type="step_limit",
        details={"steps": steps, "visits": visits},
    )


def as_run_error(exc: Exception, op_id: str) -> LatticeRunError:
    """``exc`` itself, or for a bug or an unwrapped library error, an ``internal_error``."""
    if isinstance(exc, LatticeRunError):
        return exc
    return LatticeRunError(
        f"internal error in op {op_id!r}: {type(exc).__name__}: {exc}",
        error_type="internal_error",
    )


def walk_steps(ir: ExecIR, executor_of: Callable[[Op], Executor | None]) -> dict[str, Step]:
    """Every op of ``ir`` as the walk takes it, with the executor ``executor_of`` gives it
    (where it runs: this process, or a durable engine's worker)."""
    return {op_id: Step(op, executor_of(op), edge_table(op.next)) for op_id, op in ir.ops.items()}


def op_reads(ir: ExecIR) -> dict[str, list[StatePath]]:
    """Op id → the state paths its record shows as its inputs (secrets never)."""
    return {
        op_id: [parse_path(p) for p in op.reads if not p.startswith("$secrets")]
        for op_id, op in ir.ops.items()
    }


def edge_table(edges: list[Any]) -> dict[str, str]:
    """Port → next op (lowering puts a FORK where several edges leave one port)."""
    table: dict[str, str] = {}
    for edge in edges:
        table.setdefault(edge.port, edge.to)
    return table

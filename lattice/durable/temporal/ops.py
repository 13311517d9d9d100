"""One op of a run, executed on a worker: what the ``lattice.op`` activity does.

The workflow (``workflow.py``) sends the op's id, the digest of the run's ExecIR (a
worker reads the ExecIR itself once, and keeps it compiled), the part of the run's state the op reads
(``state_slice.py``) and what the run has used so far; ``OpExecutor.run_op`` executes
the op with Lattice's own executor (an LLM op through the contract engine, with its
retries, repairs and budgets) and returns what the op did: the port it left through, its
output and what it adds to its record (``OpExtras``), the state changes it made, the
events it emitted, and where the provider and the answers stand after it. Everything
else is the walk's, in the workflow, as for a local op: the ``op_started`` and
``op_finished`` events, the op's record (``lattice.runtime.op_record``), and routing a
failure, which comes back as data (``error_data``), as does a question without an
answer, never as an exception: Temporal retries an activity only when a worker was lost
before it answered, so its retries never compound Lattice's.

The op's model answers and tool results are journaled as they come
(``op_journal.py``: the activity sends them with its heartbeats); an op started again
after its worker was lost gets them back in ``recorded`` and does not pay for them again.

Secrets are read here, on the worker, from its environment; everything returned (and
journaled) is masked with the run's redactor first, so a secret never enters Temporal's
history. This module does not import ``temporalio``.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from lattice.config import LatticeConfig
from lattice.contracts.calls import TRANSIENT_EVENTS
from lattice.contracts.usage import Usage
from lattice.durable.temporal.fixtures import FixtureTables, LoadTable, RunFixtures
from lattice.durable.temporal.live import LiveOp
from lattice.durable.temporal.op_journal import (
    OpJournal,
    less_replayed,
    replayed_provider_state,
)
from lattice.durable.temporal.tool_sessions import RunToolSessions
from lattice.durable.temporal.tracing import op_spans
from lattice.errors import ErrorType, LatticeRunError
from lattice.ir.models import ExecIR
from lattice.ir.serialize import ir_from_json
from lattice.llm.base import close_loop_clients, provider_checkpoint, restore_provider
from lattice.llm.disabled import DisabledProvider
from lattice.runs.redaction import make_redactor, redact_value
from lattice.runs.store import RunStore
from lattice.runtime.context import HaltRun, RunContext
from lattice.runtime.executors import Executor, build_executor
from lattice.runtime.journaled import JournaledProvider
from lattice.runtime.op_record import error_data
from lattice.runtime.runner import read_secret
from lattice.runtime.settings import RuntimeSettings, settings_from_config
from lattice.runtime.state import StateStore
from lattice.runtime.walk import as_run_error
from lattice.runtime.walk_state import WalkState
from lattice.service.runs import ProviderSpec
from lattice.tools.builtin import BuiltinTools
from lattice.tools.mcp import ToolSessions

LoadExecIR = Callable[[], Awaitable[dict[str, Any]]]
"""Reads a run's ExecIR (from its workflow): ops carry only its digest."""
ON_TEMPORAL_HOW_TO = (
    "no LLM provider is configured on the workers. Run offline with a mock script: "
    "lattice run DOC --engine temporal --mock FILE (lattice mock init DOC writes one; "
    '--dry-run shows its prompts and starts nothing), or "mock"/"mock_script" in the '
    "POST /v1/runs body of a gateway on Temporal; or choose a real provider with "
    '--provider openai|anthropic|litellm ("provider" in the body) or [llm] provider in '
    "the workers' lattice.toml (keys come from the workers' OPENAI_API_KEY / "
    "ANTHROPIC_API_KEY); or replay fixtures (--fixtures FILE)"
)
"""What an op asks to do when neither its run nor the worker names a provider: the
Temporal engine's options (the local engine's hint names ``--fixtures``)."""

CACHED_DOCUMENTS = 64
"""Compiled ExecIRs a worker keeps (by digest), so an op does not compile its run again."""


def execir_digest(execir: dict[str, Any]) -> str:
    """The digest a run's ExecIR is cached under on workers."""
    text = json.dumps(execir, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass
class CompiledRun:
    """A run's ExecIR with its executors built once (templates and conditions compiled)."""

    ir: ExecIR
    executors: dict[str, Executor | None]


class OpExecutor:
    """Executes the ops of any run on one worker, with the worker's configuration
    (``lattice.toml``: providers' addresses, model classes, policies, allowed secrets)."""

    def __init__(self, config: LatticeConfig) -> None:
        self.config = config
        self._compiled: OrderedDict[tuple[str, str], CompiledRun] = OrderedDict()
        self._fixtures = FixtureTables()
        self.tool_sessions = RunToolSessions()
        """Each run's MCP sessions on this worker, kept across its ops (``tool_sessions.py``)."""

    def settings(self, request: dict[str, Any]) -> RuntimeSettings:
        """The runtime settings of the run ``request`` belongs to: the worker's
        configuration with the run's own budgets."""
        budgets = request.get("budgets") or {}
        return settings_from_config(
            self.config,
            max_calls=budgets.get("max_calls"),
            max_tokens_total=budgets.get("max_tokens_total"),
        )

    async def _compile(
        self, request: dict[str, Any], settings: RuntimeSettings, load: LoadExecIR
    ) -> CompiledRun:
        digest = str(request["execir_digest"])
        key = (digest, str(request.get("budgets")))
        compiled = self._compiled.get(key)
        if compiled is not None:
            self._compiled.move_to_end(key)
            return compiled
        execir = await load()
        if execir_digest(execir) != digest:
            raise LatticeRunError(
                f"the run's ExecIR does not match its digest {digest}",
                error_type=ErrorType.INTERNAL_ERROR,
            )
        ir = ir_from_json(execir)
        compiled = CompiledRun(
            ir, {op_id: build_executor(op, settings) for op_id, op in ir.ops.items()}
        )
        self._compiled[key] = compiled
        while len(self._compiled) > CACHED_DOCUMENTS:
            self._compiled.popitem(last=False)
        return compiled

    async def _provider(self, meta: dict[str, Any], load_fixtures: LoadTable | None) -> Any:
        """The run's provider on this worker: its mock script, its fixture table (with
        this worker's live provider when recording), or the provider it names, built from
        this worker's configuration."""
        digest = meta.get("fixtures_digest")
        if isinstance(digest, str):
            if load_fixtures is None:
                raise LatticeRunError(
                    "this run replays fixtures, which this worker cannot read",
                    error_type=ErrorType.INTERNAL_ERROR,
                )
            table = await self._fixtures.table(digest, load_fixtures)
            live = {k: v for k, v in meta.items() if k not in ("fixtures_digest", "record")}
            record_with = (
                ProviderSpec.from_meta(live).build(self.config) if meta.get("record") else None
            )
            return RunFixtures(table, record_with=record_with)
        provider = ProviderSpec.from_meta(meta).build(self.config)
        if isinstance(provider, DisabledProvider):
            provider.how_to = ON_TEMPORAL_HOW_TO
        return provider

    async def run_op(
        self,
        request: dict[str, Any],
        load: LoadExecIR,
        *,
        recorded: Sequence[dict[str, Any]] = (),
        on_journal: Callable[[list[dict[str, Any]]], None] | None = None,
        on_settle: Callable[[list[dict[str, Any]]], Awaitable[None]] | None = None,
        load_fixtures: LoadTable | None = None,
        live: LiveOp | None = None,
    ) -> dict[str, Any]:
        """Execute ``request["op_id"]`` of the run and return what it did (module docstring).
        ``load`` gives the run's ExecIR when this worker has not compiled it yet;
        ``recorded`` is the journal an earlier attempt of this op left (its answers are
        not asked for again), else the request's ``journal`` (what the op's visit that
        halted left, for a visit going on after its answer or decisions); ``on_journal`` is
        given the journal as it grows, ``on_settle`` when it must reach the server now
        (``op_journal.py``); ``load_fixtures`` gives the run's fixture table when this
        worker has not read it yet (``fixtures.py``); ``live`` is given the op's events as
        they come, for its heartbeats (``live.py``)."""
        settings = self.settings(request)
        compiled = await self._compile(request, settings, load)
        op_id = str(request["op_id"])
        op = compiled.ir.ops[op_id]
        executor = compiled.executors[op_id]
        if executor is None:
            raise LatticeRunError(
                f"op {op_id!r} ({op.kind}) is not supported on Temporal yet",
                error_type=ErrorType.UNSUPPORTED,
            )
        provider = await self._provider(request.get("provider") or {}, load_fixtures)
        recorded = list(recorded) or list(request.get("journal") or [])
        provider_state = replayed_provider_state(recorded) or request.get("provider_state")
        if provider_state is not None:
            restore_provider(provider, provider_state)
        redact = make_redactor(settings.secret_names())
        if live is not None:
            live.redact = redact
        journal = OpJournal(recorded, redact, on_journal, on_settle=on_settle)
        events: list[dict[str, Any]] = []
        segment = int(request.get("segment") or 1)
        spans = op_spans(settings, provider, str(request["run_id"]), segment)
        state = StateStore.from_snapshot(request["state"], secrets=partial(read_secret, settings))
        state.changes = []
        state.limit(settings.state_limits)
        ctx = RunContext(
            run_id=str(request["run_id"]),
            state=state,
            recorder=RunStore(None).open(str(request["run_id"]), redact=None),
            answers=dict(request.get("answers") or {}),
            ask_human=None,
            listeners=[
                events.append,
                *([live] if live is not None else []),
                *([spans] if spans is not None else []),
            ],
            llm=settings.call_env(
                JournaledProvider(provider, journal, recorded),
                usage=less_replayed(
                    Usage.from_json(request.get("usage")), request.get("journal") or []
                ),
            ),
            http=settings.http,
            tools=lambda: self.tool_sessions.for_run(
                str(request["run_id"]),
                lambda: ToolSessions(
                    settings.mcp_servers,
                    builtin=BuiltinTools(repo_root=settings.repo_root),
                    log_dir=None,
                    redact=None,
                ),
            ),
            seq=int(request.get("seq") or 0),
            redact=redact,
            secret_names=settings.secret_names(),
        )
        ctx.walk = WalkState(base_provider=provider)
        ctx.last_result = request.get("last_result")
        ctx.current_op, ctx.current_node = op_id, op.source_node
        done: dict[str, Any] = {}
        if spans is not None:
            spans.started(op_id, op.source_node, op.kind)
        try:
            outcome = await executor.run(ctx)
            done |= {"port": outcome.port, "output": outcome.output, "record": outcome.record}
        except HaltRun as halt:
            done["halt"] = {
                "reason": halt.reason,
                "summary": halt.summary,
                "details": halt.details,
                "action": halt.action,
                "node_id": op.source_node,
            }
            if halt.keeps_journal:  # the op's next activity replays it (op_journal.py)
                done["journal"] = journal.lines
        except Exception as raised:  # the walk routes it (its failed port, or the run's end)
            done["error"] = error_data(as_run_error(raised, op_id))
        finally:
            if spans is not None:
                error = done.get("error") or {}
                spans.finished(
                    op_id, op.source_node, port=done.get("port"), error=error.get("error_type")
                )
            if state.tmp:
                state.clear_tmp()
            try:
                await ctx.aclose()
            finally:
                await close_loop_clients(provider)
                ctx.detach()
        done |= {
            "changes": state.changes or [],
            "last_result": ctx.last_result,
            "answers": ctx.answers,
            "usage": ctx.usage.to_json(),
            "provider_state": provider_checkpoint(provider),
            "events": [e for e in events if e["type"] not in TRANSIENT_EVENTS],
            "seq": ctx.seq,
        }
        if isinstance(provider, RunFixtures) and provider.recorded:
            done["fixtures"] = provider.recorded
        masked: dict[str, Any] = redact_value(done, ctx.redact)
        return masked

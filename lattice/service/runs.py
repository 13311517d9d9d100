"""The run service: one way to turn a user's options into a run or a resume, shared by
every front door (``lattice run`` / ``lattice resume`` and ``lattice serve``).

A front door reads its options (command-line flags, an HTTP body), lowers the document,
and asks this module for a ``PreparedRun`` (a new run) or a ``PreparedResume`` (a run
folder to continue). Both build the provider, the runtime settings, the store and the
limits the same way, record the same metadata in ``checkpoint.json`` (so that a run
started by one front door can be resumed by the other), and run either synchronously
(the CLI) or on the caller's event loop (the server).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from lattice.config import AgentsConfig, LatticeConfig, load_config
from lattice.errors import InputError, LatticeUserError
from lattice.ir.models import ExecIR
from lattice.ir.serialize import ir_from_json
from lattice.llm.base import LLMProvider, close_loop_clients
from lattice.llm.fixture import FixtureProvider
from lattice.llm.mock import MockProvider
from lattice.permissions.approvals import Approver
from lattice.runs.checkpoint import read_checkpoint
from lattice.runs.folder import read_run_json
from lattice.runs.store import RunStore
from lattice.runtime.context import AskHuman, EventListener
from lattice.runtime.results import RunResult
from lattice.runtime.resume import StartFrom
from lattice.runtime.runner import RunLimits, Runner
from lattice.runtime.settings import RuntimeSettings, settings_from_config
from lattice.service.mocks import check_script_nodes, check_tool_keys
from lattice.service.providers import ProviderChoice

MAX_MOCK_LATENCY = 60.0
"""The longest pause (seconds) a mock script may ask for per call."""
MAX_MOCK_PIECES = 1000
"""The most pieces a mock answer may be streamed in."""


@dataclass(frozen=True)
class ProviderSpec:
    """The provider of a run: the command-line choice (``--provider``, ``--mock FILE``,
    ``--fixtures FILE``, ``--record``), or a mock script given as a JSON object (the
    server's inline scripts), with an optional pause per mock call (``latency``, seconds;
    for demos and benchmarks of many concurrent runs), and the number of pieces a mock
    answer is streamed in when the run streams (``pieces``; ``MockProvider``)."""

    choice: ProviderChoice = field(default_factory=ProviderChoice)
    script: Mapping[str, Any] | None = None
    latency: float = 0.0
    pieces: int = 0

    @property
    def given(self) -> bool:
        return self.choice.given or self.script is not None

    def build(self, config: LatticeConfig) -> LLMProvider:
        if not 0 <= self.latency <= MAX_MOCK_LATENCY:
            raise LatticeUserError(
                f"mock latency must be between 0 and {MAX_MOCK_LATENCY:g} seconds",
                error_type="mock_error",
            )
        if not 0 <= self.pieces <= MAX_MOCK_PIECES:
            raise LatticeUserError(
                f"mock pieces must be between 0 and {MAX_MOCK_PIECES}", error_type="mock_error"
            )
        if self.script is not None:
            choice = self.choice
            if choice.name not in (None, "mock") or choice.mock or choice.fixtures or choice.record:
                raise LatticeUserError(
                    "an inline mock script is used alone (it implies provider mock)",
                    error_type="mock_error",
                )
            return MockProvider.from_script(
                self.script, latency=self.latency, pieces=self.pieces, keep_calls=False
            )
        provider = self.choice.build(config)
        if self.latency or self.pieces:
            if not isinstance(provider, MockProvider):
                raise LatticeUserError(
                    "mock latency and pieces apply to mock scripts only", error_type="mock_error"
                )
            provider.latency = self.latency
            provider.pieces = self.pieces
        return provider

    def to_meta(self) -> dict[str, Any]:
        """The spec as saved in a run's metadata (``checkpoint.json``)."""
        meta = self.choice.to_meta()
        if self.script is not None:
            meta["mock_script"] = dict(self.script)
        if self.latency:
            meta["mock_latency"] = self.latency
        if self.pieces:
            meta["mock_pieces"] = self.pieces
        return meta

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any]) -> ProviderSpec:
        script = meta.get("mock_script")
        latency = meta.get("mock_latency")
        pieces = meta.get("mock_pieces")
        return cls(
            choice=ProviderChoice.from_meta(meta),
            script=script if isinstance(script, Mapping) else None,
            latency=float(latency) if isinstance(latency, int | float) else 0.0,
            pieces=pieces if isinstance(pieces, int) else 0,
        )


@dataclass(frozen=True)
class RunOptions:
    """What a user may choose about a new run besides its document, inputs and answers."""

    provider: ProviderSpec = field(default_factory=ProviderSpec)
    config_path: str | None = None
    """The configuration file the run was given (recorded; a resume reads it again)."""
    max_calls: int | None = None
    max_tokens_total: int | None = None
    max_steps: int | None = None
    max_visits: int | None = None
    repo: Path | None = None
    """The repository root (``repo_root``), already checked."""
    meta: Mapping[str, Any] = field(default_factory=dict)
    """Extra metadata a front door records (the server: the workflow's name)."""
    approver: Approver | None = None
    """Asks a person now whether an agent's tool call may run (the terminal)."""
    no_wait: bool = False
    """A call that needs approval when no one can answer is refused, not waited for."""


def repo_root(path: str | None) -> Path | None:
    """The ``--repo`` directory, resolved; a missing or non-directory path is a user error."""
    if not path:
        return None
    root = Path(path).resolve()
    if not root.is_dir():
        raise InputError(f"--repo {path}: not a directory")
    return root


@dataclass
class PreparedRun:
    """A new run, checked and ready: its Runner (inputs and answers checked), settings
    and inputs."""

    runner: Runner
    settings: RuntimeSettings
    inputs: dict[str, Any]
    start: StartFrom | None = None
    """Set for a re-run: the op it starts from, its state and its parent."""

    def run(self, *, run_id: str | None = None) -> RunResult:
        """Run to its end in a private event loop (the CLI)."""
        return self.runner.run(self.inputs, run_id=run_id, start=self.start)

    async def arun(self, *, run_id: str | None = None) -> RunResult:
        """Run on the caller's event loop, then close the provider's clients bound to it."""
        try:
            return await self.runner.arun(self.inputs, run_id=run_id, start=self.start)
        finally:
            await close_loop_clients(self.runner.provider)


def prepare_run(
    ir: ExecIR,
    *,
    config: LatticeConfig,
    options: RunOptions,
    inputs: Mapping[str, Any],
    answers: Mapping[str, Any] | None = None,
    workflow: Mapping[str, Any] | None = None,
    runs_dir: Path | None,
    ask_human: AskHuman | None = None,
    store_type: type[RunStore] = RunStore,
) -> PreparedRun:
    """Build the run of ``ir``: provider, settings, store (``runs_dir``; None keeps the run
    in memory; ``store_type`` builds it), limits and metadata. Raises a LatticeUserError
    for a bad provider choice, InputError for answers or inputs that do not fit the
    workflow."""
    provider = options.provider.build(config)
    check_mock_nodes(ir, provider, options.provider)
    settings = settings_from_config(
        config,
        max_calls=options.max_calls,
        max_tokens_total=options.max_tokens_total,
        repo_root=options.repo,
    )
    settings = with_approvals(settings, options.approver, options.no_wait)
    runner = Runner(
        ir,
        provider=provider,
        store=store_type(runs_dir, durability=config.runs.durability),
        limits=RunLimits(
            max_steps=options.max_steps or config.runtime.max_steps,
            max_visits=options.max_visits or config.runtime.max_visits,
        ),
        answers=answers,
        ask_human=ask_human,
        workflow=workflow,
        meta={
            **options.provider.to_meta(),
            "config": options.config_path,
            "max_calls": options.max_calls,
            "max_tokens_total": options.max_tokens_total,
            "repo": str(options.repo) if options.repo else None,
            "workflow": ir.workflow.id,
            **({"agents": config.agents.model_dump()} if config.agents.granted() else {}),
            **options.meta,
        },
        settings=settings,
    )
    inputs = dict(inputs)
    runner.validate_inputs(inputs)
    return PreparedRun(runner, settings, inputs)


@dataclass
class PreparedResume:
    """A run folder to continue, with the provider, settings and configuration it goes on
    with (the run's own unless the caller chose others)."""

    folder: Path
    checkpoint: dict[str, Any]
    config: LatticeConfig
    provider: LLMProvider
    settings: RuntimeSettings
    answers: dict[str, Any]
    store: RunStore
    """How the folder is written on (its durability)."""
    accept_changed: bool = False
    ask_human: AskHuman | None = None

    @property
    def run_id(self) -> str:
        return str(self.checkpoint.get("run_id") or self.folder.name)

    def run(self, *, on_event: EventListener | None = None) -> RunResult:
        """Continue the run to its end in a private event loop (the CLI)."""
        return Runner.resume(
            self.folder,
            answers=self.answers,
            provider=self.provider,
            settings=self.settings,
            ask_human=self.ask_human,
            on_event=on_event,
            accept_changed=self.accept_changed,
            store=self.store,
        )

    async def arun(
        self,
        *,
        on_event: EventListener | None = None,
        on_runner: Callable[[Runner], None] | None = None,
    ) -> RunResult:
        """Continue the run on the caller's event loop. ``on_runner`` is given the Runner
        that continues it as soon as it exists (to ``request_stop`` the run)."""
        try:
            reopened = Runner.reopen(
                self.folder,
                answers=self.answers,
                provider=self.provider,
                settings=self.settings,
                ask_human=self.ask_human,
                accept_changed=self.accept_changed,
                store=self.store,
            )
            try:
                if on_runner is not None:
                    on_runner(reopened.runner)
            except BaseException:
                reopened.release()
                raise
            return await reopened.arun(on_event=on_event)
        finally:
            await close_loop_clients(self.provider)


def prepare_resume(
    folder: Path,
    *,
    provider: ProviderSpec | None = None,
    answers: Mapping[str, Any] | None = None,
    accept_changed: bool = False,
    config: LatticeConfig | None = None,
    config_path: str | None = None,
    repo: str | None = None,
    ask_human: AskHuman | None = None,
    store_type: type[RunStore] = RunStore,
    approver: Approver | None = None,
    no_wait: bool = False,
) -> PreparedResume:
    """Get ready to continue the run in ``folder``. What is not given is taken from the
    run's checkpoint: the provider (``provider`` that gives nothing counts as not given),
    the configuration file (unless ``config`` is given), the budgets and the repository."""
    checkpoint = read_checkpoint(folder)
    meta = checkpoint.get("meta") or {}
    if config is None:
        config = load_config(config_path or meta.get("config"))
    if isinstance(meta.get("agents"), dict):  # the grants the run was started with
        config = config.model_copy(update={"agents": AgentsConfig.model_validate(meta["agents"])})
    spec = provider if provider is not None and provider.given else ProviderSpec.from_meta(meta)
    built = spec.build(config)
    if provider is not None and provider.given:  # a script the run has not seen yet
        check_mock_nodes(ir_from_json(read_run_json(folder, "execir.json")), built, spec)
    settings = settings_from_config(
        config,
        max_calls=meta.get("max_calls"),
        max_tokens_total=meta.get("max_tokens_total"),
        repo_root=repo_root(repo or meta.get("repo")),
    )
    settings = with_approvals(settings, approver, no_wait)
    return PreparedResume(
        folder=folder,
        checkpoint=checkpoint,
        config=config,
        provider=built,
        settings=settings,
        answers=dict(answers or {}),
        store=store_type(folder.parent, durability=config.runs.durability),
        accept_changed=accept_changed,
        ask_human=ask_human,
    )


def with_approvals(
    settings: RuntimeSettings, approver: Approver | None, no_wait: bool
) -> RuntimeSettings:
    """``settings`` whose agents ask ``approver`` (a person now) and, with ``no_wait``,
    refuse a call that needs approval when no one answers."""
    if approver is None and not no_wait:
        return settings
    agents = replace(settings.agents, approver=approver, no_wait=no_wait)
    return replace(settings, agents=agents)


def check_mock_nodes(ir: ExecIR, provider: LLMProvider, spec: ProviderSpec) -> None:
    """Refuse a mock script (alone, or recorded as fixtures) naming nodes ``ir`` lacks."""
    if isinstance(provider, FixtureProvider):
        provider = provider.record_with  # type: ignore[assignment]
    if isinstance(provider, MockProvider):
        where = f"mock script {spec.choice.mock}" if spec.choice.mock else "mock script"
        check_script_nodes(ir, provider.responses, where=where)
        check_tool_keys(ir, provider.tools, where=where)

"""RuntimeSettings: how a Runner calls models (model map, attempts, policies, retries, budgets)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from lattice.contracts.calls import CallEnv, Emit, Sleep, discard_event
from lattice.contracts.policies import DEFAULT_POLICIES, RetrySettings
from lattice.contracts.usage import Budget, Usage
from lattice.errors import LatticeUserError, install_hint
from lattice.llm.base import LLMProvider
from lattice.permissions.policy import Permissions
from lattice.permissions.settings import RuleSet, build_permissions
from lattice.runtime.state import StateLimits
from lattice.telemetry.settings import TelemetrySettings, telemetry_from_config
from lattice.tools.http import HttpPolicy
from lattice.tools.mcp import McpServerSpec, specs_from_config
from lattice.tools.toolset import Toolset
from lattice.workspace.grants import WorkspaceGrant

if TYPE_CHECKING:  # settings_from_config takes a config; the runtime itself needs none
    from lattice.config import LatticeConfig
    from lattice.permissions.approvals import Approver


ToolsetFactory = Callable[[WorkspaceGrant, tuple[str, ...]], Iterable[Toolset]]
"""Opens the toolsets that serve the granted tools of one agent op's visit. The visit
takes charge of each toolset as the iterable gives it: a generator that fails to open
one has those it gave before closed."""


@dataclass(frozen=True)
class AgentSettings:
    """What the user lets agent ops do (``[agents]`` and the command-line flags) and
    the caps on every agent op's limits (None: the op's own)."""

    grant: WorkspaceGrant = field(default_factory=WorkspaceGrant)
    max_turns: int | None = None
    max_tool_calls: int | None = None
    max_tokens: int | None = None
    tool_timeout_s: float | None = None
    toolsets: ToolsetFactory | None = None
    """Makes the toolsets of a visit (None: ``lattice.workspace.workspace_toolsets``)."""
    permissions: Permissions | None = None
    """The rules each call of a granted tool is decided by (None: every call runs)."""
    no_wait: bool = False
    """A call that needs approval when no one can answer is refused instead of halting."""
    approver: Approver | None = None
    """Asks a person now whether a call may run (the terminal); None: the run halts."""


@dataclass(frozen=True)
class RuntimeSettings:
    """Defaults that documents and nodes can override.

    ``models`` maps model classes (small/medium/large/default) to concrete model names;
    ``max_attempts`` is attempts per class (first call + repairs); ``policies`` maps
    error types to action stacks (see ``lattice.contracts.policies``); ``sleep`` is
    injectable so tests use a fake clock.
    """

    models: Mapping[str, str | None] = field(default_factory=dict)
    max_attempts: int = 3
    policies: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: DEFAULT_POLICIES)
    retry: RetrySettings = field(default_factory=RetrySettings)
    max_calls: int | None = None
    max_tokens_total: int | None = None
    sleep: Sleep = asyncio.sleep
    http: HttpPolicy = field(default_factory=HttpPolicy)
    """Allowed/denied hosts, response size cap and an injectable transport for httpRequest."""
    prices: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    """Model → (input, output) USD per million tokens, for ``usage.estimated_cost_usd``."""
    temperature: float = 0.0
    """Sampling temperature of LLM ops that set none themselves."""
    secrets_allow: tuple[str, ...] = ()
    """Environment variables that ``{{ $secrets.NAME }}`` may read; their values are redacted."""
    masked_env: tuple[str, ...] = ()
    """Other environment variables whose values are redacted and no document may read: the
    Temporal payload codec's keys when ``[temporal] codec_key_env`` names a variable."""
    repo_root: Path | None = None
    """The repository a user handed to the run (``--repo DIR``): what ``retrieve_context`` may
    read and what ``patch_applies`` checks patches against. None: neither is available."""
    mcp_servers: Mapping[str, McpServerSpec] = field(default_factory=dict)
    """MCP servers from ``[mcp.servers]`` of the user's config, by server id."""
    gc_pacing: bool = True
    """Make full garbage collections rarer while runs are active (``lattice.runtime.gc_pacing``)."""
    max_parallel: int = 16
    """Ops that the branches of a run (forks, for-each items) run at once, at most."""
    state_limits: StateLimits | None = field(default_factory=StateLimits)
    """Bounds on one value and on a run's whole state (None: no bounds)."""
    stream: bool | None = None
    """Stream model answers (``llm_delta`` events to listeners). None: when a listener of
    the run takes deltas; True: always (a provider that can stream does); False: never."""
    telemetry: TelemetrySettings | None = None
    """Trace every run (OpenTelemetry spans, ``lattice.telemetry``); None: no tracing."""
    agents: AgentSettings = field(default_factory=AgentSettings)
    """What agent ops may do: the user's grant (nothing by default) and limit caps."""
    formats: bool = True
    """Assert ``format`` in output contracts, the run's inputs and httpRequest output
    schemas (``[schemas] formats``; a schema may opt out, ``lattice.schemas``)."""

    def budget(self) -> Budget:
        return Budget(max_calls=self.max_calls, max_tokens=self.max_tokens_total)

    def call_env(
        self, provider: LLMProvider, *, usage: Usage | None = None, emit: Emit = discard_event
    ) -> CallEnv:
        """What contract calls of one run (or one ``LLMPrimitive`` call) go through."""
        return CallEnv(
            provider=provider,
            usage=usage if usage is not None else Usage(),
            emit=emit,
            budget=self.budget(),
            retry=self.retry,
            sleep=self.sleep,
            models=self.models,
            base_policies=self.policies,
            stream=self.stream,
        )

    def run_listeners(
        self, provider: LLMProvider, *, workflow: str | None = None
    ) -> list[Callable[[dict[str, Any]], None]]:
        """The event listeners a Runner with these settings starts with: the tracing
        listener when ``telemetry`` is set (OpenTelemetry is imported only then)."""
        if self.telemetry is None or not self.telemetry.enabled:
            return []
        try:
            from lattice.telemetry.spans import TraceListener
        except ImportError as exc:
            raise LatticeUserError(
                "tracing is configured ([telemetry] or OTEL_EXPORTER_OTLP_ENDPOINT) but "
                f"OpenTelemetry is not installed: {install_hint('otel')}",
                error_type="config_error",
            ) from exc

        return [
            TraceListener(
                self.telemetry,
                provider=str(getattr(provider, "name", "unknown")),
                workflow=workflow,
                secret_names=self.secret_names(),
            )
        ]

    def secret_names(self) -> tuple[str, ...]:
        """Environment variables whose values are masked in run folders and output: the
        allowed ``$secrets``, those that MCP servers' ``env`` passes on as ``${NAME}`` and
        ``masked_env`` (provider and Lattice keys are masked besides, by the redactor)."""
        passed_on = (name for spec in self.mcp_servers.values() for name in spec.env_references())
        return tuple(dict.fromkeys((*self.secrets_allow, *passed_on, *self.masked_env)))


def agent_settings_from_config(config: LatticeConfig) -> AgentSettings:
    """``[agents]`` as the runtime takes it (a workspace that is not a folder is an error)."""
    agents = config.agents
    root: Path | None = None
    if agents.workspace:
        root = Path(agents.workspace).expanduser().resolve()
        if not root.is_dir():
            raise LatticeUserError(
                f"agents workspace {agents.workspace}: not a directory", error_type="config_error"
            )
    grant = WorkspaceGrant(
        root=root,
        read="read" in agents.allow,
        write="write" in agents.allow,
        shell="shell" in agents.allow,
        web="web" in agents.allow,
        mcp_servers=tuple(agents.mcp_servers),
        patch_only=agents.patch_only,
        tool_timeout=agents.tool_timeout,
        shell_tmp_bytes=agents.shell_tmp_bytes,
        shell_file_bytes=agents.shell_file_bytes,
        shell_write_bytes=agents.shell_write_bytes,
        shell_write_files=agents.shell_write_files,
    )
    return AgentSettings(
        grant=grant,
        permissions=permissions_from_config(config, root),
        max_turns=agents.max_turns,
        max_tool_calls=agents.max_tool_calls,
        max_tokens=agents.max_tokens,
        # the tools stop themselves at tool_timeout (the shell a little later): the loop's
        # own limit is a backstop that leaves them room to say why
        tool_timeout_s=agents.tool_timeout + 10,
    )


def permissions_from_config(config: LatticeConfig, workspace: Path | None) -> Permissions:
    """``[agents.permissions]``, the command line's rules and Claude Code's settings files
    as the run's permissions (a rule or file that cannot be read is an error)."""
    own = config.agents.permissions
    toml = config.source or "lattice.toml"
    sets = [
        RuleSet(
            {"allow": own.allow, "ask": own.ask, "deny": own.deny},
            f"{toml}: agents.permissions.{{behavior}}[{{index}}]",
            Path(config.source).resolve().parent if config.source else None,
            own.default_mode,
            f"{toml}: agents.permissions.default_mode",
        ),
        RuleSet(
            {"allow": own.flags.allow, "ask": own.flags.ask, "deny": own.flags.deny},
            "--{behavior}-rule",
            Path.cwd(),
            own.flags.mode,
            "--permission-mode",
        ),
    ]
    return build_permissions(
        workspace=workspace,
        configured=sets,
        claude_files=own.claude_settings,
        bypass=own.bypass_permissions,
    )


def settings_from_config(
    config: LatticeConfig,
    *,
    max_calls: int | None = None,
    max_tokens_total: int | None = None,
    repo_root: Path | None = None,
) -> RuntimeSettings:
    """RuntimeSettings from ``lattice.toml`` (command-line budgets win)."""
    runtime = config.runtime
    policies = {**DEFAULT_POLICIES, **{k: tuple(v) for k, v in config.policies.items()}}
    return RuntimeSettings(
        models={str(name): model for name, model in config.llm.models.items()},
        max_attempts=runtime.max_attempts,
        gc_pacing=runtime.gc_pacing,
        stream=None if runtime.stream == "auto" else runtime.stream,
        telemetry=telemetry_from_config(config),
        retry=RetrySettings(max_retries=runtime.max_retries),
        max_parallel=runtime.max_parallel,
        state_limits=StateLimits(
            max_state_bytes=runtime.max_state_bytes, max_value_bytes=runtime.max_value_bytes
        ),
        repo_root=repo_root,
        mcp_servers=specs_from_config(config.mcp.servers),
        policies=MappingProxyType(policies),
        max_calls=max_calls if max_calls is not None else runtime.max_calls,
        max_tokens_total=max_tokens_total
        if max_tokens_total is not None
        else runtime.max_tokens_total,
        http=HttpPolicy(
            allow_hosts=tuple(config.http.allow_hosts),
            deny_hosts=tuple(config.http.deny_hosts),
            allow_private=config.http.allow_private,
            max_response_bytes=config.http.max_response_bytes,
        ),
        secrets_allow=tuple(config.secrets.allow),
        masked_env=(config.temporal.codec_key_variable()[0],),
        temperature=config.llm.temperature,
        prices={model: (p.input, p.output) for model, p in config.prices.items()},
        agents=agent_settings_from_config(config),
        formats=config.schemas.formats,
    )

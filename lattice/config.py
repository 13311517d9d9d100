"""The user's configuration: ``lattice.toml``, validated, with environment overrides.

Found via ``--config FILE``, then ``LATTICE_CONFIG``, then ``./lattice.toml``; none
is fine (defaults). Unknown keys and out-of-range values are errors that name the
key. API keys are never read from here: only from the providers' usual environment
variables (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``).

::

    [llm]
    provider = "openai"              # default provider (env LATTICE_PROVIDER)
    temperature = 0.0
    [llm.models]                     # model classes → "provider:model" (env LATTICE_MODEL_SMALL, …)
    small = "openai:gpt-4o-mini"
    large = "anthropic:claude-opus-4-1"
    [providers.openai]
    base_url = "http://localhost:11434/v1"   # Ollama, vLLM, llama.cpp, LM Studio
    # [providers.litellm] takes the same keys (base_url is LiteLLM's api_base)
    timeout = 60
    max_concurrency = 8
    requests_per_minute = 0          # 0: no client-side limit
    [runtime]
    max_attempts = 3
    max_calls = 200                  # model requests per run, repairs and retries included
    max_tokens_total = 500000
    max_retries = 3                  # retries of one model call, whatever the errors
    max_parallel = 16                # ops that a run's parallel branches run at once
    max_state_bytes = 10000000       # $in and $vars of one run (about, as JSON)
    max_value_bytes = 10000000       # one value written to state
    stream = "auto"                  # stream answers: "auto" (when a listener shows them), true, false
    [runs]
    durability = "fsync"             # or "os": see docs/runs.md
    [schemas]
    formats = true                   # assert "format" (date-time, email, uri, ...): docs/contracts.md
    [policies]
    schema_error = ["repair", "escalate", "fail"]
    [prices."gpt-4o-mini"]           # USD per million tokens, for cost estimates
    input = 0.15
    output = 0.6
    [secrets]
    allow = ["GITHUB_TOKEN"]
    [http]                           # httpRequest reaches public addresses only, unless:
    allow_hosts = []                 # hosts (globs), IPs, networks; exact ones may be private
    deny_hosts = []                  # also matched against resolved addresses; deny wins
    allow_private = false            # true: loopback, private, link-local, ... (not metadata)
    [temporal]                       # runs on Temporal (docs/temporal.md)
    blob_threshold_bytes = 262144    # payloads this large go to the blob store
    blob_store = "s3://lattice-blobs/runs"   # default: a folder of this machine
    blob_endpoint_url = "http://127.0.0.1:9000"  # an S3-compatible server
    [mcp.servers.time]
    command = "mcp-server-time"
    args = []
    [telemetry]                      # OpenTelemetry traces (pip install -e '.[otel]')
    otlp_endpoint = "http://localhost:4318"  # OTLP/HTTP collector (env OTEL_EXPORTER_OTLP_ENDPOINT)
    capture_content = false          # prompts and answers on the spans (masked)
    service_name = "lattice"         # env OTEL_SERVICE_NAME
    [triggers.release]               # a webhook of lattice serve (docs/services.md)
    path = "github/release"          # POST /hooks/github/release
    workflow = "release-announcement.json"   # under --workflows
    signature = "github"             # X-Hub-Signature-256 (or "lattice": X-Lattice-Signature)
    secret_env = "GITHUB_WEBHOOK_SECRET"     # the HMAC secret's environment variable
    inputs = { repo = "body.repository.full_name" }   # JMESPath over body and headers
    [schedules.nightly]              # a cron schedule of lattice serve
    cron = "0 2 * * *"
    timezone = "Europe/Berlin"
    workflow = "standup-digest.json"
    catch_up = "skip"                # ticks missed while down: skip, or run the latest once
    [temporal]                       # runs on Temporal (pip install -e '.[temporal]')
    codec_key_env = "LATTICE_TEMPORAL_KEY"   # encrypt every payload with the key(s) it holds
"""

from __future__ import annotations

import ipaddress
import os
import re
import tomllib
import zoneinfo
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from lattice.contracts.policies import ACTIONS
from lattice.errors import ErrorType, LatticeUserError, did_you_mean
from lattice.ir.tool_names import mcp_grant_entry
from lattice.permissions.rules import RuleError
from lattice.permissions.settings import check_mode, parse_rules

MODEL_CLASSES = ("small", "medium", "large", "default")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)  # validators built on first use


class ProviderConfig(_Strict):
    base_url: str | None = None
    timeout: float = Field(default=60.0, gt=0, le=3600)
    max_concurrency: int = Field(default=8, ge=1, le=1024)
    requests_per_minute: int = Field(default=0, ge=0, le=1_000_000)


class LLMConfig(_Strict):
    provider: str | None = None
    models: dict[Literal["small", "medium", "large", "default"], str] = Field(default_factory=dict)
    temperature: float = Field(default=0.0, ge=0, le=2)


class RuntimeConfig(_Strict):
    max_attempts: int = Field(default=3, ge=1, le=10)
    max_steps: int = Field(default=10_000, ge=1)
    max_visits: int = Field(default=1_000, ge=1)
    max_calls: int | None = Field(default=200, ge=1)
    max_tokens_total: int | None = Field(default=None, ge=1)
    max_retries: int = Field(default=3, ge=0, le=100)
    max_parallel: int = Field(default=16, ge=1, le=10_000)
    max_state_bytes: int = Field(default=10_000_000, ge=1)
    max_value_bytes: int = Field(default=10_000_000, ge=1)
    gc_pacing: bool = True
    stream: bool | Literal["auto"] = "auto"


class RunsConfig(_Strict):
    durability: Literal["fsync", "os"] = "fsync"


class SchemasConfig(_Strict):
    formats: bool = True
    """Assert ``format`` in output contracts, inputs and httpRequest output schemas
    (``lattice.schema_formats``); false keeps it an annotation everywhere."""


class Price(_Strict):
    input: float = Field(ge=0)
    output: float = Field(ge=0)


class SecretsConfig(_Strict):
    allow: list[str] = Field(default_factory=list)


class HttpConfig(_Strict):
    allow_hosts: list[str] = Field(default_factory=list)
    deny_hosts: list[str] = Field(default_factory=list)
    allow_private: bool = False
    max_response_bytes: int = Field(default=5_000_000, ge=1)

    @field_validator("allow_hosts", "deny_hosts")
    @classmethod
    def _host_entries(cls, entries: list[str]) -> list[str]:
        for entry in entries:
            value = entry.strip().strip("[]")
            if not value:
                raise ValueError("an empty host entry")
            if "://" in value:
                raise ValueError(f"{entry!r} is a URL: write the host name alone")
            if "/" in value:
                try:
                    ipaddress.ip_network(value, strict=False)
                except ValueError:
                    raise ValueError(f"{entry!r} is not an IP network such as 10.0.0.0/8") from None
            elif ":" in value:
                try:
                    ipaddress.ip_address(value)
                except ValueError:
                    raise ValueError(f"{entry!r}: write the host without a port") from None
        return entries


class McpServerConfig(_Strict):
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    url: str | None = None
    timeout: float = Field(default=30.0, gt=0)

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either command (stdio) or url (streamable HTTP), not both")
        return self


class McpConfig(_Strict):
    servers: dict[str, McpServerConfig] = Field(default_factory=dict)


class TelemetryConfig(_Strict):
    otlp_endpoint: str | None = None
    capture_content: bool = False
    service_name: str = Field(default="lattice", min_length=1)

    @field_validator("otlp_endpoint")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        scheme, sep, rest = value.strip().partition("://")
        if not sep or scheme not in ("http", "https") or not rest.strip("/"):
            raise ValueError(
                f"{value!r} is not an http(s) URL such as http://localhost:4318 "
                "(the collector's OTLP/HTTP address)"
            )
        return value.strip()

    def traces_url(self) -> str | None:
        """Where spans are posted: ``otlp_endpoint`` plus ``/v1/traces`` (a URL that
        already ends with it is taken as it is), None when tracing is off."""
        if self.otlp_endpoint is None:
            return None
        base = self.otlp_endpoint.rstrip("/")
        return base if base.endswith("/v1/traces") else base + "/v1/traces"


DEFAULT_CODEC_KEY_ENV = "LATTICE_TEMPORAL_KEY"


class EvalsConfig(_Strict):
    """``[evals]``: what ``lattice eval`` takes from the user's configuration."""

    scorers: list[str] = Field(default_factory=list)
    """Python functions that score every evaluation's rows, ``"[name=]module:function"``
    (a dataset cannot name code: it is data)."""

    @field_validator("scorers")
    @classmethod
    def _references(cls, value: list[str]) -> list[str]:
        for item in value:
            if not re.fullmatch(r"(?:[\w.-]+=)?[\w.]+:[\w.]+", item):
                raise ValueError(f'{item!r} is not "[name=]module:function"')
        return value


class TemporalConfig(_Strict):
    """``[temporal]``: what every client and worker of runs on Temporal shares."""

    codec_key_env: str | None = None
    """The environment variable holding the payload codec's keys (base64 of 32 bytes,
    comma-separated: the first encrypts, all decrypt). Named here, it must be set; unnamed,
    ``LATTICE_TEMPORAL_KEY`` is used when set, and payloads are plain otherwise."""

    @field_validator("codec_key_env")
    @classmethod
    def _variable_name(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
            raise ValueError(f"{value!r} is not an environment variable's name")
        return value

    blob_threshold_bytes: int = Field(default=256 * 1024, ge=1024)
    """A payload (a value, an op's request or result) this large or larger, encrypted
    when there is a key, is kept in the blob store and the history holds a reference."""
    blob_store: str | None = None
    """Where large payloads are kept: a folder (by default ``lattice/temporal-blobs``
    under ``$XDG_DATA_HOME`` or ``~/.local/share``, shared by the workers of one
    machine) or ``s3://BUCKET/PREFIX`` (S3 or an S3-compatible server, for several
    machines: pip install -e '.[s3]'). Every client and worker of a task queue must
    name the same store."""
    blob_endpoint_url: str | None = None
    """An S3-compatible server's address (MinIO, Ceph, ...); S3 itself when unset.
    Credentials and region come from the usual AWS variables (``AWS_ACCESS_KEY_ID``,
    ``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION``) or files."""

    def codec_key_variable(self) -> tuple[str, bool]:
        """The variable the codec's keys come from, and whether it must be set."""
        if self.codec_key_env is not None:
            return self.codec_key_env, True
        return DEFAULT_CODEC_KEY_ENV, False


AGENT_GRANTS = ("read", "write", "shell", "web")


class FlagRules(_Strict):
    """The rules and mode of the command line (``--allow-rule``, ``--ask-rule``,
    ``--deny-rule``, ``--permission-mode``), kept apart to be named as such."""

    allow: list[str] = Field(default_factory=list)
    ask: list[str] = Field(default_factory=list)
    deny: list[str] = Field(default_factory=list)
    mode: str | None = None


class PermissionsConfig(_Strict):
    """``[agents.permissions]``: Claude Code's permission rules for agents' tool calls,
    inside what ``[agents]`` grants (docs/agents.md)."""

    allow: list[str] = Field(default_factory=list)
    ask: list[str] = Field(default_factory=list)
    deny: list[str] = Field(default_factory=list)
    default_mode: str | None = None
    """default, acceptEdits, plan, dontAsk or bypassPermissions (with bypass_permissions)."""
    claude_settings: bool = True
    """Read ``~/.claude/settings.json`` and the workspace's ``.claude/settings*.json``."""
    bypass_permissions: bool = False
    """Let a ``bypassPermissions`` mode stand (else the run is in default mode)."""
    flags: FlagRules = Field(default_factory=FlagRules)

    @model_validator(mode="after")
    def _rules_read(self) -> PermissionsConfig:
        lists = {"allow": self.allow, "ask": self.ask, "deny": self.deny}
        try:
            parse_rules(lists, "{behavior}[{index}]", None)
            if self.default_mode is not None:
                check_mode(self.default_mode, "default_mode")
        except RuleError as exc:
            raise ValueError(exc.message) from None
        return self


class AgentsConfig(_Strict):
    """``[agents]``: what agent nodes may do. Nothing is granted by default; a document
    can only ask (docs/agents.md)."""

    workspace: str | None = None
    """The folder every file tool and the shell are confined to (none: no file tools)."""
    allow: list[Literal["read", "write", "shell", "web"]] = Field(default_factory=list)
    mcp_servers: list[str] = Field(default_factory=list)
    """Configured MCP servers (``[mcp.servers.<id>]``) whose tools agents may call."""
    patch_only: bool = False
    """Record every change as a patch in the run folder without touching the files."""
    permissions: PermissionsConfig = Field(default_factory=PermissionsConfig)
    max_turns: int | None = Field(default=None, ge=1, le=1000)
    max_tool_calls: int | None = Field(default=None, ge=0, le=10_000)
    max_tokens: int | None = Field(default=None, ge=1)
    tool_timeout: float = Field(default=30.0, gt=0, le=3600)
    """Seconds one tool call may take (the shell's command included)."""
    shell_tmp_bytes: int = Field(default=128_000_000, ge=1_000_000)
    """The size of a shell command's private /tmp (memory-backed)."""
    shell_file_bytes: int = Field(default=100_000_000, ge=1)
    """The largest file a shell command may write."""
    shell_write_bytes: int = Field(default=1_000_000_000, ge=0)
    """What one shell command may add to the workspace, in bytes; it is stopped past it."""
    shell_write_files: int = Field(default=10_000, ge=0)
    """How many files and folders one shell command may add to the workspace."""

    def granted(self) -> bool:
        """Whether anything at all is granted."""
        return bool(self.workspace or self.allow or self.mcp_servers)


TRIGGER_PATH = re.compile(r"^[A-Za-z0-9_-]+(/[A-Za-z0-9_.-]+)*$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class TriggerConfig(_Strict):
    """A webhook (``[triggers.<name>]``): ``POST /hooks/<path>`` on ``lattice serve``
    starts ``workflow`` (a file under ``--workflows``, or ``NAME@VERSION``) with ``inputs``
    read from the request by JMESPath (over ``{"body": ..., "headers": {...}}``), once per
    delivery, when its HMAC signature (keyed by the environment variable ``secret_env``)
    holds."""

    path: str
    workflow: str
    inputs: dict[str, str] = Field(default_factory=dict)
    signature: Literal["github", "lattice"] = "lattice"
    secret_env: str
    tolerance_seconds: int = Field(default=300, ge=1, le=86_400)

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        value = value.strip("/")
        if not TRIGGER_PATH.match(value) or ".." in value.split("/"):
            raise ValueError("a path of letters, digits, _ and - segments, such as github/push")
        return value

    @field_validator("secret_env")
    @classmethod
    def _env_name(cls, value: str) -> str:
        if not ENV_NAME.match(value):
            raise ValueError(
                "the name of an environment variable (the secret is never written here)"
            )
        return value


class ScheduleConfig(_Strict):
    """A schedule (``[schedules.<name>]``): ``lattice serve`` starts ``workflow`` (a file
    under ``--workflows``, or ``NAME@VERSION``) with ``inputs`` at each tick of ``cron`` in ``timezone``;
    ``catch_up`` says what becomes of ticks missed while it was down (``skip`` them, or
    run the latest ``once``)."""

    cron: str
    workflow: str
    timezone: str = "UTC"
    inputs: dict[str, Any] = Field(default_factory=dict)
    catch_up: Literal["skip", "once"] = "skip"

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        try:
            zoneinfo.ZoneInfo(value)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"{value!r} is not a time zone such as Europe/Berlin or UTC") from None
        return value


class LatticeConfig(_Strict):
    """The whole ``lattice.toml``."""

    llm: LLMConfig = Field(default_factory=LLMConfig)
    providers: dict[str, ProviderConfig] = Field(default_factory=dict)
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig)
    runs: RunsConfig = Field(default_factory=RunsConfig)
    schemas: SchemasConfig = Field(default_factory=SchemasConfig)
    policies: dict[str, list[str]] = Field(default_factory=dict)
    prices: dict[str, Price] = Field(default_factory=dict)
    secrets: SecretsConfig = Field(default_factory=SecretsConfig)
    http: HttpConfig = Field(default_factory=HttpConfig)
    mcp: McpConfig = Field(default_factory=McpConfig)
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)
    agents: AgentsConfig = Field(default_factory=AgentsConfig)
    temporal: TemporalConfig = Field(default_factory=TemporalConfig)
    evals: EvalsConfig = Field(default_factory=EvalsConfig)
    triggers: dict[str, TriggerConfig] = Field(default_factory=dict)
    schedules: dict[str, ScheduleConfig] = Field(default_factory=dict)
    source: str | None = Field(default=None, exclude=True)

    @field_validator("providers")
    @classmethod
    def _known_providers(cls, value: dict[str, ProviderConfig]) -> dict[str, ProviderConfig]:
        unknown = sorted(set(value) - {"openai", "anthropic", "litellm"})
        if unknown:
            raise ValueError(
                f"unknown provider table(s) {unknown}; known: openai, anthropic, litellm"
            )
        return value

    @field_validator("policies")
    @classmethod
    def _known_actions(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        for error_type, stack in value.items():
            bad = [a for a in stack if a not in ACTIONS]
            if not stack or bad:
                raise ValueError(f"policies.{error_type}: actions are {', '.join(ACTIONS)}")
        return value

    @model_validator(mode="after")
    def _agents_mcp_configured(self) -> LatticeConfig:
        malformed = [s for s in self.agents.mcp_servers if mcp_grant_entry(s) is None]
        if malformed:
            raise ValueError(
                f"agents.mcp_servers: {malformed[0]!r} is not a server id, mcp__<server>, "
                "mcp__<server>__* or mcp__<server>__<tool>"
            )
        servers = [entry[0] for entry in map(mcp_grant_entry, self.agents.mcp_servers) if entry]
        unknown = [s for s in servers if s not in self.mcp.servers]
        if unknown:
            raise ValueError(
                f"agents.mcp_servers names {unknown}, not in [mcp.servers] "
                f"(configured: {', '.join(self.mcp.servers) or 'none'})"
            )
        return self

    def provider_config(self, name: str) -> ProviderConfig:
        return self.providers.get(name, ProviderConfig())

    def shown(self) -> dict[str, Any]:
        """The effective configuration for ``lattice config show`` (no secrets are ever held here;
        environment keys are reported as set/unset only)."""
        data = self.model_dump(mode="json")
        data["source"] = self.source
        data["environment"] = {
            name: ("set (hidden)" if os.environ.get(name) else "unset")
            for name in (
                "OPENAI_API_KEY",
                "ANTHROPIC_API_KEY",
                "OPENAI_BASE_URL",
                "ANTHROPIC_BASE_URL",
            )
        }
        return data


def problem_text(message: str) -> str:
    """A validation message without the ``Value error, `` pydantic puts before the text of
    a ValueError raised by a validator."""
    return message.removeprefix("Value error, ")


def with_agent_grants(
    config: LatticeConfig,
    *,
    workspace: str | None = None,
    allow: list[str] | None = None,
    mcp_servers: list[str] | None = None,
    patch_only: bool = False,
    flags: FlagRules | None = None,
    claude_settings: bool = True,
    bypass_permissions: bool = False,
) -> LatticeConfig:
    """``config`` with the grants of ``--workspace``, ``--allow`` (comma-separated, may be
    repeated), ``--allow-mcp`` and ``--patch-only`` added to its ``[agents]``: the
    workspace replaces the configured one, the rest add to it. ``flags`` are the command
    line's permission rules and mode (checked here: a bad one names its option);
    ``claude_settings`` off (``--no-claude-settings``) and ``bypass_permissions``
    (``--bypass-permissions``) override ``[agents.permissions]``."""
    if flags is not None:
        lists = {"allow": flags.allow, "ask": flags.ask, "deny": flags.deny}
        parse_rules(lists, "--{behavior}-rule", None)
        if flags.mode is not None:
            check_mode(flags.mode, "--permission-mode")
    permissions = config.agents.permissions.model_dump()
    if flags is not None:
        permissions["flags"] = flags.model_dump()
    permissions["claude_settings"] = permissions["claude_settings"] and claude_settings
    permissions["bypass_permissions"] = permissions["bypass_permissions"] or bypass_permissions
    if permissions != config.agents.permissions.model_dump():
        config = config.model_copy(
            update={
                "agents": config.agents.model_copy(
                    update={"permissions": PermissionsConfig.model_validate(permissions)}
                )
            }
        )
    kinds = [kind.strip() for item in allow or () for kind in item.split(",") if kind.strip()]
    unknown = [kind for kind in kinds if kind not in AGENT_GRANTS]
    if unknown:
        hint = did_you_mean(unknown[0], AGENT_GRANTS) if len(unknown) == 1 else ""
        raise LatticeUserError(
            f"--allow {','.join(unknown)}: grants are {', '.join(AGENT_GRANTS)}{hint}",
            error_type=ErrorType.CONFIG_ERROR,
        )
    if workspace is None and not kinds and not mcp_servers and not patch_only:
        return config
    agents = config.agents.model_dump()
    if workspace is not None:
        agents["workspace"] = workspace
    agents["allow"] = list(dict.fromkeys([*agents["allow"], *kinds]))
    agents["mcp_servers"] = list(dict.fromkeys([*agents["mcp_servers"], *(mcp_servers or ())]))
    agents["patch_only"] = agents["patch_only"] or patch_only
    data = config.model_dump()
    data["agents"] = agents
    try:
        updated = LatticeConfig.model_validate(data)
    except ValidationError as exc:
        raise LatticeUserError(
            f"agent grants: {problem_text(exc.errors()[0]['msg'])}",
            error_type=ErrorType.CONFIG_ERROR,
        ) from None
    updated.source = config.source
    return updated


def _apply_env(data: dict[str, Any]) -> dict[str, Any]:
    llm = dict(data.get("llm") or {})
    if os.environ.get("LATTICE_PROVIDER"):
        llm["provider"] = os.environ["LATTICE_PROVIDER"]
    models = dict(llm.get("models") or {})
    for cls in MODEL_CLASSES:
        value = os.environ.get(f"LATTICE_MODEL_{cls.upper()}")
        if value:
            models[cls] = value
    if models:
        llm["models"] = models
    if llm:
        data = {**data, "llm": llm}
    return _apply_otel_env(data)


_TRUE = ("1", "true", "yes", "on")


def _apply_otel_env(data: dict[str, Any]) -> dict[str, Any]:
    """The OpenTelemetry variables: ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (the full URL)
    or ``OTEL_EXPORTER_OTLP_ENDPOINT`` (the collector's base URL) turn tracing on,
    ``OTEL_SDK_DISABLED=true`` turns it off, ``OTEL_SERVICE_NAME`` names the service and
    ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` sets ``capture_content``."""
    env = os.environ
    telemetry = dict(data.get("telemetry") or {})
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if endpoint:
        telemetry["otlp_endpoint"] = endpoint
    if env.get("OTEL_SERVICE_NAME"):
        telemetry["service_name"] = env["OTEL_SERVICE_NAME"]
    capture = env.get("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
    if capture:
        telemetry["capture_content"] = capture.strip().lower() in _TRUE
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() in _TRUE:
        telemetry["otlp_endpoint"] = None
    if telemetry:
        data = {**data, "telemetry": telemetry}
    return data


def load_config(path: str | Path | None = None) -> LatticeConfig:
    """Read and validate the configuration (see the module docstring for where it is found)."""
    candidate = Path(path) if path else None
    if candidate is None and os.environ.get("LATTICE_CONFIG"):
        candidate = Path(os.environ["LATTICE_CONFIG"])
    if candidate is None and Path("lattice.toml").is_file():
        candidate = Path("lattice.toml")
    data: dict[str, Any] = {}
    if candidate is not None:
        try:
            data = tomllib.loads(candidate.read_text(encoding="utf-8"))
        except OSError as exc:
            raise LatticeUserError(
                f"cannot read config {candidate}: {exc.strerror}", error_type=ErrorType.CONFIG_ERROR
            ) from exc
        except tomllib.TOMLDecodeError as exc:
            raise LatticeUserError(
                f"{candidate}: not valid TOML: {exc}", error_type=ErrorType.CONFIG_ERROR
            ) from exc
    try:
        config = LatticeConfig.model_validate(_apply_env(data))
    except ValidationError as exc:
        problems = "\n  ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {problem_text(err['msg'])}"
            for err in exc.errors(include_url=False)
        )
        raise LatticeUserError(
            f"invalid configuration {candidate or '(environment)'}:\n  {problems}",
            error_type=ErrorType.CONFIG_ERROR,
        ) from exc
    config.source = str(candidate) if candidate else None
    return config

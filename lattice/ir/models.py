"""ExecIR: the deterministic, versioned program that lowering emits and the runner walks.

Ops are small typed records discriminated by ``kind``; ``ExecIR`` holds them by id
with the entry op, the inputs schema and lowering diagnostics. Field names are
camelCase on the wire (``sourceNode``, ``irVersion``) and snake_case in Python.

Values inside ops (prompts, URLs, bodies, ``value`` of STATE, ``output`` of END)
are *value templates*: a string that is exactly one ``{{ expr }}`` yields the
referenced value itself, other strings with ``{{ }}`` interpolate text, a string
that is exactly a ``$``-path (``$vars.a.result``) yields that value, and anything
else is a literal. See ``lattice.lower.templates``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from lattice.ir.kinds import DEFAULT_PORT as DEFAULT_PORT
from lattice.ir.kinds import FAILED_PORT as FAILED_PORT

IR_VERSION = "3"
"""Bumped whenever the meaning of an existing field changes."""


class IRModel(BaseModel):
    """Base of every IR record: camelCase aliases, unknown fields rejected. Validators are
    built when a model is first used, not at import (``defer_build``: building them all
    cost about 140 ms of ``import lattice``)."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", defer_build=True
    )


class Edge(IRModel):
    """One outgoing edge: when the op leaves through ``port``, go to op ``to``."""

    port: str = DEFAULT_PORT
    """``default`` for sequential flow, a branch label for SWITCH, ``failed`` for failure routes."""
    to: str
    """Id of the op to run next."""


class OpBase(IRModel):
    id: str
    """Unique op id: the node id, with ``#suffix`` for extra ops and ``parent__`` for inlined sub-flows."""
    source_node: str
    """Id of the document node this op was lowered from (provenance)."""
    name: str | None = None
    """A label for people (the node's title)."""
    next: list[Edge] = Field(default_factory=list)
    """Outgoing edges, in document order."""
    reads: list[str] = Field(default_factory=list)
    """The ``$``-paths this op reads (from templates and wiring); informational."""


class StartOp(OpBase):
    """Entry of the run; ``$in`` is validated against ``ExecIR.inputs_schema`` here."""

    kind: Literal["START"] = "START"


class EndOp(OpBase):
    """End of the run. The run output is ``output`` when given, else the last result."""

    kind: Literal["END"] = "END"
    output: Any = None
    """A value template (``$``-path or ``{{ }}`` template) selecting the run's output."""


class ContractOpBase(OpBase):
    """The fields of an op whose artifact comes from a model under a contract (LLM_WRITE,
    AGENT): the prompt, the model, and the contract the answer is held to."""

    prompt: str
    """User part: a text template rendered against state."""
    system: str | None = None
    """System part written in the document (agent definition), if any."""
    template: str | None = None
    """Prompt template id (``artifact-builder@1``) used to frame the call."""
    variables: dict[str, Any] = Field(default_factory=dict)
    """Named values for ``{{ name }}`` in the prompt (value templates)."""
    context: list[str] = Field(default_factory=list)
    """``$``-paths of upstream results appended to the payload when present."""
    output_schema: dict[str, Any] | None = None
    """JSON Schema of the artifact; None means free text."""
    model_class: str = "default"
    """``small``/``medium``/``large``/``default``; mapped to a concrete model by config."""
    model: str | None = None
    """A concrete model name that overrides the class mapping."""
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    invariants: list[Any] = Field(default_factory=list)
    """Named invariant checks (``"no_code"`` or ``{"name": ..., ...params}``)."""
    max_attempts: int | None = None
    """Attempts per model class before escalation (None: the configured default)."""
    escalate: bool | dict[str, Any] = True
    """False disables escalation; a dict may cap the ladder (``{"maxClass": "medium"}``)."""
    policies: dict[str, list[str]] = Field(default_factory=dict)
    """Per-error-type recovery stacks overriding the defaults (``{"schema_error": ["repair", "fail"]}``)."""
    strict_output: bool | None = None
    """True: prose around the JSON is an ``explanatory_text`` violation; otherwise a reply
    holding exactly one valid JSON value is salvaged without a round trip."""
    max_attempts_total: int | None = None
    """Model calls of one visit in all (None: ``max_attempts`` per class × the ladder)."""
    repair_context_chars: int | None = None
    """Cap on the input lines a repair packet quotes (None: 2,000; 0: none)."""
    writes: str
    """State path the validated output is written to (``$vars.<node>.result``)."""


class LLMWriteOp(ContractOpBase):
    """Ask a model for one artifact under a contract and write it to ``writes``."""

    kind: Literal["LLM_WRITE"] = "LLM_WRITE"
    purpose: Literal["generate", "classify", "tool_arguments", "tool_selection"] = "generate"
    """Why lowering created this op; classifiers and tool-argument ops come from other nodes."""
    labels: list[str] | None = None
    """For classifiers: the branch labels the output's ``branch`` must be one of."""
    tool_server: str | None = None
    """For tool_arguments / tool_selection ops: the MCP server whose tool schemas become the
    contract at run time (``output_schema`` is then the document's fallback description)."""
    tool_name: str | None = None
    """For tool_arguments ops: the tool whose ``inputSchema`` is the output schema."""
    main_agent: bool | None = None
    """A ``prompt`` step: a turn of Claude Code's main agent. A run whose grant gives the
    main agent tools runs it as an AGENT op (``lattice.lower.main_agent``)."""


MAX_AGENT_TURNS = 1000
"""The most turns an agent may ask for (the most ``[agents] max_turns`` may allow)."""
MAX_AGENT_TOOL_CALLS = 10_000
"""The most tool calls an agent may ask for (the most ``[agents] max_tool_calls`` may allow)."""


class AgentLimits(IRModel):
    """The bounds of one visit of an AGENT op (each ends the loop with ``agent_limit``)."""

    max_turns: int = Field(default=20, ge=1, le=MAX_AGENT_TURNS)
    """Model turns (requests) of the loop, repairs of the final answer not counted."""
    max_tool_calls: int = Field(default=50, ge=0, le=MAX_AGENT_TOOL_CALLS)
    """Tool calls in all."""
    max_tokens: int | None = Field(default=None, ge=1)
    """Input plus output tokens of all turns (None: only the run's budget)."""
    tool_timeout_s: float = Field(default=60.0, gt=0)
    """Wall-clock limit of one tool call, in seconds."""


class AgentOp(ContractOpBase):
    """A bounded loop of model turn → tool calls → tool results → model turn …, ending in
    a final answer held to the op's contract exactly like an LLM_WRITE's, written to
    ``writes``. Which of ``tools`` the model is offered is the user's grant, never the IR's."""

    kind: Literal["AGENT"] = "AGENT"
    tools: list[str] = Field(default_factory=list)
    """The tools the document asks for, by their Claude Code names (``Read``, ``Edit``,
    ``Bash``, ``mcp__<server>__<tool>``), in the document's order; ``*``: every tool the
    main agent has (whatever the user grants), ``AskUserQuestion``: asking the person."""
    agent_type: str | None = None
    """The document's ``builtInType`` (``explore``/``plan``/``general-purpose``: the first
    two have a read-only Bash), ``custom`` (a sub-agent of its own), the node type the
    tools came from (``skill``, ``codex``), or ``main`` (a prompt step run as a turn of
    the main agent)."""
    limits: AgentLimits = Field(default_factory=AgentLimits)


class Condition(IRModel):
    """A parsed deterministic condition (see ``lattice.lower.conditions``)."""

    op: Literal[
        "eq",
        "ne",
        "gt",
        "ge",
        "lt",
        "le",
        "in",
        "not_in",
        "contains",
        "not_contains",
        "matches",
        "exists",
        "not_exists",
        "empty",
        "not_empty",
        "jmespath",
    ]
    value: Any = None
    """The right-hand side (literal, list, regex or JMESPath expression)."""


class Case(IRModel):
    """One SWITCH branch: leave through ``port`` when ``test`` holds."""

    port: str
    test: Condition
    source: str = ""
    """The condition as written in the document."""


class SwitchOp(OpBase):
    """Deterministic branch on a value: the first matching case wins, else ``default_port``."""

    kind: Literal["SWITCH"] = "SWITCH"
    input: str | None = None
    """``$``-path of the value tested; None means the most recent result."""
    cases: list[Case] = Field(default_factory=list)
    default_port: str | None = None
    """Port taken when no case matches; None makes a non-match a run error."""


class HttpCall(IRModel):
    """An HTTP request; every string may be a template."""

    tool: Literal["http"] = "http"
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"] = "GET"
    url: str
    headers: dict[str, str] = Field(default_factory=dict)
    query: dict[str, Any] = Field(default_factory=dict)
    body: Any = None
    timeout_ms: int | None = None
    response_type: Literal["json", "text", "auto"] = "auto"


class McpCall(IRModel):
    """A call to a tool of an MCP server named in the user's config (never in the document)."""

    tool: Literal["mcp"] = "mcp"
    server_id: str
    tool_name: str | None = None
    """None when the tool is chosen by a preceding ``tool_selection`` LLM op."""
    arguments: dict[str, Any] = Field(default_factory=dict)
    """Value templates for the tool's arguments (manual mode)."""
    arguments_from: str | None = None
    """``$``-path of arguments (or ``{tool, arguments}``) produced by an LLM op (AI modes)."""
    mode: Literal["manualParameterConfig", "aiParameterConfig", "aiToolSelection"] = (
        "manualParameterConfig"
    )


class ToolCallOp(OpBase):
    """Call an external tool and write ``{status, headers, body}`` or the tool's result."""

    kind: Literal["TOOL_CALL"] = "TOOL_CALL"
    call: Annotated[HttpCall | McpCall, Field(discriminator="tool")]
    output_schema: dict[str, Any] | None = None
    writes: str


class StateOp(OpBase):
    """Change a named variable ``$vars.<variable>``; ``get`` copies it to ``writes``."""

    kind: Literal["STATE"] = "STATE"
    operation: Literal["set", "get", "append", "increment", "delete"]
    variable: str
    value: Any = None
    """A value template; for ``increment`` the step (default 1)."""
    writes: str | None = None


class TransformOp(OpBase):
    """Evaluate a JMESPath expression over ``input`` (default: ``{in, vars, ctx}``)."""

    kind: Literal["TRANSFORM"] = "TRANSFORM"
    expression: str
    input: str | None = None
    writes: str


class AskOption(IRModel):
    label: str
    description: str | None = None


class AskOp(OpBase):
    """Ask a human; halts the run unless an answer is supplied. Writes ``{label, index}``."""

    kind: Literal["ASK"] = "ASK"
    question: str
    options: list[AskOption] = Field(default_factory=list)
    multi_select: bool = False
    once: bool | None = None
    """True: each answer is used for one visit only (a branch session's messages): a
    single answer is a queue of one, so a visit after it halts for the next."""
    writes: str


class ForkOp(OpBase):
    """Start one branch per entry in ``branches``; they run concurrently, each over the
    state as it was at the fork plus its own writes. When every branch has ended
    (reached the JOIN, END, or a way that never reaches the JOIN), their writes are
    merged and the walk goes on at the JOIN; with no JOIN, the run ends."""

    kind: Literal["FORK"] = "FORK"
    branches: list[str]
    """Entry op of each branch, in document order."""
    join: str | None = None
    """The JOIN op where the branches meet (the fork's immediate post-dominator)."""
    fail_fast: bool = True
    """A failing branch stops its siblings at their next op boundary (False: they finish)."""


class JoinOp(OpBase):
    """Where the branches of ``fork`` meet; a branch that arrives here is done."""

    kind: Literal["JOIN"] = "JOIN"
    fork: str
    """The FORK op whose branches meet here."""


class ForEachOp(OpBase):
    """Run the flow starting at ``body`` once per item of the list at ``items``, at most
    ``max_concurrency`` at a time, each over the state at this op plus ``$vars.<node>.item``
    and ``.index``; write the list of the flow's outputs, in item order, to ``writes``."""

    kind: Literal["FOR_EACH"] = "FOR_EACH"
    items: str
    """A value template giving the list."""
    body: str
    """Entry op of the flow run per item (its END's output is the item's result)."""
    max_concurrency: int = 8
    on_item_error: Literal["fail", "collect"] = "fail"
    """``fail``: a failing item fails the op; ``collect``: its FailureReport takes its slot."""
    writes: str


Op = Annotated[
    StartOp
    | EndOp
    | LLMWriteOp
    | AgentOp
    | SwitchOp
    | ToolCallOp
    | StateOp
    | TransformOp
    | AskOp
    | ForkOp
    | JoinOp
    | ForEachOp,
    Field(discriminator="kind"),
]


class WorkflowInfo(IRModel):
    id: str
    name: str
    description: str | None = None
    notes: list[str] | None = None
    """What the document asks that Lattice reads but does not do (``lattice lower`` shows
    them; docs/documents.md); None when there is nothing to say."""
    tools_asked: list[str] | None = None
    """The tools ``slashCommandOptions.allowedTools`` asks agents may use: asked for
    only, granted by the user (docs/agents.md); None when it asks for none."""


class IRDiagnostic(IRModel):
    """A warning kept with the IR (errors never produce IR)."""

    code: str
    severity: str
    message: str
    pointer: str = ""
    node_id: str | None = None


class ExecIR(IRModel):
    """A lowered workflow: ops by id, the entry op, the inputs schema and warnings."""

    ir_version: str = IR_VERSION
    workflow: WorkflowInfo
    entry: str
    inputs_schema: dict[str, Any] = Field(default_factory=dict)
    """JSON Schema of ``$in``: the start node's ``inputs``, or inferred from references."""
    ops: dict[str, Op]
    diagnostics: list[IRDiagnostic] = Field(default_factory=list)

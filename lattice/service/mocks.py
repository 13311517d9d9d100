"""``lattice mock init``: a mock script (and answers file) that runs a document offline.

Every LLM node gets answers of the shape it expects: a branch label for the classifier
of a natural-language ifElse/switch, an example of its output schema for a structured
node (an mcp node's AI mode included: its parameters' schema), a short text otherwise.
Every mcp and httpRequest node gets a tool result under ``tools`` (so no server is
needed), shaped so that what later nodes read of it is there. Each choice (classifier or
question) takes the branch that reaches an ``end`` node by the fewest ops, so a loop is
left at its first pass; ``choices`` says which. Nodes that can run more than once (on a
cycle, in a parallel branch of one, or in a forEach flow) get a few answers. Edit the
answers to steer the run down other branches. A branch session gets as many messages
as its reply op has answers, then ``/done``.

An agent node gets its turns: one plausible call of each tool it asks for that the
user's grant gives it (the reading tools, the web and MCP tools at once; each writing
tool and the shell in a turn of its own, on a scratch file ``lattice-mock.txt``), then
a final answer of the right shape. Without a grant it gets only the final answer (a
scripted tool call needs a tool to call). Under a grant that gives the main agent a tool,
prompt steps are turns of the main agent (as the run makes them): they get the same
turns, then, when the step runs once, an ``AskUserQuestion`` call answered in the
answers file (``ASK_OPTIONS``' first label), so the script exercises asking the person.
"""

from __future__ import annotations

import difflib
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lattice.errors import ErrorType, LatticeUserError
from lattice.ir.models import (
    AgentOp,
    AskOp,
    ContractOpBase,
    EndOp,
    ExecIR,
    ForEachOp,
    ForkOp,
    HttpCall,
    LLMWriteOp,
    McpCall,
    Op,
    SwitchOp,
    ToolCallOp,
)
from lattice.ir.templates import TemplateSyntaxError, parse_path
from lattice.ir.tool_names import split_mcp_name
from lattice.llm.examples import example_value
from lattice.lower.graph import reached, strongly_connected_components
from lattice.lower.main_agent import acts, under_grant
from lattice.lower.session_nodes import END_COMMAND
from lattice.workspace.grants import ASK_TOOL, WorkspaceGrant

LOOP_ANSWERS = 3
"""Answers given to a node that can run more than once (it sits on a cycle)."""

UNREACHABLE = float("inf")

SCRATCH_FILE = "lattice-mock.txt"
"""The file a mock agent's writing tools create and edit (inside the granted workspace)."""
READING_CALLS: dict[str, dict[str, Any]] = {
    "Read": {"file_path": "README.md", "limit": 40},
    "LS": {"path": "."},
    "Glob": {"pattern": "**/*"},
    "Grep": {"pattern": "TODO"},
    "WebFetch": {"url": "https://example.com/", "prompt": "What is this page about?"},
}
WRITING_CALLS: dict[str, dict[str, Any]] = {
    "Write": {"file_path": SCRATCH_FILE, "content": "written by a lattice mock script\n"},
    "Edit": {"file_path": SCRATCH_FILE, "old_string": "written", "new_string": "edited"},
    "MultiEdit": {
        "file_path": SCRATCH_FILE,
        "edits": [{"old_string": "mock", "new_string": "mock agent"}],
    },
    "Bash": {"command": "ls"},
}
"""Each in a turn of its own, in this order (the edits need the file Write made)."""
ASK_OPTIONS = ("Yes, go on", "No, stop here")
"""The options of the question a mock main-agent step asks; the answers file picks the first."""


def ask_turn(step: str) -> dict[str, Any]:
    """The ``$tool_calls`` turn in which a mock main-agent step asks the person."""
    question = {
        "question": f"Go on with {step}?",
        "header": "Confirm",
        "options": [{"label": label} for label in ASK_OPTIONS],
        "multiSelect": False,
    }
    return {"$tool_calls": [{"name": ASK_TOOL, "arguments": {"questions": [question]}}]}


@dataclass(frozen=True)
class Choice:
    """The answer ``mock init`` picked for one classifier or question."""

    node: str
    label: str
    steps: float
    """Ops from the branch taken to the nearest ``end`` (``inf``: none reaches one)."""
    labels: tuple[str, ...]


@dataclass
class MockPlan:
    """What ``mock init`` writes: the script, the answers file and the choices made."""

    script: dict[str, Any]
    answers: dict[str, Any]
    choices: list[Choice] = field(default_factory=list)


ToolSchemas = Mapping[str, Mapping[str, dict[str, Any]]]
"""server → tool → inputSchema, as configured servers list them."""


def plan_mocks(
    ir: ExecIR, tool_schemas: ToolSchemas | None = None, grant: WorkspaceGrant | None = None
) -> MockPlan:
    """The mock script and answers that take ``ir`` from start to an end offline.
    ``tool_schemas`` (from the configured servers) shape MCP AI-mode arguments; without
    them the node's own ``parameters`` do. Agent nodes call the tools ``grant`` gives
    them before they answer; under a grant that gives the main agent a tool, prompt
    steps do too and ask the person once (answered in ``answers``)."""
    grant = grant or WorkspaceGrant()
    if acts(grant):
        ir = under_grant(ir, grant)
    graph = _op_graph(ir)
    distance = _steps_to_end(ir, graph)
    repeated = _repeated_ops(ir, graph)
    choices = {op_id: _choose(ir, op, distance) for op_id, op in ir.ops.items()}
    made = {op_id: choice for op_id, choice in choices.items() if choice is not None}
    responses: dict[str, list[Any]] = {}
    tools: dict[str, list[Any]] = {}
    step_answers: dict[str, Any] = {}
    for op in ir.ops.values():
        times = LOOP_ANSWERS if op.id in repeated else 1
        if isinstance(op, LLMWriteOp):
            choice = made.get(op.id)
            answer = choice.label if choice is not None else _answer(op, tool_schemas or {})
            responses.setdefault(op.source_node, []).extend([answer] * times)
        elif isinstance(op, AgentOp):
            granted = grant.decide(op.tools).granted
            turns = agent_turns(granted)
            if op.agent_type == "main" and ASK_TOOL in granted and op.id not in repeated:
                turns.append(ask_turn(op.name or op.source_node))
                step_answers[op.source_node] = ASK_OPTIONS[0]
            responses.setdefault(op.source_node, []).extend([*turns, _result_of(op)] * times)
        elif isinstance(op, ToolCallOp):
            tools.setdefault(op.source_node, []).extend([_tool_result(ir, op)] * times)
    description = (
        f"Mock answers for {ir.workflow.name or ir.workflow.id}, made by lattice mock init: "
        "each choice takes the shortest way to an end; edit to steer the run."
    )
    if tools:
        description += " Drop an entry of tools to call the configured server instead."
    script: dict[str, Any] = {"description": description, "responses": responses}
    if tools:
        script["tools"] = tools
    answers: dict[str, Any] = dict(step_answers)
    for op in ir.ops.values():
        if isinstance(op, AskOp) and op.once and op.source_node not in answers:
            answers[op.source_node] = session_messages(LOOP_ANSWERS)
        elif isinstance(op, AskOp) and op.source_node not in answers:
            choice = made.get(op.id)
            first = choice.label if choice is not None else _open_answer(op)
            answers[op.source_node] = [first] if op.multi_select else first
    ordered = [made[op_id] for op_id in ir.ops if op_id in made]
    return MockPlan(script, answers, ordered)


def mock_script(ir: ExecIR, grant: WorkspaceGrant | None = None) -> dict[str, Any]:
    """The mock script: ``{"description", "responses": {node: [answers]}, "tools"?}``."""
    return plan_mocks(ir, grant=grant).script


def answers_file(ir: ExecIR) -> dict[str, Any]:
    """Answers for the document's questions: for each, the option on the shortest way
    to an end (or a text when it has no options)."""
    return plan_mocks(ir).answers


def check_script_nodes(ir: ExecIR, nodes: Iterable[str], *, where: str = "mock script") -> None:
    """Refuse (a LatticeUserError) a mock script whose ``responses`` name a node the
    document does not have: its answers would never be used, and the node meant would
    fail later with ``mock_exhausted``. ``where`` names the script in the message."""
    known = {op.source_node for op in ir.ops.values()}
    unknown = [node for node in nodes if node not in known]
    if not unknown:
        return
    calling = sorted({op.source_node for op in ir.ops.values() if isinstance(op, ContractOpBase)})
    named = []
    for node in unknown:
        close = difflib.get_close_matches(node, sorted(known), n=1)
        named.append(f"{node!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    raise LatticeUserError(
        f"{where}: responses name node(s) the document does not have: {', '.join(named)}; "
        f"its nodes that call a model: {', '.join(calling) or 'none'}",
        error_type=ErrorType.MOCK_ERROR,
    )


def check_tool_keys(ir: ExecIR, keys: Iterable[str], *, where: str = "mock script") -> None:
    """Refuse a script whose ``tools`` name, without a ``/``, something that is not an
    mcp or httpRequest node of the document (``server/tool`` keys answer any caller)."""
    calling = sorted({op.source_node for op in ir.ops.values() if isinstance(op, ToolCallOp)})
    unknown = [key for key in keys if "/" not in key and key not in calling]
    if not unknown:
        return
    named = []
    for key in unknown:
        close = difflib.get_close_matches(key, calling, n=1)
        named.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    raise LatticeUserError(
        f"{where}: tools name node(s) that call no tool: {', '.join(named)}; its mcp and "
        f"httpRequest nodes: {', '.join(calling) or 'none'} (or key an MCP tool as "
        '"server/tool")',
        error_type=ErrorType.MOCK_ERROR,
    )


def needs_mcp(ir: ExecIR) -> list[str]:
    """The MCP servers the document's nodes call (they must be configured to run it)."""
    servers = {
        op.tool_server for op in ir.ops.values() if isinstance(op, LLMWriteOp) and op.tool_server
    }
    servers.update(
        op.call.server_id
        for op in ir.ops.values()
        if isinstance(op, ToolCallOp) and isinstance(op.call, McpCall)
    )
    return sorted(servers)


def _answer(op: LLMWriteOp, tool_schemas: ToolSchemas) -> Any:
    if op.purpose == "classify" and op.labels:
        return op.labels[0]
    listed = tool_schemas.get(op.tool_server or "", {})
    if op.purpose == "tool_arguments" and op.tool_name is not None and op.tool_name in listed:
        return example_value(listed[op.tool_name])
    if op.purpose == "tool_selection":
        if listed:
            tool, schema = next(iter(listed.items()))
            return {"tool": tool, "arguments": example_value(schema)}
        return {"tool": op.tool_name or "(the tool to call)", "arguments": {}}
    if op.output_schema is not None:
        return example_value(op.output_schema)
    return f"(mock answer of {op.name or op.source_node})"


def agent_turns(granted: Iterable[str]) -> list[dict[str, Any]]:
    """The ``$tool_calls`` turns of a mock agent: one plausible call of each granted tool."""
    names = list(granted)
    reading = [
        {"name": name, "arguments": READING_CALLS.get(name, {})}
        for name in names
        if name in READING_CALLS or split_mcp_name(name) is not None  # one MCP tool, not a server
    ]
    turns = [{"$tool_calls": reading}] if reading else []
    turns += [
        {"$tool_calls": [{"name": name, "arguments": arguments}]}
        for name, arguments in WRITING_CALLS.items()
        if name in names
    ]
    return turns


def _result_of(op: ContractOpBase) -> Any:
    if op.output_schema is not None:
        return example_value(op.output_schema)
    return f"(mock answer of {op.name or op.source_node})"


def session_messages(count: int) -> list[str]:
    """A branch session's messages: ``count`` of them (its reply op, on the session's
    loop, has as many answers), then the command that ends it."""
    return [f"(mock message {i})" for i in range(1, count + 1)] + [END_COMMAND]


def _open_answer(op: AskOp) -> str:
    return op.options[0].label if op.options else "an answer"


def _op_graph(ir: ExecIR) -> dict[str, list[str]]:
    """Every way the walk can go from each op: its edges, a FORK's branches and a
    FOR_EACH's flow."""
    graph: dict[str, list[str]] = {}
    for op_id, op in ir.ops.items():
        targets = [edge.to for edge in op.next]
        if isinstance(op, ForkOp):
            targets += op.branches
        if isinstance(op, ForEachOp):
            targets.append(op.body)
        graph[op_id] = [target for target in targets if target in ir.ops]
    return graph


def _steps_to_end(ir: ExecIR, graph: Mapping[str, list[str]]) -> dict[str, float]:
    """Ops from each op to the nearest END (breadth first, backwards); FORK and JOIN
    ops do not count."""
    back: dict[str, list[str]] = {op_id: [] for op_id in graph}
    for source, targets in graph.items():
        for target in targets:
            back[target].append(source)
    distance: dict[str, float] = {}
    queue: deque[str] = deque()
    for op_id, op in ir.ops.items():
        if isinstance(op, EndOp):
            distance[op_id] = 0
            queue.append(op_id)
    while queue:  # 0-1 breadth first: FORK/JOIN/SWITCH edges cost nothing
        op_id = queue.popleft()
        for source in back[op_id]:
            cost = 0 if ir.ops[source].kind in ("FORK", "JOIN", "SWITCH") else 1
            candidate = distance[op_id] + cost
            if candidate < distance.get(source, UNREACHABLE):
                distance[source] = candidate
                if cost:
                    queue.append(source)
                else:
                    queue.appendleft(source)
    return distance


def _choose(ir: ExecIR, op: Op, distance: Mapping[str, float]) -> Choice | None:
    """The label a classifier or question takes: the one whose way reaches an END by the
    fewest ops (the first in document order among equals)."""
    if isinstance(op, LLMWriteOp) and op.purpose == "classify" and op.labels:
        labels = list(op.labels)
    elif isinstance(op, AskOp) and op.options:
        labels = [option.label for option in op.options]
    else:
        return None
    switch = next((ir.ops[e.to] for e in op.next if isinstance(ir.ops.get(e.to), SwitchOp)), None)
    if switch is None:
        return None
    ports = {edge.port: edge.to for edge in switch.next}
    best: tuple[float, str] | None = None
    for label in labels:
        steps = distance.get(ports.get(label, ""), UNREACHABLE)
        if best is None or steps < best[0]:
            best = (steps, label)
    assert best is not None
    return Choice(op.source_node, best[1], best[0], tuple(labels))


def _repeated_ops(ir: ExecIR, graph: Mapping[str, list[str]]) -> set[str]:
    """Ops that can run more than once in a run: those on a cycle (a parallel branch
    inside a loop included) and those of a forEach flow."""
    repeated: set[str] = set()
    for component in strongly_connected_components(graph):
        if len(component) > 1 or any(op_id in graph[op_id] for op_id in component):
            repeated |= component
    for op in ir.ops.values():
        if isinstance(op, ForEachOp) and op.body in graph:
            repeated |= reached(graph, op.body) | {op.body}
    return repeated


def _tool_result(ir: ExecIR, op: ToolCallOp) -> Any:
    """A result for a tool call holding what the document reads of it: an HTTP
    response ``{status, headers, body}`` whose body fits the node's output schema, or an
    MCP result (text, or an object with the properties later nodes read)."""
    shape = _read_shape(ir, op.writes)
    if isinstance(op.call, HttpCall):
        body_read = shape.get("body") if isinstance(shape, dict) else None
        body: Any = example_value(op.output_schema) if op.output_schema else None
        body = _overlay(body, body_read) if body_read is not None else body
        return {"status": 200, "headers": {}, "body": {} if body is None else body}
    assert isinstance(op.call, McpCall)
    if shape is None:
        tool = op.call.tool_name or "tool"
        return f"(mock result of {op.call.server_id}/{tool})"
    return shape


def _read_shape(ir: ExecIR, writes: str) -> Any:
    """The skeleton of what ops read under ``writes``: ``{"a": {"b": "…"}}`` for
    ``<writes>.a.b``; None when nothing reads below ``writes`` itself."""
    try:
        base = parse_path(writes)
    except TemplateSyntaxError:
        return None
    shape: Any = None
    for op in ir.ops.values():
        for text in op.reads:
            try:
                path = parse_path(text)
            except TemplateSyntaxError:
                continue
            if path.root != base.root or path.keys[: len(base.keys)] != base.keys:
                continue
            below = path.keys[len(base.keys) :]
            if below:
                shape = _overlay(shape, _skeleton(below))
    return shape


def _skeleton(keys: tuple[str | int, ...]) -> Any:
    value: Any = "(mock)"
    for key in reversed(keys):
        value = [value] * (key + 1) if isinstance(key, int) else {key: value}
    return value


def _overlay(base: Any, top: Any) -> Any:
    """``top`` laid over ``base``: objects merge key by key, anything else is ``top``
    unless ``base`` already holds a value there."""
    if isinstance(base, dict) and isinstance(top, dict):
        merged = dict(base)
        for key, value in top.items():
            merged[key] = _overlay(base.get(key), value) if key in base else value
        return merged
    if base is None or (isinstance(top, dict | list) and not isinstance(base, dict | list)):
        return top
    return base

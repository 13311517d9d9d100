"""``lattice mock init``: a mock script (and answers file) that runs a document offline.

Every LLM node gets one answer of the shape it expects: a branch label for the
classifier of a natural-language ifElse/switch (its first branch), an example of its
output schema for a structured node, a short text otherwise. Nodes inside a loop get a
few answers, so that a loop that needs more than one pass can make them. Questions get
their first option. Edit the answers to steer the run down other branches.

An agent node gets its turns: one plausible call of each tool it asks for that the
user's grant gives it (the reading tools, the web and MCP tools at once; each writing
tool and the shell in a turn of its own, on a scratch file ``lattice-mock.txt``), then
a final answer of the right shape. Without a grant it gets only the final answer (a
scripted tool call needs a tool to call).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

from lattice.errors import LatticeUserError
from lattice.ir.models import (
    AgentOp,
    AskOp,
    ContractOpBase,
    ExecIR,
    LLMWriteOp,
    McpCall,
    ToolCallOp,
)
from lattice.llm.examples import example_value
from lattice.lower.graph import strongly_connected_components
from lattice.workspace.grants import WorkspaceGrant

LOOP_ANSWERS = 3
"""Answers given to a node that can run more than once (it sits on a cycle)."""


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


def mock_script(ir: ExecIR, grant: WorkspaceGrant | None = None) -> dict[str, Any]:
    """The mock script: ``{"description", "responses": {node: [answers]}}``; agent nodes
    call the tools ``grant`` gives them first."""
    looping = _on_cycles(ir)
    responses: dict[str, list[Any]] = {}
    grant = grant or WorkspaceGrant()
    for op in ir.ops.values():
        if isinstance(op, ContractOpBase):
            times = LOOP_ANSWERS if op.id in looping else 1
            turns = agent_turns(grant.decide(op.tools).granted) if isinstance(op, AgentOp) else []
            responses.setdefault(op.source_node, []).extend([*turns, _answer(op)] * times)
    return {
        "description": f"Mock answers for {ir.workflow.name or ir.workflow.id}, made by "
        "lattice mock init: classifiers take their first branch; edit to steer the run.",
        "responses": responses,
    }


def answers_file(ir: ExecIR) -> dict[str, Any]:
    """Answers for the document's questions: the first option of each (or a text)."""
    answers: dict[str, Any] = {}
    for op in ir.ops.values():
        if isinstance(op, AskOp) and op.source_node not in answers:
            first = op.options[0].label if op.options else "an answer"
            answers[op.source_node] = [first] if op.multi_select else first
    return answers


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
        error_type="mock_error",
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


def agent_turns(granted: Iterable[str]) -> list[dict[str, Any]]:
    """The ``$tool_calls`` turns of a mock agent: one plausible call of each granted tool."""
    names = list(granted)
    reading = [
        {"name": name, "arguments": READING_CALLS.get(name, {})}
        for name in names
        if name in READING_CALLS or name.startswith("mcp__")
    ]
    turns = [{"$tool_calls": reading}] if reading else []
    turns += [
        {"$tool_calls": [{"name": name, "arguments": arguments}]}
        for name, arguments in WRITING_CALLS.items()
        if name in names
    ]
    return turns


def _answer(op: ContractOpBase) -> Any:
    if isinstance(op, LLMWriteOp):
        if op.purpose == "classify" and op.labels:
            return op.labels[0]
        if op.purpose in ("tool_arguments", "tool_selection"):
            return {}  # the schema comes from the MCP server at run time
    if op.output_schema is not None:
        return example_value(op.output_schema)
    return f"(mock answer of {op.name or op.source_node})"


def _on_cycles(ir: ExecIR) -> set[str]:
    """Ops that lie on a cycle of the op graph."""
    graph = {
        op_id: [edge.to for edge in op.next if edge.to in ir.ops] for op_id, op in ir.ops.items()
    }
    cyclic: set[str] = set()
    for component in strongly_connected_components(graph):
        if len(component) > 1 or any(op_id in graph[op_id] for op_id in component):
            cyclic |= component
    return cyclic

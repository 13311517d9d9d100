"""Prompt steps as turns of the main agent: what a run does with them under a grant.

Claude Code runs a whole cc-wf-studio workflow in its main agent, which has every tool
the user allows and ``AskUserQuestion``. Lowering marks each ``prompt`` step's LLM_WRITE
as such (``main_agent``); ``under_grant`` makes each an AGENT op that asks for every tool
(``EVERY_TOOL``) and for ``ASK_TOOL``, when the user's grant gives the main agent at
least one tool. Without a grant the IR is left as it is: one model call per prompt step,
as before.
"""

from __future__ import annotations

from lattice.ir.models import AgentOp, ExecIR, LLMWriteOp
from lattice.workspace.grants import ASK_TOOL, EVERY_TOOL, WorkspaceGrant

MAIN_AGENT_TOOLS = (EVERY_TOOL, ASK_TOOL)
"""What a prompt step asks for as a turn of the main agent."""


def acts(grant: WorkspaceGrant) -> bool:
    """Whether ``grant`` gives the main agent any tool (prompt steps then act)."""
    return bool(grant.every_tool())


def as_agent(op: LLMWriteOp) -> AgentOp:
    """A prompt step's LLM_WRITE as the main agent's AGENT op (same prompt and contract)."""
    fields = op.model_dump(exclude={"kind", "purpose", "labels", "tool_server", "tool_name"})
    fields.pop("main_agent", None)
    return AgentOp(**fields, tools=list(MAIN_AGENT_TOOLS), agent_type="main")


def under_grant(ir: ExecIR, grant: WorkspaceGrant) -> ExecIR:
    """``ir`` with its prompt steps as AGENT ops when ``grant`` gives the main agent tools;
    ``ir`` itself otherwise (and when it has no prompt step)."""
    steps = [
        op_id
        for op_id, op in ir.ops.items()
        if isinstance(op, LLMWriteOp) and op.main_agent and op.purpose == "generate"
    ]
    if not steps or not acts(grant):
        return ir
    ops = dict(ir.ops)
    for op_id in steps:
        op = ops[op_id]
        assert isinstance(op, LLMWriteOp)
        ops[op_id] = as_agent(op)
    return ir.model_copy(update={"ops": ops})

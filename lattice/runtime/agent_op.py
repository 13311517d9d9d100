"""AGENT: the op's contract call, its model turns going through the agent loop.

The op's tools are those the document asks for that the user granted
(``RuntimeSettings.agents``); the loop (``lattice.agents.loop``) runs them between
turns, and the final answer is held to the op's contract by the same engine as an
LLM_WRITE's. The op's record holds the transcript (turns, tool calls, results) and the
files it changed; each change's diff is also written to the run folder
(``changes/<op>-<n>.diff``).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from lattice.agents.gate import CallGate
from lattice.agents.loop import AgentBounds, AgentLoop, QuestionPending, ToolBox, ToolJournal
from lattice.ir.models import AgentOp
from lattice.permissions.approvals import ApprovalRequest, ApprovalsPending
from lattice.runs.oplog import OpExtras
from lattice.runtime.answers import waiting_summary
from lattice.runtime.ask_tool import AskToolset, take_step_answers
from lattice.runtime.context import HaltRun, Outcome, RunContext
from lattice.runtime.llm_op import LLMWriteExecutor
from lattice.runtime.settings import AgentSettings, RuntimeSettings
from lattice.tools.toolset import FileChange, Toolset
from lattice.workspace.grants import ASK_TOOL, READ_ONLY_TYPES, ToolDecision


def approval_halt(requests: list[ApprovalRequest]) -> HaltRun:
    """The halt of a run whose agent waits for a person to approve ``requests``; its
    summary shows each call and what it would do (a diff, a command and its folder)."""
    lines = [f"waiting for approval of {len(requests)} tool call(s):"]
    for request in requests:
        lines.append(f"{request.id}: {request.tool} ({request.why})")
        preview = request.preview
        if "diff" in preview:
            lines.append(str(preview["diff"]).rstrip("\n"))
        elif "command" in preview:
            lines.append(f"  $ {preview['command']}  (in {preview['cwd']})")
        else:
            lines.append(f"  {json.dumps(request.arguments, ensure_ascii=False)[:400]}")
    first = requests[0].id
    return HaltRun(
        "waiting_for_approval",
        "\n".join(lines),
        {"approvals": [request.to_json() for request in requests]},
        f"lattice resume RUN_DIR --approve {first} (or --approve-all, or --deny {first} "
        "--reason TEXT)",
        keeps_journal=True,
    )


def agent_bounds(op: AgentOp, agents: AgentSettings) -> AgentBounds:
    """The op's limits, each capped by the user's ``[agents]`` limit when one is set."""
    limits = op.limits

    def capped(own: Any, cap: Any) -> Any:
        if cap is None:
            return own
        return cap if own is None else min(own, cap)

    return AgentBounds(
        max_turns=capped(limits.max_turns, agents.max_turns),
        max_tool_calls=capped(limits.max_tool_calls, agents.max_tool_calls),
        max_tokens=capped(limits.max_tokens, agents.max_tokens),
        tool_timeout_s=capped(limits.tool_timeout_s, agents.tool_timeout_s),
    )


class AgentExecutor(LLMWriteExecutor):
    """Compiled once per op, like an LLM_WRITE; each visit opens the granted toolsets."""

    op: AgentOp

    def __init__(self, op: AgentOp, settings: RuntimeSettings | None = None) -> None:
        super().__init__(op, settings)
        self.agents = self.settings.agents
        self.decision: ToolDecision = self.agents.grant.decide(op.tools)
        self.bounds = agent_bounds(op, self.agents)

    async def run(self, ctx: RunContext) -> Outcome:
        op = self.op
        toolsets = self._open_toolsets(ctx)
        if ASK_TOOL in self.decision.granted:
            answers = take_step_answers(ctx.answers, op.source_node)
            toolsets.append(AskToolset(op, answers, ctx.ask_human, ctx.emit))
        try:
            gate = self._gate(ctx)
            offered = self.decision.granted
            if gate is not None:
                offered = tuple(tool for tool in offered if gate.offers(tool))
            box = await ToolBox.open(toolsets, offered)
            journal = ctx.llm.provider if isinstance(ctx.llm.provider, ToolJournal) else None
            loop = AgentLoop(
                ctx.llm.provider,
                ctx.llm,
                box,
                self.bounds,
                journal=journal,
                patch_only=self.agents.grant.patch_only,
                mask=ctx.redact,
                gate=gate,
            )
            ctx.emit("agent_started", {"tools": list(box.names), "refused": self._refused()})
            if box.missing:
                ctx.emit(
                    "agent_tool_missing",
                    {"node": op.source_node, "tools": list(box.missing)},
                )
            messages = self.render(ctx)
            try:
                value, attempts = await self.call(
                    ctx, self.engine, messages, replace(ctx.llm, provider=loop)
                )
            except QuestionPending as asked:
                raise HaltRun(
                    "waiting_for_answer",
                    waiting_summary(asked.question, asked.options),
                    {
                        "question": asked.question,
                        "options": asked.options,
                        "multiSelect": asked.multi_select,
                        "tool": ASK_TOOL,
                    },
                    f"lattice resume RUN_DIR --answer {op.source_node}=<"
                    + ("option label or index" if asked.options else "text")
                    + ">",
                    keeps_journal=True,
                ) from None
            except ApprovalsPending as waiting:
                raise approval_halt(waiting.requests) from None
            finally:
                transcript = loop.transcript
                ctx.emit(
                    "agent_finished",
                    {"turns": len(transcript.turns), "tool_calls": transcript.tool_calls},
                )
        finally:
            for toolset in toolsets:
                await toolset.aclose()
        changes = transcript.changes()
        ctx.write_result(op.writes, value)
        record: OpExtras = {"attempts": attempts, "transcript": transcript.to_json()}
        if changes:
            record["changes"] = self._save_changes(ctx, changes)
        return Outcome(output=value, record=record)

    def _gate(self, ctx: RunContext) -> CallGate | None:
        """The gate of this visit's calls (None: no permissions, every offered call runs)."""
        permissions = self.agents.permissions
        if permissions is None or permissions.said_nothing:
            return None
        root = self.agents.grant.root
        return CallGate(
            permissions,
            root if root is not None else Path.cwd(),
            self.op.source_node,
            answers=ctx.answers,
            approver=self.agents.approver,
            no_wait=self.agents.no_wait,
        )

    def _open_toolsets(self, ctx: RunContext) -> list[Toolset]:
        granted = tuple(name for name in self.decision.granted if name != ASK_TOOL)
        if not granted:
            return []
        if self.agents.toolsets is not None:
            return list(self.agents.toolsets(self.agents.grant, granted))
        from lattice.workspace.toolset import workspace_toolsets  # httpx: only when agents run

        mcp = ctx.tools if any(name.startswith("mcp__") for name in granted) else None
        return workspace_toolsets(
            self.agents.grant,
            granted,
            http_client=ctx.http_pool.client,
            mcp=mcp,
            read_only_shell=self.op.agent_type in READ_ONLY_TYPES,
        )

    def _refused(self) -> list[dict[str, str]]:
        return [{"tool": tool, "grant": setting} for tool, setting in self.decision.refused]

    def _save_changes(self, ctx: RunContext, changes: list[FileChange]) -> list[dict[str, Any]]:
        """Each change's diff as ``changes/<op>-<n>.diff`` in the run folder; the list of
        changes (path, digests, applied, diff file) for the op's record."""
        out = []
        safe_op = "".join(c if c.isalnum() or c in "-_." else "_" for c in self.op.id)
        for number, change in enumerate(changes, 1):
            name = f"changes/{safe_op}-{number}.diff"
            if ctx.recorder.run_dir is not None:
                (ctx.recorder.run_dir / "changes").mkdir(exist_ok=True)
                ctx.recorder.write_text(name, change.diff)
            entry = {**change.to_json(), "diff_file": name}
            entry.pop("content", None)  # the diff says it; the new text stays in the journal
            out.append(entry)
        ctx.root.changes.extend({"op": self.op.id, **entry} for entry in out)
        return out

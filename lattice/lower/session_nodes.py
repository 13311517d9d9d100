"""``branchSession``: an interactive side session, as the fork of cc-wf-studio that has
the node runs it in Claude Code (the workflow pauses; the person and the AI work
together, then a summary is handed back to the workflow).

Lowered to a loop of ops, so that each message and each reply is an op of its own,
journaled and committed like any other (a resume re-sends nothing):

    N, N#open    STATE  $vars.N.reply = <the session's opening>, $vars.N.transcript = []
    N#message    ASK    the last reply; the person's message (``once``: each answer is
                        used for one message) → $vars.N.message
    N#end        SWITCH the message is ``/done`` → N#summary, else → N#reply
    N#reply      AGENT  answers the message with the grant's tools → $vars.N.reply
    N#turn       STATE  appends {person, assistant} to $vars.N.transcript → N#message
    N#summary    LLM_WRITE the hand-back summary, under the node's contract → $vars.N.result

The reply op asks for the tools of Claude Code's main agent (the general-purpose set);
what it gets is the user's grant, and without one each reply is a model call with no
tools (the run says so before it starts, as for any agent node).
"""

from __future__ import annotations

import re
from typing import ClassVar

from lattice.document.models import SEQUENTIAL_PORT, Node
from lattice.ir.models import (
    AgentLimits,
    AgentOp,
    AskOp,
    Case,
    Condition,
    Edge,
    LLMWriteOp,
    StateOp,
    SwitchOp,
)
from lattice.ir.templates import path_text
from lattice.lower.fields import get_str
from lattice.lower.llm_nodes import llm_contract
from lattice.lower.registry import LoweringContext, NodeLowering
from lattice.workspace.grants import BUILTIN_TYPE_TOOLS

END_COMMAND = "/done"
"""The message that ends a session (whatever its case and surrounding spaces)."""
END_PATTERN = r"^\s*/[Dd][Oo][Nn][Ee]\s*$"
PLAIN_ID = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")

SESSION_SYSTEM = (
    "You are working together with a person in an interactive session that branched off "
    "a workflow. Answer the person's latest message: do the work they ask for with the "
    "tools you have (if any), say what you did and what you found, and ask when "
    "something is unclear. The person ends the session when the work is done."
)
SUMMARY_SYSTEM = (
    "An interactive session between a person and an AI assistant has ended. Write the "
    "summary the session hands back to the workflow it branched off: what was decided, "
    "what was done (files changed, commands run, results), and anything left open. "
    "Report only what the transcript shows."
)


class BranchSessionLowerer:
    """``branchSession`` (label, workDescription, outputPorts 1): the session loop above."""

    node_type: ClassVar[str] = "branchSession"

    def ports(self, node: Node) -> list[str]:
        return [SEQUENTIAL_PORT]

    # long: the session's ops built in the order they run: open, ask, end, agent turn, summary
    def lower(self, node: Node, ctx: LoweringContext) -> NodeLowering:
        label = get_str(ctx, node, "label") or node.title or node.id
        work = get_str(ctx, node, "workDescription") or ""
        pieces: list[str] = []
        if isinstance(node.data.get("label"), str):
            pieces += ctx.use_text(node, label, "data", "label")
        if work:
            pieces += ctx.use_text(node, work, "data", "workDescription")
        if not PLAIN_ID.match(node.id):
            ctx.error(
                node,
                "invalid-field",
                f"a branchSession node's id is a plain name (letters, digits, _ and -), "
                f"not {node.id!r}: the session keeps its state under it",
                "id",
            )
        n = node.id
        transcript = path_text("$vars", n, "transcript")
        reply = path_text("$vars", n, "reply")
        text = path_text("$vars", n, "message", "text")
        context = ctx.upstream_results(n)
        opening = f"Branch session: {label}" + (f"\n\n{work}" if work else "")
        steps = ("open", "message", "end", "reply", "turn", "summary")
        ids = {step: f"{n}#{step}" for step in steps}

        # two ops, not one set of {transcript, reply}: the session's later writes go
        # into $vars.<node>, and an event must keep the value it recorded
        start = StateOp(
            id=n,
            source_node=n,
            name=node.title,
            operation="set",
            variable=f"{n}.reply",
            value=opening,
            reads=sorted(set(pieces)),
            next=[Edge(to=ids["open"])],
        )
        empty = StateOp(
            id=ids["open"],
            source_node=n,
            name=node.title,
            operation="set",
            variable=f"{n}.transcript",
            value=[],
            next=[Edge(to=ids["message"])],
        )
        ask = AskOp(
            id=ids["message"],
            source_node=n,
            name=node.title,
            question=(
                "{{ " + reply + " }}\n\n"
                f"(branch session {label!r}: your message, or {END_COMMAND} to end the "
                "session and hand back its summary)"
            ),
            once=True,
            writes=path_text("$vars", n, "message"),
            reads=[reply],
            next=[Edge(to=ids["end"])],
        )
        end = SwitchOp(
            id=ids["end"],
            source_node=n,
            name=node.title,
            input=text,
            cases=[
                Case(
                    port="done", test=Condition(op="matches", value=END_PATTERN), source=END_COMMAND
                )
            ],
            default_port=SEQUENTIAL_PORT,
            reads=[text],
            next=[Edge(port="done", to=ids["summary"]), Edge(to=ids["reply"])],
        )
        task = (
            f"The session: {label}\n"
            + (f"What it is for:\n{work}\n" if work else "")
            + "\nThe conversation so far (JSON, oldest first):\n{{ "
            + transcript
            + " }}\n\nThe person's message:\n{{ "
            + text
            + " }}"
        )
        contract = llm_contract(ctx, node)
        answer = AgentOp(
            id=ids["reply"],
            source_node=n,
            name=node.title,
            prompt=task,
            system=SESSION_SYSTEM,
            context=context,
            reads=sorted({*context, transcript, text, *pieces}),
            writes=reply,
            model_class=contract["model_class"],
            model=contract.get("model"),
            next=[Edge(to=ids["turn"])],
            tools=list(BUILTIN_TYPE_TOOLS["general-purpose"]),
            agent_type="branchSession",
            limits=AgentLimits(),
        )
        turn = StateOp(
            id=ids["turn"],
            source_node=n,
            name=node.title,
            operation="append",
            variable=f"{n}.transcript",
            value={"person": "{{ " + text + " }}", "assistant": "{{ " + reply + " }}"},
            reads=[text, reply],
            next=[Edge(to=ids["message"])],
        )
        summary_prompt = (
            f"The session: {label}\n"
            + (f"What it was for:\n{work}\n" if work else "")
            + "\nIts transcript (JSON, oldest first):\n{{ "
            + transcript
            + " }}\n\nWrite the session's hand-back summary."
        )
        summary = LLMWriteOp(
            id=ids["summary"],
            source_node=n,
            name=node.title,
            prompt=summary_prompt,
            system=SUMMARY_SYSTEM,
            context=context,
            reads=sorted({*context, transcript, *pieces}),
            writes=path_text("$vars", n, "result"),
            **contract,
        )
        return NodeLowering(
            ops=[start, empty, ask, end, answer, turn, summary],
            entry=n,
            exits={SEQUENTIAL_PORT: [(summary.id, SEQUENTIAL_PORT)]},
            result_schema=contract["output_schema"],
            produces=("result", "transcript", "reply", "message"),
        )

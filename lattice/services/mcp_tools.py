"""Each workflow of a catalog as an MCP tool, served with the MCP SDK's low-level
``Server`` (over stdio by ``lattice mcp serve``, over Streamable HTTP at the gateway's
``/mcp``).

A tool's name and description are the document's, its input schema the start node's
inputs, its result (structured content) the run's outcome: the end node's output, or
the question a halted run waits for, or why it failed. A call starts a durable run and
answers when it stops; each op that finishes is a progress notification; a cancelled
call stops its run at the next op boundary (it ends ``interrupted``, resumable). A run
that halts for a person is asked by MCP elicitation when the client takes it, else the
call answers with the question and the run id, and the ``answer`` tool continues it.

Approvals of an agent's tool calls are a person's, never the MCP client's: the client
is often a model, and a model must not approve the calls a rule sends to a person. The
``answer`` tool refuses ``$approvals``; a run that waits for approvals answers with the
pending calls and the doors a person approves them by (the panel, ``lattice resume
--approve``, the gateway's ``/answers``). The state a halted call hands its client for
the retry (``request_state``) is signed, so a client cannot turn the retry into an
answer to another run or to approvals.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import logging
import secrets
from collections.abc import Callable, Mapping
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from pydantic import BaseModel

from lattice.errors import LatticeUserError
from lattice.events import EventKind
from lattice.permissions.approvals import APPROVALS, allow_run_scope
from lattice.runtime.results import RunResult
from lattice.services.catalog import Workflow
from lattice.services.runs import HostedRun, StartedBy, WorkflowRuns, outcome

log = logging.getLogger("lattice.services")

ANSWER_TOOL = "answer"
"""The tool that answers a halted run's question and continues it."""
ANSWER_KEY = "answer"
"""The key of the elicitation a halted call asks its client for."""
ANSWER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "run_id": {"type": "string", "description": "the halted run (from the call's result)"},
        "answers": {
            "type": "object",
            "description": "answers by question node id: an option's label (or a list of "
            "labels for a multi-select question) or free text",
        },
    },
    "required": ["run_id", "answers"],
    "additionalProperties": False,
}
MAX_ELICITATIONS = 20
"""Questions one call asks by elicitation at most before it answers with the next one."""


def workflow_server(
    runs: WorkflowRuns, *, name: str = "lattice", state_key: bytes | None = None
) -> Server[Any]:
    """The MCP server of ``runs``'s workflows (tools listed afresh on every request, so a
    workflow added to the folder is a tool at once). ``state_key`` signs the state of
    halted calls (a random key of this process when not given; the gateway derives one
    from its token, so that its replicas accept each other's)."""
    signer = StateSigner(state_key or secrets.token_bytes(32))

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        workflows = await asyncio.to_thread(runs.catalog.workflows)
        tools = [as_tool(workflow) for workflow in workflows.values()]
        tools.append(
            types.Tool(
                name=ANSWER_TOOL,
                description="Answer the question a halted workflow run waits for and "
                "continue the run; returns its outcome as a workflow tool does.",
                input_schema=ANSWER_SCHEMA,
            )
        )
        return types.ListToolsResult(tools=tools)

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        arguments = dict(params.arguments or {})
        try:
            if params.request_state:  # the retry of a call whose run asked a question
                return await _answered(ctx, runs, params, signer)
            progress = Progress(ctx)
            if params.name == ANSWER_TOOL:
                answers = _object(arguments.get("answers"), "answers")
                if APPROVALS in answers:
                    raise LatticeUserError(APPROVALS_ARE_A_PERSONS)
                hosted = await runs.answer(
                    _text(arguments.get("run_id"), "run_id"), answers, on_event=progress
                )
                return await _follow(ctx, runs, hosted, progress, signer)
            # NAME@VERSION: a deployed version the listing (of the latest) does not show
            workflow = await asyncio.to_thread(runs.catalog.resolve, params.name)
            hosted = await runs.start(
                workflow, arguments, StartedBy("mcp", {"tool": workflow.name}), on_event=progress
            )
            return await _follow(ctx, runs, hosted, progress, signer)
        except LatticeUserError as exc:
            return error_result(runs.redact(exc.message))

    return Server(
        name,
        instructions="Each tool runs a Lattice workflow to its end and returns its output.",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def as_tool(workflow: Workflow) -> types.Tool:
    return types.Tool(
        name=workflow.name,
        title=workflow.ir.workflow.name,
        description=workflow.description,
        input_schema=workflow.input_schema,
        output_schema=workflow.output_schema,
    )


class Progress:
    """A run's listener that reports each finished op as an MCP progress notification
    of the call (a no-op when the caller asked for none)."""

    def __init__(self, ctx: ServerRequestContext[Any]) -> None:
        self.ctx = ctx
        self.done = 0
        self.pending: set[asyncio.Task[None]] = set()

    def __call__(self, event: dict[str, Any]) -> None:
        if event["type"] != EventKind.OP_FINISHED:
            return
        self.done += 1
        node = event.get("node_id") or event.get("op_id")
        task = asyncio.get_running_loop().create_task(self._send(self.done, f"finished {node}"))
        self.pending.add(task)
        task.add_done_callback(self.pending.discard)

    async def flush(self) -> None:
        """Wait for the notifications on their way (sent before the call's result)."""
        if self.pending:
            await asyncio.wait(list(self.pending))

    async def _send(self, done: int, message: str) -> None:
        try:
            await self.ctx.session.report_progress(done, None, message)
        except Exception as exc:  # a caller gone or a closed stream: the run goes on
            log.debug("progress not sent: %s", exc)


APPROVALS_ARE_A_PERSONS = (
    "approvals of tool calls are a person's to give, not an MCP client's: approve them in "
    "the panel, with `lattice resume RUN --approve ID`, or at POST /v1/runs/RUN/answers"
)


class StateSigner:
    """Signs and checks the ``request_state`` of a halted call: what run and question its
    retry answers."""

    def __init__(self, key: bytes) -> None:
        self.key = key

    def sign(self, run_id: str, question: Mapping[str, Any]) -> str:
        payload = json.dumps({"run_id": run_id, "question": question}, sort_keys=True)
        body = base64.urlsafe_b64encode(payload.encode()).decode()
        return f"{body}.{self._mac(body)}"

    def open(self, state: str) -> tuple[str, dict[str, Any]] | None:
        """The run id and question ``state`` was signed for, or None when this server
        did not make it."""
        body, _, mac = state.rpartition(".")
        if not body or not hmac.compare_digest(mac, self._mac(body)):
            return None
        try:
            decoded = json.loads(base64.urlsafe_b64decode(body.encode()))
            run_id, question = str(decoded["run_id"]), dict(decoded["question"])
        except (ValueError, KeyError, TypeError):
            return None
        if question.get("node_id") == APPROVALS:
            return None
        return run_id, question

    def _mac(self, body: str) -> str:
        return hmac.new(self.key, body.encode(), hashlib.sha256).hexdigest()


def state_key_of(token: str) -> bytes:
    """The key that signs halted calls' state at a gateway with ``token``."""
    return hashlib.sha256(b"lattice mcp request_state\0" + token.encode()).digest()


async def _follow(
    ctx: ServerRequestContext[Any],
    runs: WorkflowRuns,
    hosted: HostedRun,
    progress: Progress,
    signer: StateSigner,
) -> types.CallToolResult | types.InputRequiredResult:
    """Wait for the run's end (stopping it when the call is cancelled), asking a halted
    run's questions by elicitation while the client takes them: as a request to the
    client on a connection that carries them, else (MCP 2026-07-28) as an
    ``InputRequiredResult`` whose retry continues the run (``_answered``). Approvals
    are asked only as a request to the client (elicitation is shown to its person, not
    its model), one form per pending call."""
    for _ in range(MAX_ELICITATIONS):
        result = await _until_stopped(hosted)
        out = outcome(result)
        question = out.get("question")
        pending = _pending_approvals(out)
        if pending and _takes_elicitation(ctx) and ctx.session.can_send_request:
            decisions = await _elicit_approvals(ctx, pending)
            if decisions is None:
                break
            hosted = await runs.answer(result.run_id, {APPROVALS: decisions}, on_event=progress)
            continue
        if question is None or not _takes_elicitation(ctx):
            break
        if not ctx.session.can_send_request:
            await progress.flush()
            return types.InputRequiredResult(
                input_requests={ANSWER_KEY: _elicit_request(question)},
                request_state=signer.sign(out["run_id"], question),
            )
        answer = await _elicit(ctx, question)
        if answer is None:
            break
        hosted = await runs.answer(result.run_id, {question["node_id"]: answer}, on_event=progress)
    await progress.flush()
    return tool_result(out, runs.redact)


async def _answered(
    ctx: ServerRequestContext[Any],
    runs: WorkflowRuns,
    params: types.CallToolRequestParams,
    signer: StateSigner,
) -> types.CallToolResult | types.InputRequiredResult:
    """Continue the run a question halted with the client's elicited answer (the retry
    of the call that asked it); a declined question answers with the halted run."""
    opened = signer.open(params.request_state or "")
    if opened is None:
        return error_result("the request state of this call is not one this server made")
    run_id, question = opened
    answer = _accepted((params.input_responses or {}).get(ANSWER_KEY))
    if answer is None:
        halted = {"run_id": run_id, "status": "halted", "question": question}
        return tool_result(halted, runs.redact)
    progress = Progress(ctx)
    hosted = await runs.answer(run_id, {question["node_id"]: answer}, on_event=progress)
    return await _follow(ctx, runs, hosted, progress, signer)


def _pending_approvals(out: Mapping[str, Any]) -> list[dict[str, Any]]:
    failure = out.get("failure") or {}
    if out.get("status") != "halted" or failure.get("category") != "waiting_for_approval":
        return []
    return [dict(x) for x in (failure.get("details") or {}).get("approvals") or []]


def approval_form(request: Mapping[str, Any]) -> dict[str, Any]:
    """The form of one pending call: a decision (its "for the rest of the run" saying
    what it would allow) and a reason."""
    scope = allow_run_scope(str(request.get("tool")), request.get("arguments") or {})
    return {
        "type": "object",
        "properties": {
            "decision": {
                "type": "string",
                "title": "Decision",
                "enum": ["allow", "allow_run", "deny"],
                "enumNames": [
                    "Allow once",
                    f"Allow {scope} for the rest of this agent's run",
                    "Deny",
                ],
            },
            "reason": {"type": "string", "title": "Reason (told to the agent when denied)"},
        },
        "required": ["decision"],
    }


def _approval_message(request: Mapping[str, Any]) -> str:
    lines = [f"The agent of step {request.get('node')} asks to use {request.get('tool')}"]
    lines.append(f"(asked by: {request.get('why')})")
    if request.get("diff"):
        lines.append(_excerpt(str(request["diff"]), 4000))
    elif request.get("command"):
        lines.append(f"$ {request['command']}  (in {request.get('cwd')})")
    else:
        lines.append(_excerpt(json.dumps(request.get("arguments"), ensure_ascii=False), 1000))
    return "\n".join(lines)


def _excerpt(text: str, limit: int) -> str:
    """``text`` cut at ``limit`` characters, saying so: a person approves what they see."""
    if len(text) <= limit:
        return text
    return (
        f"{text[:limit]}\n[{len(text) - limit:,} more characters not shown here: see the "
        "whole call in the execution panel (lattice runs open) before allowing it]"
    )


async def _elicit_approvals(
    ctx: ServerRequestContext[Any], pending: list[dict[str, Any]]
) -> dict[str, Any] | None:
    """The person's decisions on ``pending`` (by approval id, door ``mcp``), or None when
    they declined a form (the run stays halted)."""
    decisions: dict[str, Any] = {}
    for request in pending:
        reply = await ctx.session.elicit_form(
            _approval_message(request), approval_form(request), related_request_id=ctx.request_id
        )
        content = reply.content
        if reply.action != "accept" or not isinstance(content, dict):
            return None
        decision = content.get("decision")
        if decision not in ("allow", "allow_run", "deny"):
            return None
        reason = content.get("reason")
        decisions[str(request["id"])] = {
            "decision": decision,
            "reason": reason if isinstance(reason, str) else "",
            "door": "mcp elicitation",
        }
    return decisions


def _accepted(response: Any) -> Any:
    """The answer in an elicitation's response, or None when it was not accepted."""
    if isinstance(response, BaseModel):
        response = response.model_dump()
    if not isinstance(response, dict) or response.get("action") != "accept":
        return None
    content = response.get("content")
    return content.get("answer") if isinstance(content, dict) else None


async def _until_stopped(hosted: HostedRun) -> RunResult:
    done = asyncio.ensure_future(hosted.done())
    try:
        return await asyncio.shield(done)
    except asyncio.CancelledError:
        hosted.stop()  # the call was cancelled: the run stops at its next op boundary
        await asyncio.wait([done])
        raise


def _takes_elicitation(ctx: ServerRequestContext[Any]) -> bool:
    return ctx.session.check_client_capability(
        types.ClientCapabilities(elicitation=types.ElicitationCapability())
    )


def _form(question: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The elicitation of ``question``: its text, and a form of one field, ``answer``
    (one of the options, a list of them for a multi-select question, or free text)."""
    options = question.get("options") or []
    answer: dict[str, Any] = {"type": "string", "title": "Answer"}
    if options and question.get("multi_select"):
        answer = {"type": "array", "title": "Answers", "items": {"type": "string", "enum": options}}
    elif options:
        answer = {"type": "string", "title": "Answer", "enum": options}
    schema = {"type": "object", "properties": {"answer": answer}, "required": ["answer"]}
    return str(question.get("question") or "The workflow asks:"), schema


def _elicit_request(question: Mapping[str, Any]) -> types.ElicitRequest:
    message, schema = _form(question)
    return types.ElicitRequest(
        params=types.ElicitRequestFormParams(message=message, requested_schema=schema)
    )


async def _elicit(ctx: ServerRequestContext[Any], question: Mapping[str, Any]) -> Any:
    """The person's answer to ``question``, or None when they declined or cancelled."""
    message, schema = _form(question)
    reply = await ctx.session.elicit_form(message, schema, related_request_id=ctx.request_id)
    return _accepted(reply)


def tool_result(out: dict[str, Any], redact: Callable[[str], str]) -> types.CallToolResult:
    """A run's outcome as a tool's result: structured, with its JSON as text too, secret
    values masked; an error result when the run failed."""
    text = redact(json.dumps(out, ensure_ascii=False, default=str))
    out = json.loads(text)
    if out.get("question") is not None:
        text += (
            f"\nThe run waits for an answer: call the {ANSWER_TOOL!r} tool with "
            f'{{"run_id": "{out["run_id"]}", "answers": {{"{out["question"]["node_id"]}": '
            '"<answer>"}}.'
        )
    elif (out.get("failure") or {}).get("category") == "waiting_for_approval":
        text += (
            "\nThe run waits for a person to approve tool calls of its agent (this tool "
            f"cannot): {APPROVALS_ARE_A_PERSONS.split(': ', 1)[1].replace('RUN', out['run_id'])}."
        )
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content=out,
        is_error=out["status"] == "failed",
    )


def error_result(message: str) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=message)], is_error=True
    )


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise LatticeUserError(f"{what} must be a non-empty string")
    return value


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise LatticeUserError(f"{what} must be an object")
    return value

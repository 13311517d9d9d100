"""LLM_WRITE: compile the micro-prompt, run it through the contract engine, write the artifact.

Micro-prompt: system = the node's own system part + the template (``artifact-builder@1``
for ops with a schema, ``classifier@1`` for classifiers) with the schema and rules
injected; user = the rendered prompt plus the upstream results it reads, plus any
information a person supplied after a ``missing_information`` halt.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from lattice.contracts.calls import CallEnv, Sampling
from lattice.contracts.engine import Contract, ContractEngine
from lattice.contracts.invariants import bind_invariants
from lattice.contracts.packets import REPAIR_CONTEXT_CHARS
from lattice.contracts.policies import ladder_from
from lattice.errors import LatticeRunError
from lattice.ir.models import ContractOpBase, LLMWriteOp
from lattice.ir.templates import ValueTemplate, parse_path, parse_template, to_text
from lattice.llm.base import Message
from lattice.prompts.builtin import TEMPLATES
from lattice.prompts.registry import PromptTemplate
from lattice.runtime.context import HaltRun, Outcome, RunContext
from lattice.runtime.mock_tools import offline_contract, scripted_tool
from lattice.runtime.settings import RuntimeSettings
from lattice.runtime.tool_contracts import tool_contract


def _context_label(path: str) -> str:
    """``$vars.fetch.result`` → ``fetch``; ``$in`` → ``inputs``."""
    parsed = parse_path(path)
    if parsed.root == "$in" and not parsed.keys:
        return "inputs"
    if parsed.root == "$vars" and parsed.keys[1:] == ("result",):
        return str(parsed.keys[0])
    return path


def contract_for(op: ContractOpBase, settings: RuntimeSettings) -> Contract:
    """The Contract of an LLM_WRITE or AGENT op under ``settings``."""
    escalate = op.escalate
    max_class = escalate.get("maxClass") if isinstance(escalate, dict) else None
    enabled = escalate is not False and not (
        isinstance(escalate, dict) and escalate.get("enabled") is False
    )
    return Contract(
        schema=op.output_schema,
        invariants=tuple(bind_invariants(op.invariants, repo_root=settings.repo_root)),
        max_attempts=op.max_attempts or settings.max_attempts,
        ladder=ladder_from(op.model_class, max_class=max_class, enabled=enabled),
        policies={k: tuple(v) for k, v in op.policies.items()},
        strict_output=bool(op.strict_output),
        max_attempts_total=op.max_attempts_total,
        repair_context_chars=(
            op.repair_context_chars if op.repair_context_chars is not None else REPAIR_CONTEXT_CHARS
        ),
        formats=settings.formats,
    )


def template_for(op: ContractOpBase) -> PromptTemplate | None:
    if op.template:
        return TEMPLATES.get(op.template)
    if op.output_schema is not None:
        return TEMPLATES.get("artifact-builder@1")
    return None


def compose_messages(
    *,
    prompt: str,
    context: Iterable[tuple[str, Any]] = (),
    system: str | None = None,
    template: PromptTemplate | None = None,
    builtins: Mapping[str, str] | None = None,
    variables: Mapping[str, Any] | None = None,
) -> tuple[Message, ...]:
    """The original (non-repair) messages of a contract call; LLM_WRITE ops and
    ``LLMPrimitive`` both build theirs here.

    ``context`` holds ``(label, value)`` input blocks, shown under ``# Input`` as
    ``## label`` (empty values are left out). With a ``template`` the system part is
    ``system`` + the template filled with ``builtins`` (rules, schema), the prompt, the
    input blocks and ``variables``; without one the user part is the prompt plus the blocks.
    """
    blocks = [
        f"## {label}\n{to_text(value)}"
        for label, value in context
        if not (value is None or (isinstance(value, (str, dict)) and not value))
    ]
    input_text = ("\n\n# Input\n" + "\n\n".join(blocks)) if blocks else ""
    if template is None:
        user = prompt + input_text
        if system:
            return (Message("system", system), Message("user", user))
        return (Message("user", user),)
    values = {**(builtins or {}), "prompt": prompt, "input": input_text}
    if variables:
        values.update({k: to_text(v) for k, v in variables.items()})
    system_text, user = template.render(values)
    system_parts = [part for part in (system, system_text) if part]
    if system_parts:
        return (Message("system", "\n\n".join(system_parts)), Message("user", user))
    return (Message("user", user),)


class LLMWriteExecutor:
    """Compiled once per op: templates, variables, context paths, validator and invariants."""

    def __init__(self, op: ContractOpBase, settings: RuntimeSettings | None = None) -> None:
        self.op = op
        self.settings = settings or RuntimeSettings()
        self.prompt = parse_template(op.prompt)
        self.variables = {name: ValueTemplate(value) for name, value in op.variables.items()}
        self.context = [(_context_label(path), parse_path(path)) for path in op.context]
        self.template = template_for(op)
        self.engine = ContractEngine(contract_for(op, self.settings))
        self._tool_engines: dict[str, ContractEngine] = {}
        self.takes_information = not op.id.startswith(f"{op.source_node}#")
        """Information a person supplied for the node goes to the node's own op; a
        node's extra ops (a branch session's replies and summary) take none: the
        answers to such a node are its session's messages."""
        self.sampling = Sampling(
            temperature=op.temperature if op.temperature is not None else self.settings.temperature,
            top_p=op.top_p,
            max_tokens=op.max_tokens,
        )
        # What every call reads, as plain attributes (a model's own are read through
        # its ``__getattr__`` hook).
        self.tool_server = op.tool_server if isinstance(op, LLMWriteOp) else None
        self.writes, self.written = op.writes, parse_path(op.writes)
        self.model, self.node, self.op_id, self.system = op.model, op.source_node, op.id, op.system

    def render(
        self, ctx: RunContext, engine: ContractEngine | None = None, tools: str = ""
    ) -> tuple[Message, ...]:
        """The original (non-repair) messages for this visit of the op."""
        state = ctx.state
        if self.variables:
            variables = {name: t.render(state.resolve) for name, t in self.variables.items()}
            prompt = self.prompt.render(lambda ref: state.resolve(ref, variables))
        else:
            variables = {}
            prompt = self.prompt.render(state.resolve)
        template = self.template
        answers = ctx.answers if self.takes_information else None
        if template is None and not self.context and not tools and not answers:
            system = self.system  # compose_messages' answer for a bare prompt
            if system:
                return (Message("system", system), Message("user", prompt))
            return (Message("user", prompt),)
        context = [(label, state.get(path)) for label, path in self.context]
        if tools:
            context.append(("Tools", tools))
        extra = _take_information(answers, self.op.source_node) if answers else None
        if extra:
            context.append(("Information from a person", extra))
        return compose_messages(
            prompt=prompt,
            context=context,
            system=self.op.system,
            template=template,
            builtins=None if template is None else (engine or self.engine).builtins(),
            variables=variables,
        )

    async def run(self, ctx: RunContext) -> Outcome:
        engine, tools = self.engine, ""
        if self.tool_server is not None:
            engine, tools = await self._tool_engine(ctx)
        try:  # ``call``, inlined: one coroutine less for every model call of a run
            value, attempts = await engine.run(
                self.render(ctx, engine, tools),
                ctx.llm,
                sampling=self.sampling,
                model=self.model,
                node_id=self.node,
                op_id=self.op_id,
            )
        except LatticeRunError as exc:
            halt = self._as_halt(exc)
            if halt is None:
                raise
            raise halt from exc
        ctx.write_result(self.writes, value, self.written)
        # no attempts: the run keeps no op records (``CallEnv.records``)
        return Outcome("default", value, {"attempts": attempts} if attempts else None)

    async def call(
        self, ctx: RunContext, engine: ContractEngine, messages: tuple[Message, ...], env: CallEnv
    ) -> tuple[Any, list[dict[str, Any]]]:
        """Run the contract call; a ``halt`` recovery becomes a HaltRun."""
        op = self.op
        try:
            return await engine.run(
                messages,
                env,
                sampling=self.sampling,
                model=op.model,
                node_id=op.source_node,
                op_id=op.id,
            )
        except LatticeRunError as exc:
            halt = self._as_halt(exc)
            if halt is None:
                raise
            raise halt from exc

    def _as_halt(self, exc: LatticeRunError) -> HaltRun | None:
        """The HaltRun a ``halt`` recovery's error becomes (None for any other error)."""
        if exc.details.get("action") != "halt":
            return None
        return HaltRun(
            exc.error_type,
            exc.message,
            {k: v for k, v in exc.details.items() if k != "action"},
            f"lattice resume RUN_DIR --answer {self.op.source_node}=<the missing information>",
        )

    async def _tool_engine(self, ctx: RunContext) -> tuple[ContractEngine, str]:
        """The contract engine for the server's current tool schemas (compiled once per
        schema); an open one when the mock script answers the tool call (no server)."""
        op = self.op
        assert isinstance(op, LLMWriteOp)
        if scripted_tool(ctx, op.source_node, op.tool_server, op.tool_name) is not None:
            schema, tools = offline_contract(op.purpose), ""
        else:
            schema, tools = await tool_contract(op, ctx.tools)
        key = json.dumps(schema, sort_keys=True)
        engine = self._tool_engines.get(key)
        if engine is None:
            engine = ContractEngine(replace(self.engine.contract, schema=schema))
            self._tool_engines[key] = engine
        return engine, tools


def _take_information(answers: dict[str, Any], node_id: str) -> str | None:
    value = answers.get(node_id)
    if isinstance(value, list):
        if not value:
            return None
        answers[node_id] = value[1:]
        value = value[0]
    return None if value is None else to_text(value)

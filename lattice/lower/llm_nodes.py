"""Lowerers of nodes that become LLM_WRITE ops: prompt, subAgent, skill, codex (the last
three become AGENT ops when they ask for tools: ``lattice.lower.agent_nodes``)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, ClassVar

from lattice.contracts.invariants import invariant_names
from lattice.contracts.policies import ACTIONS
from lattice.document.models import SEQUENTIAL_PORT, Node
from lattice.errors import did_you_mean
from lattice.ir.models import FAILED_PORT, AgentOp, LLMWriteOp, TransformOp
from lattice.ir.templates import path_text
from lattice.lower.agent_nodes import AgentAsk, agent_ask
from lattice.lower.fields import get_choice, get_dict, get_list, get_number, get_schema, get_str
from lattice.lower.registry import LoweringContext, NodeLowering
from lattice.prompts.builtin import TEMPLATES

MODEL_CLASSES = ("small", "medium", "large", "default")
CLAUDE_MODEL_CLASSES = {
    "haiku": "small",
    "sonnet": "medium",
    "opus": "large",
    "inherit": "default",
}
"""cc-wf-studio's model names mapped onto Lattice's model classes."""

LLM_PORTS = [SEQUENTIAL_PORT, FAILED_PORT]


def model_class_of(ctx: LoweringContext, node: Node) -> tuple[str, str | None]:
    """(model class, concrete model or None) from ``modelClass`` and/or ``model``."""
    model_class = get_choice(ctx, node, "modelClass", MODEL_CLASSES, default=None)
    model = get_str(ctx, node, "model")
    inherited = ctx.document_model_class
    if model is not None and model.lower() in CLAUDE_MODEL_CLASSES:
        chosen = model_class or CLAUDE_MODEL_CLASSES[model.lower()]
        return inherited if chosen == "default" else chosen, None
    if model is not None and model.lower() in MODEL_CLASSES:
        chosen = model_class or model.lower()
        return inherited if chosen == "default" else chosen, None
    return model_class or (inherited if not model else "default"), model or None


def llm_contract(ctx: LoweringContext, node: Node) -> dict[str, Any]:
    """The contract fields every LLM node may carry (schema, sampling, repair, escalation)."""
    model_class, model = model_class_of(ctx, node)
    repair = get_dict(ctx, node, "repair") or {}
    max_attempts = repair.get("maxAttempts")
    if max_attempts is not None and (
        not isinstance(max_attempts, int)
        or isinstance(max_attempts, bool)
        or not 1 <= max_attempts <= 10
    ):
        ctx.error(
            node,
            "invalid-field",
            "repair.maxAttempts must be an integer from 1 to 10",
            "data",
            "repair",
            "maxAttempts",
        )
        max_attempts = None
    escalate = node.data.get("escalate", True)
    if not isinstance(escalate, bool | dict):
        ctx.error(
            node,
            "invalid-field",
            "data.escalate must be true, false or an object",
            "data",
            "escalate",
        )
        escalate = True
    invariants = get_list(ctx, node, "invariants") or []
    for i, inv in enumerate(invariants):
        if not (
            isinstance(inv, str) or (isinstance(inv, dict) and isinstance(inv.get("name"), str))
        ):
            ctx.error(
                node,
                "invalid-field",
                'an invariant is a name or {"name": ..., ...}',
                "data",
                "invariants",
                i,
            )
    invariants = _known_invariants(ctx, node, invariants)
    template = _checked_template(ctx, node)
    strict = node.data.get("strictOutput")
    if strict is not None and not isinstance(strict, bool):
        ctx.error(
            node, "invalid-field", "data.strictOutput must be true or false", "data", "strictOutput"
        )
        strict = None
    total = get_number(ctx, node, "maxAttemptsTotal", integer=True, minimum=1)
    return {
        "output_schema": get_schema(ctx, node, "outputSchema"),
        "model_class": model_class,
        "model": model,
        "temperature": get_number(ctx, node, "temperature", minimum=0),
        "top_p": get_number(ctx, node, "topP", minimum=0),
        "max_tokens": get_number(ctx, node, "maxTokens", integer=True, minimum=1),
        "invariants": invariants,
        "max_attempts": max_attempts,
        "escalate": escalate,
        "template": template,
        "policies": _policies(ctx, node),
        "strict_output": strict,
        "max_attempts_total": total,
        "repair_context_chars": get_number(
            ctx, node, "repairContextChars", integer=True, minimum=0
        ),
    }


def _known_invariants(ctx: LoweringContext, node: Node, specs: list[Any]) -> list[Any]:
    known = invariant_names()
    kept = []
    for i, spec in enumerate(specs):
        name = (
            spec if isinstance(spec, str) else spec.get("name") if isinstance(spec, dict) else None
        )
        if not isinstance(name, str):
            continue
        if name not in known:
            ctx.error(
                node,
                "invariant-unknown",
                f"unknown invariant {name!r}{did_you_mean(name, known)}; known: {', '.join(known)}",
                "data",
                "invariants",
                i,
            )
            continue
        kept.append(spec)
    return kept


def _checked_template(ctx: LoweringContext, node: Node) -> str | None:
    """``data.template``: must name a registered template whose variables the node supplies."""
    ref = get_str(ctx, node, "template")
    if ref is None:
        return None
    template = TEMPLATES.find(ref)
    if template is None:
        ctx.error(
            node,
            "template-unknown",
            f"unknown prompt template {ref!r}{TEMPLATES.suggest(ref)}",
            "data",
            "template",
        )
        return None
    variables = node.data.get("variables")
    supplied: dict[str, Any] = variables if isinstance(variables, dict) else {}
    missing = [v for v in template.variables if v not in supplied]
    if missing:
        ctx.error(
            node,
            "template-variable-missing",
            f"template {template.key} needs data.variables {', '.join(missing)}",
            "data",
            "variables",
        )
    return template.key


def _policies(ctx: LoweringContext, node: Node) -> dict[str, list[str]]:
    raw = get_dict(ctx, node, "policies") or {}
    out: dict[str, list[str]] = {}
    for error_type, stack in raw.items():
        if not isinstance(stack, list) or not stack or not all(a in ACTIONS for a in stack):
            ctx.error(
                node,
                "invalid-field",
                f"a policy is a non-empty list of actions from {', '.join(ACTIONS)}",
                "data",
                "policies",
                error_type,
            )
            continue
        out[error_type] = list(stack)
    return out


def _read_prefixes(reads: list[str]) -> set[str]:
    """Every read and each of its parents (``$vars.a.result.x`` gives ``$vars.a.result``,
    ``$vars.a``, ``$vars``): a path is already read when it is in this set."""
    out: set[str] = set()
    for read in reads:
        out.add(read)
        for i, char in enumerate(read):
            if char in ".[":
                out.add(read[:i])
    return out


def _llm_op(
    ctx: LoweringContext,
    node: Node,
    *,
    prompt: str,
    system: str | None,
    prompt_key: str | None,
    pieces: tuple[tuple[str, tuple[str | int, ...]], ...] = (),
    agent: AgentAsk | None = None,
    main_agent: bool = False,
) -> NodeLowering:
    """One LLM_WRITE, or one AGENT when the node asks for tools (``agent``). ``prompt_key`` names the data field the prompt is (read as a text
    template, as the runtime reads it); ``pieces`` are document texts a built prompt
    embeds, each with its place, checked the same way."""
    contract = llm_contract(ctx, node)
    variables = get_dict(ctx, node, "variables") or {}
    reads: list[str] = []
    if prompt_key is not None:
        reads += ctx.use_text(node, prompt, "data", prompt_key)
    mark = ctx.template_errors
    for text, where in pieces:
        reads += ctx.use_text(node, text, *where)
    if pieces:
        ctx.check_prompt(node, prompt, "data", since=mark)
    for name, value in variables.items():
        reads += ctx.use_template(node, value, "data", "variables", name)
    already = _read_prefixes(reads)
    context = [p for p in ctx.upstream_results(node.id) if p not in already]
    fields: dict[str, Any] = {
        "id": node.id,
        "source_node": node.id,
        "name": node.title,
        "prompt": prompt,
        "system": system,
        "variables": variables,
        "context": context,
        "reads": sorted(set(reads) | set(context)),
        "writes": path_text("$vars", node.id, "result"),
        **contract,
    }
    op: LLMWriteOp | AgentOp = (
        LLMWriteOp(**fields, main_agent=main_agent or None)
        if agent is None
        else AgentOp(**fields, **agent.op_fields())
    )
    return NodeLowering.single(op, ports=LLM_PORTS, result_schema=contract["output_schema"])


class PromptLowerer:
    """``prompt``: a templated prompt → one LLM_WRITE marked as a turn of the main agent
    (a run whose grant gives the main agent tools runs it as an AGENT op)."""

    node_type: ClassVar[str] = "prompt"

    def ports(self, node: Node) -> list[str]:
        return LLM_PORTS

    def lower(self, node: Node, ctx: LoweringContext) -> NodeLowering:
        prompt = get_str(ctx, node, "prompt", required=True) or ""
        system = get_str(ctx, node, "system")
        return _llm_op(
            ctx, node, prompt=prompt, system=system, prompt_key="prompt", main_agent=True
        )


class SubAgentLowerer:
    """``subAgent``: ``agentDefinition`` is the system part, ``prompt`` the task → AGENT
    (``lattice.lower.agent_nodes``: the tools it asks for)."""

    node_type: ClassVar[str] = "subAgent"

    def ports(self, node: Node) -> list[str]:
        return LLM_PORTS

    def lower(self, node: Node, ctx: LoweringContext) -> NodeLowering:
        system = get_str(ctx, node, "agentDefinition")
        prompt = get_str(ctx, node, "prompt")
        key: str | None = "prompt"
        if not prompt:
            prompt = get_str(ctx, node, "description")
            key = "description"
        if not prompt:
            ctx.error(
                node, "missing-field", "subAgent node needs data.prompt or data.description", "data"
            )
            prompt, key = "", None
        return _llm_op(
            ctx, node, prompt=prompt, system=system, prompt_key=key, agent=agent_ask(ctx, node)
        )


SKILL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def find_skill_file(
    name: str, scope: str | None, base_dir: Path | None, source: str | None = None
) -> Path | None:
    """Locate ``<root>/.claude/skills/<name>/SKILL.md`` for a skill node
    (``.github/skills/`` when ``source`` is ``copilot``).

    Only files with that exact shape are read, never an arbitrary path from the
    document: project (and ``local``) skills under the document's folder or its
    parents, personal skills under the user's home.
    """
    if not SKILL_NAME.match(name):
        return None
    roots: list[Path] = []
    if scope in ("personal", "user"):
        roots.append(Path.home())
    elif base_dir is not None:
        roots.extend([base_dir, *list(base_dir.resolve().parents)[:3]])
    folder = (".github", "skills") if source == "copilot" else (".claude", "skills")
    for root in roots:
        candidate = root.joinpath(*folder, name, "SKILL.md")
        if candidate.is_file():
            return candidate
    return None


class SkillLowerer:
    """``skill``: an LLM_WRITE whose system part is the skill's SKILL.md when it can be
    found, its task ``executionPrompt`` (else ``prompt``, else "apply the skill");
    ``executionMode: load`` makes the node's result the skill's text instead (no model
    call), which the nodes after it receive as their input."""

    node_type: ClassVar[str] = "skill"

    def ports(self, node: Node) -> list[str]:
        return LLM_PORTS

    def lower(self, node: Node, ctx: LoweringContext) -> NodeLowering:
        name = get_str(ctx, node, "name", required=True) or node.id
        description = get_str(ctx, node, "description") or ""
        scope = get_str(ctx, node, "scope")
        source = get_str(ctx, node, "source")
        path = find_skill_file(name, scope, ctx.base_dir, source)
        if path is not None:
            system: str | None = path.read_text(encoding="utf-8", errors="replace")
        else:
            system = None
            folder = ".github/skills" if source == "copilot" else ".claude/skills"
            where = f"~/{folder}" if scope in ("personal", "user") else folder
            ctx.warn(
                node,
                "skill-unresolved",
                f"skill {name!r} not found under {where}/{name}/SKILL.md; "
                "the LLM op uses the skill's name and description only",
                "data",
            )
        if get_str(ctx, node, "executionMode") == "load":
            text = system if system is not None else f"Skill {name}: {description}".strip()
            return _loaded_skill(node, text)
        agent = agent_ask(ctx, node)
        for key in ("executionPrompt", "prompt"):
            own_prompt = get_str(ctx, node, key)
            if own_prompt:
                return _llm_op(
                    ctx, node, prompt=own_prompt, system=system, prompt_key=key, agent=agent
                )
        prompt = (
            f"Apply the skill {name!r}"
            + (f" ({description})" if description else "")
            + " to the input."
        )
        pieces: tuple[tuple[str, tuple[str | int, ...]], ...] = (
            (repr(name), ("data", "name")),
            (description, ("data", "description")),
        )
        return _llm_op(
            ctx, node, prompt=prompt, system=system, prompt_key=None, pieces=pieces, agent=agent
        )


def _loaded_skill(node: Node, text: str) -> NodeLowering:
    """A skill in ``load`` mode: a TRANSFORM whose result is the skill's text."""
    literal = "`" + json.dumps(text, ensure_ascii=False).replace("`", "\\`") + "`"
    op = TransformOp(
        id=node.id,
        source_node=node.id,
        name=node.title,
        expression=literal,
        input="$in",
        writes=path_text("$vars", node.id, "result"),
    )
    return NodeLowering.single(op, ports=LLM_PORTS, result_schema={"type": "string"})


class CodexLowerer:
    """``codex``: the node's prompt as an LLM_WRITE, or an AGENT when it names a ``sandbox``
    (the Codex agent itself is not called)."""

    node_type: ClassVar[str] = "codex"

    def ports(self, node: Node) -> list[str]:
        return LLM_PORTS

    def lower(self, node: Node, ctx: LoweringContext) -> NodeLowering:
        generated = node.data.get("promptMode") == "ai-generated"
        prompt = get_str(ctx, node, "prompt", required=not generated) or ""
        agent = agent_ask(ctx, node)
        if generated and not prompt.strip():
            # upstream lets the orchestrating model write the prompt: here the task is
            # the node's, and its input the results before it
            task = f"Carry out the task {node.title!r} for the input."
            return _llm_op(ctx, node, prompt=task, system=None, prompt_key=None, agent=agent)
        return _llm_op(ctx, node, prompt=prompt, system=None, prompt_key="prompt", agent=agent)

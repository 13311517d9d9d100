"""LLM_WRITE: render the micro-prompt, call the provider, parse and check the output, write it."""

from __future__ import annotations

import json
from typing import Any

import jsonschema

from lattice.errors import LatticeRunError
from lattice.ir.models import LLMWriteOp
from lattice.ir.templates import ValueTemplate, parse_path, parse_template, to_text
from lattice.llm.base import LLMRequest, Message
from lattice.runtime.context import Outcome, RunContext
from lattice.runtime.extract import extract_json


def schema_instructions(schema: dict[str, Any]) -> str:
    return (
        "Reply with exactly one JSON value and nothing else (no prose, no code fences). "
        "It must conform to this JSON Schema:\n" + json.dumps(schema, indent=2, ensure_ascii=False)
    )


def _context_label(path: str) -> str:
    """``$vars.fetch.result`` → ``fetch``; ``$in`` → ``inputs``."""
    parsed = parse_path(path)
    if parsed.root == "$in" and not parsed.keys:
        return "inputs"
    if parsed.root == "$vars" and parsed.keys[1:] == ("result",):
        return str(parsed.keys[0])
    return path


class LLMWriteExecutor:
    """Compiled once per op: prompt template, variables, context paths and schema validator."""

    def __init__(self, op: LLMWriteOp) -> None:
        self.op = op
        self.prompt = parse_template(op.prompt)
        self.variables = {name: ValueTemplate(value) for name, value in op.variables.items()}
        self.context = [(_context_label(path), parse_path(path)) for path in op.context]
        self.validator = (
            jsonschema.Draft202012Validator(op.output_schema)
            if op.output_schema is not None
            else None
        )
        system = [op.system] if op.system else []
        if op.output_schema is not None:
            system.append(schema_instructions(op.output_schema))
        self.system = "\n\n".join(system) if system else None

    def render_user(self, ctx: RunContext) -> str:
        state = ctx.state
        variables = {name: t.render(state.resolve) for name, t in self.variables.items()}
        text = self.prompt.render(lambda ref: state.resolve(ref, variables))
        blocks = []
        for label, path in self.context:
            if state.exists(path):
                value = state.read(path)
                if value not in ({}, None):
                    blocks.append(f"## {label}\n{to_text(value)}")
        if blocks:
            text += "\n\n# Input\n" + "\n\n".join(blocks)
        return text

    def build_request(self, ctx: RunContext) -> LLMRequest:
        op = self.op
        messages = []
        if self.system:
            messages.append(Message("system", self.system))
        messages.append(Message("user", self.render_user(ctx)))
        return LLMRequest(
            messages=tuple(messages),
            model_class=op.model_class,
            model=op.model,
            temperature=op.temperature if op.temperature is not None else 0.0,
            top_p=op.top_p,
            max_tokens=op.max_tokens,
            response_schema=op.output_schema,
            node_id=op.source_node,
            op_id=op.id,
        )

    def parse(self, text: str) -> Any:
        """The op's value from the model's text: JSON checked against the schema, or the text."""
        if self.validator is None:
            return text
        value = extract_json(text)
        errors = sorted(self.validator.iter_errors(value), key=lambda e: list(e.absolute_path))
        if errors:
            violations = [
                {"pointer": "/" + "/".join(str(p) for p in e.absolute_path), "message": e.message}
                for e in errors
            ]
            raise LatticeRunError(
                f"output of {self.op.source_node!r} does not match its schema: "
                + "; ".join(f"{v['pointer']}: {v['message']}" for v in violations[:5]),
                error_type="schema_error",
                details={"violations": violations},
            )
        return value

    async def run(self, ctx: RunContext) -> Outcome:
        request = self.build_request(ctx)
        prompt_hash = request.prompt_hash()
        ctx.emit(
            "llm_request",
            {
                "model": request.model,
                "model_class": request.model_class,
                "prompt_hash": prompt_hash,
            },
        )
        response = await ctx.provider.complete(request)
        ctx.usage.add(response.model, request.model_class, response.usage)
        ctx.emit(
            "llm_response",
            {
                "model": response.model,
                "model_class": request.model_class,
                "prompt_hash": prompt_hash,
                "input_tokens": response.usage.input_tokens,
                "output_tokens": response.usage.output_tokens,
                "latency_ms": round(response.latency_ms, 3),
                "finish_reason": response.finish_reason,
            },
        )
        attempt = {
            "model": response.model,
            "model_class": request.model_class,
            "prompt_hash": prompt_hash,
            "messages": [{"role": m.role, "content": m.content} for m in request.messages],
            "completion": response.text,
            "input_tokens": response.usage.input_tokens,
            "output_tokens": response.usage.output_tokens,
        }
        try:
            value = self.parse(response.text)
        except LatticeRunError as exc:
            attempt["error"] = {"error_type": exc.error_type, "message": exc.message, **exc.details}
            exc.details.setdefault("attempts", [attempt])
            raise
        ctx.write_result(self.op.writes, value)
        return Outcome(output=value, record={"attempts": [attempt]})

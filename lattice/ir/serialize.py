"""(De)serialisation of ExecIR and the JSON Schema of ExecIR itself."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import jmespath
from jmespath.exceptions import JMESPathError
from pydantic import ValidationError

from lattice.errors import ErrorType, LatticeUserError
from lattice.ir.models import (
    IR_VERSION,
    AgentOp,
    AskOp,
    Condition,
    ContractOpBase,
    EndOp,
    ExecIR,
    ForEachOp,
    ForkOp,
    HttpCall,
    JoinOp,
    McpCall,
    Op,
    StateOp,
    SwitchOp,
    ToolCallOp,
    TransformOp,
)
from lattice.ir.templates import (
    Ref,
    StatePath,
    Template,
    TemplateSyntaxError,
    ValueTemplate,
    is_secret,
    iter_value_refs,
    parse_path,
    parse_template,
)
from lattice.patterns import pattern_problem
from lattice.schemas import schema_problems

SECRET_LANE = ("call.url", "call.headers", "call.query", "call.body", "reads[")
"""The fields of an HTTP TOOL_CALL op that may read ``$secrets`` (lowering's secret lane:
an httpRequest node's url, headers, query or body, and the op's reads)."""


def ir_to_dict(ir: ExecIR) -> dict[str, Any]:
    """The wire form: camelCase keys, ``id`` and ``kind`` first in each op, ``None`` fields omitted."""
    data = ir.model_dump(mode="json", by_alias=True, exclude_none=True)
    data["ops"] = {
        op_id: {"id": op["id"], "kind": op["kind"], **op} for op_id, op in data["ops"].items()
    }
    return data


def ir_to_json(ir: ExecIR) -> str:
    """Byte-stable JSON text of ``ir`` (same IR, same bytes), ending in a newline."""
    return json.dumps(ir_to_dict(ir), indent=2, ensure_ascii=False) + "\n"


def execir_digest(ir: ExecIR) -> str:
    """``sha256:<hex>`` of ``ir_to_json(ir)``: the digest a run folder records for its
    ``execir.json``; the same workflow lowered again has the same digest."""
    return "sha256:" + hashlib.sha256(ir_to_json(ir).encode("utf-8")).hexdigest()


def ir_from_json(text: str | bytes | dict[str, Any]) -> ExecIR:
    """Parse ExecIR from JSON text or a dict; a malformed IR is a LatticeUserError.

    Beyond its shape, the IR is held to what running it needs (``check_ir``): an IR file
    is input like a document, and a Runner built from it must not fail on a template,
    path, condition or schema it cannot read.
    """
    try:
        if isinstance(text, dict):
            ir = ExecIR.model_validate(text)
        else:
            ir = ExecIR.model_validate_json(text)
    except (ValidationError, RecursionError) as exc:
        reason = str(exc) if isinstance(exc, ValidationError) else "nested too deeply"
        raise LatticeUserError(
            f"not a valid ExecIR document: {reason}", error_type=ErrorType.INVALID_IR
        ) from None
    problems = check_ir(ir)
    if problems:
        raise LatticeUserError(
            "not a valid ExecIR document:\n  " + "\n  ".join(problems),
            error_type=ErrorType.INVALID_IR,
        )
    return ir


def check_ir(ir: ExecIR) -> list[str]:
    """Every problem that would stop a Runner from being built for ``ir`` or from walking
    it: another IR version, unknown entry, edge, branch, join, fork or body ops, templates,
    state paths, conditions, JMESPath expressions and JSON Schemas that do not compile,
    a schema ``$ref`` that leads outside its schema or to nothing, and ``$secrets`` read outside an HTTP call's url, headers, query or body (where
    lowering's ``secret-outside-lane`` keeps them). Each names the op and its field.
    Lowering never emits such an IR; an IR read from a file may hold anything."""
    problems: list[str] = []
    if ir.ir_version != IR_VERSION:
        problems.append(
            f"irVersion: {ir.ir_version!r}; this Lattice runs IR version {IR_VERSION!r} "
            "only: lower the document again"
        )
    if ir.entry not in ir.ops:
        problems.append(f"entry: no op {ir.entry!r}")
    try:
        _schema(ir.inputs_schema)()
    except (ValueError, RecursionError) as exc:
        reason = str(exc) if not isinstance(exc, RecursionError) else "nested too deeply"
        problems.append(f"inputsSchema: {reason}")
    for op_id, op in ir.ops.items():
        if op.id != op_id:
            problems.append(f"ops[{op_id!r}]: its id is {op.id!r}")
        for index, edge in enumerate(op.next):
            if edge.to not in ir.ops:
                problems.append(f"ops[{op_id!r}].next[{index}]: no op {edge.to!r}")
        problems += _links(ir, op_id, op)
        lane = isinstance(op, ToolCallOp) and isinstance(op.call, HttpCall)
        for field, check in _op_checks(op):
            try:
                compiled = check()
            except (TemplateSyntaxError, ValueError, RecursionError) as exc:
                reason = str(exc) if not isinstance(exc, RecursionError) else "nested too deeply"
                problems.append(f"ops[{op_id!r}].{field}: {reason}")
                continue
            if lane and field.startswith(SECRET_LANE):
                continue
            for ref in _refs(compiled):
                if is_secret(ref):
                    problems.append(
                        f"ops[{op_id!r}].{field}: {ref.text}: a secret may be read only in an "
                        "HTTP call's url, headers, query or body"
                    )
                    break
    return problems


def _links(ir: ExecIR, op_id: str, op: Op) -> list[str]:
    """What a FORK, JOIN or FOR_EACH op names that is not there (or not its partner)."""
    out: list[str] = []
    at = f"ops[{op_id!r}]"
    if isinstance(op, ForkOp):
        for index, branch in enumerate(op.branches):
            if branch not in ir.ops:
                out.append(f"{at}.branches[{index}]: no op {branch!r}")
        if op.join is not None:
            join = ir.ops.get(op.join)
            if not isinstance(join, JoinOp) or join.fork != op_id:
                out.append(f"{at}.join: no JOIN op {op.join!r} of this fork")
    elif isinstance(op, JoinOp):
        fork = ir.ops.get(op.fork)
        if not isinstance(fork, ForkOp) or fork.join != op_id:
            out.append(f"{at}.fork: no FORK op {op.fork!r} that joins here")
    elif isinstance(op, ForEachOp) and op.body not in ir.ops:
        out.append(f"{at}.body: no op {op.body!r}")
    return out


def _refs(compiled: object) -> tuple[Ref, ...]:
    """The refs of what a check compiled: a path, a text template or a value's refs."""
    if isinstance(compiled, StatePath):
        return (compiled,)
    if isinstance(compiled, Template):
        return compiled.refs
    if isinstance(compiled, tuple):
        return compiled
    return ()


def _path(text: str | None) -> Callable[[], object]:
    return lambda: parse_path(text) if text is not None else None


def _template(value: Any) -> Callable[[], object]:
    def check() -> tuple[Ref, ...]:
        ValueTemplate(value)
        return tuple(iter_value_refs(value))

    return check


def _schema(schema: dict[str, Any] | None) -> Callable[[], object]:
    def check() -> None:
        problems = schema_problems(schema) if schema is not None else ()
        if problems:
            where = "".join(f"/{part}" for part in problems[0].path)
            raise ValueError(f"{problems[0].message}" + (f" (at {where})" if where else ""))

    return check


TOOL_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,127}$|^mcp__[A-Za-z0-9_-]{1,120}__\*$|^\*$")
"""A tool name a model can be offered (Claude Code's ``Read``, ``mcp__server__tool``),
all of an MCP server's tools (``mcp__server__*``), or every tool granted (``*``)."""


def _tool_names(names: list[str]) -> Callable[[], object]:
    def check() -> None:
        for index, name in enumerate(names):
            if not TOOL_NAME.match(name):
                raise ValueError(f"[{index}]: {name!r} is not a tool name")
        if len(set(names)) != len(names):
            raise ValueError("a tool is named twice")

    return check


def _jmespath(expression: str) -> Callable[[], object]:
    def check() -> None:
        try:
            jmespath.compile(expression)
        except JMESPathError as exc:
            raise ValueError(f"invalid JMESPath: {exc}") from None

    return check


def _condition(condition: Condition) -> Callable[[], object]:
    def check() -> None:
        op, value = condition.op, condition.value
        if op == "matches":
            if not isinstance(value, str):
                raise ValueError("matches needs a regular expression")
            problem = pattern_problem(value)
            if problem is not None:
                raise ValueError(f"invalid regular expression: {problem}")
        elif op == "jmespath":
            if not isinstance(value, str):
                raise ValueError("jmespath needs an expression")
            _jmespath(value)()
        elif op in ("in", "not_in") and not isinstance(value, list):
            raise ValueError(f"{op} needs a list")
        elif op in ("gt", "ge", "lt", "le") and (
            not isinstance(value, int | float) or isinstance(value, bool)
        ):
            raise ValueError(f"{op} needs a number")

    return check


def _op_checks(op: Op) -> Iterator[tuple[str, Callable[[], object]]]:
    """``(field, check)`` for each part of ``op`` the runtime compiles."""
    for index, read in enumerate(op.reads):
        yield f"reads[{index}]", _path(read)
    if isinstance(op, EndOp):
        yield "output", _template(op.output)
    elif isinstance(op, ContractOpBase):
        yield "prompt", lambda: parse_template(op.prompt)
        yield "variables", _template(op.variables)
        for index, path in enumerate(op.context):
            yield f"context[{index}]", _path(path)
        yield "writes", _path(op.writes)
        yield "outputSchema", _schema(op.output_schema)
        if isinstance(op, AgentOp):
            yield "tools", _tool_names(op.tools)
    elif isinstance(op, SwitchOp):
        yield "input", _path(op.input)
        for index, case in enumerate(op.cases):
            yield f"cases[{index}].test", _condition(case.test)
    elif isinstance(op, StateOp):
        yield "variable", _path("$vars." + op.variable)
        yield "value", _template(op.value)
        yield "writes", _path(op.writes)
    elif isinstance(op, TransformOp):
        yield "expression", _jmespath(op.expression)
        yield "input", _path(op.input)
        yield "writes", _path(op.writes)
    elif isinstance(op, AskOp):
        yield "question", _template(op.question)
        yield "writes", _path(op.writes)
    elif isinstance(op, ToolCallOp):
        call = op.call
        yield "writes", _path(op.writes)
        yield "outputSchema", _schema(op.output_schema)
        if isinstance(call, HttpCall):
            yield "call.url", lambda: parse_template(call.url)
            yield "call.headers", _template(call.headers)
            yield "call.query", _template(call.query)
            yield "call.body", _template(call.body)
        elif isinstance(call, McpCall):
            yield "call.arguments", _template(call.arguments)
            yield "call.argumentsFrom", _path(call.arguments_from)
    elif isinstance(op, ForEachOp):
        yield "items", _template(op.items)
        yield "writes", _path(op.writes)


def execir_json_schema() -> dict[str, Any]:
    """JSON Schema (Draft 2020-12) of ExecIR, as serialised by ``ir_to_json``."""
    schema = ExecIR.model_json_schema(by_alias=True, mode="serialization")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = f"https://lattice.dev/schemas/execir-{IR_VERSION}.json"
    return schema

"""Lowerers of start, end, group, httpRequest, mcp, variableStore, dataTransform and subAgentFlow."""

from __future__ import annotations

import re
from typing import Any, ClassVar

import jmespath
from jmespath.exceptions import JMESPathError

from lattice.document.models import SEQUENTIAL_PORT, Node
from lattice.ir.models import (
    FAILED_PORT,
    Edge,
    EndOp,
    HttpCall,
    LLMWriteOp,
    McpCall,
    StartOp,
    StateOp,
    ToolCallOp,
    TransformOp,
)
from lattice.ir.templates import TemplateSyntaxError, parse_path, path_text
from lattice.lower.fields import get_choice, get_dict, get_number, get_schema, get_str
from lattice.lower.llm_nodes import llm_contract
from lattice.lower.registry import LoweringContext, NodeLowering

TOOL_PORTS = [SEQUENTIAL_PORT, FAILED_PORT]
HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
HTTP_RESULT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"status": {"type": "integer"}, "headers": {"type": "object"}, "body": {}},
}
VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*\Z")


class StartLowerer:
    """``start``: START; ``data.inputs`` is the JSON Schema of ``$in``."""

    node_type: ClassVar[str] = "start"

    def ports(self, node: Node) -> list[str]:
        return [SEQUENTIAL_PORT]

    def lower(self, node: Node, ctx: LoweringContext) -> NodeLowering:
        schema = get_schema(ctx, node, "inputs")
        op = StartOp(id=node.id, source_node=node.id, name=node.title)
        return NodeLowering.single(op, result_schema=schema, produces=())


class EndLowerer:
    """``end``: END; ``data.output`` (template or ``$``-path) selects the run output."""

    node_type: ClassVar[str] = "end"

    def ports(self, node: Node) -> list[str]:
        return []

    def lower(self, node: Node, ctx: LoweringContext) -> NodeLowering:
        output = node.data.get("output")
        reads = ctx.use_template(node, output, "data", "output") if output is not None else []
        op = EndOp(id=node.id, source_node=node.id, name=node.title, output=output, reads=reads)
        return NodeLowering.single(op, ports=(), produces=())


class GroupLowerer:
    """``group``: a visual frame; lowers to nothing."""

    node_type: ClassVar[str] = "group"

    def ports(self, node: Node) -> list[str]:
        return []

    def lower(self, node: Node, ctx: LoweringContext) -> NodeLowering:
        return NodeLowering(produces=())


class HttpRequestLowerer:
    """``httpRequest``: TOOL_CALL (http) writing ``{status, headers, body}``."""

    node_type: ClassVar[str] = "httpRequest"

    def ports(self, node: Node) -> list[str]:
        return TOOL_PORTS

    def lower(self, node: Node, ctx: LoweringContext) -> NodeLowering:
        method = get_choice(ctx, node, "method", HTTP_METHODS, default="GET", fold=str.upper)
        url = get_str(ctx, node, "url", required=True) or ""
        headers = get_dict(ctx, node, "headers") or {}
        for key, value in headers.items():
            if not isinstance(value, str):
                ctx.error(
                    node, "invalid-field", "header values are strings", "data", "headers", key
                )
        query = get_dict(ctx, node, "query") or {}
        body = node.data.get("body")
        response_type = get_choice(
            ctx, node, "responseType", ("json", "text", "auto"), default="auto"
        )
        # The secret lane: what these four hold leaves the process for the destination.
        reads = ctx.use_text(node, url, "data", "url", secrets=True)
        reads += ctx.use_template(node, headers, "data", "headers", secrets=True)
        reads += ctx.use_template(node, query, "data", "query", secrets=True)
        reads += ctx.use_template(node, body, "data", "body", secrets=True)
        schema = get_schema(ctx, node, "outputSchema")
        call = HttpCall(
            method=method,  # type: ignore[arg-type]
            url=url,
            headers={k: v for k, v in headers.items() if isinstance(v, str)},
            query=query,
            body=body,
            timeout_ms=get_number(ctx, node, "timeoutMs", integer=True, minimum=1),
            response_type=response_type,  # type: ignore[arg-type]
        )
        op = ToolCallOp(
            id=node.id,
            source_node=node.id,
            name=node.title,
            call=call,
            output_schema=schema,
            writes=path_text("$vars", node.id, "result"),
            reads=sorted(set(reads)),
        )
        result_schema = dict(HTTP_RESULT_SCHEMA)
        if schema is not None:
            result_schema = {
                **HTTP_RESULT_SCHEMA,
                "properties": {**HTTP_RESULT_SCHEMA["properties"], "body": schema},
            }
        return NodeLowering.single(op, ports=TOOL_PORTS, result_schema=result_schema)


_JSON_TYPES = {"string", "number", "integer", "boolean", "array", "object"}


def parameters_schema(parameters: Any) -> dict[str, Any]:
    """A JSON Schema from cc-wf-studio's ``parameters`` list (the server's own schema wins at run time)."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    for param in parameters if isinstance(parameters, list) else []:
        if not isinstance(param, dict) or not isinstance(param.get("name"), str):
            continue
        prop: dict[str, Any] = {}
        kind = param.get("type")
        if isinstance(kind, str) and kind in _JSON_TYPES:
            prop["type"] = kind
        if isinstance(param.get("description"), str):
            prop["description"] = param["description"]
        properties[param["name"]] = prop
        if param.get("required") is True and param["name"] not in required:
            required.append(param["name"])
    return {"type": "object", "properties": properties, "required": required}


LEGACY_MCP_MODES = {
    "detailed": "manualParameterConfig",
    "naturalLanguageParam": "aiParameterConfig",
    "fullNaturalLanguage": "aiToolSelection",
}
"""The mcp ``mode`` names of older files, as upstream's editor maps them when it loads one."""


class McpLowerer:
    """``mcp``: TOOL_CALL; AI modes put an LLM_WRITE (arguments or tool choice) before it."""

    node_type: ClassVar[str] = "mcp"

    def ports(self, node: Node) -> list[str]:
        return TOOL_PORTS

    def lower(self, node: Node, ctx: LoweringContext) -> NodeLowering:
        server_id = get_str(ctx, node, "serverId", required=True) or ""
        tool_name = get_str(ctx, node, "toolName")
        mode = get_str(ctx, node, "mode") or (
            "manualParameterConfig" if tool_name else "aiToolSelection"
        )
        mode = LEGACY_MCP_MODES.get(mode, mode)
        if mode not in ("manualParameterConfig", "aiParameterConfig", "aiToolSelection"):
            ctx.error(
                node,
                "invalid-field",
                "data.mode must be manualParameterConfig, aiParameterConfig or aiToolSelection",
                "data",
                "mode",
            )
            mode = "manualParameterConfig"
        if mode != "aiToolSelection" and not tool_name:
            ctx.error(node, "missing-field", f"mcp node in {mode} mode needs data.toolName", "data")
        if mode == "manualParameterConfig":
            arguments = get_dict(ctx, node, "parameterValues") or {}
            reads = ctx.use_template(node, arguments, "data", "parameterValues")
            call = McpCall(
                server_id=server_id,
                tool_name=tool_name,
                arguments=arguments,
                mode="manualParameterConfig",
            )
            op = ToolCallOp(
                id=node.id,
                source_node=node.id,
                name=node.title,
                call=call,
                writes=path_text("$vars", node.id, "result"),
                reads=sorted(set(reads)),
            )
            return NodeLowering.single(op, ports=TOOL_PORTS)
        return self._lower_ai(node, ctx, server_id, tool_name, mode)

    # long: an AI mode's LLM op and the tool call it feeds, built in order
    def _lower_ai(
        self, node: Node, ctx: LoweringContext, server_id: str, tool_name: str | None, mode: str
    ) -> NodeLowering:
        contract = llm_contract(ctx, node)
        # Document text built into the prompt is a template at run time: each piece is
        # checked (and its references recorded) where it is written.
        mark = ctx.template_errors
        piece_reads = ctx.use_text(node, repr(server_id), "data", "serverId")
        if mode == "aiParameterConfig":
            config = get_dict(ctx, node, "aiParameterConfig") or {}
            task = config.get("description") if isinstance(config.get("description"), str) else ""
            description = node.data.get("toolDescription")
            piece_reads += ctx.use_text(node, repr(tool_name), "data", "toolName")
            if isinstance(description, str):
                piece_reads += ctx.use_text(node, description, "data", "toolDescription")
            if task:
                piece_reads += ctx.use_text(node, task, "data", "aiParameterConfig", "description")
            prompt = (
                f"Produce the arguments for the MCP tool {tool_name!r} of server {server_id!r}"
                + (f" ({description})" if isinstance(description, str) else "")
                + (f".\nTask: {task}" if task else ".")
            )
            self._check_parameters(ctx, node)
            contract["output_schema"] = parameters_schema(node.data.get("parameters"))
            purpose = "tool_arguments"
        else:
            config = get_dict(ctx, node, "aiToolSelectionConfig") or {}
            task = (
                config.get("taskDescription")
                if isinstance(config.get("taskDescription"), str)
                else ""
            )
            if task:
                piece_reads += ctx.use_text(
                    node, task, "data", "aiToolSelectionConfig", "taskDescription"
                )
            prompt = (
                f"Choose one tool of MCP server {server_id!r} and its arguments for this task."
                + (f"\nTask: {task}" if task else "")
            )
            contract["output_schema"] = {
                "type": "object",
                "properties": {"tool": {"type": "string"}, "arguments": {"type": "object"}},
                "required": ["tool", "arguments"],
                "additionalProperties": False,
            }
            purpose = "tool_selection"
        ctx.check_prompt(node, prompt, "data", since=mark)
        context = ctx.upstream_results(node.id)
        args_path = path_text("$vars", node.id, "arguments")
        llm = LLMWriteOp(
            id=node.id,
            source_node=node.id,
            name=node.title,
            purpose=purpose,  # type: ignore[arg-type]
            tool_server=server_id,
            tool_name=tool_name if mode == "aiParameterConfig" else None,
            prompt=prompt,
            context=context,
            writes=args_path,
            reads=context + [r for r in dict.fromkeys(piece_reads) if r not in context],
            **contract,
        )
        call = McpCall(
            server_id=server_id,
            tool_name=tool_name,
            arguments_from=args_path,
            mode=mode,  # type: ignore[arg-type]
        )
        tool = ToolCallOp(
            id=node.id + "#call",
            source_node=node.id,
            name=node.title,
            call=call,
            writes=path_text("$vars", node.id, "result"),
            reads=[args_path],
        )
        llm.next.append(Edge(to=tool.id))
        exits = {
            SEQUENTIAL_PORT: [(tool.id, SEQUENTIAL_PORT)],
            FAILED_PORT: [(llm.id, FAILED_PORT), (tool.id, FAILED_PORT)],
        }
        return NodeLowering(
            ops=[llm, tool], entry=llm.id, exits=exits, produces=("result", "arguments")
        )

    @staticmethod
    def _check_parameters(ctx: LoweringContext, node: Node) -> None:
        """cc-wf-studio's ``parameters``: a list of ``{name, type?, description?, required?}``."""
        parameters = node.data.get("parameters")
        if parameters is None:
            return
        if not isinstance(parameters, list):
            ctx.error(node, "invalid-field", "data.parameters must be a list", "data", "parameters")
            return
        seen: set[str] = set()
        for i, param in enumerate(parameters):
            if not isinstance(param, dict) or not isinstance(param.get("name"), str):
                continue  # skipped, as cc-wf-studio files carry odd entries
            if param["name"] in seen:
                ctx.error(
                    node,
                    "invalid-field",
                    f"parameter {param['name']!r} is listed twice",
                    "data",
                    "parameters",
                    i,
                    "name",
                )
            seen.add(param["name"])
            kind = param.get("type")
            if kind is not None and not isinstance(kind, str):
                ctx.error(
                    node,
                    "invalid-field",
                    f"a parameter's type is a string ({', '.join(sorted(_JSON_TYPES))})",
                    "data",
                    "parameters",
                    i,
                    "type",
                )


class VariableStoreLowerer:
    """``variableStore``: STATE on ``$vars.<name>`` (set/get/append/increment/delete)."""

    node_type: ClassVar[str] = "variableStore"
    operations = ("set", "get", "append", "increment", "delete")

    def ports(self, node: Node) -> list[str]:
        return [SEQUENTIAL_PORT]

    def lower(self, node: Node, ctx: LoweringContext) -> NodeLowering:
        operation = get_choice(
            ctx, node, "operation", self.operations, default="set", required=True
        )
        name = get_str(ctx, node, "name", required=True) or ""
        if name and not VARIABLE_NAME.match(name):
            ctx.error(
                node,
                "invalid-field",
                "data.name must be a plain name (letters, digits, _ and -, not starting with a digit)",
                "data",
                "name",
            )
        value = node.data.get("value")
        if (
            operation == "increment"
            and value is not None
            and not isinstance(value, str)
            and (not isinstance(value, int | float) or isinstance(value, bool))
        ):
            ctx.error(
                node,
                "invalid-field",
                "increment needs a numeric data.value (the step)",
                "data",
                "value",
            )
        reads = ctx.use_template(node, value, "data", "value") if value is not None else []
        if operation in ("get", "increment", "delete"):  # append records only the item
            reads.append(path_text("$vars", name))
        op = StateOp(
            id=node.id,
            source_node=node.id,
            name=node.title,
            operation=operation,  # type: ignore[arg-type]
            variable=name,
            value=value,
            writes=path_text("$vars", node.id, "result") if operation == "get" else None,
            reads=reads,
        )
        return NodeLowering.single(op, produces=("result",) if operation == "get" else ())


class DataTransformLowerer:
    """``dataTransform``: TRANSFORM with a JMESPath expression (compiled now to report errors)."""

    node_type: ClassVar[str] = "dataTransform"

    def ports(self, node: Node) -> list[str]:
        return [SEQUENTIAL_PORT, FAILED_PORT]

    def lower(self, node: Node, ctx: LoweringContext) -> NodeLowering:
        expression = get_str(ctx, node, "expression", required=True) or ""
        if expression:
            try:
                jmespath.compile(expression)
            except JMESPathError as exc:
                ctx.error(
                    node,
                    "jmespath-invalid",
                    f"invalid JMESPath expression: {exc}",
                    "data",
                    "expression",
                )
            except RecursionError:
                ctx.error(
                    node,
                    "jmespath-invalid",
                    "the JMESPath expression is nested too deeply to compile",
                    "data",
                    "expression",
                )
        source = get_str(ctx, node, "input")
        reads: list[str] = []
        if source is not None:
            try:
                source = parse_path(source).text
                reads = ctx.use_template(node, source, "data", "input")
            except TemplateSyntaxError as exc:
                ctx.error(node, "template-syntax", str(exc), "data", "input")
                source = None
        op = TransformOp(
            id=node.id,
            source_node=node.id,
            name=node.title,
            expression=expression,
            input=source,
            writes=path_text("$vars", node.id, "result"),
            reads=reads,
        )
        return NodeLowering.single(op, ports=[SEQUENTIAL_PORT, FAILED_PORT])


class SubAgentFlowLowerer:
    """``subAgentFlow``: inlined before lowering (see ``lattice.lower.subflows``).

    A node that reaches this lowerer references a flow that does not exist.
    """

    node_type: ClassVar[str] = "subAgentFlow"

    def ports(self, node: Node) -> list[str]:
        return [SEQUENTIAL_PORT]

    def lower(self, node: Node, ctx: LoweringContext) -> NodeLowering:
        flow_id = get_str(ctx, node, "subAgentFlowId", required=True)
        if flow_id:
            ctx.error(
                node,
                "subflow-unknown",
                f"no subAgentFlow with id {flow_id!r}{ctx.suggest_flow(flow_id)}",
                "data",
                "subAgentFlowId",
            )
        return NodeLowering(produces=())

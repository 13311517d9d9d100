"""``lattice mock init``: a mock script (and answers file) for a workflow."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from lattice.cli.common import config_with_grants, lower_for_cli, note
from lattice.cli.main import EXIT_OK, EXIT_USAGE
from lattice.config import LatticeConfig, load_config
from lattice.errors import LatticeRunError
from lattice.files import write_output_file
from lattice.ir.models import ExecIR
from lattice.runtime.settings import agent_settings_from_config
from lattice.service.mocks import MockPlan, ToolSchemas, needs_mcp, plan_mocks
from lattice.tools.builtin import BuiltinTools
from lattice.tools.mcp import BUILTIN_SERVER_ID, McpServerSpec, ToolSessions, specs_from_config


def _dump(data: object) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def init(args: argparse.Namespace) -> int:
    config = config_with_grants(load_config(args.config), args)
    result = lower_for_cli(args.workflow, config)
    if result.ir is None:
        return EXIT_USAGE
    ir = result.ir
    grant = agent_settings_from_config(config).grant
    plan = plan_mocks(ir, _configured_tool_schemas(ir, config), grant)
    script, answers = plan.script, plan.answers
    answers_path = args.answers_output
    if answers and answers_path is None and args.output:
        name = Path(args.output).name.removesuffix(".json").removesuffix(".mock")
        answers_path = str(Path(args.output).with_name(f"{name}.answers.json"))
    if args.output:
        write_output_file(Path(args.output), _dump(script))
        tools = len(script.get("tools", {}))
        note(f"wrote {args.output}: {len(script['responses'])} LLM node(s), {tools} tool node(s)")
    else:
        sys.stdout.write(_dump(script))
    if answers_path:
        write_output_file(Path(answers_path), _dump(answers))
        note(f"wrote {answers_path}: {len(answers)} question(s)")
    elif answers:
        note(f"the workflow asks {len(answers)} question(s): add --answers-output FILE")
    _note_choices(plan)
    mock = args.output or "MOCK_FILE"
    extra = f" --answers {answers_path}" if answers_path else ""
    extra += _grant_hint(args)
    note(
        f"run it: lattice run {args.workflow} --mock {mock}{extra}{_inputs_hint(args.workflow, ir)}"
    )
    return EXIT_OK


def _grant_hint(args: argparse.Namespace) -> str:
    """The grant flags the script was made for (its agents' tool calls need them)."""
    hint = f" --workspace {args.workspace}" if args.workspace else ""
    hint += "".join(f" --allow {allow}" for allow in args.allow or ())
    hint += "".join(f" --allow-mcp {server}" for server in args.allow_mcp or ())
    return hint + (" --patch-only" if args.patch_only else "")


def _inputs_hint(workflow: str, ir: ExecIR) -> str:
    """The inputs a run needs: the example inputs file beside the workflow when there is
    one, else an ``--input NAME=…`` per required input without a default."""
    schema = ir.inputs_schema or {}
    properties = schema.get("properties") or {}
    needed = [
        name
        for name in schema.get("required") or []
        if not (isinstance(properties.get(name), dict) and "default" in properties[name])
    ]
    if not needed:
        return ""
    beside = Path(workflow).with_name(Path(workflow).name.removesuffix(".json") + ".inputs.json")
    if beside.is_file():
        return f" --inputs {beside}"
    return "".join(f" --input {name}=…" for name in needed)


def _note_choices(plan: MockPlan) -> None:
    """Say which branch each classifier and question takes, and why."""
    for choice in plan.choices:
        if len(choice.labels) < 2:
            continue
        how = (
            f"the shortest way to an end ({choice.steps:g} op(s))"
            if choice.steps != float("inf")
            else "no branch reaches an end"
        )
        note(f"{choice.node}: answers {choice.label!r} of {len(choice.labels)}: {how}")


def _configured_tool_schemas(ir: ExecIR, config: LatticeConfig) -> ToolSchemas:
    """The input schemas of the tools of every configured MCP server the document calls
    (each server is asked once, then closed); a server that cannot be asked is named and
    left out (its nodes' own ``parameters`` shape the answers)."""
    specs = specs_from_config(config.mcp.servers)
    servers = [s for s in needs_mcp(ir) if s in specs or s == BUILTIN_SERVER_ID]
    return asyncio.run(_list_schemas(specs, servers)) if servers else {}


async def _list_schemas(specs: dict[str, McpServerSpec], servers: list[str]) -> ToolSchemas:
    schemas: dict[str, dict[str, dict[str, object]]] = {}
    sessions = ToolSessions(specs, builtin=BuiltinTools(repo_root=None))
    try:
        for server in servers:
            try:
                tools = await sessions.list_tools(server)
            except LatticeRunError as exc:
                note(f"could not list the tools of MCP server {server!r}: {exc.message}")
                continue
            schemas[server] = {tool.name: tool.input_schema for tool in tools}
            note(f"asked MCP server {server!r} for its tools: arguments follow their inputSchema")
    finally:
        await sessions.aclose()
    return schemas

"""``lattice lower``, ``check``, ``schema``, ``hash-prompt`` and ``config show``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from lattice.cli.common import config_with_grants, lower_for_cli
from lattice.cli.main import EXIT_OK, EXIT_USAGE
from lattice.config import load_config
from lattice.files import write_output_file
from lattice.ir import execir_json_schema
from lattice.ir.models import AgentOp
from lattice.ir.tool_names import parse_mcp_name
from lattice.llm.base import LLMRequest, Message
from lattice.lower.acting import Toolless, toolless_nodes
from lattice.lower.emit import EMITTERS
from lattice.lower.main_agent import under_grant
from lattice.permissions.policy import Permissions
from lattice.runtime.settings import agent_settings_from_config
from lattice.workspace.grants import ASK_TOOL, EVERY_TOOL, WorkspaceGrant


def lower(args: argparse.Namespace) -> int:
    result = lower_for_cli(args.workflow, load_config(args.config))
    if result.ir is None:
        return EXIT_USAGE
    for line in result.ir.workflow.notes or ():
        print(f"{args.workflow}: note: {line}", file=sys.stderr)
    text = EMITTERS[args.emit](result.ir)
    if args.output:
        write_output_file(Path(args.output), text)
    else:
        sys.stdout.write(text)
    return EXIT_OK


def check(args: argparse.Namespace) -> int:
    config = config_with_grants(load_config(args.config), args)
    result = lower_for_cli(args.workflow, config)
    if result.ir is None:
        print(
            f"{args.workflow}: {len(result.errors)} error(s), {len(result.warnings)} warning(s)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    for line in result.ir.workflow.notes or ():
        print(f"{args.workflow}: note: {line}", file=sys.stderr)
    ops = len(result.ir.ops)
    print(f"{args.workflow}: ok ({ops} ops, {len(result.warnings)} warning(s))", file=sys.stderr)
    settings = agent_settings_from_config(config)
    grant = settings.grant
    ir = under_grant(result.ir, grant)
    agents = [op for op in ir.ops.values() if isinstance(op, AgentOp)]
    if agents:
        sys.stdout.write(agent_listing(agents, grant, settings.permissions))
    toolless = toolless_nodes(ir, grant)
    if toolless:
        sys.stdout.write(toolless_listing(toolless))
    return EXIT_OK


def toolless_listing(nodes: list[Toolless]) -> str:
    """The nodes Claude Code would run with tools that a run with this grant runs
    without them, and what would grant them."""
    lines = ["without tools in this run (Claude Code would give them tools):"]
    for item in nodes:
        said = f" asks to act: {', '.join(repr(w) for w in item.words)}" if item.words else ""
        lines.append(f"  {item.node} ({item.kind}){said}")
        lines.append(f"    to grant: {item.grant}")
    return "\n".join(lines) + "\n"


ASKED_AS = {EVERY_TOOL: f"every tool of the main agent ({EVERY_TOOL})"}
SAID = {"allow": "allowed", "ask": "asks", "deny": "denied", "depends": "depends"}
"""How ``lattice check`` says what a tool's calls get."""


def agent_listing(
    agents: list[AgentOp], grant: WorkspaceGrant, permissions: Permissions | None = None
) -> str:
    """Per agent node: the tools it asks for, those granted, what would grant the rest,
    and for each granted tool whether its calls run, ask or are refused, and by what."""
    lines = [f"agent nodes ({grant.describe()}):"]
    if permissions is not None and not permissions.said_nothing:
        lines.append(f"  {permissions.describe()}")
        lines.extend(f"  note: {note}" for note in permissions.notes)
    for op in agents:
        decision = grant.decide(op.tools)
        kind = f" ({op.agent_type})" if op.agent_type else ""
        lines.append(f"  {op.source_node}{kind}")
        asked = [ASKED_AS.get(tool, tool) for tool in op.tools]
        lines.append(f"    asks for: {', '.join(asked) or 'no tools'}")
        granted = [_granted_as(tool, grant) for tool in decision.granted]
        lines.append(f"    granted:  {', '.join(granted) or 'none'}")
        if permissions is not None and not permissions.said_nothing:
            width = max((len(tool) for tool in decision.granted), default=0)
            for tool in decision.granted:
                said, why = (
                    ("allow", "asking the person needs no permission")
                    if tool == ASK_TOOL
                    else permissions.tool_summary(tool)
                )
                lines.append(f"      {tool:<{width}}  {SAID[said]}: {why}")
        by_setting: dict[str, list[str]] = {}
        for tool, setting in decision.refused:
            by_setting.setdefault(setting, []).append(tool)
        for setting, tools in by_setting.items():
            lines.append(f"    not granted: {', '.join(tools)} (to grant: {setting})")
    return "\n".join(lines) + "\n"


def _granted_as(tool: str, grant: WorkspaceGrant) -> str:
    """A granted tool name; a whole MCP server asked for and granted in part says which part."""
    mcp = parse_mcp_name(tool)
    if mcp is None or mcp[1] is not None:
        return tool
    allowed = grant.mcp_tools(mcp[0])
    if allowed is None:
        return tool
    return f"{tool} (only {', '.join(f'mcp__{mcp[0]}__{name}' for name in sorted(allowed))})"


def schema(args: argparse.Namespace) -> int:
    sys.stdout.write(json.dumps(execir_json_schema(), indent=2) + "\n")
    return EXIT_OK


def hash_prompt(args: argparse.Namespace) -> int:
    """Hash a prompt read from stdin: a JSON request object, or plain text as one user message."""
    text = sys.stdin.read()
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        data = None
    if isinstance(data, dict) and isinstance(data.get("messages"), list):
        request = LLMRequest(
            messages=tuple(Message(m["role"], m["content"]) for m in data["messages"]),
            model_class=data.get("model_class", "default"),
            temperature=data.get("temperature", 0.0),
            top_p=data.get("top_p"),
            max_tokens=data.get("max_tokens"),
            response_schema=data.get("schema"),
        )
    else:
        request = LLMRequest(messages=(Message("user", text),), model_class=args.model_class)
    print(request.prompt_hash())
    return EXIT_OK


def show_config(args: argparse.Namespace) -> int:
    sys.stdout.write(json.dumps(load_config(args.config).shown(), indent=2) + "\n")
    return EXIT_OK

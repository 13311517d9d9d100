"""The ``lattice`` command.

Exit codes: 0 completed, 1 run failed, 2 bad usage or invalid document,
3 halted waiting for a human. Only argparse is imported at start-up; each
command imports what it needs, so ``lattice --help`` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lattice.config import LatticeConfig
    from lattice.errors import Diagnostic
    from lattice.lower.compiler import LoweringResult

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_HALTED = 0, 1, 2, 3
EXIT_BY_STATUS = {"completed": EXIT_OK, "failed": EXIT_FAILED, "halted": EXIT_HALTED}
CONFIG_HELP = (
    "lattice.toml (default: $LATTICE_CONFIG, ./lattice.toml); with one, mcp nodes must name "
    "servers it configures"
)


def _print_diagnostics(diagnostics: Sequence[Diagnostic], source: str | None) -> None:
    for diagnostic in diagnostics:
        print(diagnostic.format(source), file=sys.stderr)


def _lower_for_cli(path: str, config: LatticeConfig | None = None) -> LoweringResult:
    """Lower ``path``, printing its diagnostics. With a config read from a file, mcp nodes
    must name servers it declares."""
    from lattice.lower import lower_document

    servers = list(config.mcp.servers) if config is not None and config.source else None
    result = lower_document(Path(path), mcp_servers=servers)
    _print_diagnostics(result.diagnostics, path)
    return result


def cmd_lower(args: argparse.Namespace) -> int:
    from lattice.config import load_config
    from lattice.lower.emit import EMITTERS

    result = _lower_for_cli(args.workflow, load_config(args.config))
    if result.ir is None:
        return EXIT_USAGE
    text = EMITTERS[args.emit](result.ir)
    if args.output:
        from lattice.runtime.files import atomic_write_text

        atomic_write_text(Path(args.output), text)
    else:
        sys.stdout.write(text)
    return EXIT_OK


def cmd_check(args: argparse.Namespace) -> int:
    from lattice.config import load_config

    result = _lower_for_cli(args.workflow, load_config(args.config))
    if result.ir is None:
        print(
            f"{args.workflow}: {len(result.errors)} error(s), {len(result.warnings)} warning(s)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    ops = len(result.ir.ops)
    print(f"{args.workflow}: ok ({ops} ops, {len(result.warnings)} warning(s))", file=sys.stderr)
    return EXIT_OK


def cmd_schema(args: argparse.Namespace) -> int:
    import json

    from lattice.ir import execir_json_schema

    sys.stdout.write(json.dumps(execir_json_schema(), indent=2) + "\n")
    return EXIT_OK


def cmd_hash_prompt(args: argparse.Namespace) -> int:
    """Hash a prompt read from stdin: a JSON request object, or plain text as one user message."""
    import json

    from lattice.llm.base import LLMRequest, Message

    text = sys.stdin.read()
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
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


def cmd_config(args: argparse.Namespace) -> int:
    import json

    from lattice.config import load_config

    sys.stdout.write(json.dumps(load_config(args.config).shown(), indent=2) + "\n")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lattice",
        description="Compile and run LLM workflows under contracts.",
    )
    parser.add_argument("--version", action="version", version="lattice 0.1.0")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("lower", help="lower a workflow document to ExecIR (or Mermaid / DOT)")
    p.add_argument("workflow", help="workflow document (JSON)")
    p.add_argument("--emit", choices=["execir", "mermaid", "dot"], default="execir")
    p.add_argument("-o", "--output", help="write to FILE instead of stdout")
    p.add_argument("--config", metavar="FILE", help=CONFIG_HELP)
    p.set_defaults(handler=cmd_lower)

    p = sub.add_parser("check", help="check a workflow document and print its diagnostics")
    p.add_argument("workflow", help="workflow document (JSON)")
    p.add_argument("--config", metavar="FILE", help=CONFIG_HELP)
    p.set_defaults(handler=cmd_check)

    p = sub.add_parser("hash-prompt", help="print the prompt hash of a request read from stdin")
    p.add_argument(
        "--model-class", default="default", help="for plain-text input (default: default)"
    )
    p.set_defaults(handler=cmd_hash_prompt)

    p = sub.add_parser("config", help="show the effective configuration (secrets masked)")
    p.add_argument("action", choices=["show"])
    p.add_argument("--config", metavar="FILE")
    p.set_defaults(handler=cmd_config)

    p = sub.add_parser("schema", help="print the JSON Schema of ExecIR")
    p.set_defaults(handler=cmd_schema)

    from lattice.cli_run import add_run_commands

    add_run_commands(sub)
    from lattice.cli_export import add_export_commands

    add_export_commands(sub)
    from lattice.cli_plan import add_plan_commands

    add_plan_commands(sub)
    from lattice.cli_mcp import add_mcp_commands

    add_mcp_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``lattice`` console script; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    from lattice.errors import DocumentError, LatticeRunError, LatticeUserError

    handler: Any = args.handler
    try:
        return int(handler(args))
    except DocumentError as exc:
        _print_diagnostics(exc.diagnostics, exc.source)
        return EXIT_USAGE
    except LatticeUserError as exc:
        print(f"lattice: error[{exc.error_type}]: {exc.message}", file=sys.stderr)
        return EXIT_USAGE
    except LatticeRunError as exc:
        print(f"lattice: run failed [{exc.error_type}]: {exc.message}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("lattice: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())

"""``lattice export sft``: training examples (JSONL) from run folders (see docs/export.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def cmd_export_sft(args: argparse.Namespace) -> int:
    from lattice.cli_run import secret_redactor
    from lattice.export import ExportStats, export_examples, to_jsonl

    stats = ExportStats()
    text = to_jsonl(
        export_examples(
            [Path(p) for p in args.run_dirs],
            fmt=args.format,
            nodes=set(args.node),
            include_repaired=args.include_repaired,
            only_completed=args.only_completed,
            stats=stats,
        ),
        redact=secret_redactor(),
    )
    if args.output and args.output != "-":
        from lattice.runtime.files import atomic_write_text

        atomic_write_text(Path(args.output), text)
        where = f" to {args.output}"
    else:
        sys.stdout.write(text)
        where = ""
    print(f"lattice: exported {stats.summary()}{where}", file=sys.stderr)
    return 0


def add_export_commands(sub: Any) -> None:
    p = sub.add_parser("export", help="export training data from run folders")
    export_sub = p.add_subparsers(dest="export_kind", metavar="KIND", required=True)
    p = export_sub.add_parser(
        "sft",
        help="one chat example per accepted LLM op (JSONL)",
        description="One example per accepted LLM op of the given runs: the op's original "
        "prompt and its final valid output. RUN_DIR is a run folder or a folder of runs.",
    )
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run folder(s) or runs/")
    p.add_argument("-o", "--output", metavar="FILE", help="write JSONL here (default: stdout)")
    p.add_argument(
        "--node",
        action="append",
        default=[],
        metavar="NODE",
        help="only ops of this node (repeatable)",
    )
    p.add_argument(
        "--include-repaired",
        action="store_true",
        help="also ops that needed a repair or an escalation (default: valid at the first answer)",
    )
    p.add_argument(
        "--only-completed", action="store_true", help="only runs whose status is completed"
    )
    p.add_argument(
        "--format",
        choices=["chat", "validator"],
        default="chat",
        help="chat: {messages, meta}; validator: labelled ValidatorDecision examples",
    )
    p.set_defaults(handler=cmd_export_sft)

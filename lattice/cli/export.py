"""``lattice export sft``: training examples (JSONL) from run folders (see docs/export.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lattice.cli.common import note
from lattice.config import load_config
from lattice.errors import LatticeUserError
from lattice.files import write_output_file
from lattice.runs.export import ExportStats, export_examples, to_jsonl
from lattice.runs.redaction import Redactor, make_redactor
from lattice.runtime.settings import settings_from_config


def _default_redactor() -> Redactor:
    """Masks provider API keys, allowed secrets and the variables MCP servers' ``env``
    passes on, per the default config (export runs nothing, so it has no run settings)."""
    try:
        names = settings_from_config(load_config()).secret_names()
    except LatticeUserError:
        names = ()
    return make_redactor(names)


def export_sft(args: argparse.Namespace) -> int:
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
        redact=_default_redactor(),
    )
    if args.output and args.output != "-":
        write_output_file(Path(args.output), text)
        where = f" to {args.output}"
    else:
        sys.stdout.write(text)
        where = ""
    note(f"exported {stats.summary()}{where}")
    return 0

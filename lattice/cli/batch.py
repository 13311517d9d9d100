"""``lattice batch`` (a workflow over a dataset) and ``lattice batch diff`` (two results files)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from lattice.batch.diff import diff_batches
from lattice.batch.engine import BatchOptions, BatchRun
from lattice.batch.limits import BatchLimits
from lattice.batch.rows import InvalidLine
from lattice.cli.common import config_with_grants, lower_for_cli, note
from lattice.cli.main import EXIT_INTERRUPTED, EXIT_USAGE
from lattice.config import load_config
from lattice.document.loader import read_json_file
from lattice.errors import LatticeError
from lattice.runtime.settings import agent_settings_from_config
from lattice.runtime.sync import run_sync
from lattice.workspace.grants import refused_tools

SHOWN_INVALID = 20
"""Invalid input lines printed one by one (the rest are counted; --summary-json lists all)."""


def batch(args: argparse.Namespace) -> int:
    config = config_with_grants(load_config(args.config), args)
    lowered = lower_for_cli(args.workflow, config)
    if lowered.ir is None:
        return EXIT_USAGE
    for refused in refused_tools(lowered.ir, agent_settings_from_config(config).grant):
        note(f"warning: {refused.message()}")
    shown = 0

    def on_invalid(item: InvalidLine) -> None:
        nonlocal shown
        shown += 1
        if shown <= SHOWN_INVALID:
            note(f"skipped {item.describe(args.inputs)}")
        elif shown == SHOWN_INVALID + 1:
            note("skipped more lines (the summary counts them; --summary-json lists them)")

    options = BatchOptions(
        workflow=lowered.ir,
        document=read_json_file(Path(args.workflow)),
        inputs=args.inputs,
        output=args.output,
        concurrency=args.concurrency,
        runs_dir=None if args.no_record else args.runs_dir,
        provider=args.provider,
        mock=args.mock,
        mock_latency=args.mock_latency_ms / 1000,
        fixtures=args.fixtures,
        record=args.record,
        config=config,
        durability=args.durability,
        answers=args.answers,
        retry_failed=args.retry_failed,
        max_calls=args.max_calls,
        max_tokens_total=args.max_tokens_total,
        max_steps=args.max_steps,
        max_visits=args.max_visits,
        repo=args.repo,
        limits=BatchLimits(
            max_calls_total=args.max_calls_total,
            max_cost_usd=args.max_cost,
            requests_per_minute=args.rpm,
            tokens_per_minute=args.tpm,
        ),
        engine=args.engine,
        ray_address=args.ray_address,
        ray_actors=args.ray_actors,
        summary_json=args.summary_json,
        progress=True if args.progress == "auto" else args.progress,
        progress_interval=args.progress_interval,
        on_invalid=on_invalid,
        on_warning=lambda message: note(f"warning: {message}"),
    )
    run = BatchRun(options)
    try:
        summary = run_sync(run.arun, what="await lattice.abatch(...)")
    except KeyboardInterrupt:
        if run.summary is not None:
            print(f"lattice: {run.summary.render()}", file=sys.stderr)
        note("interrupted; run the same command again to go on where it stopped")
        return EXIT_INTERRUPTED
    except LatticeError:
        if run.summary is not None and run.summary.ran:
            print(f"lattice: {run.summary.render()}", file=sys.stderr)
        raise
    print(f"lattice: {summary.render()}", file=sys.stderr)
    return summary.exit_code


def diff(args: argparse.Namespace) -> int:
    result = diff_batches(Path(args.old), Path(args.new))
    if args.json:
        sys.stdout.write(json.dumps(result.to_json(), indent=2, ensure_ascii=False) + "\n")
    else:
        sys.stdout.write(result.render(limit=None if args.all else 50))
    return 1 if result.changed else 0

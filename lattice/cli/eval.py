"""``lattice eval``: a workflow (or two variants of it) over a dataset, scored (docs/evals.md)."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from lattice.batch.limits import BatchLimits
from lattice.batch.rows import InvalidLine
from lattice.cli.common import lower_for_cli, note
from lattice.cli.main import EXIT_USAGE
from lattice.config import LatticeConfig, load_config
from lattice.errors import InputError, LatticeUserError
from lattice.evals.run import EvalOptions, Evaluation, Variant
from lattice.evals.scorers import ScorerSpec, parse_spec
from lattice.files import atomic_write_text
from lattice.runtime.sync import run_sync

SHOWN_INVALID = 20


def _variants(args: argparse.Namespace, config: LatticeConfig) -> list[Variant] | None:
    """A and B as the flags give them; None when a document does not lower (its
    diagnostics printed)."""
    if args.results:
        if args.variant or args.mock_b or args.mock:
            raise LatticeUserError(
                "--results scores recorded files: no --variant, --mock, --mock-b"
            )
        if len(args.results) > 2:
            raise LatticeUserError("--results takes one results file, or two (A and B)")
        labels = ("A", "B")
        return [Variant(labels[i], results=Path(p)) for i, p in enumerate(args.results)]
    lowered = lower_for_cli(args.workflow, config)
    if lowered.ir is None:
        return None
    first = Variant(
        "A", Path(args.workflow), mock=Path(args.mock) if args.mock else None, ir=lowered.ir
    )
    if args.variant is None and args.mock_b is None:
        return [first]
    if args.mock_b is not None and args.mock is None and args.provider != "mock":
        raise LatticeUserError("--mock-b gives B a mock script: give A one too (--mock)")
    ir = lowered.ir
    workflow = Path(args.workflow)
    if args.variant is not None:
        other = lower_for_cli(args.variant, config)
        if other.ir is None:
            return None
        ir, workflow = other.ir, Path(args.variant)
    mock_b = args.mock_b or args.mock
    return [first, Variant("B", workflow, mock=Path(mock_b) if mock_b else None, ir=ir)]


def _scorers(args: argparse.Namespace, config: LatticeConfig) -> list[ScorerSpec]:
    specs: list[ScorerSpec] = []
    for index, text in enumerate(args.scorer):
        try:
            value = json.loads(text) if text.lstrip().startswith("{") else text
        except json.JSONDecodeError as exc:
            raise InputError(f"--scorer {text!r}: not JSON ({exc.msg})") from None
        specs.append(parse_spec(value, f"--scorer {text}", origin="command line", index=index))
    given = [(ref, "command line") for ref in args.scorer_fn]
    given += [(ref, "lattice.toml") for ref in config.evals.scorers]
    for reference, origin in given:
        name, _, function = reference.rpartition("=")
        if not name:
            name = function.rpartition(":")[2].rpartition(".")[2]
        where = "--scorer-fn" if origin == "command line" else "lattice.toml [evals] scorers"
        specs.append(
            parse_spec(
                {"type": "python", "name": name, "function": function},
                f"{where} {reference}",
                origin=origin,  # type: ignore[arg-type]
            )
        )
    return specs


def _thresholds(args: argparse.Namespace) -> dict[str, float]:
    out: dict[str, float] = {}
    for text in args.threshold:
        match = re.fullmatch(r"\s*([^=]+?)\s*=\s*([0-9.]+)\s*", text)
        value = float(match.group(2)) if match and match.group(2).count(".") <= 1 else -1.0
        if match is None or not 0 <= value <= 1:
            raise InputError(f"--threshold {text!r}: write SCORER=MIN, MIN from 0 to 1")
        out[match.group(1)] = value
    return out


def evaluate(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    if args.record:
        raise LatticeUserError("lattice eval records live answers with --cache FILE, not --record")
    if args.max_regressions < 0:
        raise LatticeUserError("--max-regressions is 0 or more")
    variants = _variants(args, config)
    if variants is None:
        return EXIT_USAGE
    shown = 0

    def on_invalid(item: InvalidLine) -> None:
        nonlocal shown
        shown += 1
        if shown <= SHOWN_INVALID:
            note(f"skipped {item.describe(args.dataset)}")

    options = EvalOptions(
        dataset=args.dataset,
        variants=variants,
        out_dir=args.out,
        scorers=_scorers(args, config),
        thresholds=_thresholds(args),
        max_regressions=args.max_regressions,
        provider=args.provider,
        fixtures=args.fixtures,
        cache=args.cache,
        judge_mock=args.judge_mock,
        judge_provider=args.judge_provider,
        config=config,
        concurrency=args.concurrency,
        record=not args.no_record,
        durability=args.durability,
        limits=BatchLimits(max_calls_total=args.max_calls_total, max_cost_usd=args.max_cost),
        max_calls=args.max_calls,
        max_tokens_total=args.max_tokens_total,
        engine=args.engine,
        ray_address=args.ray_address,
        progress=args.progress,
        on_invalid=on_invalid,
        on_warning=lambda text: note(f"warning: {text}"),
    )
    evaluation = Evaluation(options)
    report = run_sync(evaluation.arun, what="lattice eval")
    from lattice.evals.report import render

    sys.stdout.write(render(report, show_all=args.all))
    if args.json:
        text = json.dumps(report.to_json(), indent=2, ensure_ascii=False, default=str) + "\n"
        atomic_write_text(Path(args.json), text)
    if args.html:
        from lattice.evals.html import html_report

        atomic_write_text(Path(args.html), html_report(report, panel_url=args.panel_url))
        note(f"wrote {args.html}")
    return report.exit_code

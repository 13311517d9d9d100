"""``lattice run``, ``lattice resume`` and ``lattice runs``: running workflows from the shell."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from lattice.cli.common import (
    Progress,
    TerminalApprover,
    TerminalAsker,
    approvals_given,
    config_with_grants,
    lower_for_cli,
    note,
    parse_pairs,
    provider_choice,
    read_json_object,
    report,
)
from lattice.cli.main import EXIT_INTERRUPTED, EXIT_USAGE
from lattice.cli.parser import RUNS_LIST_DEFAULT
from lattice.config import load_config
from lattice.document.loader import read_json_file
from lattice.errors import InputError, InvalidInputs, LatticeUserError
from lattice.events import EventKind
from lattice.ir.models import ExecIR
from lattice.llm.mock import MockProvider
from lattice.lower.acting import toolless_nodes
from lattice.permissions.approvals import APPROVALS
from lattice.runs.store import RunStore
from lattice.runs.view import approvals_waiting, list_runs, run_folders, show_run
from lattice.runtime.runner import Runner, check_answers
from lattice.service.runs import (
    ProviderSpec,
    RunOptions,
    prepare_resume,
    prepare_run,
    repo_root,
)
from lattice.workspace.grants import refused_tools


def _coerce(raw: str, schema: Any) -> Any:
    """A ``--input`` value: kept as text for string properties, else read as JSON when it parses."""
    if isinstance(schema, dict) and schema.get("type") == "string":
        return raw
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, RecursionError):
        return raw


INPUTS_HINT = "(give inputs with --input KEY=VALUE, repeatable, or --inputs FILE, a JSON object)"


def collect_inputs(args: argparse.Namespace, ir: ExecIR) -> dict[str, Any]:
    """``--inputs FILE`` overlaid with each ``--input K=V``."""
    inputs: dict[str, Any] = read_json_object(args.inputs, "inputs file") if args.inputs else {}
    properties = (ir.inputs_schema or {}).get("properties") or {}
    for key, raw in parse_pairs(args.input, "--input").items():
        inputs[key] = _coerce(raw, properties.get(key))
    return inputs


def run(args: argparse.Namespace) -> int:
    config = config_with_grants(load_config(args.config), args)
    result = lower_for_cli(args.workflow, config)
    if result.ir is None:
        return EXIT_USAGE
    ir = result.ir
    inputs = collect_inputs(args, ir)
    answers = read_json_object(args.answers, "answers file") if args.answers else {}
    if answers:
        check_answers(ir, answers, what=f"answers in {args.answers}")
    interactive = not args.answers and sys.stdin.isatty()
    asker = TerminalAsker()
    approver = TerminalApprover()
    try:
        prepared = prepare_run(
            ir,
            config=config,
            options=RunOptions(
                provider=ProviderSpec(provider_choice(args)),
                config_path=args.config,
                max_calls=args.max_calls,
                max_tokens_total=args.max_tokens_total,
                max_steps=args.max_steps,
                max_visits=args.max_visits,
                repo=repo_root(args.repo),
                approver=approver if interactive else None,
                no_wait=args.no_wait,
                meta={"started_by": {"via": "cli"}},
            ),
            inputs=inputs,
            answers=answers,
            workflow=read_json_file(Path(args.workflow)),
            runs_dir=None if args.no_record else Path(args.runs_dir),
            ask_human=asker if interactive else None,
        )
    except InvalidInputs as exc:
        raise InvalidInputs(f"{exc}\n{INPUTS_HINT}") from None
    runner = prepared.runner
    for refused in refused_tools(ir, prepared.settings.agents.grant):
        note(f"warning: {refused.message()}")
    for toolless in toolless_nodes(runner.ir, prepared.settings.agents.grant):
        note(f"warning: {toolless.message()}")
    permissions = prepared.settings.agents.permissions
    if permissions is not None and not permissions.said_nothing and ir_has_agents(ir):
        note(permissions.describe())
        for said in permissions.notes:
            note(f"warning: {said}")
    if args.dry_run:
        return _dry_run(runner, inputs)
    if args.engine == "temporal":
        from lattice.cli.temporal import run_on_temporal  # the temporal extra, needed only here

        return run_on_temporal(args, prepared, ir, answers)
    progress = asker.progress = approver.progress = Progress(
        live=sys.stderr.isatty() and not args.json
    )
    runner.subscribe(progress)
    try:
        outcome = prepared.run()
    except KeyboardInterrupt:
        progress.stop()
        if progress.run_id is not None and not args.no_record:
            resume_with = Path(args.runs_dir) / progress.run_id
            note(f"interrupted; continue with: lattice resume {resume_with}")
            return EXIT_INTERRUPTED
        raise
    finally:
        progress.stop()
    return report(outcome, progress, args.json, prepared.settings)


def ir_has_agents(ir: ExecIR) -> bool:
    return any(op.kind == "AGENT" for op in ir.ops.values())


def _dry_run(runner: Runner, inputs: dict[str, Any]) -> int:
    """Run with persistence off, printing ``<hash>  <node>  <preview>`` per prompt."""
    if not isinstance(runner.provider, MockProvider):
        raise InputError(
            "--dry-run needs --mock FILE: it shows what a run would send without calling a model"
        )
    runner.store = RunStore(None)
    lines: list[str] = []

    def collect(event: dict[str, Any]) -> None:
        if event["type"] == EventKind.LLM_REQUEST:
            data = event["data"]
            lines.append(
                f"{data['prompt_hash']}  {event.get('node_id')}  [{data['model_class']}]  {data.get('prompt_preview', '')}"
            )

    runner.subscribe(collect)
    result = runner.run(inputs)
    sys.stdout.write("\n".join(lines) + ("\n" if lines else ""))
    print(f"lattice: dry run {result.status}: {len(lines)} prompt(s)", file=sys.stderr)
    return 0


def run_folder(run: str, runs_dir: str) -> Path:
    """The folder of ``run``: a run folder's path, or a run id under ``runs_dir``; what
    every command that takes a RUN (``resume`` and each ``runs`` action) resolves it with."""
    folder = Path(run)
    if folder.is_dir():
        return folder
    by_id = Path(runs_dir) / run
    if "/" not in run and by_id.is_dir():
        return by_id
    if folder.exists():
        raise InputError(f"{run} is not a run folder (give runs/<run_id> or a run id)")
    raise InputError(f"no run folder {run} (and no run {run!r} under {runs_dir}/)")


def resume(args: argparse.Namespace) -> int:
    if args.temporal:
        from lattice.cli.temporal import resume as resume_on_temporal

        return resume_on_temporal(args)
    folder = run_folder(args.run_dir, args.runs_dir)
    answers: dict[str, Any] = dict(parse_pairs(args.answer, "--answer"))
    approvals = approvals_given(args)
    if approvals:
        check_waiting(folder, approvals)
        answers[APPROVALS] = approvals
    interactive = sys.stdin.isatty() and not args.answer and not approvals
    asker = TerminalAsker()
    approver = TerminalApprover()
    prepared = prepare_resume(
        folder,
        provider=ProviderSpec(provider_choice(args)),
        answers=answers,
        accept_changed=args.accept_changed,
        config_path=args.config,
        repo=args.repo,
        ask_human=asker if interactive else None,
        approver=approver if interactive else None,
        no_wait=args.no_wait,
    )
    progress = asker.progress = approver.progress = Progress(
        live=sys.stderr.isatty() and not args.json
    )
    try:
        result = prepared.run(on_event=progress)
    except KeyboardInterrupt:
        progress.stop()
        note(f"interrupted; continue with: lattice resume {folder}")
        return EXIT_INTERRUPTED
    return report(result, progress, args.json, prepared.settings)


def check_waiting(folder: Path, approvals: dict[str, Any]) -> None:
    """Refuse a decision on a call the halted run does not wait for (decided already, or
    never asked; a mistyped id), as the gateway does, before anything runs."""
    waiting = approvals_waiting(folder)
    if waiting is None:
        return  # not halted: resuming says why it cannot take approvals
    stale = sorted(set(approvals) - {"*"} - set(waiting))
    if stale:
        raise InputError(
            f"{', '.join(stale)}: not waiting for a decision (decided already, or never "
            f"asked); the run waits for: {', '.join(waiting) or 'no approval'}"
        )


def runs(args: argparse.Namespace) -> int:
    if args.action == "stop":
        if not args.temporal:
            raise LatticeUserError(
                "lattice runs stop RUN --temporal HOST:PORT stops a run on Temporal; a local "
                "run stops with Ctrl-C, or its gateway's POST /v1/runs/RUN/cancel"
            )
        from lattice.cli.temporal import stop  # the temporal extra, needed only here

        return stop(args)
    if args.action == "diff":
        return runs_diff(args)
    if args.action == "export":
        from lattice.cli.temporal import export  # the temporal extra, needed only here

        return export(args)
    if args.action == "open":
        from lattice.cli.panel import open_run  # the server extra, needed only here

        return open_run(args)
    if args.action == "list":
        return runs_list(args)
    if args.action == "show" and args.temporal:
        from lattice.cli.temporal import show

        return show(args)
    if args.action == "show":
        if not args.run_dir:
            raise LatticeUserError("lattice runs show RUN (a run folder or a run id)")
        sys.stdout.write(show_run(run_folder(args.run_dir, args.runs_dir)))
    return 0


def runs_list(args: argparse.Namespace) -> int:
    """``lattice runs list``: the ``--limit`` newest runs (20 by default, every one with
    ``--all``); how many more there are is said on stderr."""
    if args.all and args.limit is not None:
        raise LatticeUserError("lattice runs list: give --limit N or --all, not both")
    limit = None if args.all else (args.limit or RUNS_LIST_DEFAULT)
    workflow = getattr(args, "workflow", None)
    if args.temporal and workflow:
        raise LatticeUserError(
            "lattice runs list --workflow reads run folders (not --temporal yet)"
        )
    if workflow and workflow.endswith("@latest"):
        raise LatticeUserError(
            f"--workflow {workflow}: latest moves; name the version (NAME@3) or the workflow"
        )
    if args.temporal:
        from lattice.cli.temporal import list_runs as list_on_temporal

        return list_on_temporal(args, limit)
    root = Path(args.runs_dir)
    sys.stdout.write(list_runs(root, limit, waiting=args.waiting, workflow=workflow))
    filtered = args.waiting or workflow
    more = len(run_folders(root)) - limit if limit is not None and not filtered else 0
    if more > 0:
        sys.stderr.write(
            f"lattice: {more:,} older run{'s' if more > 1 else ''} not shown "
            "(--limit N for more, --all for every one)\n"
        )
    return 0


def runs_diff(args: argparse.Namespace) -> int:
    """``lattice runs diff RUN_A RUN_B``: exit 0 when the runs agree, 1 when they differ."""
    from lattice.batch.diff import diff_runs

    if not args.run_dir or not args.other:
        raise LatticeUserError("lattice runs diff RUN_A RUN_B")
    if args.temporal:
        from lattice.cli.temporal import exported  # the temporal extra, needed only here

        with exported(args, [args.run_dir, args.other]) as (a, b):
            result = diff_runs(a, b)
    else:
        result = diff_runs(
            run_folder(args.run_dir, args.runs_dir), run_folder(args.other, args.runs_dir)
        )
    if args.json:
        sys.stdout.write(json.dumps(result.to_json(), indent=2, ensure_ascii=False) + "\n")
    else:
        sys.stdout.write(result.render())
    return 1 if result.changed else 0

"""``lattice plan`` and ``lattice artifacts``: compiler passes over a project directory.

The logic lives in ``lattice.plan`` (passes, inputs, saving) and ``lattice.artifacts``
(the artifact store); this module parses arguments and reports. Running and reporting
reuse the helpers of ``lattice run`` (provider choice, progress, result output).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lattice.errors import LatticeUserError

if TYPE_CHECKING:
    from lattice.artifacts import Artifact

PASS_NAMES = ("project", "architecture", "scaffold", "test", "implementation", "refactor")
"""The passes in order (``lattice.plan.PASSES``; repeated here so ``lattice --help`` stays fast)."""


def _next_step(artifact: Artifact, project: Path) -> str | None:
    """What approving ``artifact`` makes possible."""
    where = f"--project {project}"
    if artifact.type == "ProjectPlan":
        return f"lattice plan architecture {where}"
    if artifact.type == "ArchitecturePlan":
        return f"lattice plan scaffold {where}"
    if artifact.type == "ScaffoldPlan":
        return f"lattice plan test {where}"
    if artifact.type == "TestPlan":
        return (
            f"lattice plan implementation TARGET_FILE {where}; before a refactor pass, lock "
            f"it: lattice artifacts lock {artifact.id} {where}"
        )
    return None


def _note(text: str) -> None:
    print(f"lattice: {text}", file=sys.stderr)


def _saved(artifact: Artifact, project: Path) -> None:
    from lattice.artifacts import ArtifactStore

    path = ArtifactStore(project).path(artifact.id)
    _note(f"saved {artifact.type} {artifact.id} ({artifact.status}): {path}")
    for warning in artifact.warnings:
        _note(f"warning: {warning}")
    _note(
        f"next: review it (lattice artifacts show {artifact.id} --project {project}), "
        f"then: lattice artifacts approve {artifact.id} --project {project}"
    )


def cmd_plan(args: argparse.Namespace) -> int:
    from lattice.cli_run import (
        _check_mock_covers,
        _Progress,
        _provider,
        _read_json_object,
        _report,
    )
    from lattice.config import load_config
    from lattice.plan import (
        build_runner,
        gather_inputs,
        get_pass,
        project_dir,
        save_from_run,
        save_result,
    )
    from lattice.runtime.settings import settings_from_config

    spec = get_pass(args.pass_name)
    project = project_dir(args.project)
    if args.from_run:
        if args.subject:
            raise LatticeUserError(
                "--from-run takes the run's own target or goal; drop the argument"
            )
        artifact = save_from_run(spec, project, Path(args.from_run).resolve())
        sys.stdout.write(json.dumps(artifact.content, indent=2, ensure_ascii=False) + "\n")
        _saved(artifact, project)
        return 0

    inputs = gather_inputs(spec, project, args.subject)  # before anything is written
    for note in inputs.notes():
        _note(note)
    config = load_config(args.config)
    answers = _read_json_object(args.answers, "answers file") if args.answers else {}
    provider, provider_meta = _provider(args, config)
    runner = build_runner(
        inputs,
        provider=provider,
        runs_dir=Path(args.runs_dir) if args.runs_dir else None,
        settings=settings_from_config(
            config, max_calls=args.max_calls, max_tokens_total=args.max_tokens_total
        ),
        answers=answers,
        meta={
            **provider_meta,
            "config": args.config,
            "max_calls": args.max_calls,
            "max_tokens_total": args.max_tokens_total,
        },
    )
    _check_mock_covers(runner.ir, provider)
    progress = _Progress(live=sys.stderr.isatty() and not args.json)
    runner.subscribe(progress)
    try:
        result = runner.run(inputs.values)
    finally:
        progress.stop()
    code = _report(result, progress, args.json, runner.settings)
    if result.status == "completed":
        _saved(save_result(inputs, result), project)
    elif result.status == "halted":
        _note(
            "once the resumed run completes, save its artifact: "
            f"lattice plan {spec.name} --project {project} --from-run {result.run_dir}"
        )
    return code


def cmd_artifacts(args: argparse.Namespace) -> int:
    from lattice.artifacts import ArtifactStore
    from lattice.plan import project_dir

    project = project_dir(args.project)
    store = ArtifactStore(project)
    if args.action == "list":
        artifacts = store.all()
        if args.json:
            rows = [{k: v for k, v in a.to_json().items() if k != "content"} for a in artifacts]
            sys.stdout.write(json.dumps(rows, indent=2, ensure_ascii=False) + "\n")
        elif artifacts:
            sys.stdout.write("".join(_row(a) + "\n" for a in artifacts))
        else:
            _note(f"no artifacts in {store.root} yet; start with: lattice plan project")
        return 0
    if not args.artifact_id:
        raise LatticeUserError(f"lattice artifacts {args.action} ID [--project DIR]")
    if args.action == "show":
        artifact = store.get(args.artifact_id)
        shown: Any = artifact.content if args.content else artifact.to_json()
        sys.stdout.write(json.dumps(shown, indent=2, ensure_ascii=False) + "\n")
        if not artifact.intact:
            _note(f"{artifact.id}'s content no longer matches its hash (edited since saved)")
        return 0
    if args.action == "approve":
        artifact = store.approve(args.artifact_id)
        edited = " (edited content re-validated)" if "edited" in artifact.history[-1] else ""
        _note(f"approved {artifact.type} {artifact.id}{edited}")
        step = _next_step(artifact, project)
        if step:
            _note(f"next: {step}")
        return 0
    artifact = store.lock(args.artifact_id)
    _note(f"locked {artifact.type} {artifact.id}")
    return 0


def _row(artifact: Artifact) -> str:
    subject = f"  {artifact.subject}" if artifact.subject else ""
    flag = "  (modified since saved)" if not artifact.intact else ""
    return (
        f"{artifact.id:<18} {artifact.type:<18} {artifact.status:<8} "
        f"{artifact.content_hash[7:19]}  run {artifact.run.get('run_id') or '-'}{subject}{flag}"
    )


def add_plan_commands(sub: Any) -> None:
    from lattice.cli_run import add_provider_options

    p = sub.add_parser(
        "plan",
        help="run a compiler pass over a project directory and save its artifact",
        description="Passes, in order: "
        + ", ".join(PASS_NAMES)
        + ". Each reads the approved artifacts of the passes before it (docs/passes.md).",
    )
    p.add_argument("pass_name", metavar="PASS", choices=PASS_NAMES, help=" | ".join(PASS_NAMES))
    p.add_argument(
        "subject",
        nargs="?",
        metavar="TARGET_FILE|GOAL",
        help="implementation: the file to plan; refactor: the goal",
    )
    p.add_argument(
        "--project", default=".", metavar="DIR", help="the project directory (default: .)"
    )
    p.add_argument(
        "--from-run",
        metavar="RUN_DIR",
        help="save the artifact of a run of this pass that completed after lattice resume",
    )
    add_provider_options(p)
    p.add_argument(
        "--answers",
        metavar="FILE",
        help='information the model asked for, in advance: {"plan": "<text>"}',
    )
    p.add_argument(
        "--runs-dir", metavar="DIR", help="where run folders go (default: DIR/.lattice/runs)"
    )
    p.add_argument(
        "--json", action="store_true", help="print the whole run result, not just the artifact"
    )
    p.set_defaults(handler=cmd_plan)

    p = sub.add_parser("artifacts", help="list, show, approve or lock a project's artifacts")
    p.add_argument("action", choices=["list", "show", "approve", "lock"])
    p.add_argument("artifact_id", nargs="?", metavar="ID", help="for show, approve and lock")
    p.add_argument(
        "--project", default=".", metavar="DIR", help="the project directory (default: .)"
    )
    p.add_argument("--content", action="store_true", help="show: the artifact's content only")
    p.add_argument("--json", action="store_true", help="list: JSON (without contents)")
    p.set_defaults(handler=cmd_artifacts)

"""``lattice plan`` and ``lattice artifacts``: planning passes over a project directory.

The logic lives in ``lattice.planner`` (passes, inputs, saving, the artifact store);
this module reports. Running and reporting use the same pieces as ``lattice run``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from lattice.cli.common import (
    Progress,
    note,
    provider_choice,
    read_json_object,
    report,
)
from lattice.config import load_config
from lattice.errors import LatticeUserError
from lattice.planner.artifacts import Artifact, ArtifactStore
from lattice.planner.inputs import gather_inputs, project_dir
from lattice.planner.passes import get_pass
from lattice.planner.run import build_runner, save_from_run, save_result
from lattice.runtime.settings import settings_from_config


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


def _saved(artifact: Artifact, project: Path) -> None:
    path = ArtifactStore(project).path(artifact.id)
    note(f"saved {artifact.type} {artifact.id} ({artifact.status}): {path}")
    for warning in artifact.warnings:
        note(f"warning: {warning}")
    note(
        f"next: review it (lattice artifacts show {artifact.id} --project {project}), "
        f"then: lattice artifacts approve {artifact.id} --project {project}"
    )


def plan(args: argparse.Namespace) -> int:
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
    for text in inputs.notes():
        note(text)
    config = load_config(args.config)
    answers = read_json_object(args.answers, "answers file") if args.answers else {}
    choice = provider_choice(args)
    provider = choice.build(config)
    runner = build_runner(
        inputs,
        provider=provider,
        runs_dir=Path(args.runs_dir) if args.runs_dir else None,
        settings=settings_from_config(
            config, max_calls=args.max_calls, max_tokens_total=args.max_tokens_total
        ),
        answers=answers,
        meta={
            **choice.to_meta(),
            "config": args.config,
            "max_calls": args.max_calls,
            "max_tokens_total": args.max_tokens_total,
        },
    )
    progress = Progress(live=sys.stderr.isatty() and not args.json)
    runner.subscribe(progress)
    try:
        result = runner.run(inputs.values)
    finally:
        progress.stop()
    code = report(result, progress, args.json, runner.settings)
    if result.status == "completed":
        _saved(save_result(inputs, result), project)
    elif result.status == "halted":
        note(
            "once the resumed run completes, save its artifact: "
            f"lattice plan {spec.name} --project {project} --from-run {result.run_dir}"
        )
    return code


def artifacts(args: argparse.Namespace) -> int:
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
            note(f"no artifacts in {store.root} yet; start with: lattice plan project")
        return 0
    if not args.artifact_id:
        raise LatticeUserError(f"lattice artifacts {args.action} ID [--project DIR]")
    if args.action == "show":
        artifact = store.get(args.artifact_id)
        shown: Any = artifact.content if args.content else artifact.to_json()
        sys.stdout.write(json.dumps(shown, indent=2, ensure_ascii=False) + "\n")
        if not artifact.intact:
            note(f"{artifact.id}'s content no longer matches its hash (edited since saved)")
        return 0
    if args.action == "approve":
        artifact = store.approve(args.artifact_id)
        edited = " (edited content re-validated)" if "edited" in artifact.history[-1] else ""
        note(f"approved {artifact.type} {artifact.id}{edited}")
        step = _next_step(artifact, project)
        if step:
            note(f"next: {step}")
        return 0
    artifact = store.lock(args.artifact_id)
    note(f"locked {artifact.type} {artifact.id}")
    return 0


def _row(artifact: Artifact) -> str:
    subject = f"  {artifact.subject}" if artifact.subject else ""
    flag = "  (modified since saved)" if not artifact.intact else ""
    return (
        f"{artifact.id:<18} {artifact.type:<18} {artifact.status:<8} "
        f"{artifact.content_hash[7:19]}  run {artifact.run.get('run_id') or '-'}{subject}{flag}"
    )

"""Running a pass and saving its result as a draft artifact."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lattice.document.loader import read_json_file
from lattice.errors import ErrorType, LatticeUserError
from lattice.ir.models import ExecIR
from lattice.llm.base import LLMProvider
from lattice.lower import lower
from lattice.planner.artifacts import Artifact, ArtifactStore, schema_problems
from lattice.planner.inputs import PassInputs, gather_inputs, project_dir
from lattice.planner.passes import PassSpec, get_pass
from lattice.runs.checkpoint import read_checkpoint
from lattice.runs.folder import read_run_json
from lattice.runs.store import RunStore
from lattice.runtime.results import RunResult
from lattice.runtime.runner import Runner
from lattice.runtime.settings import RuntimeSettings


def load_pass(spec: PassSpec) -> tuple[ExecIR, dict[str, Any]]:
    """(ExecIR, document) of the pass's workflow; DocumentError when it does not lower."""
    if not spec.workflow.is_file():
        raise LatticeUserError(
            f"the {spec.name} pass's workflow {spec.workflow} is missing "
            "(they ship inside the lattice package, under lattice/planner/workflows: reinstall it)"
        )
    document = read_json_file(spec.workflow)
    return lower(document, base_dir=spec.workflow.parent), document


def default_runs_dir(project: Path) -> Path:
    return project / ".lattice" / "runs"


def build_runner(
    inputs: PassInputs,
    *,
    provider: LLMProvider,
    runs_dir: Path | None = None,
    settings: RuntimeSettings | None = None,
    answers: Mapping[str, Any] | None = None,
    meta: Mapping[str, Any] | None = None,
) -> Runner:
    """A Runner of the pass's workflow; runs go to ``runs_dir`` (default ``DIR/.lattice/runs``)."""
    ir, document = load_pass(inputs.spec)
    return Runner(
        ir,
        provider=provider,
        store=RunStore(runs_dir if runs_dir is not None else default_runs_dir(inputs.project)),
        answers=answers,
        workflow=document,
        meta={**(meta or {}), "plan": inputs.meta()},
        settings=settings,
    )


def _run_ref(project: Path, run_id: str, run_dir: Path | None) -> dict[str, Any]:
    shown: str | None = None
    if run_dir is not None:
        resolved = run_dir.resolve()
        try:
            shown = resolved.relative_to(project).as_posix()
        except ValueError:
            shown = str(resolved)
    return {"run_id": run_id, "run_dir": shown}


def save_artifact(
    spec: PassSpec,
    project: Path,
    content: Any,
    *,
    run_id: str,
    run_dir: Path | None,
    subject: str | None,
    inputs: list[dict[str, Any]],
    store: ArtifactStore | None = None,
) -> Artifact:
    """Save a pass's output as a new draft, after checking it against the schema once more
    and its ids against the artifacts it was built from (problems become ``warnings``)."""
    store = store or ArtifactStore(project)
    problems = schema_problems(spec.artifact_type, content)
    if problems:
        raise LatticeUserError(
            f"the run's output is not a valid {spec.artifact_type}:\n  "
            + "\n  ".join(problems[:20]),
            error_type=ErrorType.ARTIFACT_INVALID,
        )
    sources: dict[str, Any] = {}
    for ref in inputs:
        try:
            sources[ref["type"]] = store.get(ref["id"]).content
        except LatticeUserError:
            continue
    return store.create(
        artifact_type=spec.artifact_type,
        pass_name=spec.name,
        content=content,
        run=_run_ref(project, run_id, run_dir),
        subject=subject,
        inputs=inputs,
        warnings=reference_warnings(spec.artifact_type, content, sources, subject),
    )


def save_result(inputs: PassInputs, result: RunResult) -> Artifact:
    """Save a completed run of the pass as a draft artifact."""
    if result.status != "completed":
        raise LatticeUserError(f"the run {result.run_id} is {result.status}; nothing to save")
    return save_artifact(
        inputs.spec,
        inputs.project,
        result.output,
        run_id=result.run_id,
        run_dir=result.run_dir,
        subject=inputs.subject,
        inputs=[a.ref() for a in inputs.used],
    )


def save_from_run(spec: PassSpec, project: Path, run_dir: Path) -> Artifact:
    """Save the artifact of a pass run that completed later (after ``lattice resume``)."""
    checkpoint = read_checkpoint(run_dir)
    plan = (checkpoint.get("meta") or {}).get("plan")
    if not isinstance(plan, dict):
        raise LatticeUserError(f"{run_dir} is not a run of lattice plan")
    if plan.get("pass") != spec.name:
        raise LatticeUserError(
            f"{run_dir} is a run of the {plan.get('pass')} pass, not of the {spec.name} pass"
        )
    if Path(str(plan.get("project"))).resolve() != project:
        raise LatticeUserError(
            f"{run_dir} ran over the project {plan.get('project')}, not {project}"
        )
    status = checkpoint.get("status")
    if status != "completed":
        raise LatticeUserError(
            f"the run {run_dir.name} is {status}; finish it first: lattice resume {run_dir} "
            "(see its failure_report.json)"
        )
    store = ArtifactStore(project)
    run_id = str(checkpoint.get("run_id"))
    saved = [a.id for a in store.all() if a.run.get("run_id") == run_id]
    if saved:
        raise LatticeUserError(f"the run {run_id} is already saved as {', '.join(saved)}")
    result = read_run_json(run_dir, "result.json")
    return save_artifact(
        spec,
        project,
        result.get("output"),
        run_id=run_id,
        run_dir=run_dir,
        subject=plan.get("subject"),
        inputs=list(plan.get("inputs") or []),
        store=store,
    )


@dataclass
class PlanOutcome:
    """A pass run from Python: the run, and the saved draft when it completed."""

    inputs: PassInputs
    result: RunResult
    artifact: Artifact | None


def run_pass(
    pass_name: str,
    project: str | Path,
    subject: str | None = None,
    *,
    provider: LLMProvider,
    runs_dir: Path | None = None,
    settings: RuntimeSettings | None = None,
    answers: Mapping[str, Any] | None = None,
) -> PlanOutcome:
    """Gather a pass's inputs, run it and save its artifact (what ``lattice plan`` does)."""
    spec = get_pass(pass_name)
    inputs = gather_inputs(spec, project_dir(project), subject)
    runner = build_runner(
        inputs, provider=provider, runs_dir=runs_dir, settings=settings, answers=answers
    )
    result = runner.run(inputs.values)
    artifact = save_result(inputs, result) if result.status == "completed" else None
    return PlanOutcome(inputs, result, artifact)


# -- cross-references -------------------------------------------------------------------

_DEFINES: dict[str, dict[str, str]] = {
    "ProjectPlan": {"requirement": "requirements[].id", "constraint": "constraints[].id"},
    "ArchitecturePlan": {"component": "components[].id", "decision": "decisions[].id"},
    "ScaffoldPlan": {"file": "files[].id"},
    "TestPlan": {"test case": "cases[].id"},
}
"""Which ids each artifact type defines (kind → where)."""

_REFERS: dict[str, list[tuple[str, str, str]]] = {
    "ArchitecturePlan": [
        ("components[].requirement_ids[]", "requirement", "ProjectPlan"),
        ("components[].depends_on[]", "component", "ArchitecturePlan"),
        ("decisions[].constraint_ids[]", "constraint", "ProjectPlan"),
    ],
    "ScaffoldPlan": [
        ("files[].component_ids[]", "component", "ArchitecturePlan"),
        ("entry_points[].file_id", "file", "ScaffoldPlan"),
    ],
    "TestPlan": [
        ("cases[].requirement_ids[]", "requirement", "ProjectPlan"),
        ("cases[].component_ids[]", "component", "ArchitecturePlan"),
        ("cases[].file_id", "file", "ScaffoldPlan"),
        ("untested_requirements[].requirement_id", "requirement", "ProjectPlan"),
    ],
    "ImplementationPlan": [
        ("target.file_id", "file", "ScaffoldPlan"),
        ("test_case_ids[]", "test case", "TestPlan"),
        ("steps[].test_case_ids[]", "test case", "TestPlan"),
        ("uses[].file_id", "file", "ScaffoldPlan"),
    ],
    "RefactorPlan": [
        ("moves[].component_ids[]", "component", "ArchitecturePlan"),
        ("invariants_preserved[].test_case_ids[]", "test case", "TestPlan"),
    ],
}
"""Which ids each artifact type cites (where, kind, the type that defines them)."""


def _collect(value: Any, path: str) -> list[Any]:
    """Values at a dotted path where ``name[]`` steps into every item of a list."""
    current = [value]
    for step in path.split("."):
        key, each = (step[:-2], True) if step.endswith("[]") else (step, False)
        nxt: list[Any] = []
        for item in current:
            child = item.get(key) if isinstance(item, dict) else None
            if each and isinstance(child, list):
                nxt.extend(child)
            elif not each and child is not None:
                nxt.append(child)
        current = nxt
    return current


def reference_warnings(
    artifact_type: str, content: Any, sources: Mapping[str, Any], subject: str | None = None
) -> list[str]:
    """Ids that ``content`` cites but neither it nor its input artifacts define.

    JSON Schema checks each artifact alone; this checks the ids that tie the chain
    together (a TestPlan case citing R9 when the ProjectPlan stops at R6).
    """
    warnings: list[str] = []
    for path, kind, definer in _REFERS.get(artifact_type, []):
        source = content if definer == artifact_type else sources.get(definer)
        if source is None:
            continue
        known = {str(v) for v in _collect(source, _DEFINES[definer][kind])}
        unknown = sorted({str(v) for v in _collect(content, path)} - known)
        if unknown:
            warnings.append(
                f"{path}: {', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} not "
                f"{kind} id(s) of the {definer}"
            )
    if artifact_type == "ArchitecturePlan" and "ProjectPlan" in sources:
        served = {str(v) for v in _collect(content, "components[].requirement_ids[]")}
        required = [str(v) for v in _collect(sources["ProjectPlan"], "requirements[].id")]
        unserved = [r for r in required if r not in served]
        if unserved:
            warnings.append(f"requirements served by no component: {', '.join(unserved)}")
    if artifact_type == "ImplementationPlan" and isinstance(content, dict):
        target = content.get("target") or {}
        if subject is not None and target.get("path") != subject:
            warnings.append(f"target.path: {target.get('path')} is not the target file {subject}")
        planned = {
            str(f.get("id")): f.get("path")
            for f in _collect(sources.get("ScaffoldPlan"), "files[]")
        }
        file_id = str(target.get("file_id"))
        if file_id in planned and planned[file_id] != target.get("path"):
            warnings.append(
                f"target.file_id: {file_id} is {planned[file_id]} in the ScaffoldPlan, "
                f"not {target.get('path')}"
            )
    if artifact_type == "TestPlan" and "ProjectPlan" in sources:
        checked = {str(v) for v in _collect(content, "cases[].requirement_ids[]")}
        checked |= {str(v) for v in _collect(content, "untested_requirements[].requirement_id")}
        required = [str(v) for v in _collect(sources["ProjectPlan"], "requirements[].id")]
        missing = [r for r in required if r not in checked]
        if missing:
            warnings.append(
                f"requirements neither tested nor listed as untested: {', '.join(missing)}"
            )
    return warnings

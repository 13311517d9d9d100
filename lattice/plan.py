"""Compiler passes over a project directory: what ``lattice plan PASS`` does.

Six passes turn a project's documents into planning artifacts, one pass at a time,
each reviewed by a person before the next pass may use it::

    project → architecture → scaffold → test → implementation TARGET_FILE | refactor GOAL

Each pass is an ordinary workflow document (``lattice/passes/<pass>.json``) whose one
LLM node builds one artifact under contract (``artifact-builder@1``, the artifact's
JSON Schema, the ``no_code`` invariant). The document never reads files: this module
builds the pass's ``$in`` from the project directory — its required documents, the
approved artifacts it builds on, the target file or the layout — leaving out the
inputs the pass must not see, runs the workflow, and saves the result as a draft
artifact (``lattice.artifacts``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from lattice.artifacts import Artifact, ArtifactStore, schema_problems
from lattice.errors import LatticeUserError

if TYPE_CHECKING:
    from lattice.ir.models import ExecIR
    from lattice.llm.base import LLMProvider
    from lattice.runtime import Runner
    from lattice.runtime.results import RunResult
    from lattice.runtime.settings import RuntimeSettings

PASSES_DIR = Path(__file__).resolve().parent / "passes"
"""The pass documents of a source checkout."""

# fmt: off
SOURCE_SUFFIXES = frozenset({
    ".py", ".pyi", ".pyx", ".js", ".jsx", ".mjs", ".cjs", ".ts", ".tsx", ".go", ".rs", ".java",
    ".kt", ".kts", ".scala", ".c", ".h", ".cc", ".cpp", ".cxx", ".hpp", ".hh", ".cs", ".fs",
    ".rb", ".php", ".swift", ".m", ".mm", ".sh", ".bash", ".zsh", ".ps1", ".lua", ".pl", ".r",
    ".jl", ".ex", ".exs", ".erl", ".hs", ".ml", ".clj", ".dart", ".vue", ".svelte", ".sql",
})
# fmt: on
"""File suffixes that count as source code."""
TEST_DIRS = frozenset({"tests", "test", "__tests__", "spec", "specs"})
SKIPPED_DIRS = frozenset({"__pycache__", "node_modules", "venv", "site-packages"})
"""Directories never walked (besides hidden ones such as .git and .lattice)."""
LAYOUT_LIMIT = 2000
"""At most this many paths of the repository layout reach the refactor pass."""


@dataclass(frozen=True)
class ArtifactInput:
    """An artifact a pass builds on: the newest of ``type``, at least ``status``, as ``$in.<key>``."""

    type: str
    key: str
    status: str = "approved"


@dataclass(frozen=True)
class PassSpec:
    """One pass: what it produces and what it reads (and must not read)."""

    name: str
    artifact_type: str
    documents: tuple[tuple[str, str], ...] = ()
    """(file name in the project directory, ``$in`` key) of each required document."""
    artifacts: tuple[ArtifactInput, ...] = ()
    subject: str | None = None
    """``"target"`` (a TARGET_FILE argument) or ``"goal"`` (a GOAL argument) or None."""
    forbidden: str | None = None
    """``"code"`` (no source code or tests) or ``"other-sources"`` (no source but the target)."""
    layout: bool = False
    """Whether ``$in.layout`` lists the project's files."""

    @property
    def workflow(self) -> Path:
        return PASSES_DIR / f"{self.name}.json"


PASSES: dict[str, PassSpec] = {
    spec.name: spec
    for spec in (
        PassSpec(
            "project",
            "ProjectPlan",
            documents=(
                ("requirements.md", "requirements"),
                ("constraints.md", "constraints"),
                ("glossary.md", "glossary"),
            ),
            forbidden="code",
        ),
        PassSpec(
            "architecture",
            "ArchitecturePlan",
            documents=(("constraints.md", "constraints"),),
            artifacts=(ArtifactInput("ProjectPlan", "project_plan"),),
        ),
        PassSpec(
            "scaffold",
            "ScaffoldPlan",
            artifacts=(
                ArtifactInput("ProjectPlan", "project_plan"),
                ArtifactInput("ArchitecturePlan", "architecture_plan"),
            ),
        ),
        PassSpec(
            "test",
            "TestPlan",
            documents=(("requirements.md", "requirements"),),
            artifacts=(
                ArtifactInput("ProjectPlan", "project_plan"),
                ArtifactInput("ArchitecturePlan", "architecture_plan"),
                ArtifactInput("ScaffoldPlan", "scaffold_plan"),
            ),
        ),
        PassSpec(
            "implementation",
            "ImplementationPlan",
            artifacts=(
                ArtifactInput("TestPlan", "test_plan"),
                ArtifactInput("ScaffoldPlan", "scaffold_plan"),
            ),
            subject="target",
            forbidden="other-sources",
        ),
        PassSpec(
            "refactor",
            "RefactorPlan",
            artifacts=(
                ArtifactInput("ArchitecturePlan", "architecture_plan"),
                ArtifactInput("TestPlan", "test_plan", status="locked"),
            ),
            subject="goal",
            layout=True,
        ),
    )
}
PASS_OF_TYPE = {spec.artifact_type: spec.name for spec in PASSES.values()}


def get_pass(name: str) -> PassSpec:
    spec = PASSES.get(name)
    if spec is None:
        raise LatticeUserError(f"unknown pass {name!r}; passes: {', '.join(PASSES)}")
    return spec


class MissingInputError(LatticeUserError):
    """A pass's required input is absent, not approved enough, or changed after approval."""

    error_type = "missing_input"


@dataclass
class PassInputs:
    """What a pass runs on: ``values`` is its ``$in``."""

    spec: PassSpec
    project: Path
    values: dict[str, Any]
    used: list[Artifact] = field(default_factory=list)
    subject: str | None = None
    excluded: list[str] = field(default_factory=list)
    """Forbidden files present in the project, left out of the prompt."""

    def notes(self) -> list[str]:
        """What to tell the person running the pass (stderr)."""
        lines = [f"input: {a.type} {a.id} ({a.status})" for a in self.used]
        if self.excluded:
            why = (
                "source code and tests are not inputs of the project pass"
                if self.spec.forbidden == "code"
                else "the implementation pass sees only its target file"
            )
            shown = ", ".join(self.excluded[:12])
            more = f" and {len(self.excluded) - 12} more" if len(self.excluded) > 12 else ""
            lines.append(
                f"excluded from the prompt ({why}): {len(self.excluded)} file(s): {shown}{more}"
            )
        return lines

    def meta(self) -> dict[str, Any]:
        """What a run of the pass records (``checkpoint.json`` meta) for ``--from-run``."""
        return {
            "pass": self.spec.name,
            "project": str(self.project),
            "subject": self.subject,
            "inputs": [a.ref() for a in self.used],
            "excluded": list(self.excluded),
        }


# -- the project directory ------------------------------------------------------------


def project_dir(path: str | Path) -> Path:
    """``--project DIR`` resolved; it must be a directory."""
    root = Path(path).resolve()
    if not root.is_dir():
        raise LatticeUserError(f"--project {path}: not a directory")
    return root


def walk_files(project: Path) -> Iterator[str]:
    """Relative POSIX paths of the project's files, sorted, hidden and build folders skipped."""
    for folder, dirs, files in os.walk(project):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIPPED_DIRS)
        base = Path(folder).relative_to(project)
        for name in sorted(files):
            if not name.startswith("."):
                yield (base / name).as_posix()


def is_test(path: str) -> bool:
    parts = PurePosixPath(path).parts
    name = parts[-1]
    stem = name.split(".")[0]
    return (
        any(part in TEST_DIRS for part in parts[:-1])
        or stem.startswith("test_")
        or stem.endswith(("_test", "_spec"))
        or ".test." in name
        or ".spec." in name
    )


def is_source(path: str) -> bool:
    return PurePosixPath(path).suffix.lower() in SOURCE_SUFFIXES


def _read_text(path: Path, shown: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise LatticeUserError(f"{shown} is not UTF-8 text") from None
    except OSError as exc:
        raise LatticeUserError(f"cannot read {shown}: {exc.strerror}") from exc


def _target_path(project: Path, raw: str) -> str:
    """TARGET_FILE as a path relative to the project (forward slashes). A relative path is
    looked up in the project first, then in the current directory; it must stay inside."""
    candidate = Path(raw)
    options = [candidate] if candidate.is_absolute() else [project / candidate, candidate]
    inside: list[str] = []
    for option in options:
        try:
            inside.append(option.resolve().relative_to(project).as_posix())
        except ValueError:
            continue
    if not inside:
        raise LatticeUserError(f"TARGET_FILE {raw} is outside the project directory {project}")
    return next((rel for rel in inside if (project / rel).is_file()), inside[0])


# -- gathering inputs -------------------------------------------------------------------


def gather_inputs(
    spec: PassSpec, project: Path, subject: str | None = None, store: ArtifactStore | None = None
) -> PassInputs:
    """The pass's ``$in``, or MissingInputError listing every missing or unapproved input.

    Reads nothing but the pass's own inputs and writes nothing.
    """
    store = store or ArtifactStore(project)
    problems: list[str] = []
    values: dict[str, Any] = {}
    used: list[Artifact] = []
    where = f"--project {project}"
    if spec.subject == "target" and not subject:
        raise LatticeUserError(
            f"the {spec.name} pass plans one file: lattice plan {spec.name} TARGET_FILE {where}"
        )
    if spec.subject == "goal" and not (subject or "").strip():
        raise LatticeUserError(
            f'the {spec.name} pass needs a goal: lattice plan {spec.name} "GOAL" {where}'
        )
    if spec.subject is None and subject:
        raise LatticeUserError(f"the {spec.name} pass takes no argument (got {subject!r})")

    for name, key in spec.documents:
        path = project / name
        if path.is_file():
            values[key] = _read_text(path, name)
        else:
            problems.append(f"{name} (a document of the project directory)")

    for need in spec.artifacts:
        artifact = store.latest(need.type)
        producer = PASS_OF_TYPE.get(need.type, "?")
        if artifact is None:
            problems.append(
                f"{need.type} ({need.status}): there is none yet; "
                f"make one with: lattice plan {producer} {where}"
            )
        elif not artifact.at_least(need.status):
            steps = []
            if artifact.status == "draft":
                steps.append(f"lattice artifacts approve {artifact.id} {where}")
            if need.status == "locked":
                steps.append(f"lattice artifacts lock {artifact.id} {where}")
            problems.append(
                f"{need.type} {artifact.id} is {artifact.status}, and the {spec.name} pass needs it "
                f"{need.status}; review it, then: " + " && ".join(steps)
            )
        elif not artifact.intact:
            problems.append(
                f"{need.type} {artifact.id} was changed after it was {artifact.status} (its "
                "content no longer matches its hash); restore it, or make a new one with: "
                f"lattice plan {producer} {where}"
            )
        else:
            values[need.key] = artifact.content
            used.append(artifact)

    excluded: list[str] = []
    target: str | None = None
    if spec.subject == "target":
        assert subject is not None
        target = _target_path(project, subject)
        path = project / target
        if path.is_file():
            values["target_file"] = {"path": target, "content": _read_text(path, target)}
        else:
            problems.append(f"the target file {target} (not found in the project directory)")
        scaffold = values.get("scaffold_plan")
        if isinstance(scaffold, dict):
            planned = {str(f.get("path", "")).removeprefix("./") for f in scaffold.get("files", [])}
            if target not in planned:
                problems.append(
                    f"the target file {target} in the ScaffoldPlan (it plans: "
                    f"{', '.join(sorted(planned)) or 'no files'})"
                )

    if spec.forbidden or spec.layout:
        files = list(walk_files(project))
        if spec.forbidden == "code":
            excluded = [f for f in files if is_source(f) or is_test(f)]
        elif spec.forbidden == "other-sources":
            excluded = [f for f in files if (is_source(f) or is_test(f)) and f != target]
        if spec.layout:
            layout = files[:LAYOUT_LIMIT]
            if len(files) > LAYOUT_LIMIT:
                layout.append(f"… and {len(files) - LAYOUT_LIMIT} more files")
            values["layout"] = layout

    if problems:
        raise MissingInputError(
            f"the {spec.name} pass cannot run; missing required input(s):\n  - "
            + "\n  - ".join(problems)
        )
    if spec.subject == "goal":
        values["goal"] = (subject or "").strip()
    return PassInputs(
        spec,
        project,
        values,
        used=used,
        subject=target if spec.subject == "target" else values.get("goal"),
        excluded=excluded,
    )


# -- running and saving -----------------------------------------------------------------


def load_pass(spec: PassSpec) -> tuple[ExecIR, dict[str, Any]]:
    """(ExecIR, document) of the pass's workflow; DocumentError when it does not lower."""
    from lattice.document.loader import read_json_file
    from lattice.lower import lower

    if not spec.workflow.is_file():
        raise LatticeUserError(
            f"the {spec.name} pass's workflow {spec.workflow} is missing "
            "(they ship inside the lattice package, under lattice/passes: reinstall it)"
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
    from lattice.runtime import Runner, RunStore

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
            error_type="artifact_invalid",
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
    from lattice.runtime.runner import read_run_json

    checkpoint = read_run_json(run_dir, "checkpoint.json")
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

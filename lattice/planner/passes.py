"""Compiler passes over a project directory: what ``lattice plan PASS`` does.

Six passes turn a project's documents into planning artifacts, one pass at a time,
each reviewed by a person before the next pass may use it::

    project → architecture → scaffold → test → implementation TARGET_FILE | refactor GOAL

Each pass is an ordinary workflow document (``lattice/planner/workflows/<pass>.json``) whose one
LLM node builds one artifact under contract (``artifact-builder@1``, the artifact's
JSON Schema, the ``no_code`` invariant). The document never reads files: this module
builds the pass's ``$in`` from the project directory — its required documents, the
approved artifacts it builds on, the target file or the layout — leaving out the
inputs the pass must not see, runs the workflow, and saves the result as a draft
artifact (``lattice.planner.artifacts``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lattice.errors import LatticeUserError

PASSES_DIR = Path(__file__).resolve().parent / "workflows"
"""The pass documents, shipped inside the package."""


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

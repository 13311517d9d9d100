"""A pass's ``$in``, built from the project directory: its required documents, the
approved artifacts it builds on, the target file or the layout, and nothing it must
not see."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from lattice.errors import LatticeUserError
from lattice.planner.artifacts import Artifact, ArtifactStore
from lattice.planner.passes import PASS_OF_TYPE, PassSpec

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


# long: each kind of input a pass declares, checked in turn so that every problem is reported at once
def gather_inputs(  # noqa: C901
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

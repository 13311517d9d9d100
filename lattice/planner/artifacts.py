"""Planning artifacts of a project: ``DIR/.lattice/artifacts/<id>.json``, one file each.

An artifact is what a compiler pass produced (``lattice plan``): its ``content`` (the
JSON the pass's LLM node returned, valid against ``lattice/planner/schemas/<type>.json``)
plus where it came from and how far it has been reviewed::

    {"id": "project-1", "type": "ProjectPlan", "pass": "project", "status": "draft",
     "content_hash": "sha256:…", "run": {"run_id": …, "run_dir": …}, "subject": null,
     "inputs": [{"id", "type", "content_hash"}], "warnings": [], "created_at": …,
     "history": [{"status", "at", …}], "content": {…}}

Lifecycle: ``draft`` (as produced) → ``approved`` (a person reviewed it; passes accept it
as input) → ``locked`` (frozen; the refactor pass needs a locked TestPlan). Each step
goes forward by one; nothing goes back. A person may edit a draft's content before
approving it (approval re-validates it and records the new hash); an approved or locked
artifact whose content no longer matches its hash is refused as an input.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lattice.errors import ErrorType, LatticeUserError
from lattice.files import atomic_write_text
from lattice.schemas import schema_errors, schema_validator

STATUSES = ("draft", "approved", "locked")
STATUS_RANK = {status: rank for rank, status in enumerate(STATUSES)}
SCHEMAS_DIR = Path(__file__).resolve().parent / "schemas"
"""The artifact schemas (``<type>.json``) of a source checkout."""

_ID = re.compile(r"^([a-z][a-z0-9]*)-([1-9][0-9]*)$")


def content_hash(content: Any) -> str:
    """``sha256:<hex>`` of the canonical JSON of ``content`` (sorted keys, no spaces)."""
    text = json.dumps(content, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def load_schema(artifact_type: str) -> dict[str, Any]:
    """The JSON Schema of an artifact type, from ``lattice/planner/schemas``."""
    path = SCHEMAS_DIR / f"{artifact_type}.json"
    try:
        schema = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise LatticeUserError(
            f"no schema for artifact type {artifact_type!r} ({path}: {exc.strerror})"
        ) from exc
    if not isinstance(schema, dict):
        raise LatticeUserError(f"{path} does not hold a JSON Schema object")
    return schema


def schema_problems(artifact_type: str, content: Any) -> list[str]:
    """Every way ``content`` breaks its type's schema, as ``<pointer>: <message>``."""
    validator = schema_validator(load_schema(artifact_type))
    errors = sorted(schema_errors(validator, content), key=lambda e: list(e.absolute_path))
    return ["/" + "/".join(str(p) for p in e.absolute_path) + ": " + e.message for e in errors]


def _now() -> str:
    """UTC, to the microsecond: artifacts list in the order they were made."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class Artifact:
    """One saved artifact (see the module docstring for the file format)."""

    id: str
    type: str
    pass_name: str
    status: str
    content: Any
    content_hash: str
    run: dict[str, Any] = field(default_factory=dict)
    """``{"run_id", "run_dir"}`` of the run that produced it (run_dir relative to the project when inside it)."""
    subject: str | None = None
    """The implementation pass's target file or the refactor pass's goal."""
    inputs: list[dict[str, Any]] = field(default_factory=list)
    """The artifacts it was built from: ``{"id", "type", "content_hash"}``."""
    warnings: list[str] = field(default_factory=list)
    """Cross-reference problems found when it was saved (ids its inputs do not define)."""
    created_at: str = ""
    history: list[dict[str, Any]] = field(default_factory=list)

    @property
    def number(self) -> int:
        match = _ID.match(self.id)
        return int(match.group(2)) if match else 0

    @property
    def intact(self) -> bool:
        """True when the content still matches the recorded hash."""
        return content_hash(self.content) == self.content_hash

    def at_least(self, status: str) -> bool:
        return STATUS_RANK[self.status] >= STATUS_RANK[status]

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": self.type,
            "pass": self.pass_name,
            "status": self.status,
            "content_hash": self.content_hash,
            "run": self.run,
            "subject": self.subject,
            "inputs": self.inputs,
            "warnings": self.warnings,
            "created_at": self.created_at,
            "history": self.history,
            "content": self.content,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Artifact:
        return cls(
            id=data["id"],
            type=data["type"],
            pass_name=data["pass"],
            status=data["status"],
            content=data["content"],
            content_hash=data["content_hash"],
            run=dict(data.get("run") or {}),
            subject=data.get("subject"),
            inputs=list(data.get("inputs") or []),
            warnings=list(data.get("warnings") or []),
            created_at=data.get("created_at", ""),
            history=list(data.get("history") or []),
        )

    def ref(self) -> dict[str, Any]:
        """How an artifact built from this one names it."""
        return {"id": self.id, "type": self.type, "content_hash": self.content_hash}


class ArtifactStore:
    """The artifacts of one project directory."""

    def __init__(self, project: Path) -> None:
        self.project = project
        self.root = project / ".lattice" / "artifacts"

    def path(self, artifact_id: str) -> Path:
        return self.root / f"{artifact_id}.json"

    def _read(self, path: Path) -> Artifact:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            artifact = Artifact.from_json(data)
        except OSError as exc:
            raise LatticeUserError(f"cannot read artifact {path}: {exc.strerror}") from exc
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
            raise LatticeUserError(
                f"artifact {path} is not a valid artifact file ({exc})",
                error_type=ErrorType.ARTIFACT_INVALID,
            ) from exc
        if artifact.status not in STATUS_RANK:
            raise LatticeUserError(
                f"artifact {path} has an unknown status {artifact.status!r}",
                error_type=ErrorType.ARTIFACT_INVALID,
            )
        return artifact

    def all(self) -> list[Artifact]:
        """Every artifact, oldest first."""
        if not self.root.is_dir():
            return []
        found = [self._read(p) for p in self.root.glob("*.json") if _ID.match(p.stem)]
        return sorted(found, key=lambda a: (a.created_at, a.pass_name, a.number))

    def get(self, artifact_id: str) -> Artifact:
        """The artifact ``artifact_id``; an unknown id is a user error listing the known ones."""
        if not _ID.match(artifact_id) or not self.path(artifact_id).is_file():
            known = [a.id for a in self.all()]
            listing = f"; artifacts here: {', '.join(known)}" if known else "; there are none yet"
            raise LatticeUserError(
                f"no artifact {artifact_id!r} in {self.root}{listing}",
                error_type=ErrorType.ARTIFACT_UNKNOWN,
            )
        return self._read(self.path(artifact_id))

    def latest(self, artifact_type: str) -> Artifact | None:
        """The newest artifact of a type (highest number), whatever its status."""
        of_type = [a for a in self.all() if a.type == artifact_type]
        return max(of_type, key=lambda a: a.number) if of_type else None

    def create(
        self,
        *,
        artifact_type: str,
        pass_name: str,
        content: Any,
        run: dict[str, Any],
        subject: str | None = None,
        inputs: list[dict[str, Any]] | None = None,
        warnings: list[str] | None = None,
    ) -> Artifact:
        """Save a new draft as ``<pass>-<n>`` (n one above the pass's highest)."""
        self.root.mkdir(parents=True, exist_ok=True)
        created = _now()
        taken = (_ID.match(p.stem) for p in self.root.glob(f"{pass_name}-*.json"))
        number = 1 + max((int(m.group(2)) for m in taken if m), default=0)
        while True:
            artifact = Artifact(
                id=f"{pass_name}-{number}",
                type=artifact_type,
                pass_name=pass_name,
                status="draft",
                content=content,
                content_hash=content_hash(content),
                run=run,
                subject=subject,
                inputs=list(inputs or []),
                warnings=list(warnings or []),
                created_at=created,
                history=[{"status": "draft", "at": created}],
            )
            try:  # "x": two passes saving at once never overwrite each other
                with self.path(artifact.id).open("x", encoding="utf-8") as handle:
                    handle.write(_dump(artifact))
            except FileExistsError:
                number += 1
                continue
            return artifact

    def _save(self, artifact: Artifact) -> None:
        atomic_write_text(self.path(artifact.id), _dump(artifact))

    def approve(self, artifact_id: str) -> Artifact:
        """draft → approved, after re-validating the content (a person may have edited it)."""
        artifact = self.get(artifact_id)
        if artifact.status != "draft":
            raise LatticeUserError(
                f"artifact {artifact.id} is already {artifact.status}; only a draft can be approved",
                error_type=ErrorType.ARTIFACT_STATUS,
            )
        problems = schema_problems(artifact.type, artifact.content)
        if problems:
            raise LatticeUserError(
                f"artifact {artifact.id} does not match the {artifact.type} schema, so it cannot "
                "be approved; fix its content:\n  " + "\n  ".join(problems[:20]),
                error_type=ErrorType.ARTIFACT_INVALID,
            )
        entry: dict[str, Any] = {"status": "approved", "at": _now()}
        if not artifact.intact:
            entry["edited"] = {"from": artifact.content_hash}
            artifact.content_hash = content_hash(artifact.content)
        artifact.status = "approved"
        artifact.history.append(entry)
        self._save(artifact)
        return artifact

    def lock(self, artifact_id: str) -> Artifact:
        """approved → locked. A draft must be approved first; a locked artifact stays locked."""
        artifact = self.get(artifact_id)
        if artifact.status == "draft":
            raise LatticeUserError(
                f"artifact {artifact.id} is a draft; approve it before locking it: "
                f"lattice artifacts approve {artifact.id} --project {self.project}",
                error_type=ErrorType.ARTIFACT_STATUS,
            )
        if artifact.status == "locked":
            raise LatticeUserError(
                f"artifact {artifact.id} is already locked", error_type=ErrorType.ARTIFACT_STATUS
            )
        if not artifact.intact:
            raise LatticeUserError(
                f"artifact {artifact.id} was changed after it was approved (its content no "
                "longer matches its hash); restore it before locking it",
                error_type=ErrorType.ARTIFACT_MODIFIED,
            )
        artifact.status = "locked"
        artifact.history.append({"status": "locked", "at": _now()})
        self._save(artifact)
        return artifact


def _dump(artifact: Artifact) -> str:
    return json.dumps(artifact.to_json(), indent=2, ensure_ascii=False) + "\n"

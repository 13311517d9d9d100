"""Deployed versions of a folder's workflows (docs/services.md, "Versions").

A version is a workflow's content as it was deployed, kept for good under the gateway's
runs folder, in ``.versions/<name>/<number>/``: its document (``workflow.json``), its ExecIR
(``execir.json``) and ``version.json`` with the digests of both. Versions are numbered
1, 2, … per name; deploying content a version already has (the same document, whatever
its whitespace or key order) is that version, not a new one. ``latest`` is the highest
number: it moves only when new content is deployed.

A version is never changed: its folder is made whole under a temporary name and then
renamed into place (a rename onto a number that exists fails, so two deploys at once
take two numbers), its files are read-only, and reading a version checks both digests
(a version whose files were changed afterwards is refused, never run).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lattice.errors import ErrorType, LatticeUserError
from lattice.ir.models import ExecIR
from lattice.ir.serialize import execir_digest, ir_from_json, ir_to_json

VERSIONS_DIR = ".versions"
"""The store's folder under the runs folder (beside ``.deliveries`` and ``.schedules``)."""
LATEST = "latest"
REF = re.compile(r"^(?P<name>.+?)(?:@(?P<version>[0-9]+|latest))?$")


def document_digest(document: Any) -> str:
    """``sha256:<hex>`` of the document's canonical JSON (sorted keys, no spaces)."""
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def split_ref(ref: str) -> tuple[str, int | None]:
    """``NAME@VERSION`` as (NAME, VERSION); ``NAME`` and ``NAME@latest`` have None."""
    match = REF.match(ref)
    if not match:
        raise LatticeUserError(f"workflow {ref!r}: expected NAME or NAME@VERSION")
    version = match.group("version")
    return match.group("name"), None if version in (None, LATEST) else int(version)


@dataclass(frozen=True)
class Version:
    """One deployed version of a workflow."""

    name: str
    number: int
    digest: str
    """The document's digest (``document_digest``)."""
    ir_digest: str
    """The ExecIR's digest, as a run folder records it for its ``execir.json``."""
    deployed_at: str

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.number}"

    def to_meta(self) -> dict[str, Any]:
        """What a run of this version records (``meta.workflow_version``)."""
        return {
            "name": self.name,
            "version": self.number,
            "digest": self.digest,
            "ir_digest": self.ir_digest,
        }


class VersionStore:
    """The deployed versions under ``root`` (the runs folder's ``.versions``)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._lock = threading.Lock()
        """One deploy at a time in this process: the same new content seen by two
        requests at once is one version, not two."""

    def deploy(self, name: str, document: Any, ir: ExecIR, *, now: str) -> tuple[Version, bool]:
        """Keep ``document`` (lowered to ``ir``) as a version of ``name``: the version
        that has its content already (and False), or a new one numbered after the last
        (and True)."""
        _check_name(name)
        with self._lock:
            return self._deploy(name, document, ir, now=now)

    def _deploy(self, name: str, document: Any, ir: ExecIR, *, now: str) -> tuple[Version, bool]:
        digest = document_digest(document)
        for number in reversed(self.numbers(name)):
            version = self._info(name, number)
            if version is not None and version.digest == digest:
                return version, False
        ir_text = ir_to_json(ir)
        folder = self.root / name
        folder.mkdir(parents=True, exist_ok=True)
        while True:
            number = (self.numbers(name) or [0])[-1] + 1
            version = Version(name, number, digest, execir_digest(ir), now)
            staging = Path(tempfile.mkdtemp(prefix=".deploying-", dir=folder))
            _write(staging / "workflow.json", json.dumps(document, indent=2, ensure_ascii=False))
            _write(staging / "execir.json", ir_text)
            info = {**version.to_meta(), "deployed_at": now}
            _write(staging / "version.json", json.dumps(info, indent=2))
            try:
                os.rename(staging, folder / str(number))
            except OSError:  # another deploy took this number: take the next
                shutil.rmtree(staging, ignore_errors=True)
                if (folder / str(number)).is_dir():
                    continue
                raise
            return version, True

    def numbers(self, name: str) -> list[int]:
        """The version numbers of ``name``, in order."""
        folder = self.root / name
        if not folder.is_dir():
            return []
        return sorted(int(entry.name) for entry in folder.iterdir() if entry.name.isdigit())

    def names(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(entry.name for entry in self.root.iterdir() if self.numbers(entry.name))

    def latest(self, name: str) -> Version | None:
        numbers = self.numbers(name)
        return self.get(name, numbers[-1]) if numbers else None

    def get(self, name: str, number: int) -> Version:
        """Version ``number`` of ``name``; a LatticeUserError when there is none."""
        _check_name(name)
        version = self._info(name, number)
        if version is None:
            known = ", ".join(str(n) for n in self.numbers(name)) or "none"
            raise LatticeUserError(
                f"no version {number} of workflow {name!r} (deployed: {known})",
                error_type=ErrorType.NOT_FOUND,
            )
        return version

    def load(self, version: Version) -> tuple[Any, ExecIR]:
        """The document and ExecIR of ``version``, their digests checked: a version
        whose files changed after it was deployed is refused."""
        folder = self.root / version.name / str(version.number)
        try:
            document = json.loads((folder / "workflow.json").read_text(encoding="utf-8"))
            ir_text = (folder / "execir.json").read_text(encoding="utf-8")
            ir = ir_from_json(ir_text)
        except (OSError, ValueError) as exc:
            raise LatticeUserError(f"workflow {version.ref}: cannot read it: {exc}") from None
        if document_digest(document) != version.digest or execir_digest(ir) != version.ir_digest:
            raise LatticeUserError(
                f"workflow {version.ref} was changed after it was deployed (its digest "
                f"does not match {folder}/version.json): a deployed version is immutable; "
                "deploy the change as a new version",
                error_type=ErrorType.VERSION_CHANGED,
            )
        return document, ir

    def _info(self, name: str, number: int) -> Version | None:
        try:
            raw = json.loads((self.root / name / str(number) / "version.json").read_text())
            return Version(name, number, raw["digest"], raw["ir_digest"], raw["deployed_at"])
        except (OSError, ValueError, KeyError, TypeError):
            return None


def _check_name(name: str) -> None:
    if not name or name.startswith(".") or "/" in name or "\\" in name or "\x00" in name:
        raise LatticeUserError(f"workflow name {name!r} cannot name a version")


def _write(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")
    path.chmod(0o444)

"""The workflows of a folder as callable services: each file lowered once (again when it
changes), named for MCP, with the schemas of its inputs and its result.

A workflow that does not lower is left out of the catalog (``problems`` says why), as
are the files beside workflows that are not workflows (mock scripts, answers, inputs).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lattice.errors import DocumentError, ErrorType, LatticeUserError, Severity
from lattice.ir.models import ContractOpBase, ExecIR
from lattice.lower import lower_document
from lattice.runtime.events import utc_now
from lattice.services.versions import Version, VersionStore, split_ref

SIDE_FILES = (".mock.json", ".answers.json", ".inputs.json", ".fixtures.json")
"""Files beside workflows that are not workflows."""
TOOL_NAME = re.compile(r"[^A-Za-z0-9_.-]+")
"""What an MCP tool name may not hold (names are 1 to 128 of ``A-Za-z0-9_.-``)."""

RESULT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "run_id": {"type": "string", "description": "the run (its folder's name)"},
        "status": {
            "type": "string",
            "enum": ["completed", "failed", "halted", "interrupted"],
        },
        "output": {"description": "what the workflow's end node returns"},
        "question": {
            "type": ["object", "null"],
            "description": "what a halted run waits for: answer it with the answer tool",
        },
        "failure": {"type": ["object", "null"]},
    },
    "required": ["run_id", "status"],
}
"""A tool's result (its structured content): the end node's output, or what the run
waits for, or why it failed. The format gives an end node no schema of its own: where
every end returns one op's checked result, ``output`` carries that op's schema."""


@dataclass(frozen=True)
class Workflow:
    """One workflow file of the folder, lowered."""

    name: str
    """The tool's name: the document's name, made fit for MCP."""
    path: Path
    document: Any
    ir: ExecIR
    version: Version | None = None
    """The deployed version this is (None where versions are not kept)."""

    @property
    def ref(self) -> str:
        """``NAME@VERSION`` (the name alone where versions are not kept)."""
        return self.version.ref if self.version is not None else self.name

    @property
    def description(self) -> str:
        info = self.ir.workflow
        return (info.description or info.name or self.name).strip()

    @property
    def input_schema(self) -> dict[str, Any]:
        schema = dict(self.ir.inputs_schema or {})
        schema.setdefault("type", "object")
        return schema

    @property
    def output_schema(self) -> dict[str, Any]:
        output = end_output_schema(self.ir)
        if output is None:
            return RESULT_SCHEMA
        properties = {**RESULT_SCHEMA["properties"], "output": output}
        return {**RESULT_SCHEMA, "properties": properties}

    @property
    def mock_path(self) -> Path:
        """The mock script beside the workflow (``NAME.mock.json``)."""
        return self.path.with_name(self.path.name.removesuffix(".json") + ".mock.json")


def end_output_schema(ir: ExecIR) -> dict[str, Any] | None:
    """The schema of the run's output when every END op returns ``$vars.<op>.result`` of
    a model's op (its output schema, or text), the same schema for every end; else None."""
    found: list[Any] = []
    for op in ir.ops.values():
        if op.kind != "END":
            continue
        output = getattr(op, "output", None)
        match = (
            re.fullmatch(r"\$vars\.([A-Za-z0-9_-]+)\.result", output)
            if isinstance(output, str)
            else None
        )
        source = ir.ops.get(match.group(1)) if match else None
        if not isinstance(source, ContractOpBase):
            return None
        found.append(source.output_schema or {"type": "string"})
    if not found or any(schema != found[0] for schema in found):
        return None
    return dict(found[0])


class Catalog:
    """The workflows of ``root`` (lowered against the configured MCP servers); with
    ``versions`` (a folder: the gateway's is ``<runs dir>/.versions``), each file's
    content is deployed there as a version when it is first seen (at start, and again
    whenever the file changes), and older versions stay callable as ``NAME@VERSION``."""

    def __init__(
        self, root: Path, *, mcp_servers: list[str] | None = None, versions: Path | None = None
    ) -> None:
        self.root = root.resolve()
        self.mcp_servers = mcp_servers
        self.versions = VersionStore(versions) if versions is not None else None
        self.problems: dict[str, str] = {}
        """Files left out, by path under the folder, and why."""
        self._cache: dict[Path, tuple[tuple[int, int], Workflow | None]] = {}
        self._deployed: dict[tuple[str, str], tuple[Any, Version]] = {}

    def files(self) -> list[Path]:
        """Workflow files under the folder, in order (hidden folders and side files left out)."""
        found = []
        for folder, dirs, names in os.walk(self.root):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for file in sorted(names):
                if file.endswith(".json") and not file.endswith(SIDE_FILES):
                    path = Path(folder) / file
                    if path.resolve().is_relative_to(self.root):
                        found.append(path)
        return found

    def workflows(self) -> dict[str, Workflow]:
        """Every workflow that lowers, by tool name (a name two files share gets the
        second file's path in it)."""
        out: dict[str, Workflow] = {}
        for path in self.files():
            workflow = self._load(path)
            if workflow is None:
                continue
            name = workflow.name
            if name in out:
                name = tool_name(path.relative_to(self.root).as_posix().removesuffix(".json"))
                workflow = Workflow(name, workflow.path, workflow.document, workflow.ir)
            out[name] = self._deploy(workflow)
        return out

    def get(self, name: str) -> Workflow | None:
        """The workflow ``name``, or ``NAME@VERSION`` (``@latest``: the file as it is
        now); None when there is none."""
        try:
            return self.resolve(name)
        except LatticeUserError:
            return None

    def resolve(self, ref: str) -> Workflow:
        """The workflow ``ref`` names: ``NAME`` or ``NAME@latest`` (the folder's file as
        it is now), ``NAME@VERSION`` (that deployed version, checked unchanged), or a file
        under the folder (``greet.json``, ``greet.json@2``); a LatticeUserError else."""
        base, number = split_ref(ref)
        current = self.file(base) if base.endswith(".json") else self.workflows().get(base)
        name = current.name if current is not None else base
        if number is None or (
            current is not None and current.version is not None and current.version.number == number
        ):
            if current is None:
                raise LatticeUserError(
                    f"no workflow {base!r} under {self.root}", error_type=ErrorType.NOT_FOUND
                )
            return current
        if self.versions is None:
            raise LatticeUserError(
                f"workflow {ref!r}: this server keeps no versions of its workflows"
            )
        version = self.versions.get(name, number)
        document, ir = self.versions.load(version)
        path = current.path if current is not None else self.root / f"{name}.json"
        return Workflow(name, path, document, ir, version)

    def file(self, relative: str) -> Workflow:
        """The workflow in the file ``relative`` to the folder (what a trigger or a
        schedule names); a LatticeUserError when it leads outside, is missing or does
        not lower."""
        path = (self.root / relative).resolve()
        if Path(relative).is_absolute() or not path.is_relative_to(self.root):
            raise LatticeUserError(
                f"workflow {relative!r} is outside {self.root}", error_type=ErrorType.INVALID_PATH
            )
        if not path.is_file():
            raise LatticeUserError(f"no workflow {relative!r} under {self.root}")
        workflow = self._load(path)
        if workflow is None:
            problem = self.problems.get(path.relative_to(self.root).as_posix(), "not a workflow")
            raise LatticeUserError(f"workflow {relative!r}: {problem}")
        for named in self.workflows().values():  # its name (and so its version) in the folder
            if named.path == workflow.path:
                return named
        return self._deploy(workflow)

    def _deploy(self, workflow: Workflow) -> Workflow:
        """``workflow`` as a deployed version (deployed now when its content is new)."""
        if self.versions is None or workflow.version is not None:
            return workflow
        key = (workflow.name, str(workflow.path))
        cached = self._deployed.get(key)
        if cached is not None and cached[0] is workflow.document:  # the file is unchanged
            version = cached[1]
        else:
            version, _new = self.versions.deploy(
                workflow.name, workflow.document, workflow.ir, now=utc_now()
            )
            self._deployed[key] = (workflow.document, version)
        return Workflow(workflow.name, workflow.path, workflow.document, workflow.ir, version)

    def _load(self, path: Path) -> Workflow | None:
        stat = path.stat()
        key = (stat.st_mtime_ns, stat.st_size)
        cached = self._cache.get(path)
        if cached is not None and cached[0] == key:
            return cached[1]
        where = path.relative_to(self.root).as_posix()
        workflow: Workflow | None = None
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
            self.problems[where] = f"cannot read it: {exc}"
            document = None
        if _looks_like_workflow(document):
            try:
                lowered = lower_document(
                    document,
                    base_dir=path.parent,
                    mcp_servers=self.mcp_servers,
                    unknown_mcp=Severity.ERROR if self.mcp_servers else Severity.WARNING,
                )
            except DocumentError as exc:
                self.problems[where] = str(exc)
            else:
                if lowered.ir is None:
                    first = lowered.errors[0] if lowered.errors else None
                    self.problems[where] = f"it does not lower: {first.message if first else '?'}"
                else:
                    self.problems.pop(where, None)
                    name = tool_name(lowered.ir.workflow.name or path.stem)
                    workflow = Workflow(name, path, document, lowered.ir)
        self._cache[path] = (key, workflow)
        return workflow


def _looks_like_workflow(document: Any) -> bool:
    return isinstance(document, Mapping) and ("nodes" in document or "workflow" in document)


def tool_name(text: str) -> str:
    """``text`` as an MCP tool name: runs of other characters made ``_``, at most 128."""
    return (TOOL_NAME.sub("_", text).strip("_") or "workflow")[:128]

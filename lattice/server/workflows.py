"""The documents a client names (files under ``--workflows``) or sends (inline).

A name is a path relative to the workflows folder; one that leads outside it (``..``, an
absolute path, a symbolic link pointing out) is refused. Mock scripts and fixtures named
in a request are resolved the same way. Lowering a file is cached until the file changes.

An inline document is untrusted like any document: lowering it reads no file (a ``skill``
node's ``SKILL.md`` is not looked up, here or in the home folder), and its ``mcp`` nodes
may name only the servers the server's configuration declares.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from lattice.document.models import Node
from lattice.errors import DocumentError
from lattice.ir.serialize import ir_to_dict
from lattice.lower import lower_document
from lattice.lower.compiler import LoweringResult, default_registry
from lattice.lower.llm_nodes import SkillLowerer
from lattice.lower.registry import LowererRegistry, LoweringContext, NodeLowering
from lattice.server.errors import ApiError, diagnostics_json, not_found

SIDE_FILES = (".mock.json", ".answers.json", ".inputs.json")
"""Files beside workflows that are not workflows."""


class _NoFileSkillLowerer(SkillLowerer):
    """``skill`` nodes of untrusted documents: the skill's name and description only."""

    node_type: ClassVar[str] = "skill"

    def lower(self, node: Node, ctx: LoweringContext) -> NodeLowering:
        local = node.model_copy(update={"data": {**node.data, "scope": None}})
        saved, ctx.base_dir = ctx.base_dir, None
        try:
            return super().lower(local, ctx)
        finally:
            ctx.base_dir = saved


def untrusted_registry() -> LowererRegistry:
    """The lowerers for documents sent over HTTP: every node type, no file reads."""
    registry = default_registry()
    registry.register(_NoFileSkillLowerer())
    return registry


UNTRUSTED = untrusted_registry()


@dataclass(frozen=True)
class Loaded:
    """A workflow file, read and lowered."""

    name: str
    path: Path
    document: Any
    lowered: LoweringResult

    def describe(self, *, full: bool) -> dict[str, Any]:
        doc: Mapping[str, Any] = self.document if isinstance(self.document, Mapping) else {}
        wrapped = doc.get("workflow")
        inner: Mapping[str, Any] = wrapped if isinstance(wrapped, Mapping) else doc
        out: dict[str, Any] = {
            "name": self.name,
            "id": inner.get("id"),
            "title": inner.get("name"),
            "description": inner.get("description"),
            "valid": self.lowered.ir is not None,
            "links": {"self": f"/v1/workflows/{self.name}"},
        }
        if full:
            out["document"] = self.document
            out["execir"] = ir_to_dict(self.lowered.ir) if self.lowered.ir is not None else None
            out["diagnostics"] = diagnostics_json(self.lowered.diagnostics)
        return out


class WorkflowLibrary:
    """The workflows folder of a server (``root`` None: only inline documents)."""

    def __init__(self, root: Path | None, mcp_servers: list[str]) -> None:
        self.root = root.resolve() if root is not None else None
        self.mcp_servers = mcp_servers
        self._cache: dict[Path, tuple[tuple[int, int], Loaded]] = {}

    def resolve(self, name: str, *, what: str = "workflow") -> Path:
        """The file ``name`` under the workflows folder; 400 when it leads outside, 404
        when there is no such file."""
        if self.root is None:
            raise ApiError(
                400,
                "no_workflows_dir",
                f"this server has no workflows folder (lattice serve --workflows DIR): "
                f"a {what} cannot be named by path",
            )
        if not name or "\x00" in name or Path(name).is_absolute() or "\\" in name:
            raise ApiError(400, "invalid_path", f"{what} {name!r}: not a relative path")
        path = (self.root / name).resolve()
        if not path.is_relative_to(self.root):
            raise ApiError(400, "invalid_path", f"{what} {name!r} is outside the workflows folder")
        if not path.is_file():
            raise not_found(f"no {what} {name!r} under the workflows folder")
        return path

    def load(self, name: str) -> Loaded:
        """The workflow file ``name``, lowered (again only when the file changed)."""
        path = self.resolve(name)
        stat = path.stat()
        key = (stat.st_mtime_ns, stat.st_size)
        cached = self._cache.get(path)
        if cached is not None and cached[0] == key:
            return cached[1]
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise ApiError(
                422, "invalid_document", f"cannot read workflow {name!r}: {exc}"
            ) from None
        try:
            lowered = lower_document(document, base_dir=path.parent, mcp_servers=self.mcp_servers)
        except DocumentError as exc:
            lowered = LoweringResult(None, list(exc.diagnostics))
        loaded = Loaded(name, path, document, lowered)
        self._cache[path] = (key, loaded)
        return loaded

    def names(self) -> list[str]:
        """Workflow files under the folder (mock scripts, answers and inputs left out)."""
        if self.root is None:
            return []
        found = []
        for folder, dirs, files in os.walk(self.root):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for file in sorted(files):
                if not file.endswith(".json") or file.endswith(SIDE_FILES):
                    continue
                path = Path(folder) / file
                if path.resolve().is_relative_to(self.root):
                    found.append(path.relative_to(self.root).as_posix())
        return found

    def listing(self) -> list[dict[str, Any]]:
        out = []
        for name in self.names():
            try:
                loaded = self.load(name)
            except ApiError as exc:
                out.append({"name": name, "valid": False, "error": exc.message})
                continue
            doc = loaded.document
            if isinstance(doc, Mapping) and ("nodes" in doc or "workflow" in doc):
                out.append(loaded.describe(full=False))
        return out

    def lower_inline(self, document: Mapping[str, Any]) -> LoweringResult:
        """Lower a document sent by a client (no file reads; configured MCP servers only)."""
        try:
            return lower_document(document, registry=UNTRUSTED, mcp_servers=self.mcp_servers)
        except DocumentError as exc:
            return LoweringResult(None, list(exc.diagnostics))

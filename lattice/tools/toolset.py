"""One interface for every set of tools an agent may call.

A ``Toolset`` lists its tools (name, description, arguments' JSON Schema) and calls one
by name. The workspace tools (read, search, edit, the sandboxed shell, web fetch) and
the MCP servers a user configured each sit behind it, as pydantic-ai's toolsets do, so
the agent loop knows one shape. A toolset is opened by its owner, called any number of
times and closed once (``aclose``) when the run ends.

A call that fails in a way the model can act on (a path outside the workspace, a
timeout, a refused command) returns a ``ToolResult`` with ``is_error`` set and a message
saying what to do instead; it never raises for those. Exceptions are for faults of
Lattice or of the user's configuration.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from lattice.llm.base import ToolDef


@dataclass(frozen=True, slots=True)
class FileChange:
    """One file an agent's tool changed (or, in patch-only mode, would have changed).

    ``path`` is relative to the workspace root; ``diff`` is a unified diff of the change;
    ``before``/``after`` are sha256 digests of the file's bytes (None: absent), so a
    change replayed after a crash can tell whether it is already applied; ``content`` is
    the file's new text, kept so that a recorded change can be applied again exactly.
    """

    path: str
    diff: str
    before: str | None
    after: str | None
    applied: bool = True
    content: str | None = field(default=None, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "diff": self.diff,
            "before": self.before,
            "after": self.after,
            "applied": self.applied,
            "content": self.content,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FileChange:
        return cls(
            path=data["path"],
            diff=data["diff"],
            before=data.get("before"),
            after=data.get("after"),
            applied=data.get("applied", True),
            content=data.get("content"),
        )


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What one tool call gives back to the model, and the files it changed."""

    text: str
    is_error: bool = False
    changes: tuple[FileChange, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"text": self.text, "is_error": self.is_error}
        if self.changes:
            out["changes"] = [change.to_json() for change in self.changes]
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ToolResult:
        return cls(
            text=data["text"],
            is_error=data.get("is_error", False),
            changes=tuple(FileChange.from_json(c) for c in data.get("changes", ())),
        )


@runtime_checkable
class Toolset(Protocol):
    """A set of tools under one name (``workspace``, or an MCP server's id)."""

    name: str

    async def list_tools(self) -> list[ToolDef]:
        """The tools offered, under the names the model calls them by."""
        ...

    async def call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        """Call one tool; failures the model can act on come back as ``is_error``."""
        ...

    async def aclose(self) -> None:
        """Release what the toolset holds (processes, sessions); called once."""
        ...

"""Pydantic models of a workflow document (the cc-wf-studio format plus Lattice's node types).

Only the envelope, nodes and connections are modelled here; each node type's
``data`` is checked by its lowerer (see ``lattice.document.nodes``), so that one
bad node does not hide the problems of the others. The models build their validators on
first use (``defer_build``), not when ``lattice`` is imported.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

SEQUENTIAL_PORT = "default"
"""The one sequential port every node has (``output``, ``out``, ``in``, missing ... in files)."""

_SEQUENTIAL_ALIASES = frozenset({"", "output", "out", "input", "in", "default", "next"})
_BRANCH_PORT = re.compile(r"^branch-(\d+)$")


def normalize_port(port: str | None) -> str:
    """Map a port name as written in a file to its canonical form.

    Sequential aliases become ``"default"``; ``branch-N`` stays ``branch-N``;
    any other name (``failed``, for example) is kept as written.
    """
    if port is None:
        return SEQUENTIAL_PORT
    stripped = port.strip()
    if stripped.lower() in _SEQUENTIAL_ALIASES:
        return SEQUENTIAL_PORT
    return stripped


class Position(BaseModel):
    """Where the editor drew a node; meaningless to Lattice but kept."""

    model_config = ConfigDict(extra="allow", defer_build=True)
    x: float = 0
    y: float = 0


class Node(BaseModel):
    """One node of a workflow: ``{id, type, name, position, data, parentId?}``."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, defer_build=True)
    id: str = Field(min_length=1)
    type: str = Field(min_length=1)
    name: str = ""
    position: Position | None = None
    data: dict[str, Any] = Field(default_factory=dict)
    parent_id: str | None = Field(default=None, alias="parentId")
    _pointer: str | None = PrivateAttr(default=None)
    """JSON pointer of this node in the file as read (set by the loader)."""

    @property
    def title(self) -> str:
        """A label for people: ``data.label``, ``data.name``, ``name`` or the id."""
        for candidate in (self.data.get("label"), self.data.get("name"), self.name):
            if isinstance(candidate, str) and candidate.strip():
                return candidate.strip()
        return self.id


class Connection(BaseModel):
    """An edge ``from`` → ``to``; ports are normalised by ``normalize_port``."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, defer_build=True)
    id: str | None = None
    source: str = Field(alias="from", min_length=1)
    target: str = Field(alias="to", min_length=1)
    from_port: str | None = Field(default=None, alias="fromPort")
    to_port: str | None = Field(default=None, alias="toPort")
    condition: Any = None
    _pointer: str | None = PrivateAttr(default=None)
    """JSON pointer of this connection in the file as read (set by the loader)."""

    @property
    def port(self) -> str:
        """The canonical output port this edge leaves from."""
        return normalize_port(self.from_port)


class SubAgentFlow(BaseModel):
    """A reusable sub-flow referenced by ``subAgentFlow`` nodes."""

    model_config = ConfigDict(extra="allow", defer_build=True)
    id: str = Field(min_length=1)
    name: str = ""
    nodes: list[Node] = Field(default_factory=list)
    connections: list[Connection] = Field(default_factory=list)


class Workflow(BaseModel):
    """A whole document after unwrapping and per-item validation.

    ``pointer_base`` is the JSON pointer of the workflow object inside the file
    (``/workflow`` for wrapped samples), so diagnostics point into the real file.
    """

    model_config = ConfigDict(extra="allow", populate_by_name=True, defer_build=True)
    id: str = ""
    name: str = ""
    description: str | None = None
    version: Any = None
    schema_version: Any = Field(default=None, alias="schemaVersion")
    nodes: list[Node] = Field(default_factory=list)
    connections: list[Connection] = Field(default_factory=list)
    sub_agent_flows: list[SubAgentFlow] = Field(default_factory=list, alias="subAgentFlows")
    pointer_base: str = Field(default="", exclude=True)

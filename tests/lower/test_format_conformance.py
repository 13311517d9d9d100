"""The format Lattice targets, kept as data (lattice/document/upstream_format.json, from
upstream's type definitions, and lattice/document/fork_format.json, the node types of a
fork of the editor), has a row in docs/documents.md for every node type and field, and
every node type lowers: a new upstream or fork field or type fails here until it is
given a meaning."""

from __future__ import annotations

import json
import re
from importlib import resources
from typing import Any

from lattice.lower.compiler import DEFAULT_REGISTRY
from tests.conftest import REPO

SECTION = "## Every field of the format"


def upstream_format() -> dict[str, Any]:
    text = resources.files("lattice.document").joinpath("upstream_format.json").read_text()
    data: dict[str, Any] = json.loads(text)
    return data


def fork_format() -> dict[str, Any]:
    text = resources.files("lattice.document").joinpath("fork_format.json").read_text()
    data: dict[str, Any] = json.loads(text)
    return data


def node_type_entries(node_types: dict[str, list[str]]) -> list[str]:
    entries = []
    for node_type, fields in node_types.items():
        entries.append(node_type)
        entries += [f"{node_type}.{field}" for field in fields]
    return entries


def format_entries(data: dict[str, Any]) -> list[str]:
    """Every node type and field, as the table's first column names them."""
    entries = [f"envelope.{field}" for field in data["envelope"]]
    for group in ("slashCommandOptions", "hooks", "tour", "subAgentFlows", "node", "connection"):
        entries += [f"{group}.{field}" for field in data[group]]
    return entries + node_type_entries(data["nodeTypes"])


def documented(markdown: str) -> set[str]:
    """The first-column keys of the table in the section "Every field of the format"."""
    section = markdown.split(SECTION, 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([^`]+)` \|", section, flags=re.MULTILINE))


def missing(data: dict[str, Any], markdown: str) -> list[str]:
    rows = documented(markdown)
    return [entry for entry in format_entries(data) if entry not in rows]


def test_the_data_names_the_upstream_version_it_follows() -> None:
    upstream = upstream_format()["upstream"]
    assert upstream["repository"] == "breaking-brake/cc-wf-studio"
    assert re.fullmatch(r"[0-9a-f]{40}", upstream["commit"])
    assert upstream["file"].endswith("workflow-definition.ts")


def test_every_node_type_and_field_has_a_row() -> None:
    markdown = (REPO / "docs" / "documents.md").read_text()
    assert missing(upstream_format(), markdown) == []


def test_a_removed_row_is_caught() -> None:
    markdown = (REPO / "docs" / "documents.md").read_text()
    row = next(
        line for line in markdown.splitlines() if line.startswith("| `skill.executionMode` |")
    )
    assert missing(upstream_format(), markdown.replace(row + "\n", "")) == ["skill.executionMode"]


def test_a_new_upstream_field_is_caught() -> None:
    data = upstream_format()
    data["nodeTypes"]["mcp"].append("retryPolicy")
    markdown = (REPO / "docs" / "documents.md").read_text()
    assert missing(data, markdown) == ["mcp.retryPolicy"]


def test_every_node_type_of_the_format_has_a_lowerer() -> None:
    for node_type in upstream_format()["nodeTypes"]:
        assert DEFAULT_REGISTRY.get(node_type) is not None, node_type


def test_every_node_type_and_field_of_the_fork_has_a_row_and_a_lowerer() -> None:
    data = fork_format()
    assert re.fullmatch(r"[0-9a-f]{40}", data["fork"]["commits"][0])
    markdown = (REPO / "docs" / "documents.md").read_text()
    rows = documented(markdown)
    assert [e for e in node_type_entries(data["nodeTypes"]) if e not in rows] == []
    for node_type in data["nodeTypes"]:
        assert DEFAULT_REGISTRY.get(node_type) is not None, node_type
        assert node_type not in upstream_format()["nodeTypes"], "the fork's type is upstream's now"


def test_a_new_fork_field_is_caught() -> None:
    data = fork_format()
    data["nodeTypes"]["branchSession"].append("summaryFormat")
    rows = documented((REPO / "docs" / "documents.md").read_text())
    assert [e for e in node_type_entries(data["nodeTypes"]) if e not in rows] == [
        "branchSession.summaryFormat"
    ]

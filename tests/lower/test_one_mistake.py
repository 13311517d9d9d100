"""One mistake, one diagnostic: what follows from a mistake already reported (a reference
to a node whose type is misspelt, connections to the id a duplicated node had, the
nodes after a shared one) is not reported again, and each diagnostic is located at
something the document holds."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from lattice.lower import lower_document
from tests.builders import chain, conn, describe, node, workflow, wrap


def _branches(node_id: str) -> dict[str, Any]:
    return node(
        node_id,
        "ifElse",
        evaluationTarget="$in.x",
        branches=[{"label": "a", "condition": "== 1"}, {"label": "b"}],
    )


def misspelt_type_read_downstream() -> dict[str, Any]:
    return chain(node("a", "promt", prompt="x"), node("b", "prompt", prompt="{{ $vars.a.result }}"))


def misspelt_start() -> dict[str, Any]:
    doc = chain(node("a", "prompt", prompt="x"))
    doc["nodes"][0]["type"] = "strat"
    return doc


def misspelt_end() -> dict[str, Any]:
    doc = chain(node("a", "prompt", prompt="x"), node("b", "prompt", prompt="y"))
    doc["nodes"][3]["type"] = "ned"
    return doc


def node_given_another_nodes_id() -> dict[str, Any]:
    """``b`` renamed to ``a``: its connections (and a reference) still name ``b``."""
    doc = chain(
        node("a", "prompt", prompt="x"),
        _branches("b"),
        node("c", "prompt", prompt="{{ $vars.b }} {{ $vars.a.result }}"),
    )
    doc["connections"][2] = conn("b", "c", "branch-0")
    doc["connections"].append(conn("b", "c", "branch-1"))
    doc["nodes"][2]["id"] = "a"
    return doc


def duplicate_id_of_another_type_read_downstream() -> dict[str, Any]:
    return workflow(
        [
            node("start", "start"),
            node("a", "prompt", prompt="x"),
            _branches("a"),
            node("c", "prompt", prompt="{{ $vars.a.result }}"),
            node("end", "end"),
        ],
        [
            conn("start", "a"),
            conn("a", "c", "branch-0"),
            conn("a", "c", "branch-1"),
            conn("a", "c"),
            conn("c", "end"),
        ],
    )


def connection_out_of_an_end_node() -> dict[str, Any]:
    doc = chain(node("a", "prompt", prompt="x"))
    doc["connections"].append(conn("end", "a"))
    return doc


def branching_node_without_a_from_port() -> dict[str, Any]:
    doc = chain(_branches("i"))
    doc["connections"][1] = conn("i", "end", "branch-0")
    doc["connections"].append(conn("i", "end"))
    return doc


def edges_instead_of_connections() -> dict[str, Any]:
    doc = chain(node("a", "prompt", prompt="x"))
    doc["edges"] = [
        {"id": c["id"], "source": c["from"], "target": c["to"]} for c in doc.pop("connections")
    ]
    return doc


CASES: list[tuple[Callable[[], dict[str, Any]], str, str | None, str, str]] = [
    # builder, code, node, pointer, words of the message
    (misspelt_type_read_downstream, "unknown-node-type", "a", "/nodes/1/type", "'prompt'"),
    (misspelt_start, "unknown-node-type", "start", "/nodes/0/type", "'start'"),
    (misspelt_end, "unknown-node-type", "end", "/nodes/3/type", "'end'"),
    (node_given_another_nodes_id, "node-duplicate-id", "a", "/nodes/2/id", "'b', which no node"),
    (duplicate_id_of_another_type_read_downstream, "node-duplicate-id", "a", "/nodes/2/id", "'a'"),
    (connection_out_of_an_end_node, "connection-unknown-port", "end", "/connections/2/from", "end"),
    (
        branching_node_without_a_from_port,
        "connection-unknown-port",
        "i",
        "/connections/2",
        "fromPort",
    ),
    (edges_instead_of_connections, "invalid-document", None, "/edges", "rename 'edges'"),
]


@pytest.mark.parametrize("wrapped", [False, True], ids=["plain", "wrapped"])
@pytest.mark.parametrize(
    ("build", "code", "node_id", "pointer", "says"),
    CASES,
    ids=[case[0].__name__ for case in CASES],
)
def test_one_mistake_gives_one_diagnostic(
    build: Callable[[], dict[str, Any]],
    code: str,
    node_id: str | None,
    pointer: str,
    says: str,
    wrapped: bool,
) -> None:
    doc = build()
    result = lower_document(wrap(doc) if wrapped else doc)
    assert len(result.diagnostics) == 1, describe(result.diagnostics)
    (found,) = result.diagnostics
    prefix = "/workflow" if wrapped else ""
    assert (found.code, found.node_id, found.pointer) == (code, node_id, prefix + pointer)
    assert says in found.message, found.message
    assert result.ir is None


def test_edges_renamed_to_connections_lower() -> None:
    """The hint of ``edges_instead_of_connections`` is the fix."""
    doc = edges_instead_of_connections()
    doc["connections"] = doc.pop("edges")
    assert lower_document(doc).ir is not None


def _mesh() -> dict[str, Any]:
    """start fans out to a, b, c; each pair of them leads on to a node of its own (d, e,
    f), and those meet again: drawn as a mesh, as a third-party editor does."""
    edges = [
        ("start", "a"), ("start", "b"), ("start", "c"),
        ("a", "d"), ("a", "e"), ("b", "d"), ("b", "f"), ("c", "e"), ("c", "f"),
        ("d", "g"), ("e", "g"), ("e", "h"), ("f", "h"),
        ("g", "i"), ("h", "i"), ("h", "j"), ("i", "end"), ("j", "end"),
    ]  # fmt: skip
    prompts = [node(n, "prompt", prompt=n) for n in "abcdefghij"]
    return workflow(
        [node("start", "start"), *prompts, node("end", "end")], [conn(a, b) for a, b in edges]
    )


def test_a_mesh_reports_each_shared_node_once_naming_every_branch() -> None:
    result = lower_document(_mesh())
    shared = [d for d in result.diagnostics if d.code == "parallel-shared-node"]
    assert [d.code for d in result.diagnostics] == ["parallel-shared-node"] * len(shared)
    per_node = Counter(d.node_id for d in shared)
    assert per_node == dict.fromkeys("defghij", 1), per_node
    by_node = {d.node_id: d.message for d in shared}
    assert "reached by 2 parallel branches (from 'a' and 'b')" in by_node["d"]
    assert "reached by 3 parallel branches (from 'a', 'b' and 'c')" in by_node["g"]
    assert "node 'start' has 3 connections (to 'a', 'b', 'c')" in by_node["g"]
    assert [d.node_id for d in shared] == list("defghij")  # in document order

"""The panel's canvas (``lattice/server/graph.py``): documents drawn where the editor
put their nodes, a layered layout for those without usable positions, and every op and
op edge of the ExecIR placed on the drawing."""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from lattice.ir.serialize import ir_to_dict
from lattice.lower import lower_document
from lattice.server.graph import (
    NODE_HEIGHT,
    NODE_WIDTH,
    document_graph,
    execir_graph,
    layered_positions,
    node_of,
    run_graph,
)
from tests.builders import approval, chain, conn, corpus_params, node, workflow
from tests.conftest import CORPUS, EXAMPLES, corpus_files, example_files
from tests.server.helpers import steps


def graph_of(path: Path) -> dict[str, Any]:
    document = json.loads(path.read_text(encoding="utf-8"))
    lowered = lower_document(path)
    assert lowered.ir is not None, path
    return run_graph(document, ir_to_dict(lowered.ir))


def check_ops_land_on_the_drawing(graph: dict[str, Any]) -> None:
    """Every op belongs to a drawn node; every op edge between two nodes travels along a
    drawn connection whose label is the port the op leaves by."""
    node_ids = {n["id"] for n in graph["nodes"]}
    for op_id, entry in graph["ops"].items():
        assert entry["node"] in node_ids, op_id
        assert op_id in next(n for n in graph["nodes"] if n["id"] == entry["node"])["ops"]
        for edge in entry["next"]:
            target = graph["ops"][edge["to"]]["node"]
            if target == entry["node"]:
                assert edge["edge"] is None
                continue
            if entry["kind"] == "FORK":  # on to the join: nothing is drawn for it
                continue
            assert edge["edge"] is not None, (op_id, edge)
            drawn = graph["edges"][edge["edge"]]
            assert (drawn["from"], drawn["to"]) == (entry["node"], target)
            if drawn["port"] != "default":  # (an inlined sub-flow leaves by its one port)
                assert drawn["label"] == edge["port"], (op_id, edge, drawn)
        for branch in entry.get("branches", []):
            drawn = graph["edges"][branch["edge"]]
            assert drawn["from"] == entry["node"]


@pytest.mark.parametrize("path", example_files(), ids=lambda p: p.name)
def test_every_example_is_drawn_with_its_ops_on_it(path: Path) -> None:
    graph = graph_of(path)
    check_ops_land_on_the_drawing(graph)
    document = json.loads(path.read_text(encoding="utf-8"))
    drawn = [n for n in document["nodes"] if n["type"] != "group"]
    assert [n["id"] for n in graph["nodes"]] == [n["id"] for n in drawn]
    if path.name == "world-clock.json":  # two pairs of nodes sit on each other
        assert graph["layout"] == "layered"
    else:
        assert graph["layout"] == "document"
        for n in graph["nodes"]:
            if n["group"] is None:
                source = next(d for d in drawn if d["id"] == n["id"])
                assert (n["x"], n["y"]) == (source["position"]["x"], source["position"]["y"])


@pytest.mark.parametrize("path", corpus_params(corpus_files(), CORPUS))
def test_editor_documents_are_drawn(path: Path) -> None:
    graph = graph_of(path)
    check_ops_land_on_the_drawing(graph)
    assert graph["layout"] == "document"


def test_children_of_a_group_are_placed_inside_it() -> None:
    graph = graph_of(EXAMPLES / "code-review-fix.json")
    groups = {g["id"]: g for g in graph["groups"]}
    assert set(groups) == {"group-review", "group-fix"}
    review = groups["group-review"]
    assert (review["x"], review["y"], review["w"], review["h"]) == (240, 120, 520, 340)
    style = next(n for n in graph["nodes"] if n["id"] == "style-review")
    assert (style["x"], style["y"], style["group"]) == (240 + 40, 120 + 80, "group-review")
    for n in graph["nodes"]:
        if n["group"]:
            box = groups[n["group"]]
            assert box["x"] <= n["x"] and n["x"] + n["w"] <= box["x"] + box["w"]
            assert box["y"] <= n["y"] and n["y"] + n["h"] <= box["y"] + box["h"]


def test_branch_edges_carry_the_labels_the_run_reports() -> None:
    graph = graph_of(EXAMPLES / "support-triage.json")
    labels = {(e["from"], e["to"]): e["label"] for e in graph["edges"]}
    assert labels[("route", "draft-billing")] == "Billing"
    assert labels[("approved", "count-revision")] == "Needs changes"
    assert labels[("classify", "init-revisions")] is None
    route = graph["ops"]["route"]
    billing = next(e for e in route["next"] if e["port"] == "Billing")
    assert graph["edges"][billing["edge"]]["to"] == "draft-billing"
    ask = graph_of(EXAMPLES / "meeting-prep.json")
    assert {e["label"] for e in ask["edges"] if e["from"] == "format"} == {
        "In person",
        "Video call",
    }
    assert {e["label"] for e in ask["edges"] if e["from"] == "now"} == {None, "failed"}


def test_ops_lowering_adds_belong_to_their_node() -> None:
    graph = graph_of(EXAMPLES / "analyst-panel.json")
    ops = graph["ops"]
    assert ops["brief#fork"]["node"] == "brief"
    assert ops["brief#fork#join"]["node"] == "summary"
    assert ops["answer_all__answer"]["node"] == "answer_all"  # the forEach's sub-flow
    fork_targets = {graph["edges"][b["edge"]]["to"] for b in ops["brief#fork"]["branches"]}
    assert fork_targets == {"market", "tech", "risk"}
    inlined = graph_of(EXAMPLES / "employee-onboarding.json")
    assert inlined["ops"]["provision__request"]["node"] == "provision"
    assert node_of("x#switch", {"sourceNode": "x"}, {"x"}) == "x"
    assert node_of("a__b__c", {}, {"a"}) == "a"
    assert node_of("lost", {}, {"a"}) is None


def test_a_document_without_positions_is_laid_out_in_layers() -> None:
    doc = approval()  # every node at (0, 0)
    lowered = lower_document(doc)
    assert lowered.ir is not None
    graph = document_graph(doc, ir_to_dict(lowered.ir))
    assert graph["layout"] == "layered"
    at = {n["id"]: (n["x"], n["y"]) for n in graph["nodes"]}
    assert len(set(at.values())) == len(at), "no two nodes share a place"
    for edge in graph["edges"]:
        assert at[edge["from"]][0] < at[edge["to"]][0], edge  # left to right
    assert at["polish"][0] == at["discarded"][0]  # both branches of the question: one layer
    for n in graph["nodes"]:
        assert (n["w"], n["h"]) == (NODE_WIDTH, NODE_HEIGHT)


def test_a_loop_does_not_push_its_start_after_its_end() -> None:
    doc = chain(
        node("a", "prompt", prompt="a"),
        node("b", "prompt", prompt="b"),
        extra_connections=[conn("b", "a", cid="back")],
    )
    for n in doc["nodes"]:
        del n["position"]
    graph = document_graph(doc)
    at = {n["id"]: n["x"] for n in graph["nodes"]}
    assert at["start"] < at["a"] < at["b"] < at["end"]


def _calls_to_lay_out(size: int) -> tuple[int, dict[str, tuple[float, float]]]:
    """Python and builtin calls made laying out a chain of ``size`` nodes."""
    ids = [f"n{i}" for i in range(size)]
    calls = 0

    def count(frame: Any, event: str, arg: Any) -> None:
        nonlocal calls
        calls += event in ("call", "c_call")

    sys.setprofile(count)
    try:
        placed = layered_positions(ids, itertools.pairwise(ids), ["n0"])
    finally:
        sys.setprofile(None)
    return calls, placed


def test_layers_grow_linearly_with_the_nodes() -> None:
    small, _ = _calls_to_lay_out(250)
    large, placed = _calls_to_lay_out(1000)
    # four times the nodes: about four times the calls (a quadratic layout makes 16x)
    assert large / small < 6, (small, large)
    assert placed["n999"][0] > placed["n0"][0]


def test_nodes_crowding_their_right_neighbour_are_drawn_narrower() -> None:
    doc = workflow(
        [
            {**node("start", "start"), "position": {"x": 0, "y": 0}},
            {**node("a", "prompt", prompt="a"), "position": {"x": 130, "y": 20}},
            {**node("end", "end"), "position": {"x": 400, "y": 0}},
        ],
        [conn("start", "a"), conn("a", "end")],
    )
    graph = document_graph(doc)
    assert graph["layout"] == "document"
    widths = {n["id"]: n["w"] for n in graph["nodes"]}
    assert widths == {"start": 106, "a": NODE_WIDTH, "end": NODE_WIDTH}


def test_a_run_without_a_document_is_drawn_op_by_op() -> None:
    lowered = lower_document(steps(3))
    assert lowered.ir is not None
    ir = ir_to_dict(lowered.ir)
    graph = run_graph(None, ir)
    assert graph["source"] == "execir"
    assert [n["id"] for n in graph["nodes"]] == list(ir["ops"])
    assert graph["ops"]["s0"]["next"][0]["edge"] is not None
    assert execir_graph(ir)["inputs_schema"] == ir["inputsSchema"]


@pytest.mark.parametrize(
    "document",
    [
        None,
        [],
        {"nodes": "no"},
        {"nodes": [1, {"id": 3}, {"type": "prompt"}, {"id": "a", "position": "here"}]},
        {"nodes": [{"id": "a", "type": "prompt"}], "connections": [{"from": "a", "to": "zz"}, 7]},
        {"nodes": [{"id": "a", "type": "prompt", "parentId": "a", "position": {"x": 1, "y": 2}}]},
        {"workflow": {"nodes": [{"id": "a", "type": "start", "position": {"x": 1e308, "y": 0}}]}},
    ],
)
def test_broken_documents_still_give_a_drawing(document: Any) -> None:
    graph = run_graph(document, {"ops": {"x": {"kind": "START", "next": [{"to": "gone"}]}}})
    assert isinstance(graph["nodes"], list)
    json.dumps(graph)

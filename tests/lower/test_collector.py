"""Lowering and the cycle collector: paused while lowering, what it leaves handed to the
oldest generation unexamined (``compiler._promote_survivors``), no cycle left behind."""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from lattice.document.loader import parse_workflow
from lattice.lower import compiler, lower_document
from tests.builders import chain, node

EXAMPLES = Path(__file__).resolve().parents[2] / "workflows" / "examples"

pytestmark = pytest.mark.skipif(
    sys.version_info >= (3, 14), reason="three generations: the collector before 3.14"
)


def _document(prompts: int) -> dict[str, Any]:
    return chain(
        *[node(f"p{i}", "prompt", prompt=f"Step {i}: {{{{ $in.topic }}}}") for i in range(prompts)]
    )


@pytest.fixture
def collector_on() -> Iterator[None]:
    """The collector enabled (as in a program) and left as it was, with nothing frozen
    (a server an earlier test started froze what it had loaded: lowering would leave
    the collector alone then)."""
    gc.unfreeze()
    was_enabled = gc.isenabled()
    gc.enable()
    yield
    if not was_enabled:
        gc.disable()


def _in_generation(generation: int, objects: Sequence[object]) -> int:
    ids = {id(o) for o in objects}
    return sum(id(o) in ids for o in gc.get_objects(generation=generation))


def test_what_lowering_leaves_goes_to_the_oldest_generation(
    collector_on: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(compiler, "PROMOTE_AT", 100)
    ir = lower_document(_document(40)).ir
    assert ir is not None
    ops = list(ir.ops.values())
    assert len(ops) == 42
    # no young collection walked them, nor will one: they are old already
    assert _in_generation(2, ops) == len(ops)
    assert gc.get_count()[0] < 100


def test_a_small_lowering_is_left_to_the_collector(
    collector_on: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(compiler, "PROMOTE_AT", 10**9)
    gc.collect()
    ir = lower_document(_document(40)).ir
    assert ir is not None
    assert _in_generation(2, list(ir.ops.values())) == 0


def test_objects_the_process_froze_stay_frozen(
    collector_on: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``lattice serve`` freezes what it loaded; ``unfreeze`` would hand it back."""
    monkeypatch.setattr(compiler, "PROMOTE_AT", 100)
    sentinel = [object()]  # a container the collector tracks
    gc.freeze()
    try:
        assert not any(o is sentinel for o in gc.get_objects())  # frozen: out of its sight
        assert lower_document(_document(40)).ir is not None
        assert not any(o is sentinel for o in gc.get_objects())  # still frozen
    finally:
        gc.unfreeze()


def test_a_paused_collector_stays_paused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compiler, "PROMOTE_AT", 100)
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        ir = lower_document(_document(40)).ir
        assert ir is not None
        assert not gc.isenabled()
        assert _in_generation(2, list(ir.ops.values())) == 0  # left where they were made
    finally:
        if was_enabled:
            gc.enable()


@pytest.mark.parametrize(
    "path", sorted(p for p in EXAMPLES.glob("*.json") if p.name.count(".") == 1), ids=str
)
def test_lowering_leaves_no_cycles(path: Path) -> None:
    """What lowering leaves unexamined must not hold garbage only a collection frees
    (after a first lowering: what builds a validator once may make cycles, once)."""
    lower_document(path)
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        result = lower_document(path)
        del result
        assert gc.collect() == 0
    finally:
        if was_enabled:
            gc.enable()


def test_connections_name_their_nodes_with_the_nodes_own_ids() -> None:
    """The loader makes each node id one string, made with the others, that connections
    share (``loader._share_ids``): lookups by id compare identities, on ids close together."""
    document = _document(5)
    workflow, diagnostics = parse_workflow(document)
    assert workflow is not None and not diagnostics
    ids = {n.id: n.id for n in workflow.nodes}
    assert [n.id for n in workflow.nodes] == [n["id"] for n in document["nodes"]]
    for conn, raw in zip(workflow.connections, document["connections"], strict=True):
        assert (conn.source, conn.target) == (raw["from"], raw["to"])
        assert conn.source is ids[conn.source] and conn.target is ids[conn.target]
    for made, raw in zip(workflow.nodes, document["nodes"], strict=True):
        assert made.id is not raw["id"]  # not the parsed string, spread over the heap
    assert workflow.model_dump(by_alias=True)["nodes"][1]["id"] == "p0"

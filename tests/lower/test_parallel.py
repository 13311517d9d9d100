"""Fan-out lowering (``lattice.lower.parallel``): the work it does on large documents."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lattice.errors import DocumentError
from lattice.lower import lower, parallel
from tests.builders import conn, node, workflow


def fork_chain(forks: int) -> dict[str, Any]:
    """A chain of transforms, each fanning out to the next one and to an END of its own:
    every fork's branches never meet, and each fork's region holds the rest of the chain."""
    nodes = [node("start", "start")]
    connections = []
    previous = "start"
    for i in range(forks + 1):
        nodes += [node(f"t{i}", "dataTransform", expression="`1`"), node(f"e{i}", "end")]
        connections.append(conn(previous, f"t{i}"))
        if i:
            connections.append(conn(previous, f"e{i}"))
        previous = f"t{i}"
    nodes.append(node("fin", "end"))
    connections.append(conn(previous, "fin"))
    return workflow(nodes, connections)


def test_a_chain_of_forks_is_lowered_with_work_linear_in_its_size(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each fork's branches were searched to the end of the chain (three times over, and
    # sorted with a linear search per op): cubic, 37 s for 1,000 forks.
    calls = 0
    targets = parallel._targets

    def counted(op: Any) -> list[str]:
        nonlocal calls
        calls += 1
        return targets(op)

    monkeypatch.setattr(parallel, "_targets", counted)
    work = {}
    for forks in (200, 400):
        calls = 0
        ir = lower(fork_chain(forks))
        assert sum(op.kind == "FORK" for op in ir.ops.values()) == forks
        work[forks] = calls
    assert work[400] < 2.5 * work[200]
    assert work[400] < 40 * len(ir.ops)


def test_two_thousand_forks_lower() -> None:
    # A guard only: the old lowering took minutes on this document (the test above
    # counts the work).
    code = (
        "from lattice.lower import lower\n"
        "from tests.lower.test_parallel import fork_chain\n"
        "ir = lower(fork_chain(2000))\n"
        "print(sum(op.kind == 'FORK' for op in ir.ops.values()))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=Path(__file__).parents[2],
    )
    assert done.stdout.split() == ["2000"]


def _t(node_id: str) -> dict[str, Any]:
    return node(node_id, "dataTransform", expression="`1`")


def test_a_branch_that_reaches_past_where_the_others_meet_is_an_error() -> None:
    # A may end early, so the fork has no post-dominator: A and B meet at X, but C goes
    # to Y, which X leads to. The join went before X: C's branch ran Y and end, then
    # after the join X, Y and end ran again.
    switch = node(
        "A",
        "ifElse",
        evaluationTarget="$in.x",
        branches=[{"label": "stop", "condition": "> 5"}, {"label": "go", "condition": ""}],
    )
    doc = workflow(
        [
            node("start", "start"),
            switch,
            *map(_t, "BCXY"),
            node("end", "end"),
            node("end2", "end"),
        ],
        [
            conn("start", "A"),
            conn("start", "B"),
            conn("start", "C"),
            conn("A", "end2", "branch-0"),
            conn("A", "X", "branch-1"),
            conn("B", "X"),
            conn("C", "Y"),
            conn("X", "Y"),
            conn("Y", "end"),
        ],
    )
    with pytest.raises(DocumentError) as raised:
        lower(doc)
    (error,) = raised.value.diagnostics
    assert error.code == "parallel-branches-overlap" and error.node_id == "start"
    assert "'X'" in error.message and "'Y'" in error.message
    # Connected to where the others meet, the branch is fine.
    doc["connections"][6]["to"] = "X"
    assert lower(doc).ops["start#fork"].join == "start#fork#join"  # type: ignore[union-attr]


def test_an_accidental_fork_names_the_port_that_fans_out() -> None:
    """A second connection from ``b``'s port makes ``b`` a fork: the message says so."""
    doc = workflow(
        [
            node("start", "start"),
            node("a", "prompt", prompt="a"),
            node("b", "prompt", prompt="b"),
            node("end", "end"),
        ],
        [conn("start", "a"), conn("a", "b"), conn("b", "end"), conn("b", "a")],
    )
    with pytest.raises(DocumentError) as raised:
        lower(doc)
    shared = [d for d in raised.value.diagnostics if d.code == "parallel-shared-node"]
    assert shared, raised.value.diagnostics
    assert "node 'b' has 2 connections (to 'end', 'a'), so their branches run at once" in (
        shared[0].message
    )

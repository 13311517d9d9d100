"""Fan-out lowering (``lattice.lower.parallel``): the work it does on large documents."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

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

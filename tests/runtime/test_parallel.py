"""Fan-out and join: several connections leaving one port run as concurrent branches,
merged in branch order where they meet."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import pytest

from lattice.errors import DocumentError, LatticeRunError
from lattice.ir.models import Edge, ForkOp, JoinOp, StateOp
from lattice.llm.base import LLMRequest, LLMResponse
from lattice.llm.mock import MockProvider
from lattice.lower import lower
from lattice.lower.emit import to_dot, to_mermaid
from lattice.runtime import Runner, RunStore
from tests.builders import conn, node, op_names, op_record, op_records, workflow


def fan_out(width: int, *, join: bool = True) -> dict[str, Any]:
    """start → b1..bN (prompts) → merge (a prompt reading them all) → end; without
    ``join`` each branch goes to an END node of its own."""
    branches = [
        node(f"b{i}", "prompt", prompt=f"B{i} about {{{{ $in.topic }}}}")
        for i in range(1, width + 1)
    ]
    reads = " ".join(f"{{{{ $vars.b{i}.result }}}}" for i in range(1, width + 1)) if join else ""
    nodes = [node("start", "start"), *branches]
    connections = [conn("start", f"b{i}") for i in range(1, width + 1)]
    if join:
        nodes += [node("merge", "prompt", prompt=f"MERGE {reads}"), node("end", "end")]
        connections += [conn(f"b{i}", "merge") for i in range(1, width + 1)]
        connections.append(conn("merge", "end"))
    else:
        nodes += [node(f"end{i}", "end") for i in range(1, width + 1)]
        connections += [conn(f"b{i}", f"end{i}") for i in range(1, width + 1)]
    return workflow(nodes, connections)


class Tracking:
    """Answers after a delay (random when ``jitter``) and counts calls in flight."""

    name = "tracking"

    def __init__(self, delay: float = 0.02, *, jitter: bool = False, seed: int = 0) -> None:
        self.delay = delay
        self.jitter = jitter
        self.rng = random.Random(seed)
        self.in_flight = 0
        self.most = 0
        self.calls: list[str] = []

    async def complete(self, request: LLMRequest) -> LLMResponse:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        self.calls.append(str(request.node_id))
        try:
            await asyncio.sleep(self.rng.uniform(0, self.delay) if self.jitter else self.delay)
        finally:
            self.in_flight -= 1
        return LLMResponse(text=f"{request.node_id}:{request.messages[-1].content[:40]}")


def run(doc: dict[str, Any], provider: Any, store: RunStore | None = None) -> Any:
    ir = lower(doc)
    inputs = {"topic": "tides"} if "topic" in ir.inputs_schema.get("properties", {}) else {}
    return Runner(ir, provider=provider, store=store or RunStore(None)).run(inputs)


# -- lowering -------------------------------------------------------------------------------------


def test_a_fan_out_lowers_to_a_fork_and_a_join_where_the_branches_meet() -> None:
    ir = lower(fan_out(3))
    fork = ir.ops["start#fork"]
    assert isinstance(fork, ForkOp)
    assert fork.branches == ["b1", "b2", "b3"] and fork.join == "start#fork#join"
    join = ir.ops["start#fork#join"]
    assert isinstance(join, JoinOp) and join.fork == "start#fork"
    assert join.next == [Edge(to="merge")]
    assert all(ir.ops[f"b{i}"].next == [Edge(to="start#fork#join")] for i in (1, 2, 3))
    assert ir.ops["start"].next == [Edge(to="start#fork")]
    assert ir.ir_version == "3"


def test_emitters_draw_forks_and_joins() -> None:
    ir = lower(fan_out(2))
    mermaid = to_mermaid(ir)
    assert '[/"FORK: after start"\\]' in mermaid and '[\\"JOIN: before merge"/]' in mermaid
    assert mermaid.count('==>|"branch') == 2 and '-.->|"joins"|' in mermaid
    dot = to_dot(ir)
    assert "trapezium" in dot and 'label="branch 2"' in dot and "style=dashed" in dot


def test_branches_that_never_meet_have_no_join() -> None:
    fork = lower(fan_out(2, join=False)).ops["start#fork"]
    assert isinstance(fork, ForkOp) and fork.join is None


def test_two_branches_setting_one_variable_is_a_located_error() -> None:
    doc = workflow(
        [
            node("start", "start"),
            node("x", "variableStore", operation="set", name="shared", value="x"),
            node("y", "variableStore", operation="set", name="shared", value="y"),
            node("end", "end"),
        ],
        [conn("start", "x"), conn("start", "y"), conn("x", "end"), conn("y", "end")],
    )
    with pytest.raises(DocumentError) as raised:
        lower(doc)
    (diagnostic,) = [d for d in raised.value.diagnostics if d.code == "parallel-variable-conflict"]
    assert diagnostic.node_id == "y" and diagnostic.pointer == "/nodes/2/data/name"
    assert "'x'" in diagnostic.message and "'y'" in diagnostic.message


def test_a_node_two_branches_reach_before_they_meet_is_an_error() -> None:
    doc = workflow(
        [
            node("start", "start"),
            node("a", "prompt", prompt="A"),
            node("b", "prompt", prompt="B"),
            node("c", "prompt", prompt="C"),
            node("shared", "prompt", prompt="S"),
            node("end", "end"),
        ],
        [
            conn("start", "a"),
            conn("start", "b"),
            conn("start", "c"),
            conn("a", "shared"),
            conn("b", "shared"),
            conn("shared", "end"),
            conn("c", "end"),
        ],
    )
    with pytest.raises(DocumentError) as raised:
        lower(doc)
    codes = [d.code for d in raised.value.diagnostics]
    assert "parallel-shared-node" in codes


# -- running -------------------------------------------------------------------------------------


@pytest.mark.parametrize("width", [2, 10])
def test_branches_run_at_once_and_the_join_sees_them_all(width: int) -> None:
    provider = Tracking(0.05)
    result = run(fan_out(width), provider)
    assert result.status == "completed", result.failure
    assert provider.most == width
    assert sorted(provider.calls[:width]) == sorted(f"b{i}" for i in range(1, width + 1))
    assert provider.calls[-1] == "merge"
    assert [result.vars[f"b{i}"]["result"] for i in range(1, width + 1)] == [
        f"b{i}:B{i} about tides" for i in range(1, width + 1)
    ]


def test_branch_events_carry_their_branch_and_op_records_their_place(tmp_path: Path) -> None:
    result = run(fan_out(2), MockProvider(default="ok"), RunStore(tmp_path))
    assert result.status == "completed"
    branched = {e["branch"] for e in result.events if "branch" in e}
    assert branched == {"0002.1", "0002.2"}
    names = op_names(result.run_dir)
    assert names[:4] == [
        "0001-start",
        "0002-start_fork",
        "0002.1.0001-b1",
        "0002.2.0001-b2",
    ]
    record = op_record(result.run_dir, "b2")
    assert record["branch"] == "0002.2" and record["seq"] == "0002.2.0001"


def test_the_final_state_does_not_depend_on_timing() -> None:
    states = []
    for seed in range(20):
        result = run(fan_out(4), Tracking(0.01, jitter=True, seed=seed))
        assert result.status == "completed"
        states.append(json.dumps(result.state["vars"], sort_keys=True))
    assert len(set(states)) == 1


def test_a_branch_that_reaches_end_is_done_for_the_join() -> None:
    doc = workflow(
        [
            node("start", "start"),
            node("a", "prompt", prompt="A"),
            node("b", "prompt", prompt="B"),
            node("c", "prompt", prompt="C"),
            node("merge", "prompt", prompt="M {{ $vars.a.result }} {{ $vars.b.result }}"),
            node("end", "end"),
            node("early", "end"),
        ],
        [
            conn("start", "a"),
            conn("start", "b"),
            conn("start", "c"),
            conn("a", "merge"),
            conn("b", "merge"),
            conn("c", "early"),
            conn("merge", "end"),
        ],
    )
    ir = lower(doc)
    assert ir.ops["start#fork"].join == "start#fork#join"  # type: ignore[union-attr]
    assert ir.ops["start#fork#join"].next == [Edge(to="merge")]
    provider = Tracking(0.02)
    result = Runner(ir, provider=provider, store=RunStore(None)).run({})
    assert result.status == "completed", result.failure
    assert provider.calls[-1] == "merge" and provider.calls.count("merge") == 1
    assert result.vars["c"]["result"].startswith("c:")


def test_a_switch_in_a_branch_may_skip_the_join() -> None:
    doc = workflow(
        [
            node(
                "start",
                "start",
                inputs={"type": "object", "properties": {"go": {"type": "string"}}},
            ),
            node("a", "prompt", prompt="A"),
            node(
                "route",
                "ifElse",
                evaluationTarget="$in.go",
                branches=[
                    {"label": "stop", "condition": '== "stop"'},
                    {"label": "on", "condition": "", "isDefault": True},
                ],
            ),
            node("merge", "prompt", prompt="M {{ $vars.a.result }}"),
            node("end", "end"),
            node("stopped", "end", output="stopped"),
        ],
        [
            conn("start", "a"),
            conn("start", "route"),
            conn("a", "merge"),
            conn("route", "stopped", "branch-0"),
            conn("route", "merge", "branch-1"),
            conn("merge", "end"),
        ],
    )
    for go, merged in (("stop", True), ("on", True)):
        provider = MockProvider(default="ok")
        result = Runner(lower(doc), provider=provider, store=RunStore(None)).run({"go": go})
        assert result.status == "completed", result.failure
        assert ("merge" in [c.node_id for c in provider.calls]) is merged


def test_branches_that_all_end_end_the_run_with_the_first_branch_output() -> None:
    result = run(fan_out(3, join=False), MockProvider(default="ok"))
    assert result.status == "completed"
    assert {result.vars[f"b{i}"]["result"] for i in (1, 2, 3)} == {"ok"}


def test_nested_forks_join_inner_first() -> None:
    doc = workflow(
        [
            node("start", "start"),
            node("a", "prompt", prompt="A"),
            node("b", "prompt", prompt="B"),
            node("a1", "prompt", prompt="A1 {{ $vars.a.result }}"),
            node("a2", "prompt", prompt="A2"),
            node(
                "merge",
                "prompt",
                prompt="M {{ $vars.a1.result }} {{ $vars.a2.result }} {{ $vars.b.result }}",
            ),
            node("end", "end"),
        ],
        [
            conn("start", "a"),
            conn("start", "b"),
            conn("a", "a1"),
            conn("a", "a2"),
            conn("a1", "merge"),
            conn("a2", "merge"),
            conn("b", "merge"),
            conn("merge", "end"),
        ],
    )
    ir = lower(doc)
    assert isinstance(ir.ops["a#fork"], ForkOp) and isinstance(ir.ops["start#fork"], ForkOp)
    inner_join = ir.ops["a#fork"].join  # type: ignore[union-attr]
    assert ir.ops[inner_join].next == [Edge(to="start#fork#join")]
    provider = Tracking(0.02)
    result = Runner(ir, provider=provider, store=RunStore(None)).run({})
    assert result.status == "completed", result.failure
    assert provider.calls[-1] == "merge"
    assert "a1:A1 a:A" in result.output and "b:B" in result.output


def test_a_fork_inside_a_loop_runs_once_per_pass(tmp_path: Path) -> None:
    doc = workflow(
        [
            node("start", "start"),
            node("count", "variableStore", operation="increment", name="passes"),
            node("a", "prompt", prompt="A"),
            node("b", "prompt", prompt="B"),
            node(
                "again",
                "ifElse",
                evaluationTarget="$vars.passes",
                branches=[
                    {"label": "more", "condition": "< 3"},
                    {"label": "done", "condition": "", "isDefault": True},
                ],
            ),
            node("end", "end", output="$vars.passes"),
        ],
        [
            conn("start", "count"),
            conn("count", "a"),
            conn("count", "b"),
            conn("a", "again"),
            conn("b", "again"),
            conn("again", "count", "branch-0"),
            conn("again", "end", "branch-1"),
        ],
    )
    provider = MockProvider(default="ok")
    result = Runner(lower(doc), provider=provider, store=RunStore(tmp_path)).run({})
    assert result.status == "completed", result.failure
    assert result.output == 3
    assert sorted(c.node_id for c in provider.calls) == ["a"] * 3 + ["b"] * 3
    forks = op_records(result.run_dir, "count#fork")
    assert len(forks) == 3


class Failing(Tracking):
    async def complete(self, request: LLMRequest) -> LLMResponse:
        if request.node_id == "b1":
            await asyncio.sleep(0.01)
            from lattice.errors import LatticeRunError

            raise LatticeRunError("b1 breaks", error_type="api_key_error")
        return await super().complete(request)


def chain_branches() -> dict[str, Any]:
    """Two branches of three prompts each: b1 → b1x → b1y, b2 → b2x → b2y."""
    names = ["b1", "b1x", "b1y", "b2", "b2x", "b2y"]
    return workflow(
        [
            node("start", "start"),
            *(node(n, "prompt", prompt=n.upper()) for n in names),
            node("merge", "prompt", prompt="M {{ $vars.b1y.result }} {{ $vars.b2y.result }}"),
            node("end", "end"),
        ],
        [
            conn("start", "b1"),
            conn("start", "b2"),
            conn("b1", "b1x"),
            conn("b1x", "b1y"),
            conn("b2", "b2x"),
            conn("b2x", "b2y"),
            conn("b1y", "merge"),
            conn("b2y", "merge"),
            conn("merge", "end"),
        ],
    )


def test_a_failing_branch_stops_its_siblings_at_their_next_op_boundary() -> None:
    provider = Failing(0.05)
    result = run(chain_branches(), provider)
    assert result.status == "failed" and result.failure is not None
    assert result.failure.category == "api_key_error" and result.failure.node_id == "b1"
    assert provider.calls == ["b2"]  # b2 finished the op it was in, then stopped


def test_without_fail_fast_the_siblings_finish() -> None:
    doc = chain_branches()
    doc["nodes"][0]["data"]["failFast"] = False
    provider = Failing(0.01)
    result = run(doc, provider)
    assert result.status == "failed" and result.failure is not None
    assert result.failure.node_id == "b1"
    assert provider.calls == ["b2", "b2x", "b2y"]


def test_a_conflict_only_visible_at_run_time_is_a_state_conflict() -> None:
    ir = lower(fan_out(2))
    ops = dict(ir.ops)
    for name in ("b1", "b2"):
        ops[name] = StateOp(
            id=name,
            source_node=name,
            operation="set",
            variable="same",
            value=name,
            next=ops[name].next,
        )
    ir = ir.model_copy(update={"ops": ops})
    result = Runner(ir, provider=MockProvider(default="ok"), store=RunStore(None)).run(
        {"topic": "x"}
    )
    assert result.status == "failed" and result.failure is not None
    assert result.failure.category == "state_conflict"
    assert "'b1'" in result.failure.summary and "'b2'" in result.failure.summary


def test_limits_count_across_branches() -> None:
    from lattice.runtime import RunLimits

    runner = Runner(
        lower(chain_branches()),
        provider=MockProvider(default="ok"),
        store=RunStore(None),
        limits=RunLimits(max_steps=5),
    )
    result = runner.run({})
    assert result.status == "failed" and result.failure is not None
    assert result.failure.category == "step_limit"


def test_resume_runs_only_what_no_branch_had_completed(tmp_path: Path) -> None:
    script = {
        "b1": ["1"],
        "b1x": ["1x"],
        "b2": ["2"],
    }  # b1y and b2x are missing: both branches stop
    doc = chain_branches()
    doc["nodes"][0]["data"]["failFast"] = False  # both branches go as far as they can
    first = MockProvider(script)
    failed = Runner(lower(doc), provider=first, store=RunStore(tmp_path)).run({})
    assert failed.status == "failed"
    assert sorted(c.node_id for c in first.calls) == ["b1", "b1x", "b1y", "b2", "b2x"]
    second = MockProvider(default="later")
    resumed = Runner.resume(failed.run_dir, provider=second)
    assert resumed.status == "completed", resumed.failure
    assert sorted(c.node_id for c in second.calls) == ["b1y", "b2x", "b2y", "merge"]
    assert resumed.vars["b1x"]["result"] == "1x" and resumed.vars["b2"]["result"] == "2"
    assert resumed.vars["b1y"]["result"] == "later"


def test_max_parallel_bounds_the_ops_branches_run_at_once() -> None:
    from lattice.runtime.settings import RuntimeSettings

    provider = Tracking(0.02)
    result = Runner(
        lower(fan_out(10)),
        provider=provider,
        store=RunStore(None),
        settings=RuntimeSettings(max_parallel=3),
    ).run({"topic": "t"})
    assert result.status == "completed"
    assert provider.most == 3


def test_runs_show_lists_branch_ops_under_their_fork(tmp_path: Path) -> None:
    from lattice.runs.view import show_run

    result = run(fan_out(2), MockProvider(default="ok"), RunStore(tmp_path))
    assert result.run_dir is not None
    shown = show_run(result.run_dir)
    assert "FORK" in shown and "[branch 0002.1]" in shown and "[branch 0002.2]" in shown
    assert "↳ 0001" in shown


def test_after_the_join_the_last_result_is_the_last_arrived_branchs() -> None:
    doc = fan_out(2)
    doc["nodes"] = [n for n in doc["nodes"] if n["id"] != "merge"]
    doc["connections"] = [
        c for c in doc["connections"] if c["from"] != "merge" and c["to"] != "merge"
    ] + [conn("b1", "end"), conn("b2", "end")]
    result = run(doc, MockProvider({"b1": ["one"], "b2": ["two"]}))
    assert result.status == "completed"
    assert result.output == "two"


class FailingLater(Tracking):
    """Fails the node ``bad`` after twice the delay; answers the others after the delay."""

    async def complete(self, request: LLMRequest) -> LLMResponse:
        if request.node_id == "bad":
            await asyncio.sleep(2 * self.delay)
            self.calls.append("bad")
            raise LatticeRunError("refused", error_type="api_key_error")
        return await super().complete(request)


def test_a_failing_branch_stops_the_branches_of_a_fork_nested_in_its_sibling() -> None:
    """start → bad, and start → split → a nested fork (two chains of five calls): once
    ``bad`` fails (while the nested fork runs), the nested branches stop at their next
    op boundary, not at their ends."""
    chain_a = [node(f"a{i}", "prompt", prompt=f"A{i}") for i in range(5)]
    chain_b = [node(f"b{i}", "prompt", prompt=f"B{i}") for i in range(5)]
    nodes = [
        node("start", "start"),
        node("bad", "prompt", prompt="BAD"),
        node("split", "prompt", prompt="S"),
    ]
    nodes += [*chain_a, *chain_b, node("end", "end")]
    connections = [
        conn("start", "bad"),
        conn("start", "split"),
        conn("split", "a0"),
        conn("split", "b0"),
    ]
    connections += [conn(f"a{i}", f"a{i + 1}") for i in range(4)]
    connections += [conn(f"b{i}", f"b{i + 1}") for i in range(4)]
    connections += [conn("a4", "end"), conn("b4", "end"), conn("bad", "end")]
    provider = FailingLater(delay=0.03)
    result = run(workflow(nodes, connections), provider)
    assert result.status == "failed" and result.failure is not None
    assert result.failure.category == "api_key_error"
    nested = [c for c in provider.calls if c[0] in "ab"]
    assert nested, provider.calls  # the nested fork had started
    assert len(nested) < 10, provider.calls  # and its chains did not run to their ends


def test_a_join_over_the_state_limit_merges_none_of_its_branches(tmp_path: Path) -> None:
    from lattice.runtime.settings import RuntimeSettings
    from lattice.runtime.state import StateLimits

    big = "x" * 600  # each branch's value fits the limit, the two together do not
    doc = workflow(
        [
            node("start", "start"),
            node("b1", "variableStore", operation="set", name="one", value=big),
            node("b2", "variableStore", operation="set", name="two", value=big),
            node("after", "variableStore", operation="set", name="done", value="x"),
            node("end", "end"),
        ],
        [
            conn("start", "b1"),
            conn("start", "b2"),
            conn("b1", "after"),
            conn("b2", "after"),
            conn("after", "end"),
        ],
    )
    settings = RuntimeSettings(state_limits=StateLimits(max_state_bytes=1000))
    result = Runner(lower(doc), store=RunStore(tmp_path), settings=settings).run()
    assert result.status == "failed" and result.failure is not None
    assert result.failure.category == "state_limit"
    assert result.vars == {}
    assert result.run_dir is not None
    final = json.loads((result.run_dir / "state_final.json").read_text())
    assert final["vars"] == {}
    resumed = Runner.resume(result.run_dir, settings=RuntimeSettings())
    assert resumed.status == "completed", resumed.failure
    assert sorted(resumed.vars) == ["done", "one", "two"]


@pytest.mark.parametrize("seed", range(4))
def test_an_end_without_output_after_a_join_returns_the_last_branch_in_document_order(
    seed: int,
) -> None:
    width = 3
    doc = fan_out(width)
    doc["nodes"] = [n for n in doc["nodes"] if n["id"] != "merge"]
    doc["connections"] = [conn("start", f"b{i}") for i in range(1, width + 1)] + [
        conn(f"b{i}", "end") for i in range(1, width + 1)
    ]
    provider = Tracking(delay=0.01, jitter=True, seed=seed)  # branches end in any order
    result = run(doc, provider)
    assert result.status == "completed"
    assert result.output == "b3:B3 about tides"

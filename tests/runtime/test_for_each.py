"""forEach: a sub-flow once per item, results in item order."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from lattice.errors import DocumentError, LatticeRunError
from lattice.ir.models import ForEachOp
from lattice.ir.templates import path_text
from lattice.llm.base import LLMRequest, LLMResponse
from lattice.llm.mock import MockProvider
from lattice.lower import lower
from lattice.runtime import Runner, RunStore
from lattice.runtime.context import Interrupted
from lattice.runtime.settings import RuntimeSettings
from tests.builders import conn, node, op_names, op_record, workflow


def each_doc(**data: Any) -> dict[str, Any]:
    """start → each (forEach over $in.items, flow "one": answer → end) → end."""
    return workflow(
        [
            node(
                "start",
                "start",
                inputs={"type": "object", "properties": {"items": {"type": "array"}}},
            ),
            node("each", "forEach", items="$in.items", subAgentFlowId="one", **data),
            node("end", "end", output="$vars.each.result"),
        ],
        [conn("start", "each"), conn("each", "end")],
        subAgentFlows=[
            {
                "id": "one",
                "name": "one",
                "nodes": [
                    node("s", "start"),
                    node(
                        "answer",
                        "prompt",
                        prompt="ANSWER {{ $vars.each.item }} at {{ $vars.each.index }}",
                    ),
                    node("e", "end", output="$vars.answer.result"),
                ],
                "connections": [conn("s", "answer"), conn("answer", "e")],
            }
        ],
    )


class Echo:
    """Answers with the prompt's item, after a delay; fails on items named "bad"."""

    name = "echo"

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.in_flight = 0
        self.most = 0
        self.calls = 0

    async def complete(self, request: LLMRequest) -> LLMResponse:
        self.calls += 1
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            await asyncio.sleep(self.delay)
        finally:
            self.in_flight -= 1
        text = request.messages[-1].content
        item = text.split("ANSWER ", 1)[1].split(" at ", 1)[0]
        if item == "bad":
            raise LatticeRunError("bad item", error_type="api_key_error")
        return LLMResponse(text=f"done {item}")


def run(items: list[Any], provider: Any, store: RunStore | None = None, **data: Any) -> Any:
    settings = RuntimeSettings(max_parallel=64)
    return Runner(
        lower(each_doc(**data)), provider=provider, store=store or RunStore(None), settings=settings
    ).run({"items": items})


def test_the_flow_lowers_under_the_node_and_the_op_names_its_first_op() -> None:
    ir = lower(each_doc())
    op = ir.ops["each"]
    assert isinstance(op, ForEachOp)
    assert op.body == "each__answer" and op.items == "$in.items" and op.max_concurrency == 8
    assert ir.ops["each__end"].kind == "END"
    assert ir.ops["each__end"].output == "$vars.each__answer.result"  # type: ignore[union-attr]


@pytest.mark.parametrize("count", [0, 1, 1000])
def test_results_come_in_item_order(count: int) -> None:
    items = [f"t{i}" for i in range(count)]
    provider = Echo()
    result = run(items, provider, maxConcurrency=50)
    assert result.status == "completed", result.failure
    assert result.output == [f"done t{i}" for i in range(count)]
    assert provider.calls == count


def test_max_concurrency_bounds_items_in_flight() -> None:
    provider = Echo(0.01)
    result = run([str(i) for i in range(30)], provider, maxConcurrency=4)
    assert result.status == "completed"
    assert provider.most == 4


def test_a_failing_item_fails_the_node_by_default() -> None:
    result = run(["a", "bad", "c"], Echo(), maxConcurrency=1)
    assert result.status == "failed" and result.failure is not None
    assert result.failure.category == "api_key_error"
    assert result.failure.node_id == "each__answer"


def test_collect_keeps_the_failure_in_the_items_slot_and_goes_on() -> None:
    result = run(["a", "bad", "c"], Echo(), onItemError="collect")
    assert result.status == "completed", result.failure
    first, failed, last = result.output
    assert (first, last) == ("done a", "done c")
    assert failed["error"]["category"] == "api_key_error"
    assert failed["error"]["node_id"] == "each__answer"


class Stopping(Echo):
    """Stops the run (as a batch's budget gate does) at the item named "stop"."""

    async def complete(self, request: LLMRequest) -> LLMResponse:
        if "ANSWER stop " in request.messages[-1].content:
            raise Interrupted("the batch's budget is spent")
        return await super().complete(request)


def test_collect_does_not_keep_a_stopped_item_as_its_failure(tmp_path: Path) -> None:
    """A stop is no item's failure: the run stops, and its resume runs that item again."""
    result = run(["a", "stop", "c"], Stopping(), RunStore(tmp_path), onItemError="collect")
    assert result.status == "interrupted", result.output
    assert result.run_dir is not None
    resumed = Runner.resume(result.run_dir, provider=Echo())
    assert resumed.status == "completed"
    assert resumed.output == ["done a", "done stop", "done c"]


def test_items_that_are_no_list_fail_clearly() -> None:
    doc = each_doc()
    doc["nodes"][0]["data"]["inputs"]["properties"]["items"] = {}
    runner = Runner(lower(doc), provider=Echo(), store=RunStore(None))
    result = runner.run({"items": "not a list"})
    assert result.status == "failed" and result.failure is not None
    assert "is not a list" in result.failure.summary


def test_each_items_ops_are_namespaced_in_events_and_records(tmp_path: Path) -> None:
    result = run(["a", "b"], Echo(), RunStore(tmp_path))
    assert result.status == "completed"
    branches = {e["branch"] for e in result.events if e.get("op_id") == "each__answer"}
    assert branches == {"0002.1", "0002.2"}
    names = op_names(result.run_dir)
    assert "0002.1.0001-each__answer" in names and "0002.2.0002-each__end" in names
    record = op_record(result.run_dir, "each")
    assert record["output"] == {"items": 2}


def test_resume_reruns_only_items_that_had_not_finished(tmp_path: Path) -> None:
    script = {"each__answer": ["x0", "x1"]}  # a third item finds the script used up
    doc = each_doc(maxConcurrency=1)
    first = MockProvider(script)
    failed = Runner(lower(doc), provider=first, store=RunStore(tmp_path)).run(
        {"items": ["a", "b", "c"]}
    )
    assert failed.status == "failed"
    second = MockProvider(default="later")
    resumed = Runner.resume(failed.run_dir, provider=second)
    assert resumed.status == "completed", resumed.failure
    assert resumed.output == ["x0", "x1", "later"]
    assert len(second.calls) == 1


def test_an_unknown_flow_is_a_located_error() -> None:
    doc = each_doc()
    doc["nodes"][1]["data"]["subAgentFlowId"] = "onee"
    with pytest.raises(DocumentError) as raised:
        lower(doc)
    (error,) = [d for d in raised.value.diagnostics if d.code == "subflow-unknown"]
    assert error.node_id == "each" and "did you mean 'one'" in error.message


def test_a_node_after_the_loop_cannot_read_an_items_vars() -> None:
    doc = each_doc()
    doc["nodes"][2]["data"]["output"] = "$vars.each__answer.result"
    with pytest.raises(DocumentError) as raised:
        lower(doc)
    assert any(d.code == "template-ref-not-before" for d in raised.value.diagnostics)


def test_a_documents_data_cannot_name_a_for_each_body() -> None:
    # JSON can spell a key with NUL ("\u0000body"): the key where expansion once left
    # the body, so a document could make any op (the forEach itself) the body.
    doc = each_doc()
    doc["nodes"][1]["data"].update(json.loads('{"\\u0000body": "each"}'))
    op = lower(doc).ops["each"]
    assert isinstance(op, ForEachOp) and op.body == "each__answer"
    doc["nodes"][1]["data"]["subAgentFlowId"] = "nope"
    with pytest.raises(DocumentError) as raised:
        lower(doc)
    assert [d.code for d in raised.value.diagnostics] == ["subflow-unknown"]


@pytest.mark.parametrize("node_id", ["fe x", "fe.x", 'fe"x'])
def test_a_for_each_node_with_any_id_writes_its_own_result(node_id: str) -> None:
    # The paths were built as f"$vars.{id}.result": "fe x" failed with an internal
    # error, and "fe.x" wrote to $vars.fe.x.
    item = path_text("$vars", node_id, "item")
    doc = workflow(
        [
            node("start", "start"),
            node(node_id, "forEach", items="$in.xs", subAgentFlowId="f"),
            node("end", "end", output=path_text("$vars", node_id, "result")),
        ],
        [conn("start", node_id), conn(node_id, "end")],
        subAgentFlows=[
            {
                "id": "f",
                "name": "f",
                "nodes": [
                    node("s", "start"),
                    node("t", "dataTransform", expression="`1`"),
                    node("e", "end", output=item),
                ],
                "connections": [conn("s", "t"), conn("t", "e")],
            }
        ],
    )
    ir = lower(doc)
    assert ir.ops[node_id].writes == path_text("$vars", node_id, "result")  # type: ignore[union-attr]
    result = Runner(ir, store=RunStore(None)).run({"xs": [1, 2]})
    assert result.status == "completed" and result.output == [1, 2]
    assert list(result.vars) == [node_id]


@pytest.mark.parametrize("outer", ["forEach", "subAgentFlow"])
def test_a_for_each_inside_a_flow_is_a_located_error(outer: str) -> None:
    # Expansion went once over the document's own nodes: a forEach copied in with a
    # flow was never expanded, and was reported as a call to an unknown flow.
    inner = {
        "id": "inner",
        "name": "inner",
        "nodes": [
            node("s", "start"),
            node("t", "dataTransform", expression="`1`"),
            node("e", "end"),
        ],
        "connections": [conn("s", "t"), conn("t", "e")],
    }
    middle = {
        "id": "middle",
        "name": "middle",
        "nodes": [
            node("s", "start"),
            node("each", "forEach", items="$in.xs", subAgentFlowId="inner"),
            node("e", "end"),
        ],
        "connections": [conn("s", "each"), conn("each", "e")],
    }
    data: dict[str, Any] = {"subAgentFlowId": "middle"}
    if outer == "forEach":
        data["items"] = "$in.xs"
    doc = workflow(
        [node("start", "start"), node("outer", outer, **data), node("end", "end")],
        [conn("start", "outer"), conn("outer", "end")],
        subAgentFlows=[inner, middle],
    )
    with pytest.raises(DocumentError) as raised:
        lower(doc)
    (error,) = raised.value.diagnostics
    assert error.code == "for-each-nested" and error.node_id == "outer__each"
    assert error.pointer == "/subAgentFlows/1/nodes/1"

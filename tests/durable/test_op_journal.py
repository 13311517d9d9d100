"""An op's journal on Temporal (no server needed): what it keeps, masks and drops, and an
op started again from the journal an earlier attempt left, which asks the model only for
what that attempt had no answer to."""

from __future__ import annotations

import asyncio
import copy
import json
import shutil
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from lattice.config import LatticeConfig
from lattice.contracts.usage import Usage
from lattice.ir.serialize import ir_to_dict
from lattice.lower.compiler import lower_document
from lattice.runs.redaction import make_redactor
from lattice.runtime.state import StateStore
from lattice.workspace import sandbox_problem
from tests.builders import chain, node
from tests.conftest import EXAMPLES
from tests.durable.helpers import example

pytest.importorskip("temporalio")

from lattice.durable.temporal.history import add_usage
from lattice.durable.temporal.op_journal import (
    OpJournal,
    recorded_lines,
    replayed_provider_state,
)
from lattice.durable.temporal.ops import OpExecutor, execir_digest

SCHEMA = {
    "type": "object",
    "properties": {"summary": {"type": "string"}},
    "required": ["summary"],
    "additionalProperties": False,
}
SCRIPT = {"responses": {"say": [{"summary": 5}, {"summary": "all about tea"}]}}
"""The first answer breaks the schema: the op repairs it with a second call."""


def op_request(
    ir: Any, node_id: str, inputs: dict[str, Any], script: dict[str, Any]
) -> tuple[dict[str, Any], Callable[[], Awaitable[dict[str, Any]]]]:
    """The activity's request for the op of ``node_id`` (the run's first: nothing used yet),
    on a mock ``script``, and the load of the run's ExecIR."""
    execir = ir_to_dict(ir)

    async def load() -> dict[str, Any]:
        return execir

    [op_id] = [op.id for op in ir.ops.values() if op.source_node == node_id]
    state = StateStore(inputs, ctx={"run_id": "r", "model_classes": ["default"]}).snapshot()
    request = {
        "run_id": "r",
        "op_id": op_id,
        "execir_digest": execir_digest(execir),
        "provider": {"mock_script": script},
        "budgets": {},
        "state": state,
        "seq": 0,
        "answers": {},
        "usage": None,
        "provider_state": None,
        "last_result": None,
    }
    return request, load


def test_the_journal_keeps_answers_and_tool_lines_masked_up_to_its_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    secret = "tok-" + uuid.uuid4().hex
    monkeypatch.setenv("LATTICE_JOURNAL_TEST_TOKEN", secret)
    seen: list[list[dict[str, Any]]] = []
    journal = OpJournal(
        [{"kind": "answer", "op_id": "a", "text": "before"}],
        make_redactor(("LATTICE_JOURNAL_TEST_TOKEN",)),
        lambda lines: seen.append(list(lines)),
        limit=400,
    )
    journal.journal({"kind": "request", "op_id": "a", "prompt_hash": "h"})
    journal.journal({"kind": "answer", "op_id": "a", "text": f"the key is {secret}"})
    journal.journal({"kind": "tool_result", "op_id": "a", "key": "k", "text": "ok"})
    assert [line["kind"] for line in journal.lines] == ["answer", "answer", "tool_result"]
    assert journal.lines[1]["text"] == "the key is ***"
    assert seen[-1] == journal.lines and len(seen) == 2
    journal.journal({"kind": "answer", "op_id": "a", "text": "x" * 400})
    journal.journal({"kind": "answer", "op_id": "a", "text": "small"})
    assert journal.full and len(journal.lines) == 3  # nothing is taken once it is full
    assert recorded_lines([journal.lines]) == journal.lines
    assert recorded_lines([]) == [] and recorded_lines(["not a journal"]) == []


def test_an_op_started_again_replays_the_answers_its_first_attempt_was_given() -> None:
    ir = lower_document(
        chain(node("say", "prompt", prompt="SUMMARY of tea", outputSchema=SCHEMA))
    ).ir
    assert ir is not None
    request, load = op_request(ir, "say", {}, SCRIPT)
    journals: list[list[dict[str, Any]]] = []

    def run(recorded: list[dict[str, Any]]) -> dict[str, Any]:
        executor = OpExecutor(LatticeConfig())
        done = executor.run_op(request, load, recorded=recorded, on_journal=journals.append)
        return asyncio.run(done)

    whole = run([])
    assert whole["port"] == "default" and whole["output"] == {"summary": "all about tea"}
    first_attempt = journals[-1]
    assert [line["text"] for line in first_attempt] == [
        '{"summary": 5}',
        '{"summary": "all about tea"}',
    ]
    # the worker died after the first answer: a new attempt gets it from the journal, and
    # the mock (its script position restored from that answer) is asked for the second only
    left = first_attempt[:1]
    assert replayed_provider_state(left) is not None
    again = run(left)
    assert again["output"] == whole["output"]
    assert again["changes"] == whole["changes"]
    assert again["provider_state"] == whole["provider_state"]
    # the first (broken) answer counts as an attempt again: the repair follows it
    assert [a["kind"] for a in again["record"]["attempts"]] == ["initial", "repair"]
    # one call made (one line added), and the journal goes on from where it was
    assert len(journals) == 3
    assert [line["text"] for line in journals[-1]] == [line["text"] for line in first_attempt]


@pytest.mark.skipif(sandbox_problem() is not None, reason=f"no sandbox: {sandbox_problem()}")
def test_an_agent_started_again_replays_its_turns_and_tool_results(tmp_path: Path) -> None:
    ir, script, inputs = example("fix-a-bug")
    shutil.copytree(EXAMPLES / "fix-a-bug-project", tmp_path / "project")
    config = LatticeConfig.model_validate(
        {"agents": {"workspace": str(tmp_path / "project"), "allow": ["read"]}}
    )
    request, load = op_request(ir, "explore", inputs, script)
    journals: list[list[dict[str, Any]]] = []

    def run(recorded: list[dict[str, Any]]) -> dict[str, Any]:
        executor = OpExecutor(config)
        done = executor.run_op(request, load, recorded=recorded, on_journal=journals.append)
        return asyncio.run(done)

    def tools_run(done: dict[str, Any]) -> list[str]:
        return [e["data"]["tool"] for e in done["events"] if e["type"] == "tool_call_started"]

    whole = run([])
    assert whole["port"] == "default", whole.get("failure")
    assert tools_run(whole) == ["Glob", "Grep", "Read", "Read"]
    kinds = [line["kind"] for line in journals[-1]]
    assert kinds.count("answer") == 3 and kinds.count("tool_result") == 4
    # the worker died once the first turn's tools had answered: a new attempt replays
    # that turn and its tool results, and runs the second turn's tools only
    first_turn = journals[-1][: kinds.index("answer", 1)]
    again = run(first_turn)
    assert again["output"] == whole["output"]
    assert tools_run(again) == ["Read", "Read"]
    assert (
        again["record"]["transcript"]["tool_calls"] == whole["record"]["transcript"]["tool_calls"]
    )


def test_an_op_without_a_provider_on_a_worker_says_what_works_on_temporal() -> None:
    ir = lower_document(chain(node("say", "prompt", prompt="Say tea"))).ir
    assert ir is not None
    [op_id] = [op.id for op in ir.ops.values() if op.source_node == "say"]
    execir = ir_to_dict(ir)

    async def load() -> dict[str, Any]:
        return execir

    request = {
        "run_id": "r",
        "op_id": op_id,
        "execir_digest": execir_digest(execir),
        "provider": {},  # none chosen, and none in the worker's configuration
        "budgets": {},
        "state": StateStore({}, ctx={"run_id": "r", "model_classes": ["default"]}).snapshot(),
        "seq": 0,
        "answers": {},
        "usage": None,
        "provider_state": None,
        "last_result": None,
    }
    done = asyncio.run(OpExecutor(LatticeConfig()).run_op(request, load))
    assert done["error"]["error_type"] == "provider_disabled"
    said = done["error"]["message"]
    assert "--fixtures FILE" in said  # fixtures travel with a run on Temporal too
    assert "--mock FILE" in said and "--dry-run" in said
    assert '"mock_script"' in said  # what a run started through the gateway sends
    assert "workers'" in said  # a provider and its keys are the workers'


def test_decisions_are_kept_and_results_settle_at_once() -> None:
    """A decision is replayed by a new attempt; ``settled`` hands the journal to the
    acknowledged heartbeat once per batch of new lines."""
    settled: list[int] = []

    async def settle(lines: list[dict[str, Any]]) -> None:
        settled.append(len(lines))

    journal = OpJournal([], make_redactor(()), on_settle=settle)
    decision = {"kind": "tool_decision", "op_id": "fix", "key": "k", "decision": "allow"}
    journal.journal(decision)
    journal.journal({"kind": "approval_request", "op_id": "fix", "key": "k"})
    asyncio.run(journal.settled())
    asyncio.run(journal.settled())  # nothing new: not sent again
    journal.journal({"kind": "tool_result", "op_id": "fix", "key": "k", "text": "ok"})
    asyncio.run(journal.settled())
    assert settled == [1, 2]
    assert recorded_lines([journal.lines]) == journal.lines
    assert journal.lines[0] == decision


def test_an_agent_going_on_after_approvals_counts_each_model_call_once(tmp_path: Path) -> None:
    """The visit that halted was counted when it ended; the visit going on from its
    journal replays its turns without counting them again."""
    ir, script, inputs = example("fix-a-bug")
    project = tmp_path / "project"
    shutil.copytree(EXAMPLES / "fix-a-bug-project", project)
    (project / ".claude").mkdir()
    (project / ".claude/settings.json").write_text(json.dumps({"permissions": {"ask": ["Read"]}}))
    config = LatticeConfig.model_validate(
        {"agents": {"workspace": str(project), "allow": ["read"]}}
    )
    request, load = op_request(ir, "explore", inputs, script)
    run_usage = Usage()
    halted = asyncio.run(OpExecutor(config).run_op(request, load))
    add_usage(run_usage, Usage().to_json(), halted["usage"])
    assert halted["halt"]["reason"] == "waiting_for_approval"
    asked = [a["id"] for a in halted["halt"]["details"]["approvals"]]
    assert asked == ["explore.1.1", "explore.1.2"]
    assert (run_usage.calls, run_usage.requests) == (1, 1)
    allow = {"decision": "allow", "door": "test", "at": "T"}
    going_on = request | {
        "usage": run_usage.to_json(),
        "journal": halted["journal"],
        "answers": {"$approvals": dict.fromkeys(asked, allow)},
        "provider_state": halted["provider_state"],
    }
    # the activity is given a copy (the request goes through Temporal)
    done = asyncio.run(OpExecutor(config).run_op(copy.deepcopy(going_on), load))
    add_usage(run_usage, going_on["usage"], done["usage"])
    answers = [line for line in done["journal"] if line["kind"] == "answer"]
    assert len(answers) == 2  # the replayed first turn and the second, asked once
    assert (run_usage.calls, run_usage.requests) == (2, 2)
    assert run_usage.input_tokens == sum(line["input_tokens"] for line in answers)
    assert run_usage.by_model == {
        "mock-model": {
            "calls": 2,
            "input_tokens": run_usage.input_tokens,
            "output_tokens": run_usage.output_tokens,
        }
    }

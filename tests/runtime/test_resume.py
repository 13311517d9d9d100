"""Halt/resume (questions without answers) and fail/resume (a mock that runs out):
resumed runs end exactly like uninterrupted ones and never repeat completed ops."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from lattice.errors import InputError, LatticeUserError
from lattice.llm.mock import MockProvider
from lattice.lower import lower
from lattice.runtime import RunLimits, Runner, RunResult, RunStore
from tests.builders import chain, conn, node, op_records, workflow

PLAN_SCHEMA = {
    "type": "object",
    "properties": {"steps": {"type": "array", "items": {"type": "string"}}},
    "required": ["steps"],
}
PLAN_1 = {"steps": ["draft"]}
PLAN_2 = {"steps": ["draft", "review"]}
SCRIPT: dict[str, list[Any]] = {"plan": [PLAN_1, PLAN_2], "write": ["The final text."]}


def review_doc() -> dict[str, Any]:
    """plan (LLM) → approve? (ASK) → Approve: write (LLM) → end
    | Revise: count → plan again | Reject: rejected end."""
    return workflow(
        [
            node(
                "start",
                "start",
                inputs={
                    "type": "object",
                    "properties": {"topic": {"type": "string"}},
                    "required": ["topic"],
                },
            ),
            node(
                "plan",
                "prompt",
                prompt="Plan a post about {{ $in.topic }}",
                outputSchema=PLAN_SCHEMA,
            ),
            node(
                "approve",
                "askUserQuestion",
                questionText="Approve the plan for {{ $in.topic }}?",
                options=[{"label": "Approve"}, {"label": "Revise"}, {"label": "Reject"}],
            ),
            node("count", "variableStore", operation="increment", name="revisions"),
            node("write", "prompt", prompt="Write it: {{ $vars.plan.result.steps }}"),
            node("end", "end", output={"plan": "$vars.plan.result", "text": "$vars.write.result"}),
            node("rejected", "end", output="rejected"),
        ],
        [
            conn("start", "plan"),
            conn("plan", "approve"),
            conn("approve", "write", "branch-0"),
            conn("approve", "count", "branch-1"),
            conn("approve", "rejected", "branch-2"),
            conn("count", "plan"),
            conn("write", "end"),
        ],
    )


INPUTS = {"topic": "tides"}


def calls_per_node(*providers: MockProvider) -> Counter[str]:
    return Counter(r.node_id or "" for p in providers for r in p.calls)


def read_events(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]


def load(run_dir: Path, name: str) -> Any:
    return json.loads((run_dir / name).read_text(encoding="utf-8"))


def prompt_hashes(events: list[dict[str, Any]]) -> list[str]:
    return [e["data"]["prompt_hash"] for e in events if e["type"] == "llm_request"]


def comparable_vars(result: RunResult) -> dict[str, Any]:
    return json.loads(json.dumps(result.vars))


@pytest.fixture
def uninterrupted(tmp_path: Path) -> tuple[RunResult, MockProvider]:
    provider = MockProvider(SCRIPT)
    runner = Runner(
        lower(review_doc()),
        provider=provider,
        store=RunStore(tmp_path / "reference"),
        answers={"approve": ["Revise", "Approve"]},
    )
    result = runner.run(INPUTS)
    assert result.status == "completed", result.failure
    return result, provider


# -- halt and resume --------------------------------------------------------------------


def test_ask_without_answer_halts_with_a_report_and_checkpoint(tmp_path: Path) -> None:
    provider = MockProvider(SCRIPT)
    result = Runner(lower(review_doc()), provider=provider, store=RunStore(tmp_path)).run(INPUTS)
    assert result.status == "halted"
    assert result.output is None
    run_dir = result.run_dir
    assert run_dir is not None

    failure = result.failure
    assert failure is not None
    assert failure.node_id == "approve"
    assert failure.op_id == "approve"
    assert failure.category == "waiting_for_answer"
    assert failure.blocking is True
    assert failure.details["question"] == "Approve the plan for tides?"
    assert failure.details["options"] == ["Approve", "Revise", "Reject"]
    assert f"lattice resume {run_dir}" in failure.recovery_action
    assert "--answer approve=" in failure.recovery_action

    report = load(run_dir, "failure_report.json")
    assert report == failure.to_json()
    checkpoint = load(run_dir, "checkpoint.json")
    assert checkpoint["status"] == "halted"
    assert checkpoint["next_op"] == "approve"
    assert checkpoint["run_id"] == result.run_id
    assert load(run_dir, "result.json")["status"] == "halted"

    events = read_events(run_dir)
    assert events[-1]["type"] == "run_halted"
    assert events[-1]["node_id"] == "approve"
    assert calls_per_node(provider) == {"plan": 1}
    # the question was not answered: nothing was written for it
    assert "approve" not in result.vars


def test_resume_ends_like_an_uninterrupted_run(
    tmp_path: Path, uninterrupted: tuple[RunResult, MockProvider]
) -> None:
    reference, reference_provider = uninterrupted
    provider = MockProvider(SCRIPT)
    first = Runner(lower(review_doc()), provider=provider, store=RunStore(tmp_path)).run(INPUTS)
    assert first.status == "halted"
    run_dir = first.run_dir
    assert run_dir is not None

    # an answer given on resume applies to the next visit only: the loop asks again
    second = Runner.resume(run_dir, answers={"approve": "Revise"}, provider=provider)
    assert second.status == "halted"
    assert second.run_id == first.run_id
    assert second.run_dir == run_dir
    assert second.failure is not None and second.failure.node_id == "approve"

    third = Runner.resume(run_dir, answers={"approve": "Approve"}, provider=provider)
    assert third.status == "completed", third.failure
    assert third.failure is None
    assert third.output == reference.output == {"plan": PLAN_2, "text": "The final text."}
    assert comparable_vars(third) == comparable_vars(reference)
    assert third.vars["revisions"] == 1

    # no LLM call was repeated for ops that had completed
    assert calls_per_node(provider) == calls_per_node(reference_provider)
    assert calls_per_node(provider) == {"plan": 2, "write": 1}
    assert third.usage.calls == reference.usage.calls == 3

    # the run folder reads as one run
    events = read_events(run_dir)
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(1, len(events) + 1))
    assert {e["run_id"] for e in events} == {first.run_id}
    types = [e["type"] for e in events]
    assert types.count("run_started") == 1
    assert types.count("run_halted") == 2
    assert types.count("run_resumed") == 2
    assert types.count("run_finished") == 1 and types[-1] == "run_finished"
    assert prompt_hashes(events) == prompt_hashes(reference.events)
    resumed = [e for e in events if e["type"] == "run_resumed"]
    assert all(e["data"]["from_op"] == "approve" for e in resumed)
    answers = [e["data"]["answer"]["label"] for e in events if e["type"] == "human_answer"]
    assert answers == ["Revise", "Approve"]

    records = op_records(run_dir)
    finished = [e for e in events if e["type"] == "op_finished"]
    assert len(records) == len(finished)
    assert [r["seq"] for r in records] == list(range(1, len(records) + 1))
    assert not (run_dir / "failure_report.json").exists()
    assert load(run_dir, "result.json")["status"] == "completed"
    assert load(run_dir, "state_final.json")["vars"] == comparable_vars(reference)
    assert load(run_dir, "checkpoint.json")["status"] == "completed"


def test_resume_with_a_fresh_provider_continues_the_mock_script(
    tmp_path: Path, uninterrupted: tuple[RunResult, MockProvider]
) -> None:
    reference, _ = uninterrupted
    first_provider = MockProvider(SCRIPT)
    runner = Runner(
        lower(review_doc()),
        provider=first_provider,
        store=RunStore(tmp_path),
        answers={"approve": ["Revise"]},  # a queue: answers the first visit only
    )
    first = runner.run(INPUTS)
    assert first.status == "halted"
    assert calls_per_node(first_provider) == {"plan": 2}

    second_provider = MockProvider(SCRIPT)  # the same script, from its start
    done = Runner.resume(first.run_dir, answers={"approve": 0}, provider=second_provider)  # type: ignore[arg-type]
    assert done.status == "completed", done.failure
    assert calls_per_node(second_provider) == {"write": 1}
    assert comparable_vars(done) == comparable_vars(reference)


def test_resume_reports_events_to_a_listener(tmp_path: Path) -> None:
    first = Runner(
        lower(review_doc()), provider=MockProvider(SCRIPT), store=RunStore(tmp_path)
    ).run(INPUTS)
    seen: list[str] = []
    Runner.resume(
        first.run_dir,  # type: ignore[arg-type]
        answers={"approve": "Reject"},
        provider=MockProvider(SCRIPT),
        on_event=lambda e: seen.append(e["type"]),
    )
    assert seen[0] == "run_resumed"
    assert seen[-1] == "run_finished"
    assert "human_answer" in seen


def test_resume_without_an_answer_halts_again(tmp_path: Path) -> None:
    first = Runner(
        lower(review_doc()), provider=MockProvider(SCRIPT), store=RunStore(tmp_path)
    ).run(INPUTS)
    again = Runner.resume(first.run_dir, provider=MockProvider(SCRIPT))  # type: ignore[arg-type]
    assert again.status == "halted"
    assert again.failure is not None and again.failure.node_id == "approve"
    done = Runner.resume(first.run_dir, answers={"approve": "Reject"})  # type: ignore[arg-type]
    assert done.status == "completed"
    assert done.output == "rejected"


def test_ask_human_callback_answers_on_resume(tmp_path: Path) -> None:
    first = Runner(
        lower(review_doc()), provider=MockProvider(SCRIPT), store=RunStore(tmp_path)
    ).run(INPUTS)
    asked: list[str] = []

    def ask(op: Any) -> str:
        asked.append(op.source_node)
        return "Reject"

    done = Runner.resume(first.run_dir, ask_human=ask)  # type: ignore[arg-type]
    assert done.status == "completed"
    assert asked == ["approve"]


def test_a_completed_run_cannot_be_resumed(
    uninterrupted: tuple[RunResult, MockProvider],
) -> None:
    reference, _ = uninterrupted
    with pytest.raises(LatticeUserError, match="already completed"):
        Runner.resume(reference.run_dir)  # type: ignore[arg-type]


def test_resume_of_a_folder_that_is_not_a_run(tmp_path: Path) -> None:
    with pytest.raises(LatticeUserError, match=r"checkpoint\.json"):
        Runner.resume(tmp_path)
    (tmp_path / "checkpoint.json").write_text("{broken")
    with pytest.raises(LatticeUserError):
        Runner.resume(tmp_path)


def test_an_invalid_answer_on_resume_changes_nothing(tmp_path: Path) -> None:
    first = Runner(
        lower(review_doc()), provider=MockProvider(SCRIPT), store=RunStore(tmp_path)
    ).run(INPUTS)
    run_dir = first.run_dir
    assert run_dir is not None
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    with pytest.raises(InputError, match="Maybe"):
        Runner.resume(run_dir, answers={"approve": "Maybe"})
    with pytest.raises(InputError, match="nobody"):
        Runner.resume(run_dir, answers={"nobody": "Approve"})
    after = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    assert after == before


def test_answers_by_index_and_any_case(tmp_path: Path) -> None:
    doc = review_doc()
    for answer in (0, "0", "approve", " APPROVE "):
        result = Runner(
            lower(doc),
            provider=MockProvider(SCRIPT),
            store=RunStore(None),
            answers={"approve": answer},
        ).run(INPUTS)
        assert result.status == "completed"
        assert result.vars["approve"]["result"] == {"label": "Approve", "index": 0}


def test_invalid_answers_are_rejected_before_running() -> None:
    ir = lower(review_doc())
    for answers in ({"approve": "Maybe"}, {"approve": 7}, {"count": "Approve"}, {"zzz": 0}):
        with pytest.raises(InputError):
            Runner(ir, provider=MockProvider(SCRIPT), store=RunStore(None), answers=answers)


# -- multi-select questions -------------------------------------------------------------


def multi_doc() -> dict[str, Any]:
    return chain(
        node(
            "pick",
            "askUserQuestion",
            questionText="Which channels?",
            multiSelect=True,
            options=[{"label": "Email"}, {"label": "Chat"}, {"label": "SMS"}],
        )
    )


@pytest.mark.parametrize("answer", ["Email,SMS", ["Email", "SMS"], [0, 2], "0, 2"])
def test_multi_select_answers_up_front(answer: Any) -> None:
    result = Runner(lower(multi_doc()), store=RunStore(None), answers={"pick": answer}).run({})
    assert result.status == "completed"
    assert result.output == {"labels": ["Email", "SMS"], "indexes": [0, 2]}


@pytest.mark.parametrize("answer", ["Email,SMS", ["Email", "SMS"]])
def test_multi_select_answer_on_resume(tmp_path: Path, answer: Any) -> None:
    first = Runner(lower(multi_doc()), store=RunStore(tmp_path)).run({})
    assert first.status == "halted"
    done = Runner.resume(first.run_dir, answers={"pick": answer})  # type: ignore[arg-type]
    assert done.status == "completed"
    assert done.output == {"labels": ["Email", "SMS"], "indexes": [0, 2]}


def test_multi_select_single_label_on_resume(tmp_path: Path) -> None:
    first = Runner(lower(multi_doc()), store=RunStore(tmp_path)).run({})
    done = Runner.resume(first.run_dir, answers={"pick": "Chat"})  # type: ignore[arg-type]
    assert done.status == "completed"
    assert done.output == {"labels": ["Chat"], "indexes": [1]}


# -- resuming a run folder that was moved -----------------------------------------------


def test_resume_writes_into_the_folder_it_was_given(tmp_path: Path) -> None:
    first = Runner(
        lower(review_doc()), provider=MockProvider(SCRIPT), store=RunStore(tmp_path / "runs")
    ).run(INPUTS)
    moved = tmp_path / "kept" / "my-run"
    moved.parent.mkdir()
    shutil.move(str(first.run_dir), moved)
    done = Runner.resume(moved, answers={"approve": "Reject"})
    assert done.status == "completed"
    assert done.run_dir == moved
    assert sorted(p.name for p in (tmp_path / "kept").iterdir()) == ["my-run"]
    assert read_events(moved)[-1]["type"] == "run_finished"


# -- fail and resume --------------------------------------------------------------------


def test_failed_run_resumes_from_the_failed_op(
    tmp_path: Path, uninterrupted: tuple[RunResult, MockProvider]
) -> None:
    reference, _ = uninterrupted
    answers = {"approve": ["Revise", "Approve"]}
    short = MockProvider({"plan": [PLAN_1, PLAN_2], "write": []})
    runner = Runner(lower(review_doc()), provider=short, store=RunStore(tmp_path), answers=answers)
    failed = runner.run(INPUTS)
    assert failed.status == "failed"
    assert failed.failure is not None
    assert failed.failure.category == "mock_exhausted"
    assert failed.failure.node_id == "write"
    run_dir = failed.run_dir
    assert run_dir is not None
    checkpoint = load(run_dir, "checkpoint.json")
    assert checkpoint["status"] == "failed"
    assert checkpoint["next_op"] == "write"
    assert load(run_dir, "failure_report.json")["category"] == "mock_exhausted"

    # the same exhausted script fails again, at the same op, without redoing anything
    again = Runner.resume(run_dir, provider=MockProvider({"plan": [PLAN_1, PLAN_2], "write": []}))
    assert again.status == "failed"
    assert again.failure is not None and again.failure.node_id == "write"

    more = MockProvider(SCRIPT)  # now with a response for "write"
    done = Runner.resume(run_dir, provider=more)
    assert done.status == "completed", done.failure
    assert calls_per_node(more) == {"write": 1}  # plan (x2) and the questions did not run again
    assert calls_per_node(short) == {"plan": 2, "write": 1}  # the one failed call
    assert done.output == reference.output
    assert comparable_vars(done) == comparable_vars(reference)

    events = read_events(run_dir)
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(1, len(events) + 1))
    types = [e["type"] for e in events]
    assert types.count("run_failed") == 2
    assert types.count("run_resumed") == 2
    assert types[-1] == "run_finished"
    # every op except the failing one ran exactly as often as in the uninterrupted run
    started = Counter(e["op_id"] for e in events if e["type"] == "op_started")
    reference_started = Counter(e["op_id"] for e in reference.events if e["type"] == "op_started")
    assert started - Counter({"write": 2}) == reference_started - Counter({"write": 0})
    assert not (run_dir / "failure_report.json").exists()
    assert done.usage.calls == 3  # usage carries over across resumes; failed calls add none


def test_failed_run_resume_keeps_the_original_answers(tmp_path: Path) -> None:
    """Answers given to the original run (a queue, partly used) carry over to the resume."""
    runner = Runner(
        lower(review_doc()),
        provider=MockProvider({"plan": [PLAN_1, PLAN_2], "write": []}),
        store=RunStore(tmp_path),
        answers={"approve": ["Revise", "Approve", "Reject"]},
    )
    failed = runner.run(INPUTS)
    assert failed.status == "failed"
    checkpoint = load(failed.run_dir, "checkpoint.json")  # type: ignore[arg-type]
    assert checkpoint["answers"] == {"approve": ["Reject"]}
    done = Runner.resume(failed.run_dir, provider=MockProvider(SCRIPT))  # type: ignore[arg-type]
    assert done.status == "completed"
    assert done.vars["approve"]["result"]["label"] == "Approve"


# -- limits and run ids -----------------------------------------------------------------


def counted_loop() -> dict[str, Any]:
    return workflow(
        [
            node("start", "start"),
            node("inc", "variableStore", operation="increment", name="n"),
            node(
                "more",
                "ifElse",
                evaluationTarget="$vars.n",
                branches=[
                    {"label": "More", "condition": "< 5"},
                    {"label": "Done", "condition": ""},
                ],
            ),
            node("end", "end", output="$vars.n"),
        ],
        [
            conn("start", "inc"),
            conn("inc", "more"),
            conn("more", "inc", "branch-0"),
            conn("more", "end", "branch-1"),
        ],
    )


def test_a_step_limit_failure_resumes_with_higher_limits(tmp_path: Path) -> None:
    failed = Runner(
        lower(counted_loop()), store=RunStore(tmp_path), limits=RunLimits(max_visits=3)
    ).run({})
    assert failed.status == "failed"
    assert failed.failure is not None and failed.failure.category == "step_limit"
    assert failed.vars["n"] == 3
    # with the same limits it fails again at once, doing nothing
    again = Runner.resume(failed.run_dir, limits=RunLimits(max_visits=3))  # type: ignore[arg-type]
    assert again.status == "failed" and again.vars["n"] == 3
    done = Runner.resume(failed.run_dir, limits=RunLimits(max_visits=10))  # type: ignore[arg-type]
    assert done.status == "completed", done.failure
    assert done.output == 5  # the loop went on from where it stopped, not from the start


def test_a_new_run_never_writes_into_an_existing_run_folder(tmp_path: Path) -> None:
    runner = Runner(lower(counted_loop()), store=RunStore(tmp_path))
    first = runner.run({}, run_id="fixed")
    assert first.run_dir is not None
    before = (first.run_dir / "events.jsonl").read_text()
    try:
        second = runner.run({}, run_id="fixed")
    except LatticeUserError:
        pass
    else:
        assert second.run_dir != first.run_dir
    assert (first.run_dir / "events.jsonl").read_text() == before


class StoppedMidOp:
    """Answers the scoring node badly, then stops the run (as a batch's budget gate does)
    from inside the op's repair call; afterwards answers well, counting what it is sent."""

    name = "stopped-mid-op"

    def __init__(self, stop: bool) -> None:
        self.stop = stop
        self.sent: list[str] = []

    async def complete(self, request: Any) -> Any:
        from lattice.llm.base import LLMResponse
        from lattice.runtime.context import Interrupted

        last = request.messages[-1].content
        self.sent.append(last)
        if self.stop and len(self.sent) == 2:
            raise Interrupted("the batch's budget is spent")
        return LLMResponse(text="not json" if len(self.sent) == 1 and self.stop else '{"x": 1}')


def test_an_op_stopped_mid_flight_keeps_its_recorded_answers_for_the_resume(
    tmp_path: Path,
) -> None:
    schema = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
    ir = lower(chain(node("score", "prompt", prompt="give x", outputSchema=schema)))
    first = StoppedMidOp(stop=True)
    stopped = Runner(ir, provider=first, store=RunStore(tmp_path)).run()
    assert stopped.status == "interrupted" and len(first.sent) == 2
    assert stopped.run_dir is not None
    again = StoppedMidOp(stop=False)
    resumed = Runner.resume(stopped.run_dir, provider=again)
    assert resumed.status == "completed"
    assert not any(text.startswith("give x") for text in again.sent), again.sent
    assert len(again.sent) == 1  # only the repair that never got its answer

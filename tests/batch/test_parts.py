"""The parts of a batch on their own: rows, answers files, the results file, the limiter,
mock scripts per row, the plan of a resumed batch, percentiles."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lattice.batch.engine import plan
from lattice.batch.limits import BatchLimits, Limiter
from lattice.batch.mocks import BatchMock
from lattice.batch.results import ResultsFile, read_results
from lattice.batch.rows import GivenAnswers, Row, id_order, read_answers, read_rows, row_key
from lattice.batch.summary import percentile
from lattice.errors import InputError, LatticeUserError


def test_rows_are_inputs_objects_or_envelopes(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text(
        json.dumps({"ticket": "a"})
        + "\n\n"
        + json.dumps({"id": "t-2", "inputs": {"ticket": "b"}, "answers": {"q": "Yes"}})
        + "\n"
        + json.dumps({"id": 7, "inputs": {"ticket": "c"}})
        + "\n"
        + json.dumps({"inputs": {"ticket": "d"}, "priority": 1})  # not an envelope
        + "\n"
        + "\xff\n",
        encoding="latin-1",
    )
    rows, invalid = read_rows(path)
    assert [(r.id, r.line, r.inputs, r.answers) for r in rows] == [
        (1, 1, {"ticket": "a"}, {}),
        ("t-2", 3, {"ticket": "b"}, {"q": "Yes"}),
        (7, 4, {"ticket": "c"}, {}),
        (5, 5, {"inputs": {"ticket": "d"}, "priority": 1}, {}),
    ]
    assert [(i.line, i.error) for i in invalid] == [(6, "not UTF-8 text")]


def test_rows_checked_by_the_workflow_are_reported_with_their_id() -> None:
    def check(row: Row) -> None:
        if "ticket" not in row.inputs:
            raise InputError("invalid inputs:\n  $in: 'ticket' is a required property")

    rows, invalid = read_rows(
        [{"ticket": "x"}, {"id": "b", "inputs": {}}, {"id": "b", "inputs": {"ticket": "y"}}],
        check,
    )
    assert [r.id for r in rows] == [1]
    assert [i.describe("data") for i in invalid] == [
        "data:2 (row 'b'): invalid inputs: $in: 'ticket' is a required property",
        "data:3 (row 'b'): the id is used before, on line 2",
    ]


def test_row_ids_sort_numbers_first_and_keep_types_apart() -> None:
    assert sorted(["b", 10, 2, "a"], key=id_order) == [2, 10, "a", "b"]
    assert row_key(5) != row_key("5")


def test_answers_files_answer_every_row_or_rows_by_id(tmp_path: Path) -> None:
    every = tmp_path / "answers.json"
    every.write_text(json.dumps({"approve": "Yes"}))
    assert read_answers(every).for_row(row_key("x")) == {"approve": "Yes"}
    by_row = tmp_path / "answers.jsonl"
    by_row.write_text(json.dumps({"id": "x", "answers": {"approve": "No"}}) + "\n")
    given = read_answers(by_row)
    assert given.for_row(row_key("x")) == {"approve": "No"}
    assert given.for_row(row_key("y")) == {}
    by_row.write_text('{"id": "x"}\n')
    with pytest.raises(InputError, match=r"answers.jsonl:1: a line is"):
        read_answers(by_row)
    every.write_text("[1]")
    with pytest.raises(InputError, match="must hold a JSON object"):
        read_answers(every)


def test_the_results_file_keeps_the_last_line_of_a_row_and_compacts(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    results = ResultsFile(path, durability="fsync")
    results.append({"id": "a", "status": "failed"})
    results.append({"id": "b", "status": "completed"})
    results.append({"id": "a", "status": "completed"})
    assert len(path.read_text().splitlines()) == 3, "appended as rows end"
    results.close()
    assert [json.loads(line) for line in path.read_text().splitlines()] == [
        {"id": "a", "status": "completed"},
        {"id": "b", "status": "completed"},
    ]
    assert read_results(path)[row_key("a")]["status"] == "completed"


def test_one_batch_at_a_time_writes_a_results_file(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    first = ResultsFile(path, durability="os")
    try:
        with pytest.raises(LatticeUserError, match="another batch is writing"):
            ResultsFile(path)
    finally:
        first.close()
    ResultsFile(path).close()


def test_a_torn_tail_is_dropped_but_a_bad_middle_line_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    path.write_text('{"id": "a", "status": "completed"}\n{"id": "b", "sta')
    results = ResultsFile(path, durability="os")
    assert results.dropped_torn_line
    assert list(results.latest) == [row_key("a")]
    results.close()
    assert path.read_text() == '{"id": "a", "status": "completed"}\n'
    path.write_text('{"id": "a"}\nnot json\n{"id": "b"}\n')
    with pytest.raises(LatticeUserError, match=r"out.jsonl:2: not a results line"):
        ResultsFile(path)
    assert path.read_text() == '{"id": "a"}\nnot json\n{"id": "b"}\n', "nothing cut away"


def test_the_limiter_counts_calls_and_cost_and_refuses_past_the_budget() -> None:
    limiter = Limiter(
        BatchLimits(max_calls_total=3, max_cost_usd=1.0), {"m": (100_000.0, 100_000.0)}
    )
    assert limiter.acquire(10) == 0.0
    limiter.record("m", 3, 2, 10)  # 5 tokens at $0.1 each
    assert limiter.acquire(10) == 0.0
    limiter.record("m", 3, 2, 10)
    assert limiter.cost_usd == pytest.approx(1.0)
    assert limiter.acquire(10) is None
    assert limiter.spent is not None and "cost budget of $1" in limiter.spent
    snapshot = limiter.snapshot()
    assert snapshot["requests"] == 2 and snapshot["refused"] == 1
    assert snapshot["estimated_cost_usd"] == pytest.approx(1.0)

    calls = Limiter(BatchLimits(max_calls_total=2))
    assert calls.acquire(1) == 0.0 and calls.acquire(1) == 0.0
    assert calls.exhausted and calls.acquire(1) is None
    assert "call budget of 2 model requests" in str(calls.spent)


def test_the_limiter_spaces_requests_and_tokens() -> None:
    now = [100.0]
    limiter = Limiter(
        BatchLimits(requests_per_minute=60, tokens_per_minute=6000), clock=lambda: now[0]
    )
    assert limiter.acquire(10) == 0.0  # 1 s per request; 10 tokens take 0.1 s
    assert limiter.acquire(10) == pytest.approx(1.0)
    assert limiter.acquire(10) == pytest.approx(2.0)
    limiter.record("m", 10, 590, 10)  # 590 more tokens than reserved: 5.9 s later
    assert limiter.acquire(10) == pytest.approx(0.3 + 5.9)
    now[0] += 100
    assert limiter.acquire(10) == 0.0


def test_every_row_gets_a_fresh_copy_of_the_mock_script_and_rows_their_own() -> None:
    mock = BatchMock.from_data(
        {
            "responses": {"a": ["one", "two"], "b": ["x"]},
            "default": "d",
            "rows": {"7": {"responses": {"a": ["seven"]}}},
        }
    )
    first, second, own = mock.for_row(1), mock.for_row(2), mock.for_row(7)
    assert first is not second
    assert first.responses == second.responses == {"a": ["one", "two"], "b": ["x"]}
    assert own.responses == {"a": ["seven"], "b": ["x"]}
    assert own.default == "d"
    assert mock.script_for(7) == {"responses": {"a": ["seven"], "b": ["x"]}, "default": "d"}
    with pytest.raises(
        LatticeUserError, match=r'mock script: rows\["9"\]: responses\["a"\] must be a list'
    ):
        BatchMock.from_data({"responses": {}, "rows": {"9": {"responses": {"a": "no list"}}}})
    with pytest.raises(LatticeUserError, match='"rows" maps row ids'):
        BatchMock.from_data({"responses": {}, "rows": []})


def test_rows_get_the_scripts_tool_results_and_their_own() -> None:
    mock = BatchMock.from_data(
        {
            "responses": {},
            "tools": {"clock": [{"t": 1}], "time/now": [{"t": 2}]},
            "rows": {"7": {"tools": {"clock": [{"t": 7}]}}},
        }
    )
    plain, own = mock.for_row(1), mock.for_row(7)
    assert plain.tool_answer("clock") == {"t": 1}
    assert own.tool_answer("clock") == {"t": 7}
    assert own.tool_answer("time/now") == {"t": 2}
    assert mock.script_for(7)["tools"] == {"clock": [{"t": 7}], "time/now": [{"t": 2}]}


def test_the_plan_of_a_resumed_batch() -> None:
    rows = [Row(f"r{i}", i, {"t": i}) for i in range(6)]
    latest = {
        row_key("r0"): {"id": "r0", "status": "completed"},
        row_key("r1"): {"id": "r1", "status": "failed", "run_dir": "runs/1", "repairs": 2},
        row_key("r2"): {"id": "r2", "status": "halted", "node_id": "ask", "run_dir": "runs/2"},
        row_key("r3"): {"id": "r3", "status": "halted", "node_id": "other", "run_dir": None},
        row_key("r4"): {"id": "r4", "status": "interrupted", "run_dir": "runs/4"},
    }
    tasks, skipped = plan(rows, latest, retry_failed=False, given=GivenAnswers())
    assert [(t.id, t.resume_dir) for t in tasks] == [("r4", "runs/4"), ("r5", None)]
    assert skipped == {"completed": 1, "failed": 1, "halted": 2}

    given = GivenAnswers(every_row={"ask": "Yes"})
    tasks, skipped = plan(rows, latest, retry_failed=True, given=given)
    by_id = {t.id: t for t in tasks}
    assert sorted(by_id) == ["r1", "r2", "r4", "r5"]
    assert by_id["r1"].resume_dir == "runs/1" and by_id["r1"].carried == {
        "repairs": 2,
        "escalations": 0,
        "retries": 0,
    }
    assert by_id["r2"].resume_answers == {"ask": "Yes"}
    assert skipped == {"completed": 1, "halted": 1}  # r3 waits on another question


def test_percentiles_take_the_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 95) == 95.0
    assert percentile([], 50) is None
    assert percentile([3.0], 95) == 3.0


def test_the_ray_engine_says_how_to_install_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from lattice.batch.ray_engine import import_ray

    monkeypatch.setitem(sys.modules, "ray", None)  # as if it were not installed
    with pytest.raises(LatticeUserError, match=r"pip install -e '\.\[ray\]'"):
        import_ray()


def test_on_ray_the_providers_configured_rpm_holds_the_whole_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lattice.batch.engine import BatchOptions, prepare
    from tests.batch.helpers import flow_document

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-used")
    config = tmp_path / "lattice.toml"
    config.write_text("[providers.openai]\nrequests_per_minute = 90\n")

    def limits(engine: str, **extra: object) -> BatchLimits:
        options = BatchOptions(
            workflow=flow_document(),
            inputs=[],
            output=tmp_path / "out.jsonl",
            provider="openai",
            config=config,
            engine=engine,  # type: ignore[arg-type]
            **extra,  # type: ignore[arg-type]
        )
        return prepare(options).limits

    assert limits("ray").requests_per_minute == 90  # each worker's provider holds only itself
    assert limits("local").requests_per_minute is None  # one provider holds every row
    assert limits("ray", limits=BatchLimits(requests_per_minute=30)).requests_per_minute == 30

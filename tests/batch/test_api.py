"""``lattice.batch`` and ``lattice.abatch`` from Python."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from lattice import BatchSummary, LatticeUserError, MockProvider, abatch, batch, lower
from lattice.batch import api
from lattice.batch.api import BatchArguments
from lattice.batch.engine import BatchOptions, BatchRun
from lattice.batch.limits import BatchLimits
from lattice.batch.local import LocalEngine
from tests.batch.helpers import ASK_ANSWER, by_id, dataset, flow_document, read_results


def test_batch_runs_rows_given_in_memory(tmp_path: Path) -> None:
    rows = [{"id": f"q{i}", "inputs": {"text": f"t{i}"}, "answers": ASK_ANSWER} for i in range(5)]
    rows.append({"text": "no answer"})  # line 6: halts
    rows.append({"txt": "typo"})  # line 7: invalid
    seen: list[int] = []
    summary = batch(
        flow_document(),
        rows,
        output=tmp_path / "out.jsonl",
        mock={"responses": {"classify": [{"label": "b"}], "draft": ["ok"]}},
        runs_dir=None,
        on_invalid=lambda item: seen.append(item.line),
    )
    assert isinstance(summary, BatchSummary)
    assert summary.rows["completed"] == 5 and summary.rows["halted"] == 1
    assert summary.rows["invalid"] == 1 and seen == [7]
    assert summary.exit_code == 1
    assert summary.halts["approve"]["example"] == 6
    lines = read_results(tmp_path / "out.jsonl")
    assert {line["id"] for line in lines} == {"q0", "q1", "q2", "q3", "q4", 6}
    assert "1 halted" in summary.render()


def test_abatch_runs_on_the_callers_loop_with_a_provider_object(tmp_path: Path) -> None:
    flow, inputs, _ = dataset(tmp_path, 12, fail=False, halt=False)
    shared = MockProvider(default={"label": "a"})

    async def main() -> BatchSummary:
        return await abatch(
            lower(flow),
            inputs,
            output=tmp_path / "out.jsonl",
            provider=shared,
            runs_dir=None,
            concurrency=4,
        )

    summary = asyncio.run(main())
    assert summary.rows["completed"] == 12
    assert len(shared.calls) == 24  # one provider for every row
    assert summary.usage["calls"] == 24


def test_batch_refuses_a_synchronous_call_inside_a_loop(tmp_path: Path) -> None:
    async def main() -> None:
        with pytest.raises(LatticeUserError, match=r"await lattice.abatch"):
            batch(flow_document(), [], output=tmp_path / "out.jsonl", mock={"responses": {}})

    asyncio.run(main())


def test_bad_options_raise_before_anything_runs(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    with pytest.raises(LatticeUserError, match="concurrency is at least 1"):
        batch(flow_document(), [], output=out, concurrency=0)
    with pytest.raises(LatticeUserError, match="not as an object"):
        batch(flow_document(), [], output=out, provider=MockProvider(), engine="ray")
    with pytest.raises(LatticeUserError, match="mock latency applies to mock scripts only"):
        batch(flow_document(), [], output=out, mock_latency=0.1)
    assert not out.exists()


def test_an_unknown_keyword_is_a_type_error(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    with pytest.raises(TypeError, match="unexpected keyword arguments: record"):
        batch(flow_document(), [], output=out, record=True)  # type: ignore[call-arg]
    assert not out.exists()


def test_every_argument_is_a_batch_option_or_a_batch_limit() -> None:
    """``BatchArguments`` is what ``BatchOptions`` is built from: they must not drift apart."""
    options = set(BatchOptions.__dataclass_fields__)
    limits = set(BatchLimits.__dataclass_fields__)
    for name in BatchArguments.__required_keys__ | BatchArguments.__optional_keys__:
        assert name in options or api._LIMITS.get(name) in limits, name


def test_batch_writes_the_summary_json(tmp_path: Path) -> None:
    summary = batch(
        flow_document(),
        [{"text": "x"}],
        output=tmp_path / "out.jsonl",
        mock={"responses": {"classify": [{"label": "a"}]}},
        runs_dir=None,
        answers={"approve": "No"},
        summary_json=tmp_path / "summary.json",
    )
    written = json.loads((tmp_path / "summary.json").read_text())
    assert written == json.loads(json.dumps(summary.to_json()))
    assert written["rows"]["completed"] == 1


def test_lattice_batch_stays_the_function_after_its_subpackage_is_imported() -> None:
    import lattice.batch.engine  # importing the subpackage must not shadow the export

    assert lattice.batch is batch and callable(lattice.batch)
    assert lattice.abatch is abatch


def test_an_interrupted_batch_names_the_folders_of_its_rows_in_flight_and_resumes_them(
    tmp_path: Path,
) -> None:
    flow, inputs, mock = dataset(tmp_path, 40, fail=False, halt=False)
    out, runs = tmp_path / "out.jsonl", tmp_path / "runs"
    options = {"mock": mock, "runs_dir": runs, "durability": "os", "concurrency": 5}

    async def interrupted() -> None:
        running = asyncio.create_task(
            abatch(flow, inputs, output=out, mock_latency=0.05, **options)  # type: ignore[arg-type]
        )
        while not out.exists() or out.read_text().count('"status":"completed"') < 10:
            await asyncio.sleep(0.01)
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running

    asyncio.run(interrupted())
    latest = by_id(out)  # the last line of each row: rows in flight wrote theirs first
    stopped = [line for line in latest.values() if line["status"] == "interrupted"]
    assert 1 <= len(stopped) <= 5
    for line in stopped:
        assert line["error_type"] == "interrupted"
        checkpoint = json.loads((Path(line["run_dir"]) / "checkpoint.json").read_text())
        assert checkpoint["status"] in ("interrupted", "completed")  # may have just ended
    folders = len(list(runs.iterdir()))

    summary = batch(flow, inputs, output=out, **options)  # type: ignore[arg-type]
    assert summary.rows["completed"] == 40 and summary.exit_code == 0
    final = {line["id"]: line for line in read_results(out)}
    assert len(final) == 40
    for line in stopped:  # resumed in their own folders
        assert final[line["id"]]["run_dir"] == line["run_dir"]
    assert len(list(runs.iterdir())) == folders + 40 - len(latest)


@pytest.mark.parametrize("record", [True, False], ids=["folders", "no-record"])
def test_an_interrupted_batch_counts_what_its_rows_in_flight_spent(
    tmp_path: Path, record: bool
) -> None:
    # five rows at a time, whose first model call takes a minute: the batch is cancelled
    # once each of them has sent it (its limiter has counted five requests)
    flow, inputs, mock = dataset(tmp_path, 20, fail=False, halt=False)
    out, runs = tmp_path / "out.jsonl", tmp_path / "runs"
    limits = BatchLimits(max_calls_total=1000)
    run = BatchRun(
        BatchOptions(
            flow, inputs, out, mock=str(mock), mock_latency=60.0, concurrency=5,
            runs_dir=runs if record else None, durability="os", limits=limits, progress="none",
        )
    )  # fmt: skip
    engine = LocalEngine(run.prepared.spec, concurrency=5, limits=limits, prices={})
    run.engine = engine
    limiter = engine.limiter
    assert limiter is not None

    async def interrupted() -> None:
        running = asyncio.create_task(run.arun())
        while limiter.requests < 5:
            await asyncio.sleep(0.01)
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running

    asyncio.run(interrupted())
    stopped = list(by_id(out).values())
    assert [line["status"] for line in stopped] == ["interrupted"] * 5
    assert [line["usage"]["requests"] for line in stopped] == [1] * 5
    assert run.summary is not None and run.summary.usage["requests"] == 5
    if record:  # the run's own count, as its folder recorded it
        for line in stopped:
            checkpoint = json.loads((Path(line["run_dir"]) / "checkpoint.json").read_text())
            assert checkpoint["usage"]["requests"] == 1

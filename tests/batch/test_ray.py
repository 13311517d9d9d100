"""The ray engine on a local Ray (``ray.init(num_cpus=2)``, 127.0.0.1 only): the same
results as the local engine, and one budget for every worker.

Ray takes about ten seconds to start here, so one instance serves this whole module,
and its checks sit in one test (pytest-xdist would otherwise start Ray in each worker).
Skipped, saying so, when Ray is not installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lattice.batch.api import batch
from lattice.batch.engine import BatchOptions, BatchRun
from lattice.batch.limits import LIMITER_LOST, BatchLimits
from lattice.batch.ray_engine import RayEngine, start_local_ray
from lattice.batch.worker import RowTask
from lattice.errors import LatticeUserError
from tests.batch.helpers import cli, dataset, no_terminal, read_results
from tests.telemetry.test_otlp_e2e import Receiver

__all__ = ["no_terminal"]

ray = pytest.importorskip(
    "ray", reason="Ray is not installed: pip install -e '.[ray]' to test the ray engine"
)

STABLE = ("id", "status", "result", "error_type", "error", "node_id", "usage", "line")
"""Fields of a results line that do not depend on the engine (not run_dir, not latency)."""


@pytest.fixture(scope="module")
def local_ray() -> Iterator[Any]:
    started = start_local_ray(num_cpus=2)
    try:
        yield started
    finally:
        started.shutdown()


def stable(path: Path) -> list[dict[str, Any]]:
    lines = read_results(path)
    return sorted(
        ({k: line.get(k) for k in STABLE} for line in lines), key=lambda line: str(line["id"])
    )


def test_the_ray_engine_gives_the_local_engines_results_and_shares_one_budget(
    local_ray: Any, capsys: pytest.CaptureFixture[str], no_terminal: Path
) -> None:
    flow, inputs, mock = dataset(no_terminal, 300)
    common = ("--inputs", inputs, "--mock", mock, "--no-record", "--progress", "none")
    local_out, ray_out = no_terminal / "local.jsonl", no_terminal / "ray.jsonl"
    code, _, err = cli(capsys, "batch", flow, "-o", local_out, *common, "--concurrency", "20")
    assert code == 1, err
    summary_file = no_terminal / "ray-summary.json"
    code, _, err = cli(
        capsys,
        "batch",
        flow,
        "-o",
        ray_out,
        *common,
        "--engine",
        "ray",
        "--concurrency",
        "20",
        "--summary-json",
        summary_file,
    )
    assert code == 1, err
    assert stable(ray_out) == stable(local_out)
    summary = json.loads(summary_file.read_text())
    assert summary["engine"] == "ray"
    assert summary["rows"]["completed"] == 240 and summary["rows"]["failed"] == 30
    code, out, _ = cli(capsys, "batch", "diff", local_out, ray_out)
    assert code == 0, out
    assert local_ray.is_initialized(), "the engine leaves a Ray it did not start running"

    # one limiter actor for both workers: the batch stops at exactly the budget
    flow, inputs, mock = dataset(no_terminal, 100, fail=False, halt=False)
    budget_out = no_terminal / "budget.jsonl"
    budget_summary = no_terminal / "budget-summary.json"
    code, _, err = cli(
        capsys,
        "batch",
        flow,
        "--inputs",
        inputs,
        "--mock",
        mock,
        "--no-record",
        "--progress",
        "none",
        "-o",
        budget_out,
        "--engine",
        "ray",
        "--ray-actors",
        "2",
        "--concurrency",
        "5",
        "--max-calls-total",
        "61",
        "--summary-json",
        budget_summary,
    )
    assert code == 1, err
    assert "stopped: the batch's call budget of 61 model requests is spent" in err
    summary = json.loads(budget_summary.read_text())
    assert summary["limiter"]["requests"] == 61
    assert summary["usage"]["calls"] == 61
    assert summary["rows"]["completed"] <= 30


def test_a_chunks_rows_stream_back_one_by_one_as_they_end(
    local_ray: Any, capsys: pytest.CaptureFixture[str], no_terminal: Path
) -> None:
    # ten rows in one chunk (concurrency 40: chunks of 10) on one actor; the first row
    # answers Yes (two model calls), the others No (one call): it ends last
    flow, inputs, mock = dataset(no_terminal, 10, fail=False, halt=False)
    rows = [json.loads(line) for line in inputs.read_text().splitlines()]
    for row in rows[1:]:
        row["answers"] = {"approve": "No"}
    inputs.write_text("".join(json.dumps(row) + "\n" for row in rows))
    out = no_terminal / "out.jsonl"
    code, _, err = cli(
        capsys,
        "batch",
        flow,
        "--inputs",
        inputs,
        "--mock",
        mock,
        "--mock-latency-ms",
        "1000",  # a second between the rows' ends: a margin for a loaded machine
        "--no-record",
        "--progress",
        "none",
        "-o",
        out,
        "--engine",
        "ray",
        "--ray-actors",
        "1",
        "--concurrency",
        "40",
    )
    assert code == 0, err
    # the results file is written as lines come back: the fast rows' lines were written
    # before the slow row (the first of the chunk) ended
    written = [line["id"] for line in read_results(out)]
    assert written[-1] == "r0000"
    assert sorted(written[:-1]) == [f"r{i:04d}" for i in range(1, 10)]


def test_once_the_budget_is_spent_the_ray_engine_starts_no_row_as_the_local_engine(
    local_ray: Any, capsys: pytest.CaptureFixture[str], no_terminal: Path
) -> None:
    # one row at a time, two calls a row: a budget of 20 calls is spent by the tenth row's
    # last call; no row starts after it (none is sent only to be refused)
    flow, inputs, mock = dataset(no_terminal, 30, fail=False, halt=False)
    common = ("--inputs", inputs, "--mock", mock, "--no-record", "--progress", "none")
    budget = ("--concurrency", "1", "--max-calls-total", "20")
    summaries = {}
    for engine in ("local", "ray"):
        out, summary = no_terminal / f"{engine}.jsonl", no_terminal / f"{engine}.summary.json"
        code, _, err = cli(
            capsys, "batch", flow, "-o", out, *common, *budget, "--summary-json", summary,
            "--engine", engine, *(("--ray-actors", "1") if engine == "ray" else ()),
        )  # fmt: skip
        assert code == 1, err
        assert "stopped: the batch's call budget of 20 model requests is spent" in err
        summaries[engine] = json.loads(summary.read_text())
        assert len(read_results(out)) == 10
    assert summaries["ray"]["rows"] == summaries["local"]["rows"]
    assert summaries["ray"]["rows"]["completed"] == 10
    assert summaries["ray"]["rows"]["not_run"] == 20
    assert summaries["ray"]["limiter"]["refused"] == 0


class LosesItsLimiter(RayEngine):
    """The ray engine, whose limiter actor is killed (and found dead) once three rows have
    ended: the rows sent as they ended are then in their first model call."""

    async def run(self, tasks: Iterable[RowTask]) -> AsyncGenerator[dict[str, Any], None]:
        ended = 0
        async with contextlib.aclosing(super().run(tasks)) as lines:
            async for line in lines:
                yield line
                ended += 1
                if ended == 3:
                    await self.kill_limiter()

    async def kill_limiter(self) -> None:
        ray.kill(self._limiter)
        with contextlib.suppress(ray.exceptions.RayActorError):
            while True:
                await self._limiter.snapshot.remote()


def test_a_dead_limiter_stops_the_batch_with_its_cause_and_the_same_command_goes_on(
    local_ray: Any, tmp_path: Path
) -> None:
    flow, inputs, mock = dataset(tmp_path, 20, fail=False, halt=False)
    out = tmp_path / "out.jsonl"
    options = {
        "mock": mock,
        "runs_dir": None,
        "concurrency": 4,
        "engine": "ray",
        "ray_actors": 1,
        "progress": "none",
    }
    limits = BatchLimits(max_calls_total=1000)
    run = BatchRun(
        BatchOptions(flow, inputs, out, mock_latency=0.5, limits=limits, **options)  # type: ignore[arg-type]
    )
    run.engine = LosesItsLimiter(
        run.prepared.spec, concurrency=4, limits=limits, prices={}, actors=1
    )
    with pytest.raises(LatticeUserError, match=r"the batch's limiter .* died") as stopped:
        asyncio.run(run.arun())
    assert "run with the same command" in str(stopped.value)

    lines = read_results(out)
    assert {line["status"] for line in lines} == {"completed", "interrupted"}  # none failed
    assert any(line["error_type"] == LIMITER_LOST for line in lines)
    assert len(lines) < 20  # the rows not started have no line: they run next time
    summary = batch(flow, inputs, output=out, max_calls_total=1000, **options)  # type: ignore[arg-type]
    assert summary.rows["completed"] == 20 and summary.exit_code == 0


def test_ray_actors_export_their_last_spans_before_they_are_stopped(
    local_ray: Any, capsys: pytest.CaptureFixture[str], no_terminal: Path
) -> None:
    # a short batch ends well within the span processor's export delay (5 s): its spans
    # leave only if each actor flushes them before it is killed
    receiver = Receiver()
    receiver.thread.start()
    try:
        config = no_terminal / "lattice.toml"
        config.write_text(f'[telemetry]\notlp_endpoint = "{receiver.url}"\n')
        flow, inputs, mock = dataset(no_terminal, 6, fail=False, halt=False)
        code, _, err = cli(
            capsys, "batch", flow, "--inputs", inputs, "--mock", mock, "--no-record",
            "--progress", "none", "-o", no_terminal / "out.jsonl", "--config", config,
            "--engine", "ray", "--ray-actors", "1",
        )  # fmt: skip
        assert code == 0, err
        runs = [span for span in receiver.spans() if "lattice.run.status" in span["attributes"]]
        assert len(runs) == 6
    finally:
        receiver.httpd.shutdown()
        receiver.httpd.server_close()


def test_an_interrupted_ray_batch_counts_what_its_rows_in_flight_spent(
    local_ray: Any, tmp_path: Path
) -> None:
    # four rows at a time, whose first model call takes a minute: the batch is cancelled
    # once each of them has sent it (the limiter actor has counted four requests)
    flow, inputs, mock = dataset(tmp_path, 12, fail=False, halt=False)
    out = tmp_path / "out.jsonl"
    limits = BatchLimits(max_calls_total=1000)
    run = BatchRun(
        BatchOptions(
            flow, inputs, out, mock=str(mock), mock_latency=60.0, runs_dir=None,
            concurrency=4, engine="ray", ray_actors=1, limits=limits, progress="none",
        )
    )  # fmt: skip
    engine = RayEngine(run.prepared.spec, concurrency=4, limits=limits, prices={}, actors=1)
    run.engine = engine

    async def requests() -> int:
        if engine._limiter is None:
            return 0
        snapshot = await engine._limiter.snapshot.remote()
        return int(snapshot["requests"])

    async def interrupted() -> None:
        running = asyncio.create_task(run.arun())
        while await requests() < 4:
            await asyncio.sleep(0.01)
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running

    asyncio.run(interrupted())
    stopped = read_results(out)
    assert [line["status"] for line in stopped] == ["interrupted"] * 4
    assert [line["usage"]["requests"] for line in stopped] == [1] * 4
    assert run.summary is not None and run.summary.usage["requests"] == 4


def test_lattice_eval_on_the_ray_engine_names_the_rows_the_local_engine_names(
    local_ray: Any, tmp_path: Path
) -> None:
    """``lattice eval --engine ray``: each variant's batch runs on Ray's workers, and the
    report is the local engine's (docs/evals.md)."""
    from tests.evals.helpers import MOCK_A, MOCK_B, REGRESSED, TRIAGE, TRIAGE_DATASET, run_eval

    lines = TRIAGE_DATASET.read_text().splitlines()
    first_rows = tmp_path / "first-rows.jsonl"  # the dataset's first line and 40 rows
    first_rows.write_text("\n".join(lines[:41]) + "\n")
    common = ("--mock", MOCK_A, "--mock-b", MOCK_B, "--progress", "none")
    reports = {}
    for engine in ("local", "ray"):
        report = tmp_path / f"{engine}.json"
        ran = run_eval(
            TRIAGE, first_rows, *common, "--out", tmp_path / engine, "--json", report,
            "--engine", engine, "--concurrency", "20",
        )  # fmt: skip
        assert ran.code == 1, ran.err
        reports[engine] = json.loads(report.read_text())
    assert reports["ray"]["regressed"] == reports["local"]["regressed"] == REGRESSED[:1]
    assert reports["ray"]["changes"] == reports["local"]["changes"]

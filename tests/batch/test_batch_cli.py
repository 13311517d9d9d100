"""``lattice batch``: rows that complete, fail and halt; resuming; answers; retries; bad
lines; budgets; progress; summaries."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lattice.batch import engine
from lattice.ir.models import IRDiagnostic
from lattice.runs.journal import read_lines
from tests.batch.helpers import (
    ASK_ANSWER,
    by_id,
    cli,
    dataset,
    is_failing,
    is_halting,
    no_terminal,
    read_results,
    row_id,
)

__all__ = ["no_terminal"]  # the fixture, used by name

OS_CONFIG = '[runs]\ndurability = "os"\n'


def batch(
    capsys: pytest.CaptureFixture[str], flow: Path, inputs: Path, out: Path, *extra: Any
) -> tuple[int, str, str]:
    return cli(capsys, "batch", flow, "--inputs", inputs, "-o", out, "--progress", "none", *extra)


def test_a_thousand_rows_complete_fail_and_halt_as_scripted_and_resume(
    capsys: pytest.CaptureFixture[str], no_terminal: Path
) -> None:
    flow, inputs, mock = dataset(no_terminal, 1000)
    out = no_terminal / "results.jsonl"
    summary_file = no_terminal / "summary.json"
    common = ("--mock", mock, "--no-record", "--concurrency", "50")
    code, _, err = batch(capsys, flow, inputs, out, *common, "--summary-json", summary_file)
    assert code == 1, err  # rows failed
    lines = read_results(out)
    assert len(lines) == 1000
    assert len({line["id"] for line in lines}) == 1000
    rows = {line["id"]: line for line in lines}
    for i in range(1000):
        line = rows[row_id(i)]
        assert set(line) >= {"id", "status", "result", "usage", "error_type", "run_dir"}
        assert line["run_dir"] is None
        if is_failing(i):
            assert line["status"] == "failed"
            assert line["error_type"] == "invalid_request"
            assert line["error"] == f"scripted failure of {row_id(i)}"
            assert line["result"] is None
        elif is_halting(i):
            assert line["status"] == "halted"
            assert line["node_id"] == "approve"
            assert "Send it?" in line["error"]
        else:
            assert line["status"] == "completed"
            assert line["result"] == "Dear customer"
            assert line["usage"]["calls"] == 2
    summary = json.loads(summary_file.read_text())
    assert summary["rows"] == {
        "total": 1000,
        "completed": 800,
        "failed": 100,
        "halted": 100,
        "interrupted": 0,
        "not_run": 0,
        "invalid": 0,
    }
    assert summary["failures"]["invalid_request"]["count"] == 100
    assert summary["failures"]["invalid_request"]["example"] == "r0003"
    assert summary["halts"]["approve"]["count"] == 100
    assert summary["latency_ms"]["p50"] <= summary["latency_ms"]["p95"]
    assert summary["usage"]["calls"] == 800 * 2 + 100  # halted rows answered classify
    assert summary["exit_code"] == 1
    assert "failures by error type" in err and "invalid_request" in err
    assert "e.g. row 'r0003'" in err

    # the same command again: nothing left to run, the file is untouched
    before = out.read_bytes()
    code, _, err = batch(capsys, flow, inputs, out, *common)
    assert code == 1
    assert "ran 0 rows this time; 1000 already in" in err
    assert out.read_bytes() == before

    # answers for the halted rows (no run folders: they run again from their start)
    answers = no_terminal / "answers.json"
    answers.write_text(json.dumps({"approve": "No"}))
    code, _, err = batch(capsys, flow, inputs, out, *common, "--answers", answers)
    assert "ran 100 rows this time" in err and "900 already in" in err
    after = read_results(out)
    assert len(after) == 1000, "one line per row again once the batch ended"
    answered = {line["id"]: line for line in after}
    for i in range(7, 1000, 10):
        assert answered[row_id(i)]["status"] == "completed"
        assert answered[row_id(i)]["result"] == {"label": "No", "index": 1}
    assert code == 1  # the failed rows are still failed

    # failed rows again: their scripts fail again
    code, _, err = batch(capsys, flow, inputs, out, *common, "--retry-failed")
    assert "ran 100 rows this time" in err
    assert sum(1 for line in read_results(out) if line["status"] == "failed") == 100


def test_halted_rows_resume_their_own_folders_with_answers_by_row(
    capsys: pytest.CaptureFixture[str], no_terminal: Path
) -> None:
    flow, inputs, mock = dataset(no_terminal, 30, fail=False)
    out = no_terminal / "results.jsonl"
    runs = no_terminal / "runs"
    common = ("--mock", mock, "--runs-dir", runs, "--durability", "os")
    code, _, _ = batch(capsys, flow, inputs, out, *common)
    assert code == 3  # rows wait for answers
    first = by_id(out)
    halted = sorted(k for k, v in first.items() if v["status"] == "halted")
    assert halted == ["r0007", "r0017", "r0027"]
    assert len(list(runs.iterdir())) == 30
    per_row = no_terminal / "answers.jsonl"
    per_row.write_text(
        json.dumps({"id": "r0007", "answers": {"approve": "Yes"}})
        + "\n"
        + json.dumps({"id": "r0017", "answers": {"approve": "No"}})
        + "\n"
    )
    code, _, err = batch(capsys, flow, inputs, out, *common, "--answers", per_row)
    assert code == 3, err  # r0027 still waits
    assert "ran 2 rows this time" in err
    now = by_id(out)
    assert now["r0007"]["status"] == "completed"
    assert now["r0007"]["result"] == "Dear customer"
    assert now["r0017"]["result"] == {"label": "No", "index": 1}
    assert now["r0027"]["status"] == "halted"
    for rid in ("r0007", "r0017"):  # resumed in place: same folder, no new run
        assert now[rid]["run_dir"] == first[rid]["run_dir"]
        assert now[rid]["usage"]["calls"] == (2 if rid == "r0007" else 1)
    assert len(list(runs.iterdir())) == 30


def test_retry_failed_resumes_the_failed_op_once_the_cause_is_fixed(
    capsys: pytest.CaptureFixture[str], no_terminal: Path
) -> None:
    flow, inputs, _ = dataset(no_terminal, 5, fail=False, halt=False)
    script: dict[str, Any] = {
        "responses": {"classify": [{"label": "a"}], "draft": ["Dear customer"]},
        "rows": {"r0002": {"responses": {"classify": [{"label": "b"}], "draft": []}}},
    }
    mock = no_terminal / "mock.json"
    mock.write_text(json.dumps(script))
    out = no_terminal / "results.jsonl"
    common = ("--mock", mock, "--runs-dir", no_terminal / "runs", "--durability", "os")
    code, _, _ = batch(capsys, flow, inputs, out, *common)
    assert code == 1
    failed = by_id(out)["r0002"]
    assert failed["status"] == "failed" and failed["error_type"] == "mock_exhausted"
    assert failed["node_id"] == "draft"
    checkpoint = json.loads((Path(failed["run_dir"]) / "checkpoint.json").read_text())
    assert checkpoint["meta"]["mock_script"]["responses"]["classify"] == [{"label": "b"}]
    code, _, err = batch(capsys, flow, inputs, out, *common)
    assert "ran 0 rows this time" in err, "failed rows wait for --retry-failed"

    del script["rows"]["r0002"]["responses"]["draft"]  # the fix: the row drafts like the others
    mock.write_text(json.dumps(script))
    code, _, err = batch(capsys, flow, inputs, out, *common, "--retry-failed")
    assert code == 0, err
    assert "ran 1 row this time" in err
    retried = by_id(out)["r0002"]
    assert retried["status"] == "completed"
    assert retried["run_dir"] == failed["run_dir"]  # resumed in place
    assert retried["result"] == "Dear customer"
    record = json.loads((Path(retried["run_dir"]) / "result.json").read_text())
    assert record["vars"]["classify"]["result"] == {"label": "b"}  # not asked again


def test_bad_input_lines_are_reported_by_line_number_and_skipped(
    capsys: pytest.CaptureFixture[str], no_terminal: Path
) -> None:
    flow, _, mock = dataset(no_terminal, 1, fail=False, halt=False)
    inputs = no_terminal / "messy.jsonl"
    inputs.write_text(
        "\n".join(
            [
                json.dumps({"text": "fine"}),  # 1: id 1
                '{"text": "cut',  # 2
                "[1, 2]",  # 3
                json.dumps({"id": "x", "inputs": {"txt": "typo"}}),  # 4
                "",  # blank: not a row
                json.dumps({"id": "y", "inputs": {"text": "ok"}, "answers": ASK_ANSWER}),  # 6
                json.dumps({"id": "y", "inputs": {"text": "again"}}),  # 7: duplicate
                json.dumps({"id": 1.5, "inputs": {"text": "ok"}}),  # 8
                json.dumps({"id": "z", "inputs": {"text": "ok"}, "answers": {"nope": 1}}),  # 9
                json.dumps({"text": "last", "answers": {}}),  # 10: not an envelope: extra key
            ]
        )
        + "\n"
    )
    out = no_terminal / "results.jsonl"
    summary_file = no_terminal / "summary.json"
    code, _, err = batch(
        capsys, flow, inputs, out, "--mock", mock, "--no-record", "--summary-json", summary_file
    )
    assert code == 1
    assert "messy.jsonl:2: not valid JSON" in err
    assert "messy.jsonl:3: a row is a JSON object, not list" in err
    assert "messy.jsonl:4 (row 'x'): invalid inputs" in err
    assert "messy.jsonl:7 (row 'y'): the id is used before, on line 6" in err
    assert "messy.jsonl:8: a row's id is a string or an integer" in err
    assert "messy.jsonl:9 (row 'z'): invalid answers" in err
    assert "messy.jsonl:10 (row 10): invalid inputs" in err
    summary = json.loads(summary_file.read_text())
    assert [item["line"] for item in summary["invalid"]] == [2, 3, 4, 7, 8, 9, 10]
    assert summary["rows"]["invalid"] == 7
    assert summary["rows"]["total"] == 2
    assert sorted(by_id(out), key=str) == [1, "y"]
    assert by_id(out)[1]["status"] == "halted"  # no answers on a bare inputs line
    assert by_id(out)["y"]["status"] == "completed"


def test_the_call_budget_stops_the_batch_and_the_next_batch_finishes_it(
    capsys: pytest.CaptureFixture[str], no_terminal: Path
) -> None:
    flow, inputs, mock = dataset(no_terminal, 60, fail=False, halt=False)
    out = no_terminal / "results.jsonl"
    summary_file = no_terminal / "summary.json"
    common = ("--mock", mock, "--runs-dir", no_terminal / "runs", "--durability", "os")
    code, _, err = batch(
        capsys,
        flow,
        inputs,
        out,
        *common,
        "--concurrency",
        "8",
        "--max-calls-total",
        "45",
        "--summary-json",
        summary_file,
    )
    assert code == 1
    assert "batch stopped" in err
    assert (
        "stopped: the batch's call budget of 45 model requests is spent (--max-calls-total)" in err
    )
    assert (
        "the rows it did not finish run with the same command (each run has the whole budget)"
        in err
    )
    summary = json.loads(summary_file.read_text())
    assert summary["limiter"]["requests"] == 45
    assert summary["limiter"]["spent"].startswith("the batch's call budget of 45")
    rows = summary["rows"]
    assert rows["completed"] <= 22
    assert rows["not_run"] > 0
    assert rows["completed"] + rows["interrupted"] + rows["not_run"] == 60
    interrupted = [line for line in read_results(out) if line["status"] == "interrupted"]
    assert all(line["error_type"] == "batch_budget_exceeded" for line in interrupted)
    assert summary["usage"]["calls"] == 45

    code, _, err = batch(capsys, flow, inputs, out, *common, "--max-calls-total", "1000")
    assert code == 0, err
    final = read_results(out)
    assert len(final) == 60 and {line["status"] for line in final} == {"completed"}
    for line in interrupted:  # resumed where the budget stopped them
        assert by_id(out)[line["id"]]["run_dir"] == line["run_dir"]
    assert len(list((no_terminal / "runs").iterdir())) == 60


def test_the_cost_budget_needs_prices_and_stops_the_batch(
    capsys: pytest.CaptureFixture[str], no_terminal: Path
) -> None:
    flow, inputs, mock = dataset(no_terminal, 40, fail=False, halt=False)
    out = no_terminal / "results.jsonl"
    code, _, err = batch(capsys, flow, inputs, out, "--mock", mock, "--max-cost", "0.01")
    assert code == 2
    assert "--max-cost needs the models' prices" in err
    config = no_terminal / "lattice.toml"
    config.write_text('[prices."mock-model"]\ninput = 10.0\noutput = 10.0\n')
    code, _, err = batch(
        capsys,
        flow,
        inputs,
        out,
        "--mock",
        mock,
        "--no-record",
        "--config",
        config,
        "--concurrency",
        "1",
        "--max-cost",
        "0.01",
    )
    assert code == 1
    assert "stopped: the batch's cost budget of $0.01 is spent" in err
    assert "estimated cost $" in err
    assert sum(1 for line in read_results(out) if line["status"] == "completed") < 40


def test_requests_per_minute_space_the_calls_of_every_row(
    capsys: pytest.CaptureFixture[str], no_terminal: Path
) -> None:
    flow, inputs, mock = dataset(no_terminal, 4, fail=False, halt=False)
    summary_file = no_terminal / "summary.json"
    code, _, _ = batch(
        capsys,
        flow,
        inputs,
        no_terminal / "results.jsonl",
        "--mock",
        mock,
        "--no-record",
        "--rpm",
        "1200",  # one start every 50 ms: 8 calls take at least 350 ms
        "--summary-json",
        summary_file,
    )
    assert code == 0
    summary = json.loads(summary_file.read_text())
    assert summary["elapsed_s"] >= 0.34
    assert summary["limiter"]["requests"] == 8


def test_progress_lines_when_not_on_a_terminal(
    capsys: pytest.CaptureFixture[str], no_terminal: Path
) -> None:
    flow, inputs, mock = dataset(no_terminal, 20, fail=False, halt=False)
    code, _, err = cli(
        capsys,
        "batch",
        flow,
        "--inputs",
        inputs,
        "-o",
        no_terminal / "results.jsonl",
        "--mock",
        mock,
        "--no-record",
        "--concurrency",
        "2",
        "--mock-latency-ms",
        "20",
        "--progress-interval",
        "0.1",
    )
    assert code == 0
    progress = [
        line
        for line in err.splitlines()
        if line.startswith("lattice: batch ") and "/20 rows" in line
    ]
    assert progress, err
    assert "rows/s" in progress[-1] and "tokens" in progress[-1]


def test_a_torn_last_line_is_dropped_and_its_row_runs_again(
    capsys: pytest.CaptureFixture[str], no_terminal: Path
) -> None:
    flow, inputs, mock = dataset(no_terminal, 10, fail=False, halt=False)
    out = no_terminal / "results.jsonl"
    code, _, _ = batch(capsys, flow, inputs, out, "--mock", mock, "--no-record")
    assert code == 0
    lines = out.read_text().splitlines()
    out.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][: len(lines[-1]) // 2])
    code, _, err = batch(capsys, flow, inputs, out, "--mock", mock, "--no-record")
    assert code == 0
    assert "ran 1 row this time" in err and "9 already in" in err
    assert "dropped a line cut short by a crash" in err
    parsed, good = read_lines(out)
    assert good == out.stat().st_size and len(parsed) == 10


def test_a_row_with_its_own_mock_answers_resumes_with_lattice_resume(
    capsys: pytest.CaptureFixture[str], no_terminal: Path
) -> None:
    flow, inputs, mock = dataset(no_terminal, 10, fail=False)
    out = no_terminal / "results.jsonl"
    code, _, _ = batch(capsys, flow, inputs, out, "--mock", mock, "--runs-dir", "runs")
    assert code == 3
    halted = by_id(out)["r0007"]
    code, stdout, err = cli(capsys, "resume", halted["run_dir"], "--answer", "approve=Yes")
    assert code == 0, err
    assert json.loads(stdout) == "Dear customer"


def test_usage_errors_name_the_problem(
    capsys: pytest.CaptureFixture[str], no_terminal: Path
) -> None:
    flow, inputs, mock = dataset(no_terminal, 3)
    code, _, err = batch(capsys, flow, inputs, inputs, "--mock", mock)
    assert code == 2 and "must not be the inputs file" in err
    code, _, err = batch(capsys, flow, no_terminal / "missing.jsonl", "out.jsonl", "--mock", mock)
    assert code == 2 and "cannot read inputs" in err
    code, _, err = batch(capsys, flow, inputs, "out.jsonl", "--mock", mock, "--provider", "openai")
    assert code == 2 and "--mock is used alone" in err
    bad = no_terminal / "bad-answers.json"
    bad.write_text(json.dumps({"classify": "x", "nope": "y"}))
    code, _, err = batch(capsys, flow, inputs, "out.jsonl", "--mock", mock, "--answers", bad)
    assert code == 2 and "'nope' is not a question node" in err
    code, _, err = batch(capsys, flow, inputs, "missing-dir/out.jsonl", "--mock", mock)
    assert code == 2 and "does not exist" in err


def test_the_shipped_tickets_run_as_docs_batch_md_shows(
    capsys: pytest.CaptureFixture[str], no_terminal: Path
) -> None:
    examples = Path(__file__).resolve().parents[2] / "workflows" / "examples"
    out = no_terminal / "triage.jsonl"
    code, _, err = batch(
        capsys,
        examples / "support-triage.json",
        examples / "support-triage.tickets.jsonl",
        out,
        "--mock",
        examples / "support-triage.batch.mock.json",
        "--no-record",
        "--concurrency",
        "32",
    )
    assert code == 1, err
    assert "200 rows: 199 completed, 1 failed" in err
    assert "e.g. row 't-137': the model refused" in err
    rows = by_id(out)
    assert rows["t-001"]["result"]["category"] == "billing"
    assert rows["t-002"]["result"]["category"] == "bug"
    assert rows["t-025"]["result"]["revisions"] == 1
    assert {line["result"]["category"] for line in rows.values() if line["result"]} == {
        "billing",
        "bug",
        "other",
    }


def test_the_failed_ticket_is_retried_as_docs_batch_md_says(
    capsys: pytest.CaptureFixture[str], no_terminal: Path
) -> None:
    """Drop t-137's entry from the script's rows, then --retry-failed: its run folder
    resumes, and the failed op asks the edited script afresh."""
    examples = Path(__file__).resolve().parents[2] / "workflows" / "examples"
    script = json.loads((examples / "support-triage.batch.mock.json").read_text())
    mock = no_terminal / "triage.mock.json"
    mock.write_text(json.dumps(script))
    out = no_terminal / "triage.jsonl"
    flow, tickets = examples / "support-triage.json", examples / "support-triage.tickets.jsonl"
    common = ("--mock", mock, "--runs-dir", no_terminal / "runs", "--durability", "os")
    code, _, err = batch(capsys, flow, tickets, out, *common)
    assert code == 1, err
    failed = by_id(out)["t-137"]
    assert failed["status"] == "failed" and failed["error_type"] == "invalid_request"

    del script["rows"]["t-137"]
    mock.write_text(json.dumps(script))
    code, _, err = batch(capsys, flow, tickets, out, *common, "--retry-failed")
    assert code == 0, err
    assert "ran 1 row this time" in err
    retried = by_id(out)["t-137"]
    assert retried["status"] == "completed", retried["error"]
    assert retried["run_dir"] == failed["run_dir"]  # resumed in place


def test_mock_rows_are_checked_against_the_document_and_the_inputs(
    capsys: pytest.CaptureFixture[str], no_terminal: Path
) -> None:
    flow, inputs, _ = dataset(no_terminal, 3, fail=False, halt=False)
    mock = no_terminal / "mock.json"
    out = no_terminal / "results.jsonl"
    base = {"classify": [{"label": "a"}], "draft": ["Dear customer"]}

    mock.write_text(json.dumps({"responses": base, "rows": {"r0001": {"draft": ["x"]}}}))
    code, _, err = batch(capsys, flow, inputs, out, "--mock", mock, "--no-record")
    assert code == 2
    assert "mock script: rows[\"r0001\"]: unknown keys ['draft']" in err
    assert 'go under "responses"' in err and err.count("mock script") == 1

    script = {"responses": base, "rows": {"r0001": {"responses": {"drafts": ["x"]}}}}
    mock.write_text(json.dumps(script))
    code, _, err = batch(capsys, flow, inputs, out, "--mock", mock, "--no-record")
    assert code == 2
    assert f'mock script {mock}: rows["r0001"]: responses name node(s)' in err
    assert "'drafts' (did you mean 'draft'?)" in err

    mock.write_text(json.dumps({"responses": base, "rows": {"r9999": {"responses": {}}}}))
    code, _, err = batch(capsys, flow, inputs, out, "--mock", mock, "--no-record")
    assert code == 0, err
    assert "warning: the mock script's rows name ids the inputs do not have: 'r9999'" in err


def test_fixtures_replay_every_row_and_travel_as_text_to_a_worker_without_the_file(
    capsys: pytest.CaptureFixture[str], no_terminal: Path
) -> None:
    import asyncio

    from lattice.batch.engine import BatchOptions, prepare
    from lattice.batch.worker import BatchWorker, RowTask

    flow, inputs, mock = dataset(no_terminal, 3, fail=False, halt=False)
    plain = json.loads(mock.read_text())
    del plain["rows"]  # lattice run reads plain scripts
    mock.write_text(json.dumps(plain))
    fixtures = no_terminal / "flow.fixtures.jsonl"
    for i in range(3):  # record each row's prompts once, from the mock script
        code, _, err = cli(
            capsys,
            "run",
            flow,
            "--input",
            f"text=row {i}",
            "--answers",
            write_answers(no_terminal),
            "--mock",
            mock,
            "--fixtures",
            fixtures,
            "--record",
            "--no-record",
        )
        assert code == 0, err
    out = no_terminal / "results.jsonl"
    code, _, err = batch(capsys, flow, inputs, out, "--fixtures", fixtures, "--no-record")
    assert code == 0, err
    assert {line["result"] for line in read_results(out)} == {"Dear customer"}

    prepared = prepare(
        BatchOptions(
            workflow=flow, inputs=inputs, output=out, fixtures=fixtures, engine="ray", runs_dir=None
        )
    )
    assert prepared.spec.fixtures_text == fixtures.read_text()
    fixtures.rename(no_terminal / "elsewhere.jsonl")  # as on another machine
    worker = BatchWorker(prepared.spec)
    line = asyncio.run(worker.run_row(RowTask("w", 1, {"text": "row 2"}, dict(ASK_ANSWER))))
    assert line["status"] == "completed" and line["result"] == "Dear customer"


def write_answers(folder: Path) -> Path:
    path = folder / "answers.json"
    path.write_text(json.dumps(ASK_ANSWER))
    return path


def test_a_results_file_of_another_workflow_is_refused(
    capsys: pytest.CaptureFixture[str], no_terminal: Path
) -> None:
    examples = Path(__file__).resolve().parents[2] / "workflows" / "examples"
    triage = no_terminal / "triage.jsonl"
    ticket = json.loads((examples / "support-triage.inputs.json").read_text())
    rows = no_terminal / "tickets.jsonl"
    rows.write_text(json.dumps({"id": "t-001", "inputs": ticket}) + "\n")
    mock = examples / "support-triage.mock.json"
    code, _, err = batch(
        capsys, examples / "support-triage.json", rows, triage, "--mock", mock, "--no-record"
    )
    assert code == 0, err
    written = triage.read_text()
    assert read_results(triage)[0]["workflow"] == "support-triage"
    collide = no_terminal / "collide.jsonl"
    collide.write_text(json.dumps({"id": "t-001", "inputs": {"name": "Ada"}}) + "\n")
    hello, hello_mock = examples / "hello-world.json", examples / "hello-world.mock.json"
    code, _, err = batch(capsys, hello, collide, triage, "--mock", hello_mock, "--no-record")
    assert code == 2
    assert "workflow 'support-triage'" in err and "workflow 'hello-world'" in err
    assert "another -o FILE" in err and f"delete {triage}" in err
    assert triage.read_text() == written, "the other workflow's file is left as it was"
    # a file written before lines named their workflow is taken as this one's
    old = [
        {k: v for k, v in line.items() if k not in ("workflow", "workflow_digest")}
        for line in read_results(triage)
    ]
    triage.write_text("".join(json.dumps(line) + "\n" for line in old))
    code, _, err = batch(capsys, hello, collide, triage, "--mock", hello_mock, "--no-record")
    assert code == 0 and "ran 0 rows this time" in err, err


def test_a_workflow_lowered_differently_by_another_lattice_resumes_its_results(
    capsys: pytest.CaptureFixture[str], no_terminal: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The results file names the document as written, not the ExecIR this version of
    Lattice lowers it to (a later one may word a warning differently)."""
    flow, inputs, mock = dataset(no_terminal, 3, halt=False)
    out = no_terminal / "results.jsonl"
    batch(capsys, flow, inputs, out, "--mock", mock, "--no-record")
    real = engine._lowered

    def lowered_by_another_lattice(options: Any) -> Any:
        ir, document = real(options)
        note = IRDiagnostic(code="new-check", severity="warning", message="a newer warning")
        return ir.model_copy(update={"diagnostics": [*ir.diagnostics, note]}), document

    monkeypatch.setattr(engine, "_lowered", lowered_by_another_lattice)
    code, _, err = batch(capsys, flow, inputs, out, "--mock", mock, "--no-record")
    assert code == 0 and "ran 0 rows this time" in err, err


def test_an_edited_workflow_does_not_resume_the_results_of_its_earlier_version(
    capsys: pytest.CaptureFixture[str], no_terminal: Path
) -> None:
    flow, inputs, mock = dataset(no_terminal, 3)
    out = no_terminal / "results.jsonl"
    common = ("--mock", mock, "--no-record", "--answers", no_terminal / "answers.json")
    (no_terminal / "answers.json").write_text(json.dumps(ASK_ANSWER))
    batch(capsys, flow, inputs, out, *common)
    # the same document written out again (another layout): the file resumes
    document = json.loads(flow.read_text())
    flow.write_text(json.dumps(document, indent=4, sort_keys=True))
    code, _, err = batch(capsys, flow, inputs, out, *common)
    assert code == 0 and "ran 0 rows this time" in err, err
    document["nodes"][1]["data"]["prompt"] = "Label: {{ $in.text }}"
    flow.write_text(json.dumps(document))
    code, _, err = batch(capsys, flow, inputs, out, *common)
    assert code == 2
    assert "another version of workflow" in err, err


@pytest.mark.parametrize(
    ("name", "text"),
    [("people.csv", "Ada,3\nBob,4\n"), ("people.txt", "name\tage\nAda\t3\n")],
)
def test_a_table_given_as_inputs_is_refused_once(
    capsys: pytest.CaptureFixture[str], no_terminal: Path, name: str, text: str
) -> None:
    flow, _, mock = dataset(no_terminal, 1)
    table = no_terminal / name
    table.write_text(text)
    code, _, err = batch(capsys, flow, table, no_terminal / "out.jsonl", "--mock", mock)
    assert code == 2
    assert err.count("error[") == 1 and "not valid JSON" not in err
    assert f"inputs {table} is not JSON Lines" in err and "one JSON object per line" in err
    assert not (no_terminal / "out.jsonl").exists(), "refused before a results file is made"


def test_inputs_without_a_valid_row_are_a_usage_error(
    capsys: pytest.CaptureFixture[str], no_terminal: Path
) -> None:
    flow, _, mock = dataset(no_terminal, 1)
    junk = no_terminal / "junk.jsonl"
    junk.write_text('{"text": \n[1, 2]\n{"text": ""}\n')
    code, _, err = batch(capsys, flow, junk, no_terminal / "out.jsonl", "--mock", mock)
    assert code == 2, err
    assert "junk.jsonl:1: not valid JSON" in err and "3 invalid lines" in err


def test_a_row_with_an_unknown_key_names_that_key(
    capsys: pytest.CaptureFixture[str], no_terminal: Path
) -> None:
    flow, _, mock = dataset(no_terminal, 1)
    rows = no_terminal / "rows.jsonl"
    rows.write_text(
        json.dumps({"id": "a", "inputs": {"text": "hi"}, "answer": ASK_ANSWER})
        + "\n"
        + json.dumps({"id": "b", "inputs": {"text": "hi"}, "answers": ASK_ANSWER})
        + "\n"
    )
    code, _, err = batch(capsys, flow, rows, no_terminal / "out.jsonl", "--mock", mock)
    assert code == 1, err
    assert 'rows.jsonl:1: a row with "id" and "inputs"' in err
    assert "'answer' is unexpected" in err and "were unexpected" not in err


@pytest.mark.parametrize("suffix", [".json", ".jsonl"])
def test_an_answers_file_that_does_not_fit_is_named(
    capsys: pytest.CaptureFixture[str], no_terminal: Path, suffix: str
) -> None:
    flow, inputs, mock = dataset(no_terminal, 1)
    answers = no_terminal / f"given{suffix}"
    wrong = {"nope": "Yes"}
    answers.write_text(
        json.dumps({"id": "r0000", "answers": wrong} if suffix == ".jsonl" else wrong)
    )
    code, _, err = batch(
        capsys, flow, inputs, no_terminal / "out.jsonl", "--mock", mock, "--answers", answers
    )
    assert code == 2
    assert f"invalid answers in {answers}" in err and "'nope' is not a question node" in err


def test_the_runs_diff_sample_in_batch_md_is_what_the_command_prints(
    capsys: pytest.CaptureFixture[str], no_terminal: Path
) -> None:
    repo = Path(__file__).resolve().parents[2]
    examples = repo / "workflows" / "examples"
    tickets = (examples / "support-triage.tickets.jsonl").read_text().splitlines()
    rows = no_terminal / "two.jsonl"
    rows.write_text("".join(t + "\n" for t in tickets if json.loads(t)["id"] in ("t-020", "t-025")))
    out = no_terminal / "triage.jsonl"
    mock = examples / "support-triage.batch.mock.json"
    code, _, err = batch(capsys, examples / "support-triage.json", rows, out, "--mock", mock)
    assert code == 0, err
    folders = {line["id"]: line["run_dir"] for line in read_results(out)}
    code, printed, _ = cli(capsys, "runs", "diff", folders["t-020"], folders["t-025"])
    assert code == 1
    doc = (repo / "docs" / "batch.md").read_text()
    sample = doc.split("```\nA /home/me/runs/", 1)[1].split("```\n", 1)[0]
    shown = ("A /home/me/runs/" + sample).splitlines()[2:]
    assert printed.splitlines()[2:] == shown  # A and B name folders; the rest is the same

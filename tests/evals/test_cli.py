"""``lattice eval``'s mistakes end in located messages and exit 2; Python scorers come
from the command line and lattice.toml only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.evals.helpers import TRIAGE, run_eval


def _write(path: Path, *lines: Any) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


@pytest.fixture
def results(tmp_path: Path) -> Path:
    line = {
        "id": "r1",
        "status": "completed",
        "result": {"reply": "Hello there"},
        "usage": {"calls": 1},
        "run_dir": None,
        "latency_ms": 3.0,
    }
    return _write(tmp_path / "a.jsonl", line)


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (
            [{"$eval": {"scorers": [{"type": "python", "function": "os:system"}]}}],
            ":1: scorers[0]: a dataset cannot name Python code",
        ),
        (
            [{"$eval": {"scorers": [{"type": "exact", "node": "clasify"}]}}],
            "scorer 'exact' scores node 'clasify', which the workflow does not have (did you mean 'classify'",
        ),
        ([{"$eval": {"thresholds": {"categroy": 0.9}}}], "a threshold names no scorer: 'categroy'"),
        ([], "nothing to score"),
    ],
)
def test_mistakes_exit_2_with_a_located_message(
    tmp_path: Path, lines: list[Any], message: str
) -> None:
    dataset = _write(
        tmp_path / "d.jsonl", *lines, {"id": "r1", "inputs": {"ticket": "x"}, "expected": 1}
    )
    if not lines:
        dataset = _write(tmp_path / "d.jsonl", {"id": "r1", "inputs": {"ticket": "x"}})
    ran = run_eval(TRIAGE, dataset, "--out", tmp_path / "o", "--mock", "m.json")
    assert ran.code == 2, ran.out + ran.err
    assert message in ran.err
    assert not (tmp_path / "o").exists()


def test_a_missing_dataset_and_bad_flags_exit_2(tmp_path: Path, results: Path) -> None:
    assert run_eval(TRIAGE, tmp_path / "none.jsonl", "--results", results).code == 2
    dataset = _write(tmp_path / "d.jsonl", {"id": "r1", "inputs": {}, "expected": 1})
    bad = run_eval(TRIAGE, dataset, "--results", results, "--threshold", "exact=2")
    assert bad.code == 2 and "write SCORER=MIN, MIN from 0 to 1" in bad.err
    both = run_eval(TRIAGE, dataset, "--results", results, "--mock-b", "b.json")
    assert both.code == 2 and "--results scores recorded files" in both.err


def test_python_scorers_from_the_command_line_and_lattice_toml(
    tmp_path: Path, results: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    dataset = _write(
        tmp_path / "d.jsonl",
        {
            "id": "r1",
            "inputs": {},
            "expect": [{"type": "regex", "actual": "reply", "pattern": "^Hello"}],
        },
    )
    (tmp_path / "lattice.toml").write_text(
        '[evals]\nscorers = ["length=tests.evals.scorer_functions:long_enough"]\n'
    )
    ran = run_eval(
        TRIAGE,
        dataset,
        "--results",
        results,
        "--json",
        tmp_path / "r.json",
        "--scorer-fn",
        "tests.evals.scorer_functions:long_enough",
        "--threshold",
        "length=1",
    )
    assert ran.code == 0, ran.out + ran.err
    scores = json.loads((tmp_path / "r.json").read_text())["variants"][0]["rows"][0]["scores"]
    assert {name: s["score"] for name, s in scores.items()} == {
        "long_enough": 1.0,
        "length": 1.0,
        "regex": 1.0,
    }


def test_lattice_batch_runs_a_dataset_with_expectations(tmp_path: Path) -> None:
    from lattice.cli.main import main
    from tests.evals.helpers import MOCK_A, TRIAGE_DATASET

    dataset = tmp_path / "d.jsonl"
    dataset.write_text("\n".join(TRIAGE_DATASET.read_text().splitlines()[:4]) + "\n")
    out = tmp_path / "r.jsonl"
    code = main(
        [
            "batch",
            str(TRIAGE),
            "--inputs",
            str(dataset),
            "-o",
            str(out),
            "--mock",
            str(MOCK_A),
            "--no-record",
            "--progress",
            "none",
        ]
    )
    assert code == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(line["id"], line["status"]) for line in lines] == [
        ("t-001", "completed"),
        ("t-002", "completed"),
        ("t-003", "completed"),
    ]


def test_a_second_document_as_variant_b(tmp_path: Path) -> None:
    from tests.evals.helpers import MOCK_A, TRIAGE_DATASET

    dataset = tmp_path / "d.jsonl"
    dataset.write_text("\n".join(TRIAGE_DATASET.read_text().splitlines()[:6]) + "\n")
    document = json.loads(TRIAGE.read_text())
    classify = next(n for n in document["nodes"] if n["id"] == "classify")
    classify["data"]["prompt"] = "Be brief. " + classify["data"]["prompt"]
    other = tmp_path / "triage-v2.json"
    other.write_text(json.dumps(document))
    args = ["--mock", MOCK_A, "--variant", other, "--out", tmp_path / "o"]
    ran = run_eval(
        TRIAGE,
        dataset,
        *args,
        "--scorer",
        '{"type": "exact", "name": "cat", "actual": "category", "expected": "category"}',
        "--progress",
        "none",
    )
    assert ran.code == 0, ran.out + ran.err
    assert f"  B: {other}, mock {MOCK_A}" in ran.out
    assert "no row regressed" in ran.out and ran.out.rstrip().endswith("PASS")
    files = sorted(p.name for p in (tmp_path / "o").glob("*.jsonl"))
    assert [f[:2] for f in files] == ["A-", "B-"]


def test_a_budget_that_stops_a_variant_is_said(tmp_path: Path) -> None:
    from tests.evals.helpers import MOCK_A, TRIAGE_DATASET

    rows = TRIAGE_DATASET.read_text().splitlines()[1:6]
    header = {
        "$eval": {"scorers": [{"type": "exact", "actual": "category", "expected": "category"}]}
    }
    dataset = tmp_path / "d.jsonl"
    dataset.write_text("\n".join([json.dumps(header), *rows]) + "\n")
    ran = run_eval(
        TRIAGE,
        dataset,
        "--mock",
        MOCK_A,
        "--out",
        tmp_path / "o",
        "--no-record",
        "--max-calls-total",
        "4",
        "--concurrency",
        "1",
        "--progress",
        "none",
    )
    assert "A: the batch stopped: the batch's call budget of 4 model requests is spent" in ran.out
    assert ran.code == 0  # no threshold, one variant: the verdict passes
    assert "exact            -          0.200 [0.036, 0.624]" in ran.out  # 1 row of 5 ran

"""The model-as-judge scorer: under contract, offline with a mock judge."""

from __future__ import annotations

import json
from pathlib import Path

from tests.evals.helpers import TRIAGE, run_eval


def _results(path: Path, rows: dict[str, str]) -> Path:
    lines = [
        {
            "id": rid,
            "status": "completed",
            "result": {"reply": reply},
            "error_type": None,
            "error": None,
            "node_id": None,
            "usage": {"calls": 1},
            "run_dir": None,
            "latency_ms": 5.0,
        }
        for rid, reply in rows.items()
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_a_judge_whose_first_answer_is_invalid_is_repaired_and_its_calls_counted(
    tmp_path: Path,
) -> None:
    dataset = tmp_path / "d.jsonl"
    header = {
        "$eval": {
            "scorers": [
                {
                    "name": "polite",
                    "type": "judge",
                    "actual": "reply",
                    "scale": 5,
                    "rubric": "The reply is polite and says what happens next.",
                }
            ],
            "thresholds": {"polite": 0.7},
        }
    }
    rows = [{"id": f"r{i}", "inputs": {"ticket": f"ticket {i}"}} for i in (1, 2)]
    dataset.write_text("\n".join(json.dumps(x) for x in [header, *rows]) + "\n")
    results = _results(tmp_path / "a.jsonl", {"r1": "Hi, we fix it today.", "r2": "No."})
    judge = tmp_path / "judge.mock.json"
    judge.write_text(
        json.dumps(
            {
                "responses": {
                    "polite": [
                        {
                            "score": 9,
                            "reason": "out of the scale",
                        },  # invalid: the contract says 1 to 5
                        {"score": 4, "reason": "polite, says when"},
                    ]
                }
            }
        )
    )
    ran = run_eval(
        TRIAGE, dataset, "--results", results, "--judge-mock", judge, "--json", tmp_path / "r.json"
    )
    assert ran.code == 0, ran.out + ran.err
    assert "judge: 4 model calls (2 repairs)" in ran.out
    report = json.loads((tmp_path / "r.json").read_text())
    scores = [row["scores"]["polite"] for row in report["variants"][0]["rows"]]
    assert [s["score"] for s in scores] == [0.75, 0.75]
    assert scores[0]["extra"] == {"grade": 4, "reason": "polite, says when"}
    assert scores[0]["calls"] == 2 and scores[0]["repairs"] == 1


def test_a_judge_that_never_answers_validly_scores_0_and_says_why(tmp_path: Path) -> None:
    dataset = tmp_path / "d.jsonl"
    header = {"$eval": {"scorers": [{"name": "j", "type": "judge", "rubric": "Good."}]}}
    dataset.write_text(json.dumps(header) + "\n" + json.dumps({"id": "r1", "inputs": {}}) + "\n")
    results = _results(tmp_path / "a.jsonl", {"r1": "x"})
    judge = tmp_path / "judge.mock.json"
    judge.write_text(
        json.dumps(
            {
                "responses": {"j": [{"score": 0, "reason": ""}]},
                "default": {"score": 0, "reason": ""},
            }
        )
    )
    ran = run_eval(
        TRIAGE, dataset, "--results", results, "--judge-mock", judge, "--json", tmp_path / "r.json"
    )
    score = json.loads((tmp_path / "r.json").read_text())["variants"][0]["rows"][0]["scores"]["j"]
    assert score["score"] == 0.0 and score["detail"].startswith("the judge gave no valid grade")
    assert ran.code == 0  # no threshold: a low score alone does not fail the eval


def test_a_judge_without_a_model_is_refused_before_anything_runs(tmp_path: Path) -> None:
    dataset = tmp_path / "d.jsonl"
    header = {"$eval": {"scorers": [{"name": "j", "type": "judge", "rubric": "Good."}]}}
    dataset.write_text(json.dumps(header) + "\n" + json.dumps({"id": "r1", "inputs": {}}) + "\n")
    results = _results(tmp_path / "a.jsonl", {"r1": "x"})
    none = run_eval(TRIAGE, dataset, "--results", results, "--provider", "disabled")
    assert none.code == 2 and "a judge scorer needs a model" in none.err
    judge = tmp_path / "judge.mock.json"
    judge.write_text(json.dumps({"responses": {"other": [{"score": 1, "reason": "x"}]}}))
    wrong = run_eval(TRIAGE, dataset, "--results", results, "--judge-mock", judge)
    assert wrong.code == 2 and "'j'" in wrong.err, wrong.err

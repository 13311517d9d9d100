"""Each scorer on its own, and the dataset's expectations as the batch and the eval read them."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from lattice.batch.rows import read_rows
from lattice.errors import InputError
from lattice.evals.dataset import read_dataset
from lattice.evals.scorers import Case, Score, build, parse_spec
from lattice.evals.stats import interval


def score(
    spec: dict[str, Any] | str, actual: Any, expected: Any = None, *, has: bool = True
) -> Score:
    scorer = build(parse_spec(spec, "test", origin="command line"))
    result = scorer(Case("r", actual, expected, has, {"q": 1}))
    if asyncio.iscoroutine(result):
        result = asyncio.run(result)
    assert isinstance(result, Score)
    return result


def test_exact_and_normalized_match() -> None:
    assert score("exact", {"a": [1, 2]}, {"a": [1.0, 2]}).value == 1.0
    assert score("exact", True, 1).value == 0.0
    assert score("exact", "Billing", "billing").value == 0.0
    assert score("normalised", "  Billing.  ", "billing").value == 1.0
    assert score("normalized", ["A  b"], ["a b"]).value == 1.0
    assert score("exact", "x", None, has=False).value is None


def test_json_schema_jmespath_numeric_and_regex() -> None:
    schema = {"type": "json_schema", "schema": {"type": "object", "required": ["a"]}}
    assert score(schema, {"a": 1}).value == 1.0
    failed = score(schema, {"b": 1})
    assert failed.value == 0.0 and "'a' is a required property" in failed.detail
    holds = {"type": "jmespath", "expression": "output.n > inputs.q && output.tag == expected"}
    assert score(holds, {"n": 2, "tag": "x"}, "x").value == 1.0
    assert score(holds, {"n": 0, "tag": "x"}, "x").value == 0.0
    near = {"type": "numeric", "tolerance": 0.5}
    assert score(near, 3.4, 3).value == 1.0 and score(near, "3.4", 3).value == 1.0
    assert score(near, 3.6, 3).value == 0.0 and score(near, True, 1).value == 0.0
    assert score({"type": "numeric", "relative": 0.1}, 105, 100).value == 1.0
    assert score({"type": "regex", "pattern": r"^Hi\b"}, "Hi there").value == 1.0
    assert score({"type": "regex", "pattern": "hi", "ignore_case": True}, "HI").value == 1.0
    assert score({"type": "regex", "pattern": "x"}, "y").value == 0.0


def test_a_regex_that_backtracks_is_stopped_by_the_time_limit() -> None:
    slow = score({"type": "regex", "pattern": r"^(a|a)*$"}, "a" * 40 + "b")
    assert slow.value == 0.0 and "did not finish" in slow.detail


def test_overlap_gives_precision_recall_and_f1() -> None:
    result = score("overlap", ["billing", "Refund", "bug"], ["billing", "refund", "login"])
    assert result.extra["precision"] == pytest.approx(2 / 3)
    assert result.extra["recall"] == pytest.approx(2 / 3)
    assert result.value == pytest.approx(2 / 3)
    assert '"bug"' in result.detail and '"login"' in result.detail
    assert score("f1", [], []).value == 1.0


def test_python_scorer_from_the_command_line_only() -> None:
    spec = {"type": "python", "function": "tests.evals.scorer_functions:long_enough"}
    assert score(spec, "a long reply", None).value == 1.0
    assert score(spec, "no", None).detail == "2 characters"
    with pytest.raises(InputError, match="a dataset cannot name Python code"):
        parse_spec(spec, "d.jsonl:3", origin="row")
    with pytest.raises(InputError, match="cannot import"):
        build(parse_spec({**spec, "function": "no_such_module:f"}, "x", origin="command line"))


def test_mistakes_in_a_scorer_are_located() -> None:
    with pytest.raises(
        InputError, match=r"d:1: scorers\[0\]: unknown scorer type 'exactly' \(did you mean 'exact'"
    ):
        parse_spec({"type": "exactly"}, "d:1: scorers[0]", origin="dataset")
    with pytest.raises(InputError, match="has no key patern"):
        parse_spec({"type": "regex", "patern": "x"}, "w", origin="dataset")
    with pytest.raises(InputError, match="the pattern cannot be used"):
        parse_spec({"type": "regex", "pattern": "("}, "w", origin="dataset")
    with pytest.raises(InputError, match="invalid JMESPath"):
        parse_spec({"type": "exact", "actual": "a.["}, "w", origin="dataset")


def test_intervals() -> None:
    whole = interval([1.0] * 200)
    assert whole is not None and whole.mean == 1.0 and 0.98 < whole.low < 1.0 and whole.high == 1.0
    mixed = interval([0.5, 0.75, 1.0])
    assert mixed is not None and mixed.low < 0.75 < mixed.high
    assert interval([]) is None


def test_a_dataset_with_expectations_is_a_batch_inputs_file_too(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    lines = [
        {"$eval": {"scorers": ["exact"], "thresholds": {"exact": 0.9}}},
        {
            "id": "a",
            "inputs": {"q": 1},
            "expected": "x",
            "expect": [{"type": "regex", "pattern": "x"}],
        },
        {"q": 2},
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    rows, invalid = read_rows(path)
    assert [(r.id, r.inputs) for r in rows] == [("a", {"q": 1}), (3, {"q": 2})] and not invalid
    dataset = read_dataset(path)
    assert [s.name for s in dataset.scorers] == ["exact"] and dataset.thresholds == {"exact": 0.9}
    assert dataset.expectations['"a"'].expected == "x"
    assert [s.type for s in dataset.expectations['"a"'].assertions] == ["regex"]
    assert not dataset.expectations["3"].has_expected


def test_every_mistake_of_a_dataset_is_reported_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    lines = [
        {"$eval": {"scorers": [{"type": "python", "function": "os:system"}], "limits": 1}},
        {"id": "a", "inputs": {}, "expect": [{"type": "nope"}]},
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    with pytest.raises(InputError) as caught:
        read_dataset(path)
    message = caught.value.message
    assert f'{path}:1: "$eval" has no key limits' in message
    assert f"{path}:1: scorers[0]: a dataset cannot name Python code" in message
    assert f"{path}:2 (row 'a'): expect[0]: unknown scorer type 'nope'" in message


def test_a_rows_assertions_have_names_of_their_own(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    two = [{"type": "regex", "pattern": "a"}, {"type": "regex", "pattern": "b"}]
    lines = [{"$eval": {"scorers": ["exact"]}}, {"id": "a", "inputs": {}, "expect": two}]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    assert [s.name for s in read_dataset(path).expectations['"a"'].assertions] == [
        "regex",
        "regex-2",
    ]
    lines[1]["expect"] = [{"type": "regex", "pattern": "a", "name": "exact"}]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    with pytest.raises(InputError, match=r"expect\[0\]: another scorer is named 'exact'"):
        read_dataset(path)

"""``lattice_eval`` in a user's test suite (the pytest plugin), run by pytester."""

from __future__ import annotations

import shutil

import pytest

from tests.evals.helpers import MOCK_A, MOCK_B, TRIAGE, TRIAGE_DATASET

pytest_plugins = ["pytester"]

USER_TESTS = """
def test_a_keeps_its_thresholds(lattice_eval):
    outcome = lattice_eval("flows/triage.json", "flows/triage.eval.jsonl",
                           mock="flows/a.mock.json", thresholds={"category": 0.9})
    outcome.assert_thresholds()
    assert outcome.mean("category") == 1.0


def test_b_does_not_regress(lattice_eval):
    outcome = lattice_eval("flows/triage.json", "flows/triage.eval.jsonl",
                           mock="flows/a.mock.json", mock_b="flows/b.mock.json")
    assert outcome.regressed == ["t-012"]
    outcome.assert_thresholds()
"""


def test_a_users_suite_fails_on_a_regression(pytester: pytest.Pytester) -> None:
    flows = pytester.mkdir("flows")
    shutil.copy(TRIAGE, flows / "triage.json")
    shutil.copy(MOCK_A, flows / "a.mock.json")
    shutil.copy(MOCK_B, flows / "b.mock.json")
    lines = TRIAGE_DATASET.read_text().splitlines()
    (flows / "triage.eval.jsonl").write_text("\n".join(lines[:16]) + "\n")  # header, 15 rows
    pytester.makepyfile(test_triage=USER_TESTS)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*AssertionError: the evaluation failed:*",
            "*1 row regressed (B scores lower than A): t-012*",
            "*FAIL: category is below its threshold 0.95 in B (0.933); 1 row regressed (allowed 0)*",
        ]
    )

"""``lattice.patterns``: a document's regular expressions run with a time limit."""

from __future__ import annotations

import pytest

from lattice.patterns import (
    REPETITION_LIMIT,
    PatternError,
    PatternTimeout,
    compile_pattern,
    pattern_problem,
    search,
    time_budget,
)

CATASTROPHIC = r"^(a|aa)+$"
"""Exponential for a backtracking matcher on ``a…a!`` (``re`` takes seconds at 36 characters)."""
VICTIM = "a" * 36 + "!"


def test_a_catastrophic_search_stops_at_its_limit() -> None:
    with pytest.raises(PatternTimeout) as caught:
        search(CATASTROPHIC, VICTIM)
    assert "did not finish within 0.1 s of CPU time" in str(caught.value)
    assert caught.value.pattern == CATASTROPHIC


def test_ordinary_searches_answer_as_re_does() -> None:
    assert search(r"^b", "bc") is not None
    assert search(r"^b", "cb") is None
    assert search(r"(?P<x>a)(?P=x)", "xaa") is not None
    assert search(r"(?<=a)b", "ab") is not None
    assert search(r"^(a+)+$", "a" * 40 + "!") is None  # exponential for re, not here


def test_a_spent_budget_refuses_further_searches_at_once() -> None:
    with time_budget(0.05):
        with pytest.raises(PatternTimeout):
            search(CATASTROPHIC, VICTIM)
        with pytest.raises(PatternTimeout) as caught:
            search(r"^b", "bc")
    assert "used up their time" in str(caught.value)
    assert search(r"^b", "bc") is not None  # outside the block: a fresh limit


@pytest.mark.parametrize(
    "pattern",
    [r"(a{1000}){1000}", r"((a{100}){100}){100}", r"a{4294967294}", r"(a{65535}){65535}"],
)
def test_counted_repetitions_too_large_to_compile_are_refused(pattern: str) -> None:
    problem = pattern_problem(pattern)
    assert problem is not None and f"at most {REPETITION_LIMIT:,}" in problem
    with pytest.raises(PatternError):
        compile_pattern(pattern)


@pytest.mark.parametrize("pattern", [r"a{1,100000}", r"[{5}]{3}", r"\{3}", r"x{2,}", r"a{100}"])
def test_counted_repetitions_that_compile_quickly_are_kept(pattern: str) -> None:
    assert pattern_problem(pattern) is None


def test_a_pattern_that_does_not_compile_says_why() -> None:
    problem = pattern_problem("(unclosed")
    assert problem is not None and "missing )" in problem

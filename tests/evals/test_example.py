"""``lattice eval`` over support-triage's example dataset: two mock variants, B regressing
on six tickets (docs/evals.md)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.evals.helpers import MOCK_A, MOCK_B, REGRESSED, TRIAGE, TRIAGE_DATASET, Ran, run_eval

NETWORK = ("http", "https", "ws", "wss", "ftp", "file")


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> tuple[Ran, Path]:
    out = tmp_path_factory.mktemp("eval")
    ran = run_eval(
        TRIAGE,
        TRIAGE_DATASET,
        "--mock",
        MOCK_A,
        "--mock-b",
        MOCK_B,
        "--out",
        out / "eo",
        "--progress",
        "none",
        "--json",
        out / "report.json",
        "--html",
        out / "report.html",
        "--concurrency",
        "32",
    )
    return ran, out


def test_the_table_names_exactly_the_regressed_rows_and_exits_1(
    example: tuple[Ran, Path],
) -> None:
    ran, out = example
    assert ran.code == 1
    assert "6 rows regressed (B scores lower than A): " + ", ".join(REGRESSED) in ran.out
    assert "1 row improved: t-137" in ran.out
    assert ran.out.rstrip().endswith("FAIL: 6 rows regressed (allowed 0)")
    table = {line.split()[0]: line for line in ran.out.splitlines() if line[:1].isalpha()}
    assert re.search(
        r"≥ 0\.95\s+0\.995 \[0\.972, 0\.999\] ✓\s+0\.970 \[0\.936, 0\.986\] ✓", table["category"]
    )
    assert "199/200" in ran.out and "194/200" in ran.out
    report = json.loads((out / "report.json").read_text())
    assert report["regressed"] == REGRESSED
    assert report["exit_code"] == 1
    changed = {c["id"]: c for c in report["changes"]}
    assert changed["t-012"]["scores"] == {"category": [1.0, 0.0]}
    assert {"path": "/category", "old": "bug", "new": "billing"} in changed["t-012"]["diff"]
    b_rows = {r["id"]: r for r in report["variants"][1]["rows"]}
    assert b_rows["t-012"]["latency_ms"] is not None and b_rows["t-012"]["calls"] == 3


def test_running_it_again_resumes_both_batches_and_says_the_same(
    example: tuple[Ran, Path],
) -> None:
    ran, out = example
    files = sorted((out / "eo").glob("*.jsonl"))
    assert [f.name[:2] for f in files] == ["A-", "B-"]
    runs_before = len(list((out / "eo" / "runs").iterdir()))
    again = run_eval(
        TRIAGE,
        TRIAGE_DATASET,
        "--mock",
        MOCK_A,
        "--mock-b",
        MOCK_B,
        "--out",
        out / "eo",
        "--progress",
        "none",
    )
    assert again.out == ran.out and again.code == 1
    assert len(list((out / "eo" / "runs").iterdir())) == runs_before  # nothing ran


def test_recorded_results_files_are_scored_as_they_are(example: tuple[Ran, Path]) -> None:
    _, out = example
    a, b = sorted((out / "eo").glob("*.jsonl"))
    same = run_eval(TRIAGE, TRIAGE_DATASET, "--results", a, a)
    assert same.code == 0 and "no row regressed" in same.out and same.out.rstrip().endswith("PASS")
    worse = run_eval(
        TRIAGE,
        TRIAGE_DATASET,
        "--results",
        a,
        b,
        "--max-regressions",
        "6",
        "--threshold",
        "category=0.98",
    )
    assert worse.code == 1
    assert worse.out.rstrip().endswith("FAIL: category is below its threshold 0.98 in B (0.970)")
    allowed = run_eval(TRIAGE, TRIAGE_DATASET, "--results", a, b, "--max-regressions", "6")
    assert allowed.code == 0 and allowed.out.rstrip().endswith("PASS")


def test_the_html_report_is_self_contained(example: tuple[Ran, Path]) -> None:
    _, out = example
    html = (out / "report.html").read_text()
    assert "<script" not in html and "http://" not in html.replace(
        "http://127.0.0.1:8600/#/runs/", ""
    )
    assert "https://" not in html
    assert "t-012, t-047, t-088, t-123, t-164, t-191" in html


def test_the_html_report_shows_the_same_in_chromium(example: tuple[Ran, Path]) -> None:
    from tests.panel.browser import chromium, console_errors, requested_urls, require_browser

    require_browser()
    _, out = example
    report = json.loads((out / "report.json").read_text())
    with chromium(network_log=True) as page:
        page.get((out / "report.html").as_uri())
        text = page.find_element("css selector", "#verdict").text
        assert text == "FAIL: 6 rows regressed (allowed 0)"
        assert page.find_element("css selector", "#regressed-ids").text == ", ".join(REGRESSED)
        shown = [
            row.get_attribute("data-row")
            for row in page.find_elements("css selector", "#changes tr.regressed")
        ]
        assert shown == REGRESSED
        category = page.find_element("css selector", "#scores tr:nth-child(2)").text
        assert "0.995 [0.972, 0.999] ✓" in category and "0.970 [0.936, 0.986] ✓" in category
        assert len(page.find_elements("css selector", "#rows tr[data-row]")) == 200
        link = page.find_element("css selector", "#changes tr[data-row='t-012'] td:nth-child(5) a")
        run_b = {r["id"]: r for r in report["variants"][1]["rows"]}["t-012"]["run_dir"]
        assert link.get_attribute("href") == f"http://127.0.0.1:8600/#/runs/{Path(run_b).name}"
        # the browser's own new-tab page aside (chrome:, data:), nothing but the report
        pages = [url for url in requested_urls(page) if url.split(":")[0] in NETWORK]
        assert pages == [(out / "report.html").as_uri()]
        assert console_errors(page) == []

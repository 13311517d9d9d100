"""The call cache across evaluation runs: a changed prompt re-pays only its node's calls
(counted against the fake OpenAI server's log)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from lattice.llm.fake_server import FakeLLMServer, serve
from tests.evals.helpers import run_eval
from tests.two_step import two_step_answer, two_step_document


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeLLMServer]:
    monkeypatch.chdir(tmp_path)
    for name in ("LATTICE_CONFIG", "LATTICE_PROVIDER", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    with serve(two_step_answer) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url + "/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        yield srv


def _kinds(server: FakeLLMServer) -> list[str]:
    return ["outline" if "OUTLINE" in r.user_text() else "summary" for r in server.received]


def test_a_changed_prompt_sends_only_its_nodes_calls(server: FakeLLMServer, tmp_path: Path) -> None:
    topics = ["tea", "rivers", "owls"]
    dataset = tmp_path / "d.jsonl"
    dataset.write_text(
        "".join(
            json.dumps(
                {"id": t, "inputs": {"topic": t}, "expected": {"summary": f"All about {t.title()}"}}
            )
            + "\n"
            for t in topics
        )
    )
    doc = tmp_path / "flow.json"
    doc.write_text(json.dumps(two_step_document()))
    args = [
        dataset,
        "--provider",
        "openai",
        "--cache",
        tmp_path / "cache.jsonl",
        "--progress",
        "none",
        "--no-record",
    ]
    first = run_eval(doc, *args)
    assert first.code == 0, first.out + first.err
    assert "cache: 0 model calls reused, 6 sent" in first.out
    assert sorted(_kinds(server)) == ["outline"] * 3 + ["summary"] * 3

    changed = two_step_document()
    summary = next(n for n in changed["nodes"] if n["id"] == "summary")
    summary["data"]["prompt"] = "In two sentences, " + summary["data"]["prompt"]
    doc.write_text(json.dumps(changed))
    before = len(server.received)
    second = run_eval(doc, *args)
    assert second.code == 0, second.out + second.err
    assert _kinds(server)[before:] == ["summary"] * 3  # the outlines came from the cache
    assert "cache: 3 model calls reused, 3 sent" in second.out
    assert "exact" in second.out and "1.000 [" in second.out

    third = run_eval(doc, *args, "--out", tmp_path / "elsewhere")
    assert len(server.received) == before + 3  # nothing sent: every answer is cached
    assert "cache: 6 model calls reused, 0 sent" in third.out


def test_a_judges_calls_are_cached_too(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("LATTICE_CONFIG", "LATTICE_PROVIDER", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    header = {"$eval": {"scorers": [{"name": "j", "type": "judge", "rubric": "Polite."}]}}
    dataset = tmp_path / "d.jsonl"
    dataset.write_text(
        "".join(
            json.dumps(x) + "\n"
            for x in [header, {"id": "a", "inputs": {}}, {"id": "b", "inputs": {}}]
        )
    )
    results = tmp_path / "r.jsonl"
    results.write_text(
        "".join(
            json.dumps({"id": i, "status": "completed", "result": f"reply {i}", "usage": {}}) + "\n"
            for i in ("a", "b")
        )
    )
    with serve(lambda body: json.dumps({"score": 5, "reason": "Polite."})) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url + "/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        args = [
            dataset,
            "--results",
            results,
            "--provider",
            "openai",
            "--cache",
            tmp_path / "c.jsonl",
        ]
        first = run_eval(tmp_path / "flow.json", *args)
        assert "cache: 0 model calls reused, 2 sent" in first.out, first.out + first.err
        assert "judge: 2 model calls (0 repairs)" in first.out
        second = run_eval(tmp_path / "flow.json", *args)
        assert "cache: 2 model calls reused, 0 sent" in second.out
        assert len(srv.received) == 2

"""End to end: ``lattice run`` with the real SDKs against a local OpenAI-/Anthropic-compatible
server on 127.0.0.1; record/replay; ``hash-prompt``; ``--dry-run``; usage; secrets."""

from __future__ import annotations

import gc
import io
import json
import re
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lattice.cli import main
from lattice.config import LatticeConfig
from lattice.ir import ir_to_dict
from lattice.llm.base import SCHEMA_NOTE, LLMRequest, Message
from lattice.llm.fake_server import FakeLLMServer, serve
from lattice.runtime import Runner, RunStore
from lattice.runtime.settings import RuntimeSettings
from lattice.service.providers import make_provider
from tests.builders import lower_ok
from tests.two_step import two_step_answer, two_step_document

HASH = re.compile(r"^[0-9a-f]{64}$")
OUTPUT = {"summary": "All about Tides"}


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No terminal, no stray config or proxy; runs land in tmp_path."""
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    monkeypatch.chdir(tmp_path)
    for name in (
        "LATTICE_CONFIG",
        "LATTICE_PROVIDER",
        "LATTICE_OPENAI_MODEL",
        "LATTICE_ANTHROPIC_MODEL",
        *(f"LATTICE_MODEL_{c}" for c in ("SMALL", "MEDIUM", "LARGE", "DEFAULT")),
        *("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"),
    ):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with serve(two_step_answer) as srv:
        yield srv


@pytest.fixture
def openai_env(monkeypatch: pytest.MonkeyPatch, server: FakeLLMServer) -> FakeLLMServer:
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url + "/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    return server


@pytest.fixture
def anthropic_env(monkeypatch: pytest.MonkeyPatch, server: FakeLLMServer) -> FakeLLMServer:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    return server


@pytest.fixture
def doc(tmp_path: Path) -> Path:
    path = tmp_path / "two-step.json"
    path.write_text(json.dumps(two_step_document()), encoding="utf-8")
    return path


def cli(capsys: pytest.CaptureFixture[str], *args: Any) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return code, out, err


def run_folders(runs: Path) -> list[Path]:
    return sorted(p for p in runs.iterdir() if p.is_dir()) if runs.exists() else []


def events(folder: Path) -> list[dict[str, Any]]:
    lines = (folder / "events.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


# -- live adapters against the local server ------------------------------------------------


def test_openai_run_end_to_end(
    capsys: pytest.CaptureFixture[str], openai_env: FakeLLMServer, doc: Path, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    code, out, err = cli(
        capsys, "run", doc, "--provider", "openai", "--input", "topic=tides", "--runs-dir", runs
    )
    assert code == 0, err
    assert json.loads(out) == OUTPUT
    assert "completed" in err

    first, second = openai_env.received
    assert first.path == second.path == "/v1/chat/completions"
    assert first.headers["authorization"] == "Bearer sk-test"
    assert first.body["model"] == second.body["model"] == "gpt-4o-mini"
    assert first.body["temperature"] == 0.0
    assert [m["role"] for m in first.body["messages"]] == ["system", "user"]
    fmt = first.body["response_format"]
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"]["strict"] is True  # the outline schema is closed
    assert fmt["json_schema"]["schema"]["required"] == ["title", "points"]
    assert "<tides>" in first.user_text()
    assert "<Tides>" in second.user_text()  # the first node's output fed the second

    [folder] = run_folders(runs)
    result = json.loads((folder / "result.json").read_text())
    assert result["output"] == OUTPUT
    responses = [e for e in events(folder) if e["type"] == "llm_response"]
    assert [e["node_id"] for e in responses] == ["outline", "summary"]
    assert all(e["data"]["model"] == "gpt-4o-mini" for e in responses)


def test_openai_run_sends_each_schema_once(
    capsys: pytest.CaptureFixture[str], openai_env: FakeLLMServer, doc: Path, tmp_path: Path
) -> None:
    code, _, err = cli(
        capsys, "run", doc, "--provider", "openai", "--input", "topic=tides", "--runs-dir", tmp_path
    )
    assert code == 0, err
    for received in openai_env.received:
        schema = received.body["response_format"]["json_schema"]["schema"]
        system = received.body["messages"][0]["content"]
        assert json.dumps(schema, ensure_ascii=False) not in system
        assert SCHEMA_NOTE in system
        assert "It must validate against the JSON Schema below." in system


def test_anthropic_run_end_to_end(
    capsys: pytest.CaptureFixture[str], anthropic_env: FakeLLMServer, doc: Path, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    code, out, err = cli(
        capsys,
        "run",
        doc,
        "--provider",
        "anthropic",
        "--input",
        "topic=tides",
        "--runs-dir",
        runs,
    )
    assert code == 0, err
    assert json.loads(out) == OUTPUT
    first, second = anthropic_env.received
    assert first.path == second.path == "/v1/messages"
    assert first.body["system"]  # the contract travels as the system prompt
    assert [m["role"] for m in first.body["messages"]] == ["user"]
    assert first.body["output_config"]["format"]["type"] == "json_schema"
    assert "<Tides>" in second.user_text()


def test_openai_auth_failure_fails_at_once(
    capsys: pytest.CaptureFixture[str], openai_env: FakeLLMServer, doc: Path, tmp_path: Path
) -> None:
    openai_env.fail_with = (401, {"error": {"message": "bad key", "code": "invalid_api_key"}}, {})
    runs = tmp_path / "runs"
    code, out, err = cli(
        capsys, "run", doc, "--provider", "openai", "--input", "topic=tides", "--runs-dir", runs
    )
    assert code == 1
    assert out == ""
    assert len(openai_env.received) == 1  # api_key_error: fail, no retry, no escalation
    assert "api_key_error" in err
    assert "OPENAI_API_KEY" in err
    [folder] = run_folders(runs)
    report = json.loads((folder / "failure_report.json").read_text())
    assert report["category"] == "api_key_error"
    assert report["node_id"] == "outline"


def test_rate_limit_is_retried_honouring_retry_after(openai_env: FakeLLMServer) -> None:
    """Through the real SDK: a 429 with Retry-After 7 → the runner waits ≥ 7 s (fake clock)
    and the retry succeeds; the SDK itself made no retry of its own."""
    openai_env.failures = [(429, {"error": {"message": "slow down"}}, {"retry-after": "7"})]
    slept: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        slept.append(seconds)

    runner = Runner(
        lower_ok(two_step_document()),
        provider=make_provider("openai"),
        store=RunStore(None),
        settings=RuntimeSettings(sleep=fake_sleep),
    )
    result = runner.run({"topic": "tides"})
    assert result.status == "completed", result.failure
    assert result.output == OUTPUT
    assert len(openai_env.received) == 3  # 429, retry, second node
    assert len(slept) == 1
    assert slept[0] >= 7
    assert result.usage.calls == 2  # the failed call produced no usage


def test_one_provider_serves_two_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    results = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)  # the leaked sockets of this bug
        with serve(two_step_answer, keep_alive=True) as keep_alive:
            monkeypatch.setenv("OPENAI_BASE_URL", keep_alive.base_url + "/v1")
            monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
            provider = make_provider("openai")
            ir = lower_ok(two_step_document())
            for _ in range(2):
                runner = Runner(ir, provider=provider, store=RunStore(None))
                results.append(runner.run({"topic": "tides"}))
            del provider, runner
            gc.collect()
    assert [r.status for r in results] == ["completed", "completed"], results[-1].failure


def test_a_run_leaves_no_open_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runner.run closes the SDK client of its event loop: with a keep-alive server and the
    provider kept alive (as an application would), the server sees the connection closed,
    and nothing is left for the garbage collector to warn about."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        with serve(two_step_answer, keep_alive=True) as keep_alive:
            monkeypatch.setenv("OPENAI_BASE_URL", keep_alive.base_url + "/v1")
            monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
            provider = make_provider("openai")
            runner = Runner(lower_ok(two_step_document()), provider=provider, store=RunStore(None))
            result = runner.run({"topic": "tides"})
            deadline = time.monotonic() + 2
            while keep_alive.open_connections and time.monotonic() < deadline:
                time.sleep(0.01)
            still_open = keep_alive.open_connections
            del provider, runner
            gc.collect()
    assert result.status == "completed"
    assert still_open == 0
    leaks = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert leaks == []


def test_a_recording_run_leaves_no_open_connection(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)  # the leaked sockets of this bug
        with serve(two_step_answer, keep_alive=True) as keep_alive:
            monkeypatch.setenv("OPENAI_BASE_URL", keep_alive.base_url + "/v1")
            monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
            provider = make_provider("openai", fixtures=tmp_path / "f.jsonl", record=True)
            runner = Runner(lower_ok(two_step_document()), provider=provider, store=RunStore(None))
            result = runner.run({"topic": "tides"})
            deadline = time.monotonic() + 1
            while keep_alive.open_connections and time.monotonic() < deadline:
                time.sleep(0.01)
            still_open = keep_alive.open_connections
            del provider, runner
            gc.collect()
    assert result.status == "completed"
    assert len((tmp_path / "f.jsonl").read_text().splitlines()) == 2
    assert still_open == 0


# -- record / replay -----------------------------------------------------------------------


def test_record_then_replay_offline(
    capsys: pytest.CaptureFixture[str], openai_env: FakeLLMServer, doc: Path, tmp_path: Path
) -> None:
    fixtures = tmp_path / "fx" / "f.jsonl"
    runs = tmp_path / "runs"
    args = ("run", doc, "--input", "topic=tides", "--runs-dir", runs)
    code, recorded_out, err = cli(
        capsys, *args, "--fixtures", fixtures, "--record", "--provider", "openai"
    )
    assert code == 0, err
    assert json.loads(recorded_out) == OUTPUT
    assert len(openai_env.received) == 2

    lines = [json.loads(line) for line in fixtures.read_text(encoding="utf-8").splitlines()]
    assert len(lines) == 2
    for line, reply, node in zip(lines, openai_env.replies, ("outline", "summary"), strict=True):
        assert set(line) == {"prompt_hash", "completion", "meta", "prompt_preview"}
        assert HASH.match(line["prompt_hash"])
        assert line["completion"] == reply["choices"][0]["message"]["content"]
        assert line["meta"]["model"] == "gpt-4o-mini"
        assert line["meta"]["node_id"] == node
        assert line["meta"]["input_tokens"] == reply["usage"]["prompt_tokens"]
        assert line["meta"]["output_tokens"] == reply["usage"]["completion_tokens"]
        assert line["meta"]["finish_reason"] == "stop"
    assert "OUTLINE the topic <tides>" in lines[0]["prompt_preview"]
    assert lines[0]["meta"]["model_class"] == "small"
    assert lines[1]["meta"]["model_class"] == "medium"
    [recorded] = run_folders(runs)
    hashes = [e["data"]["prompt_hash"] for e in events(recorded) if e["type"] == "llm_request"]
    assert hashes == [line["prompt_hash"] for line in lines]

    openai_env.stop()  # offline from here on
    code, replayed_out, err = cli(capsys, *args, "--fixtures", fixtures)
    assert code == 0, err
    assert replayed_out == recorded_out  # byte-identical
    assert len(openai_env.received) == 2

    # recording again finds every prompt in the file: no call, no new line
    code, again, err = cli(
        capsys, *args, "--fixtures", fixtures, "--record", "--provider", "openai"
    )
    assert code == 0, err
    assert again == recorded_out
    assert len(fixtures.read_text(encoding="utf-8").splitlines()) == 2


def test_replay_of_an_unrecorded_prompt_names_hash_and_preview(
    capsys: pytest.CaptureFixture[str], openai_env: FakeLLMServer, doc: Path, tmp_path: Path
) -> None:
    fixtures = tmp_path / "f.jsonl"
    runs = tmp_path / "runs"
    code, _, err = cli(
        capsys,
        "run",
        doc,
        "--input",
        "topic=tides",
        "--fixtures",
        fixtures,
        "--record",
        "--provider",
        "openai",
        "--runs-dir",
        runs,
    )
    assert code == 0, err
    openai_env.stop()

    code, out, err = cli(
        capsys,
        "run",
        doc,
        "--input",
        "topic=volcanoes",
        "--fixtures",
        fixtures,
        "--runs-dir",
        runs,
        "--json",
    )
    assert code == 1
    failure = json.loads(out)["failure"]
    assert failure["category"] == "fixture_missing"
    assert failure["node_id"] == "outline"
    # the hash the run asked for is on stderr and in the report, with the prompt's start
    [hash_in_err] = re.findall(r"prompt hash ([0-9a-f]{64})", err)
    assert hash_in_err not in fixtures.read_text(encoding="utf-8")
    assert hash_in_err in failure["summary"]
    assert "OUTLINE the topic <volcanoes>" in failure["summary"]
    assert "OUTLINE the topic <volcanoes>" in err
    assert "--record" in err


def test_replay_without_fixtures_file_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], doc: Path, tmp_path: Path
) -> None:
    code, _, err = cli(
        capsys, "run", doc, "--input", "topic=t", "--fixtures", tmp_path / "none.jsonl"
    )
    assert code == 2
    assert "none.jsonl" in err
    assert "--record" in err


def test_malformed_fixtures_file_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], doc: Path, tmp_path: Path
) -> None:
    fixtures = tmp_path / "f.jsonl"
    fixtures.write_text('{"prompt_hash": "ab", "completion": "x"}\nnot json\n', encoding="utf-8")
    code, _, err = cli(capsys, "run", doc, "--input", "topic=t", "--fixtures", fixtures)
    assert code == 2
    assert "f.jsonl:2" in err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--record",), "--fixtures"),
        (("--fixtures", "f.jsonl", "--provider", "openai"), "--record"),
        (("--fixtures", "f.jsonl", "--record", "--provider", "disabled"), "live provider"),
        (("--provider", "fixture"), "--fixtures"),
        (("--provider", "nope"), "unknown provider"),
    ],
)
def test_bad_provider_flag_combinations_exit_2(
    capsys: pytest.CaptureFixture[str], doc: Path, extra: tuple[str, ...], message: str
) -> None:
    code, _, err = cli(capsys, "run", doc, "--input", "topic=t", *extra)
    assert code == 2
    assert message in err


# -- hash-prompt and dry runs ----------------------------------------------------------------


def hash_prompt(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    text: str,
    *extra: str,
) -> str:
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    code, out, _ = cli(capsys, "hash-prompt", *extra)
    assert code == 0
    return out.strip()


def test_hash_prompt_of_plain_text(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    text = "Summarise the ticket.\nBe brief."
    expected = LLMRequest(messages=(Message("user", text),)).prompt_hash()
    assert hash_prompt(capsys, monkeypatch, text) == expected
    assert HASH.match(expected)
    # newlines are normalised: a CRLF file hashes like the LF one
    assert hash_prompt(capsys, monkeypatch, text.replace("\n", "\r\n")) == expected
    small = LLMRequest(messages=(Message("user", text),), model_class="small").prompt_hash()
    assert hash_prompt(capsys, monkeypatch, text, "--model-class", "small") == small
    assert small != expected


def test_hash_prompt_of_a_json_request(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    schema = {"type": "object"}
    data = {
        "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}],
        "model_class": "large",
        "temperature": 0.5,
        "max_tokens": 10,
        "schema": schema,
    }
    expected = LLMRequest(
        messages=(Message("system", "sys"), Message("user", "hi")),
        model_class="large",
        temperature=0.5,
        max_tokens=10,
        response_schema=schema,
    ).prompt_hash()
    assert hash_prompt(capsys, monkeypatch, json.dumps(data)) == expected


def test_prompt_hash_ignores_the_concrete_model_but_not_the_contract() -> None:
    base = LLMRequest(messages=(Message("user", "x"),), model_class="small")
    same = LLMRequest(messages=(Message("user", "x"),), model_class="small", model="gpt-9")
    assert base.prompt_hash() == same.prompt_hash()
    for other in (
        LLMRequest(messages=(Message("user", "x"),), model_class="large"),
        LLMRequest(messages=(Message("user", "x"),), model_class="small", temperature=0.3),
        LLMRequest(messages=(Message("user", "x"),), model_class="small", top_p=0.5),
        LLMRequest(messages=(Message("user", "x"),), model_class="small", max_tokens=5),
        LLMRequest(
            messages=(Message("user", "x"),), model_class="small", response_schema={"type": "x"}
        ),
        LLMRequest(messages=(Message("system", "x"),), model_class="small"),
    ):
        assert other.prompt_hash() != base.prompt_hash()


def test_dry_run_prints_one_line_per_call_with_the_hashes_a_recording_gets(
    capsys: pytest.CaptureFixture[str], openai_env: FakeLLMServer, doc: Path, tmp_path: Path
) -> None:
    # the mock answers exactly what the server answers, so the prompts are the same
    mock = tmp_path / "mock.json"
    mock.write_text(
        json.dumps(
            {
                "responses": {
                    "outline": [{"title": "Tides", "points": ["what tides is", "why"]}],
                    "summary": [{"summary": "All about Tides"}],
                }
            }
        ),
        encoding="utf-8",
    )
    runs = tmp_path / "runs"
    code, out, err = cli(
        capsys,
        "run",
        doc,
        "--input",
        "topic=tides",
        "--mock",
        mock,
        "--dry-run",
        "--runs-dir",
        runs,
    )
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 2
    parsed = [line.split("  ") for line in lines]
    assert [p[1] for p in parsed] == ["outline", "summary"]
    assert all(HASH.match(p[0]) for p in parsed)
    assert "[small]" in lines[0]
    assert "[medium]" in lines[1]
    assert "OUTLINE the topic <tides>" in lines[0]
    assert not runs.exists()  # a dry run writes no run folder
    assert openai_env.received == []

    fixtures = tmp_path / "f.jsonl"
    code, _, err = cli(
        capsys,
        "run",
        doc,
        "--input",
        "topic=tides",
        "--fixtures",
        fixtures,
        "--record",
        "--provider",
        "openai",
        "--runs-dir",
        runs,
    )
    assert code == 0, err
    recorded = [json.loads(x)["prompt_hash"] for x in fixtures.read_text().splitlines()]
    assert [p[0] for p in parsed] == recorded


def test_dry_run_needs_a_mock(capsys: pytest.CaptureFixture[str], doc: Path) -> None:
    code, out, err = cli(capsys, "run", doc, "--input", "topic=t", "--dry-run")
    assert code == 2
    assert out == ""
    assert "--mock" in err


# -- usage ---------------------------------------------------------------------------------


def test_usage_per_model_and_class(openai_env: FakeLLMServer, tmp_path: Path) -> None:
    config = LatticeConfig.model_validate(
        {"llm": {"models": {"small": "openai:gpt-small", "medium": "gpt-medium"}}}
    )
    from lattice.runtime.settings import settings_from_config

    ir = lower_ok(two_step_document())
    runner = Runner(
        ir,
        provider=make_provider("openai", config=config),
        store=RunStore(tmp_path / "runs"),
        settings=settings_from_config(config),
    )
    result = runner.run({"topic": "tides"})
    assert result.status == "completed", result.failure
    assert [r.body["model"] for r in openai_env.received] == ["gpt-small", "gpt-medium"]

    outline, summary = (reply["usage"] for reply in openai_env.replies)
    usage = result.usage
    assert usage.calls == 2
    assert usage.input_tokens == outline["prompt_tokens"] + summary["prompt_tokens"]
    assert usage.output_tokens == outline["completion_tokens"] + summary["completion_tokens"]
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    assert usage.by_model == {
        "gpt-small": {
            "calls": 1,
            "input_tokens": outline["prompt_tokens"],
            "output_tokens": outline["completion_tokens"],
        },
        "gpt-medium": {
            "calls": 1,
            "input_tokens": summary["prompt_tokens"],
            "output_tokens": summary["completion_tokens"],
        },
    }
    assert usage.by_class == {
        "small": usage.by_model["gpt-small"],
        "medium": usage.by_model["gpt-medium"],
    }
    assert result.run_dir is not None
    saved = json.loads((result.run_dir / "result.json").read_text())
    assert saved["usage"] == usage.to_json()
    assert json.loads((result.run_dir / "execir.json").read_text()) == ir_to_dict(ir)


def test_usage_in_cli_json(
    capsys: pytest.CaptureFixture[str], openai_env: FakeLLMServer, doc: Path, tmp_path: Path
) -> None:
    code, out, err = cli(
        capsys,
        "run",
        doc,
        "--provider",
        "openai",
        "--input",
        "topic=tides",
        "--runs-dir",
        tmp_path / "runs",
        "--json",
    )
    assert code == 0, err
    usage = json.loads(out)["usage"]
    assert usage["calls"] == 2
    assert usage["by_model"]["gpt-4o-mini"]["calls"] == 2
    assert set(usage["by_class"]) == {"small", "medium"}
    total = usage["input_tokens"] + usage["output_tokens"]
    assert f"{total} tokens" in err
    assert "2 model calls" in err


# -- secrets -------------------------------------------------------------------------------

SECRET = "sk-secret-XYZ"


def assert_secret_absent(root: Path) -> int:
    files = [p for p in root.rglob("*") if p.is_file()]
    for path in files:
        assert SECRET not in path.read_text(encoding="utf-8", errors="replace"), path
    return len(files)


@pytest.mark.parametrize("fail", [False, True], ids=["completed", "failed"])
def test_api_key_never_reaches_the_run_folder(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    server: FakeLLMServer,
    doc: Path,
    tmp_path: Path,
    fail: bool,
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url + "/v1")
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    if fail:
        server.fail_with = (401, {"error": {"message": "Incorrect API key provided"}}, {})
    runs = tmp_path / "runs"
    fixtures = tmp_path / "f.jsonl"
    code, out, err = cli(
        capsys,
        "run",
        doc,
        "--provider",
        "openai",
        "--input",
        "topic=tides",
        "--runs-dir",
        runs,
        "--fixtures",
        fixtures,
        "--record",
        "--json",
    )
    assert code == (1 if fail else 0), err
    assert server.received[0].headers["authorization"] == f"Bearer {SECRET}"  # it was used
    assert SECRET not in out
    assert SECRET not in err
    [folder] = run_folders(runs)
    assert assert_secret_absent(folder) >= 6
    if fixtures.exists():
        assert SECRET not in fixtures.read_text(encoding="utf-8")


def test_api_key_echoed_by_the_model_is_redacted_in_the_run_folder(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    doc: Path,
    tmp_path: Path,
) -> None:
    """Even a server that puts the key into its answer (and its error) cannot get it on disk."""

    def leaky(body: dict[str, Any]) -> str:
        answer = json.loads(two_step_answer(body))
        if "summary" in answer:
            answer["summary"] += f" (your key is {SECRET})"
        return json.dumps(answer)

    with serve(leaky) as leaky_server:
        monkeypatch.setenv("OPENAI_BASE_URL", leaky_server.base_url + "/v1")
        monkeypatch.setenv("OPENAI_API_KEY", SECRET)
        runs = tmp_path / "runs"
        code, out, err = cli(
            capsys, "run", doc, "--provider", "openai", "--input", "topic=tides", "--runs-dir", runs
        )
        assert code == 0, err
        assert json.loads(out)["summary"].startswith("All about Tides")
        leaky_server.fail_with = (
            400,
            {"error": {"message": f"Invalid key {SECRET} for this project"}},
            {},
        )
        code, _, err = cli(
            capsys, "run", doc, "--provider", "openai", "--input", "topic=tides", "--runs-dir", runs
        )
        assert code == 1
    by_status: dict[str, Path] = {}
    for folder in run_folders(runs):
        assert assert_secret_absent(folder) >= 6
        by_status[json.loads((folder / "result.json").read_text())["status"]] = folder
    assert set(by_status) == {"completed", "failed"}
    output = json.loads((by_status["completed"] / "result.json").read_text())["output"]
    assert output["summary"] == "All about Tides (your key is ***)"


def test_api_key_in_a_provider_error_is_not_printed(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    server: FakeLLMServer,
    doc: Path,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url + "/v1")
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    server.fail_with = (400, {"error": {"message": f"Invalid key {SECRET}"}}, {})
    code, out, err = cli(
        capsys,
        "run",
        doc,
        "--provider",
        "openai",
        "--input",
        "topic=tides",
        "--runs-dir",
        tmp_path / "runs",
        "--json",
    )
    assert code == 1
    assert "Invalid key" in err
    assert SECRET not in err
    assert SECRET not in out


@pytest.mark.parametrize("key", ["test", "EMPTY", "sk-no-key-required"])
def test_a_key_too_plain_to_mask_is_kept_out_of_a_provider_error(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    server: FakeLLMServer,
    doc: Path,
    tmp_path: Path,
    key: str,
) -> None:
    """A server that quotes the key it was sent: a key that is also a word is not masked
    in run folders (it would garble them), so it is taken out of the error itself."""
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url + "/v1")
    monkeypatch.setenv("OPENAI_API_KEY", key)
    server.fail_with = (
        400,
        {"error": {"message": f"Invalid key {key} (Authorization: Bearer {key}); a latest-test"}},
        {},
    )
    runs = tmp_path / "runs"
    code, out, err = cli(
        capsys, "run", doc, "--provider", "openai", "--input", "topic=tides", "--runs-dir", runs
    )
    assert code == 1
    assert server.received[0].headers["authorization"] == f"Bearer {key}"
    quoted = "Invalid key *** (Authorization: Bearer ***)"
    assert quoted in err
    [folder] = run_folders(runs)
    texts = [p.read_text(encoding="utf-8") for p in folder.rglob("*") if p.is_file()]
    assert any(quoted in text for text in texts)
    for text in [out, err, *texts]:
        assert f"Invalid key {key}" not in text and f"Bearer {key}" not in text


@given(
    contents=st.lists(st.text(), min_size=1, max_size=3),
    temperature=st.one_of(st.none(), st.floats(0, 2, allow_nan=False)),
    top_p=st.one_of(st.none(), st.floats(0, 1, allow_nan=False)),
    max_tokens=st.one_of(st.none(), st.integers(1, 10**6)),
    schema=st.one_of(st.none(), st.dictionaries(st.text(max_size=5), st.integers(), max_size=3)),
)
def test_prompt_hash_is_sha256_of_the_canonical_json(
    contents: list[str],
    temperature: float | None,
    top_p: float | None,
    max_tokens: int | None,
    schema: dict[str, int] | None,
) -> None:
    import hashlib

    request = LLMRequest(
        messages=tuple(
            Message("user" if i % 2 else "system", text) for i, text in enumerate(contents)
        ),
        temperature=temperature,
        top_p=top_p,
        max_tokens=max_tokens,
        response_schema=schema,
    )
    text = json.dumps(
        request.canonical(), sort_keys=True, ensure_ascii=False, separators=(",", ":")
    )
    assert request.prompt_hash() == hashlib.sha256(text.encode("utf-8")).hexdigest()


@pytest.mark.parametrize("spelled", ["\ud800", "\\ud800"], ids=["in-the-text", "json-escape"])
def test_a_lone_surrogate_in_an_answer_becomes_u_fffd(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    doc: Path,
    tmp_path: Path,
    spelled: str,
) -> None:
    """An answer holding a lone surrogate (the API's JSON spells ``"\\ud800"``; in the
    text itself or in the JSON the text holds) no file can encode: the run completes
    with U+FFFD in its place, and every file of the run folder is UTF-8."""

    def answer(body: dict[str, Any]) -> str:
        text = two_step_answer(body)
        return text.replace("Tides", "Ti" + spelled + "des") if "OUTLINE" in str(body) else text

    with serve(answer) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url + "/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        runs = tmp_path / "runs"
        code, out, err = cli(
            capsys, "run", doc, "--provider", "openai", "--input", "topic=tides", "--runs-dir", runs
        )
    assert code == 0, err
    assert json.loads(out) == {"summary": "All about Ti\ufffddes"}
    [folder] = run_folders(runs)
    files = [p for p in folder.rglob("*") if p.is_file()]
    assert files
    for path in files:
        path.read_bytes().decode("utf-8")  # raises on a file that is not UTF-8
    assert json.loads((folder / "result.json").read_text())["output"]["summary"].count("\ufffd")

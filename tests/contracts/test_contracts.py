"""The contract engine through whole (tiny) workflows: validation, repair, escalation,
recovery policies, halts, budgets and the events and FailureReports they leave.

Every test scripts a MockProvider, lowers a one- or few-node document with
``lattice.lower.lower`` and runs it with a fake ``sleep`` (no real waiting).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lattice.cli import main
from lattice.contracts.policies import DEFAULT_POLICIES, RetrySettings
from lattice.llm.mock import MockProvider
from lattice.lower import lower, lower_document
from lattice.runtime import Runner, RunResult, RunStore
from lattice.runtime.settings import RuntimeSettings
from tests.builders import chain, conn, describe, find, node, op_record, workflow

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"title": {"type": "string"}, "count": {"type": "integer"}},
    "required": ["title", "count"],
    "additionalProperties": False,
}
VALID = {"title": "Quarterly report", "count": 3}
INVALID = {"title": "Quarterly report", "count": "three"}


def invalids(count: int) -> list[dict[str, Any]]:
    """``count`` invalid answers, each wrong in its own way (a model that repeats the very
    violations it was shown is not repaired again: see test_a_model_that_repeats_itself_…)."""
    return [{"title": "Quarterly report", "count": f"three ({n})"} for n in range(count)]


INPUTS = {"type": "object", "properties": {"document": {"type": "string"}}}


class FakeSleep:
    """An injectable ``sleep`` that records the delays it was asked for and returns at once."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


@pytest.fixture
def sleep() -> FakeSleep:
    return FakeSleep()


def gen_doc(**data: Any) -> dict[str, Any]:
    """start → prompt node ``gen`` (schema SCHEMA, class small unless overridden) → end."""
    fields: dict[str, Any] = {
        "prompt": "Write the report header for: {{ $in.document }}",
        "outputSchema": SCHEMA,
        "modelClass": "small",
    }
    fields.update(data)
    doc = chain(node("gen", "prompt", **fields))
    doc["nodes"][0]["data"]["inputs"] = INPUTS
    return doc


def run_gen(
    items: list[Any],
    sleep: FakeSleep,
    *,
    doc: dict[str, Any] | None = None,
    store: RunStore | None = None,
    inputs: dict[str, Any] | None = None,
    **settings: Any,
) -> tuple[RunResult, MockProvider]:
    provider = MockProvider({"gen": items})
    runner = Runner(
        lower(doc or gen_doc()),
        provider=provider,
        store=store if store is not None else RunStore(None),
        settings=RuntimeSettings(sleep=sleep, **settings),
    )
    return runner.run(inputs if inputs is not None else {"document": "Q3 sales"}), provider


def events(result: RunResult, type_: str) -> list[dict[str, Any]]:
    return [e for e in result.events if e["type"] == type_]


def classes(provider: MockProvider) -> list[str]:
    return [call.model_class for call in provider.calls]


def user_text(call: Any) -> str:
    return "\n".join(m.content for m in call.messages if m.role == "user")


def all_text(call: Any) -> str:
    return "\n".join(m.content for m in call.messages)


def attempts_of(result: RunResult) -> list[dict[str, Any]]:
    assert result.failure is not None
    return result.failure.attempts


def assert_completed(result: RunResult, output: Any = VALID) -> None:
    assert result.status == "completed", result.failure and result.failure.summary
    assert result.failure is None
    assert result.vars["gen"]["result"] == output


def assert_failed(result: RunResult, category: str) -> None:
    assert result.status == "failed"
    assert result.failure is not None
    assert result.failure.category == category, result.failure.summary
    assert result.failure.node_id == "gen"
    assert result.output is None
    assert [e["data"]["error_type"] for e in events(result, "run_failed")] == [category]


@pytest.fixture
def cli_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A clean place for ``lattice run``: no lattice.toml, no LATTICE_* overrides."""
    monkeypatch.chdir(tmp_path)
    for name in ("LATTICE_CONFIG", "LATTICE_PROVIDER"):
        monkeypatch.delenv(name, raising=False)
    for cls in ("small", "medium", "large", "default"):
        monkeypatch.delenv(f"LATTICE_MODEL_{cls.upper()}", raising=False)
    return tmp_path


def write_json(path: Path, value: Any) -> Path:
    path.write_text(json.dumps(value), encoding="utf-8")
    return path


# -- the validation pipeline --------------------------------------------------------------


def test_valid_first_time_takes_one_call(sleep: FakeSleep) -> None:
    result, provider = run_gen([VALID], sleep)
    assert_completed(result)
    assert result.output == VALID
    assert len(provider.calls) == 1
    assert classes(provider) == ["small"]
    assert result.usage.calls == 1
    assert not events(result, "validation_failed")
    assert not events(result, "repair_attempt")
    assert sleep.delays == []


def test_micro_prompt_injects_schema_and_rules(sleep: FakeSleep) -> None:
    _, provider = run_gen([VALID], sleep)
    request = provider.calls[0]
    assert request.response_schema == SCHEMA
    assert request.system is not None
    assert json.dumps(SCHEMA, ensure_ascii=False) in request.system
    assert "JSON only" in request.system
    assert "missing_information" in request.system
    assert "Q3 sales" in user_text(request)


@pytest.mark.parametrize(
    "text",
    [
        "```json\n" + json.dumps(VALID, indent=2) + "\n```",
        "```\n" + json.dumps(VALID) + "\n```",
        "\n\n  " + json.dumps(VALID) + "  \n",
    ],
    ids=["json-fence", "bare-fence", "whitespace"],
)
def test_fenced_or_padded_json_is_accepted_without_repair(text: str, sleep: FakeSleep) -> None:
    result, provider = run_gen([text], sleep)
    assert_completed(result)
    assert len(provider.calls) == 1


@pytest.mark.parametrize(
    ("first", "error_type"),
    [
        ("Here is the header you asked for:\n" + json.dumps(VALID), "explanatory_text"),
        ("```json\n" + json.dumps(VALID) + "\n```\nHope this helps!", "explanatory_text"),
        (json.dumps(VALID) + "\n" + json.dumps(VALID), "multiple_artifacts"),
        ("```json\n{}\n```\n```json\n" + json.dumps(VALID) + "\n```", "multiple_artifacts"),
        ("Sorry, I cannot produce JSON today.", "json_error"),
        ('{"title": "Quarterly report", "count": 3', "json_error"),
        (json.dumps(INVALID), "schema_error"),
    ],
    ids=[
        "prose-wrapped",
        "fence-plus-prose",
        "two-objects",
        "two-fences",
        "not-json",
        "truncated",
        "schema",
    ],
)
def test_bad_output_is_classified_and_repaired(
    first: str, error_type: str, sleep: FakeSleep
) -> None:
    # strictOutput: prose around a valid artifact is a violation too (by default it is
    # salvaged: tests/contracts/test_repair_packets.py)
    result, provider = run_gen([first, VALID], sleep, doc=gen_doc(strictOutput=True))
    assert_completed(result)
    assert len(provider.calls) == 2
    assert classes(provider) == ["small", "small"]
    failed = events(result, "validation_failed")
    assert [e["data"]["error_type"] for e in failed] == [error_type]
    assert failed[0]["data"]["violations"]
    repairs = events(result, "repair_attempt")
    assert len(repairs) == 1
    assert repairs[0]["data"]["error_type"] == error_type
    # the second call is the fix-only repair packet, quoting the invalid output
    repair = provider.calls[1]
    assert "You repair a JSON artifact" in all_text(repair)
    assert first.strip() in user_text(repair)
    assert sleep.delays == []  # repairs never back off


def test_prose_wrapped_repair_lists_schema_problems_of_the_extracted_value_too(
    sleep: FakeSleep,
) -> None:
    doc = gen_doc(strictOutput=True)
    result, provider = run_gen(["Sure! " + json.dumps(INVALID), VALID], sleep, doc=doc)
    assert_completed(result)
    violations = events(result, "validation_failed")[0]["data"]["violations"]
    assert {v["pointer"] for v in violations} == {"/", "/count"}
    assert "- /count: 'three' is not of type 'integer'" in user_text(provider.calls[1])


def test_salvaged_prose_with_schema_problems_is_a_schema_error_quoting_the_json_only(
    sleep: FakeSleep,
) -> None:
    result, provider = run_gen(["Sure! " + json.dumps(INVALID) + "\nCheers", VALID], sleep)
    assert_completed(result)
    failed = events(result, "validation_failed")[0]["data"]
    assert failed["error_type"] == "schema_error"
    assert failed["violations"] == [
        {"pointer": "/count", "message": "'three' is not of type 'integer'"}
    ]
    packet = user_text(provider.calls[1])
    assert "Invalid output:\n" + json.dumps(INVALID) + "\n\nReply" in packet
    assert "Sure!" not in packet and "Cheers" not in packet


def test_schema_violations_repaired_on_second_and_third_attempts(sleep: FakeSleep) -> None:
    second_bad = {"title": 42, "count": 3}
    result, provider = run_gen([INVALID, second_bad, VALID], sleep)
    assert_completed(result)
    assert classes(provider) == ["small", "small", "small"]
    failed = events(result, "validation_failed")
    assert [e["data"]["attempt"] for e in failed] == [1, 2]
    assert [v["pointer"] for v in failed[0]["data"]["violations"]] == ["/count"]
    assert [v["pointer"] for v in failed[1]["data"]["violations"]] == ["/title"]
    assert [e["data"]["attempt"] for e in events(result, "repair_attempt")] == [2, 3]
    # each repair packet names the violation of the attempt before it, and only that one
    assert "/count" in user_text(provider.calls[1])
    assert "/title:" not in user_text(provider.calls[1])
    assert "/title" in user_text(provider.calls[2])
    assert json.dumps(second_bad) in user_text(provider.calls[2])
    assert not events(result, "escalated")


def test_three_failures_at_small_escalate_to_medium(sleep: FakeSleep) -> None:
    result, provider = run_gen(
        [*invalids(2), "not json", VALID],
        sleep,
        models={"small": "tiny-1", "medium": "mid-1", "large": "big-1"},
    )
    assert_completed(result)
    assert classes(provider) == ["small", "small", "small", "medium"]
    assert [c.model for c in provider.calls] == ["tiny-1", "tiny-1", "tiny-1", "mid-1"]
    escalated = events(result, "escalated")
    assert [(e["data"]["from"], e["data"]["to"]) for e in escalated] == [("small", "medium")]
    assert escalated[0]["data"]["error_type"] == "json_error"
    # the escalated call starts again from the original prompt (not a repair packet)
    # and says what went wrong before
    escalation = provider.calls[3]
    assert "Q3 sales" in user_text(escalation)
    assert "You repair a JSON artifact" not in all_text(escalation)
    assert "A previous attempt at this artifact failed validation" in user_text(escalation)
    assert result.usage.by_class["small"]["calls"] == 3
    assert result.usage.by_class["medium"]["calls"] == 1
    assert result.usage.by_model["mid-1"]["calls"] == 1


def test_default_class_escalates_straight_to_large(sleep: FakeSleep) -> None:
    doc = gen_doc()
    del doc["nodes"][1]["data"]["modelClass"]
    result, provider = run_gen([*invalids(3), VALID], sleep, doc=doc)
    assert_completed(result)
    assert classes(provider) == ["default"] * 3 + ["large"]


def test_capped_ladder_exhausted_fails_with_a_report_of_every_attempt(
    sleep: FakeSleep, tmp_path: Path
) -> None:
    doc = gen_doc(escalate={"maxClass": "medium"})
    script = [INVALID, "nope", {"title": 1, "count": 1}, INVALID, "a {} b {}", INVALID]
    result, provider = run_gen(script, sleep, doc=doc, store=RunStore(tmp_path))
    assert_failed(result, "schema_error")
    assert classes(provider) == ["small"] * 3 + ["medium"] * 3
    attempts = attempts_of(result)
    assert len(attempts) == 6
    assert [a["model_class"] for a in attempts] == ["small"] * 3 + ["medium"] * 3
    assert [a["error_type"] for a in attempts] == [
        "schema_error",
        "json_error",
        "schema_error",
        "schema_error",
        "multiple_artifacts",
        "schema_error",
    ]
    assert [a["kind"] for a in attempts] == [
        "initial",
        "repair",
        "repair",
        "escalation",
        "repair",
        "repair",
    ]
    for attempt in attempts:
        assert attempt["violations"], attempt
        assert all({"pointer", "message"} <= set(v) for v in attempt["violations"])
        assert "completion" in attempt
    assert attempts[2]["violations"] == [
        {"pointer": "/title", "message": "1 is not of type 'string'"}
    ]
    # the same report is on disk
    assert result.run_dir is not None
    on_disk = json.loads((result.run_dir / "failure_report.json").read_text(encoding="utf-8"))
    assert on_disk == json.loads(json.dumps(result.failure.to_json()))
    assert {
        "phase",
        "run_id",
        "op_id",
        "node_id",
        "category",
        "summary",
        "details",
        "attempts",
        "blocking",
        "recovery_action",
    } <= set(on_disk)
    assert [a["model_class"] for a in on_disk["attempts"]] == ["small"] * 3 + ["medium"] * 3
    assert on_disk["blocking"] is True
    assert "lattice resume" in on_disk["recovery_action"]
    result_json = json.loads((result.run_dir / "result.json").read_text(encoding="utf-8"))
    assert result_json["status"] == "failed"


def test_whole_ladder_failing_tries_every_class(sleep: FakeSleep) -> None:
    result, provider = run_gen(invalids(9), sleep)
    assert_failed(result, "schema_error")
    assert classes(provider) == ["small"] * 3 + ["medium"] * 3 + ["large"] * 3
    assert [a["model_class"] for a in attempts_of(result)] == classes(provider)
    assert [(e["data"]["from"], e["data"]["to"]) for e in events(result, "escalated")] == [
        ("small", "medium"),
        ("medium", "large"),
    ]


def test_a_model_that_repeats_itself_is_not_repaired_again(sleep: FakeSleep) -> None:
    """Shown its violations, a model that makes every one of them again would only be
    sent the same repair packet: the call climbs the ladder instead, and at its top ends."""
    result, provider = run_gen([INVALID] * 9, sleep)
    assert_failed(result, "schema_error")
    assert classes(provider) == ["small", "small", "medium", "large"]
    assert [a["kind"] for a in attempts_of(result)] == [
        "initial",
        "repair",
        "escalation",
        "escalation",
    ]


def test_an_answer_that_changes_keeps_its_class_repairing(sleep: FakeSleep) -> None:
    script = [INVALID, INVALID, *invalids(2), VALID]
    result, provider = run_gen(script, sleep)
    assert_completed(result)
    assert classes(provider) == ["small", "small", "medium", "medium", "medium"]


def test_cli_exits_1_when_the_ladder_is_exhausted(
    cli_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tmp_path = cli_env
    doc = write_json(tmp_path / "wf.json", gen_doc(escalate={"maxClass": "medium"}))
    mock = write_json(tmp_path / "mock.json", {"responses": {"gen": invalids(6)}})
    runs = tmp_path / "runs"
    code = main(
        [
            "run",
            str(doc),
            "--input",
            "document=Q3 sales",
            "--provider",
            "mock",
            "--mock",
            str(mock),
            "--runs-dir",
            str(runs),
        ]
    )
    assert code == 1
    err = capsys.readouterr().err
    assert "schema_error" in err
    (run_dir,) = runs.iterdir()
    report = json.loads((run_dir / "failure_report.json").read_text(encoding="utf-8"))
    assert report["category"] == "schema_error"
    assert [a["model_class"] for a in report["attempts"]] == ["small"] * 3 + ["medium"] * 3


# -- structured failures from the model ---------------------------------------------------


def test_missing_information_halts_then_resume_supplies_it(
    sleep: FakeSleep, tmp_path: Path
) -> None:
    doc = chain(
        node("outline", "prompt", prompt="Outline: {{ $in.document }}"),
        node("gen", "prompt", prompt="Header for the outline", outputSchema=SCHEMA),
    )
    doc["nodes"][0]["data"]["inputs"] = INPUTS
    script = {
        "outline": ["1. sales 2. costs"],
        "gen": [{"error": "missing_information", "details": "Which quarter is it?"}, VALID],
    }
    provider = MockProvider(script)
    runner = Runner(
        lower(doc),
        provider=provider,
        store=RunStore(tmp_path),
        settings=RuntimeSettings(sleep=sleep),
    )
    halted = runner.run({"document": "sales"})
    assert halted.status == "halted"
    assert halted.failure is not None
    assert halted.failure.category == "missing_information"
    assert halted.failure.node_id == "gen"
    assert "Which quarter is it?" in halted.failure.summary
    assert "--answer gen=" in halted.failure.recovery_action
    assert len(provider.calls) == 2  # no repair, no retry, no escalation
    assert [e["data"]["reason"] for e in events(halted, "run_halted")] == ["missing_information"]
    assert halted.run_dir is not None
    report = json.loads((halted.run_dir / "failure_report.json").read_text(encoding="utf-8"))
    assert report["category"] == "missing_information"

    resumed_provider = MockProvider(script)  # the same script, as `lattice resume` re-reads it
    resumed = Runner.resume(
        halted.run_dir,
        answers={"gen": "the info: Q3 of 2024"},
        provider=resumed_provider,
        settings=RuntimeSettings(sleep=sleep),
    )
    assert resumed.status == "completed", resumed.failure
    assert resumed.vars["gen"]["result"] == VALID
    assert resumed.vars["outline"]["result"] == "1. sales 2. costs"
    assert [c.node_id for c in resumed_provider.calls] == ["gen"]  # outline is not re-run
    assert "the info: Q3 of 2024" in user_text(resumed_provider.calls[0])
    assert not (halted.run_dir / "failure_report.json").exists()


def test_missing_information_halts_even_with_a_failed_route(sleep: FakeSleep) -> None:
    doc = workflow(
        [
            node("start", "start"),
            node("gen", "prompt", prompt="Header", outputSchema=SCHEMA),
            node("ok", "end", output="ok"),
            node("fallback", "end", output="fallback"),
        ],
        [conn("start", "gen"), conn("gen", "ok"), conn("gen", "fallback", "failed")],
    )
    result, provider = run_gen(
        [{"error": "missing_information", "details": "which quarter?"}], sleep, doc=doc, inputs={}
    )
    assert len(provider.calls) == 1
    assert result.status == "halted"
    assert result.failure is not None
    assert result.failure.category == "missing_information"
    assert [a["error_type"] for a in result.failure.attempts] == ["missing_information"]
    assert result.failure.details == {"missing": "which quarter?"}
    assert "error" not in result.vars.get("gen", {})


def test_failed_run_resumes_from_the_failed_op(sleep: FakeSleep, tmp_path: Path) -> None:
    script = [*invalids(3), VALID]
    doc = gen_doc(escalate=False)
    failed, _ = run_gen(script, sleep, doc=doc, store=RunStore(tmp_path))
    assert_failed(failed, "schema_error")
    assert failed.run_dir is not None
    provider = MockProvider({"gen": script})
    resumed = Runner.resume(
        failed.run_dir, provider=provider, settings=RuntimeSettings(sleep=sleep)
    )
    assert_completed(resumed)
    assert len(provider.calls) == 1  # the script continues where the failed run stopped
    assert resumed.usage.calls == 4


def test_invalid_request_fails_without_retry(sleep: FakeSleep) -> None:
    result, provider = run_gen(
        [{"error": "invalid_request", "details": "a header cannot be negative"}, VALID], sleep
    )
    assert_failed(result, "invalid_request")
    assert len(provider.calls) == 1
    assert "a header cannot be negative" in result.failure.summary
    assert not events(result, "repair_attempt")
    assert not events(result, "escalated")


# -- provider errors ------------------------------------------------------------------------


def test_rate_limit_is_retried_after_retry_after(sleep: FakeSleep) -> None:
    result, provider = run_gen([{"$error": "rate_limit_error", "retry_after": 2}, VALID], sleep)
    assert_completed(result)
    assert len(provider.calls) == 2
    assert len(sleep.delays) == 1
    assert sleep.delays[0] >= 2
    retry = events(result, "retry")
    assert len(retry) == 1
    assert retry[0]["data"]["error_type"] == "rate_limit_error"
    assert retry[0]["data"]["delay_s"] >= 2
    # a retry re-sends the same request, on the same class
    assert provider.calls[0].messages == provider.calls[1].messages
    assert classes(provider) == ["small", "small"]


def test_rate_limit_without_retry_after_backs_off_exponentially(sleep: FakeSleep) -> None:
    script = [{"$error": "rate_limit_error"}] * 3 + [VALID]
    result, provider = run_gen(
        script, sleep, retry=RetrySettings(max_retries=3, base=1.0, cap=30.0, jitter=0.0)
    )
    assert_completed(result)
    assert len(provider.calls) == 4
    assert sleep.delays == [1.0, 2.0, 4.0]


def test_api_key_error_fails_after_exactly_one_call(sleep: FakeSleep) -> None:
    result, provider = run_gen([{"$error": "api_key_error"}, VALID, VALID], sleep)
    assert_failed(result, "api_key_error")
    assert len(provider.calls) == 1
    assert sleep.delays == []
    assert [a["error_type"] for a in attempts_of(result)] == ["api_key_error"]


def test_provider_error_is_retried_then_fails(sleep: FakeSleep) -> None:
    result, provider = run_gen([{"$error": "provider_error"}] * 10, sleep)
    assert_failed(result, "provider_error")
    assert len(provider.calls) == 1 + RetrySettings().max_retries
    assert len(sleep.delays) == RetrySettings().max_retries
    assert sleep.delays == sorted(sleep.delays)
    assert classes(provider) == ["small"] * 4  # a provider error is not a reason to escalate
    assert [a["kind"] for a in attempts_of(result)] == ["initial", "retry", "retry", "retry"]


def test_provider_error_respects_max_retries_setting(sleep: FakeSleep) -> None:
    result, provider = run_gen(
        [{"$error": "provider_error"}] * 10, sleep, retry=RetrySettings(max_retries=1)
    )
    assert_failed(result, "provider_error")
    assert len(provider.calls) == 2
    assert len(sleep.delays) == 1


def test_provider_error_then_success(sleep: FakeSleep) -> None:
    result, provider = run_gen([{"$error": "provider_error"}, VALID], sleep)
    assert_completed(result)
    assert len(provider.calls) == 2


def test_context_length_error_escalates(sleep: FakeSleep) -> None:
    result, provider = run_gen([{"$error": "context_length_error"}, VALID], sleep)
    assert_completed(result)
    assert classes(provider) == ["small", "medium"]
    escalated = events(result, "escalated")
    assert [e["data"]["error_type"] for e in escalated] == ["context_length_error"]
    assert provider.calls[0].messages == provider.calls[1].messages
    assert sleep.delays == []


def test_context_length_error_on_every_class_fails(sleep: FakeSleep) -> None:
    result, provider = run_gen([{"$error": "context_length_error"}] * 5, sleep)
    assert_failed(result, "context_length_error")
    assert classes(provider) == ["small", "medium", "large"]


# -- routes, node settings and policies ------------------------------------------------------


def test_failed_port_is_taken_with_the_failure_report_in_vars(sleep: FakeSleep) -> None:
    doc = workflow(
        [
            node("start", "start"),
            node("gen", "prompt", prompt="Header", outputSchema=SCHEMA, escalate=False),
            node("ok", "end", output="ok"),
            node("fallback", "end", output="failed: {{ $vars.gen.error.category }}"),
        ],
        [conn("start", "gen"), conn("gen", "ok"), conn("gen", "fallback", "failed")],
    )
    result, provider = run_gen(["no", "nope", "no way"], sleep, doc=doc, inputs={})
    assert result.status == "completed"
    assert result.output == "failed: json_error"
    assert len(provider.calls) == 3
    report = result.vars["gen"]["error"]
    assert report["category"] == "json_error"
    assert report["node_id"] == "gen"
    assert report["blocking"] is False
    assert len(report["attempts"]) == 3
    assert all(a["error_type"] == "json_error" for a in report["attempts"])
    assert "result" not in result.vars["gen"]
    assert [e["data"]["port"] for e in events(result, "op_finished") if e["node_id"] == "gen"] == [
        "failed"
    ]


def test_repair_max_attempts_one_escalates_after_one_failure(sleep: FakeSleep) -> None:
    result, provider = run_gen([INVALID, VALID], sleep, doc=gen_doc(repair={"maxAttempts": 1}))
    assert_completed(result)
    assert classes(provider) == ["small", "medium"]
    assert not events(result, "repair_attempt")
    assert len(events(result, "escalated")) == 1


def test_repair_max_attempts_two_per_class(sleep: FakeSleep) -> None:
    doc = gen_doc(repair={"maxAttempts": 2}, escalate={"maxClass": "medium"})
    result, provider = run_gen(invalids(4), sleep, doc=doc)
    assert_failed(result, "schema_error")
    assert classes(provider) == ["small", "small", "medium", "medium"]


def test_settings_max_attempts_is_the_default_per_class(sleep: FakeSleep) -> None:
    result, provider = run_gen([INVALID, INVALID, VALID], sleep, max_attempts=2)
    assert_completed(result)
    assert classes(provider) == ["small", "small", "medium"]


@pytest.mark.parametrize("escalate", [False, {"enabled": False}], ids=["false", "enabled-false"])
def test_escalate_false_fails_at_the_first_class(escalate: Any, sleep: FakeSleep) -> None:
    result, provider = run_gen(invalids(6), sleep, doc=gen_doc(escalate=escalate))
    assert_failed(result, "schema_error")
    assert classes(provider) == ["small"] * 3
    assert not events(result, "escalated")


def test_escalate_false_fails_context_length_at_once(sleep: FakeSleep) -> None:
    result, provider = run_gen(
        [{"$error": "context_length_error"}, VALID], sleep, doc=gen_doc(escalate=False)
    )
    assert_failed(result, "context_length_error")
    assert len(provider.calls) == 1


def test_node_policy_override_fail_on_schema_error(sleep: FakeSleep) -> None:
    doc = gen_doc(policies={"schema_error": ["fail"]})
    result, provider = run_gen([INVALID, VALID], sleep, doc=doc)
    assert_failed(result, "schema_error")
    assert len(provider.calls) == 1
    assert result.failure.details["action"] == "fail"
    # other error types keep their defaults
    result, provider = run_gen(["nope", VALID], sleep, doc=doc)
    assert_completed(result)
    assert len(provider.calls) == 2


def test_node_policy_escalate_before_repair(sleep: FakeSleep) -> None:
    doc = gen_doc(policies={"schema_error": ["escalate", "repair", "fail"]})
    result, provider = run_gen([INVALID, INVALID, VALID], sleep, doc=doc)
    assert_completed(result)
    assert classes(provider) == ["small", "medium", "large"]


def test_node_policy_fail_on_missing_information(sleep: FakeSleep) -> None:
    doc = gen_doc(policies={"missing_information": ["fail"]})
    result, provider = run_gen(
        [{"error": "missing_information", "details": "which quarter?"}], sleep, doc=doc
    )
    assert_failed(result, "missing_information")
    assert len(provider.calls) == 1


def test_node_policy_retry_on_api_key_error(sleep: FakeSleep) -> None:
    doc = gen_doc(policies={"api_key_error": ["retry", "fail"]})
    result, provider = run_gen([{"$error": "api_key_error"}, VALID], sleep, doc=doc)
    assert_completed(result)
    assert len(provider.calls) == 2
    assert len(sleep.delays) == 1


def test_run_level_policies_from_settings(sleep: FakeSleep) -> None:
    provider = MockProvider({"gen": [{"$error": "rate_limit_error", "retry_after": 1}, VALID]})
    settings = RuntimeSettings(
        sleep=sleep, policies={**DEFAULT_POLICIES, "rate_limit_error": ("fail",)}
    )
    result = Runner(
        lower(gen_doc()), provider=provider, store=RunStore(None), settings=settings
    ).run({"document": "x"})
    assert_failed(result, "rate_limit_error")
    assert len(provider.calls) == 1
    assert sleep.delays == []


def test_node_policy_beats_run_level_policy(sleep: FakeSleep) -> None:
    provider = MockProvider({"gen": [INVALID, VALID]})
    settings = RuntimeSettings(
        sleep=sleep, policies={**DEFAULT_POLICIES, "schema_error": ("fail",)}
    )
    doc = gen_doc(policies={"schema_error": ["repair", "fail"]})
    result = Runner(lower(doc), provider=provider, store=RunStore(None), settings=settings).run(
        {"document": "x"}
    )
    assert_completed(result)
    assert len(provider.calls) == 2


@pytest.mark.parametrize(
    "policies",
    [{"schema_error": ["repair", "explode"]}, {"schema_error": []}, {"schema_error": "fail"}],
    ids=["unknown-action", "empty", "not-a-list"],
)
def test_invalid_node_policies_are_lowering_errors(policies: Any) -> None:
    result = lower_document(gen_doc(policies=policies))
    assert result.ir is None
    (diag,) = find(result, "invalid-field")
    assert diag.node_id == "gen"
    assert diag.pointer.endswith("/data/policies/schema_error"), describe(result.diagnostics)


@pytest.mark.parametrize("value", [0, 11, "3", True])
def test_invalid_repair_max_attempts_is_a_lowering_error(value: Any) -> None:
    result = lower_document(gen_doc(repair={"maxAttempts": value}))
    assert result.ir is None
    (diag,) = find(result, "invalid-field")
    assert diag.pointer.endswith("/data/repair/maxAttempts")


# -- invariants in a workflow -------------------------------------------------------------


def test_invariant_failure_is_repaired(sleep: FakeSleep) -> None:
    schema = {"type": "object", "properties": {"plan": {"type": "string"}}, "required": ["plan"]}
    doc = gen_doc(outputSchema=schema, invariants=["no_code"])
    code = {"plan": "Add this:\n```python\ndef f():\n    return 1\n```"}
    words = {"plan": "Add a function f that returns one."}
    result, provider = run_gen([code, words], sleep, doc=doc)
    assert result.status == "completed"
    assert result.vars["gen"]["result"] == words
    (failed,) = events(result, "validation_failed")
    assert failed["data"]["error_type"] == "code_in_output"
    assert failed["data"]["violations"][0]["pointer"] == "/plan"
    assert "No source code" in (provider.calls[0].system or "")  # the rule is in the contract
    assert "/plan: contains a fenced code block" in user_text(provider.calls[1])


def test_unified_diff_invariant_with_path(sleep: FakeSleep) -> None:
    schema = {"type": "object", "properties": {"patch": {"type": "string"}}, "required": ["patch"]}
    doc = gen_doc(outputSchema=schema, invariants=[{"name": "unified_diff", "path": "/patch"}])
    good = "--- a/x.txt\n+++ b/x.txt\n@@ -1,1 +1,1 @@\n-old\n+new\n"
    bad = "--- a/x.txt\n+++ b/x.txt\n@@ -1,2 +1,2 @@\n-old\n+new\n"
    result, provider = run_gen([{"patch": bad}, {"patch": good}], sleep, doc=doc)
    assert result.status == "completed"
    (failed,) = events(result, "validation_failed")
    assert failed["data"]["error_type"] == "invalid_diff"
    assert failed["data"]["violations"][0]["pointer"] == "/patch"
    assert "hunk 1 declares -2 +2 lines but has -1 +1" in user_text(provider.calls[1])


def test_invariants_run_after_the_schema(sleep: FakeSleep) -> None:
    doc = gen_doc(invariants=[{"name": "max_chars", "path": "/title", "max": 5}])
    short = {"title": "Q3", "count": 1}
    result, provider = run_gen([INVALID, VALID, short], sleep, doc=doc)
    assert_completed(result, short)
    assert len(provider.calls) == 3
    failed = events(result, "validation_failed")
    assert [e["data"]["error_type"] for e in failed] == ["schema_error", "invariant_error"]
    assert failed[1]["data"]["violations"] == [
        {"pointer": "/title", "message": "is 16 characters; the limit is 5"}
    ]


# -- budgets ----------------------------------------------------------------------------------


def test_call_budget_stops_a_node_needing_three_calls(sleep: FakeSleep) -> None:
    result, provider = run_gen([INVALID, INVALID, VALID], sleep, max_calls=2)
    assert_failed(result, "budget_exceeded")
    assert len(provider.calls) == 2
    assert result.usage.calls == 2
    assert result.failure.details["max_calls"] == 2
    assert [a["error_type"] for a in attempts_of(result)] == [
        "schema_error",
        "schema_error",
        "budget_exceeded",
    ]


def test_call_budget_counts_across_nodes(sleep: FakeSleep) -> None:
    doc = chain(
        node("a", "prompt", prompt="one"),
        node("b", "prompt", prompt="two"),
    )
    provider = MockProvider({"a": ["first"], "b": ["second"]})
    result = Runner(
        lower(doc),
        provider=provider,
        store=RunStore(None),
        settings=RuntimeSettings(sleep=sleep, max_calls=1),
    ).run({})
    assert result.status == "failed"
    assert result.failure is not None
    assert result.failure.category == "budget_exceeded"
    assert result.failure.node_id == "b"
    assert len(provider.calls) == 1


def test_token_budget(sleep: FakeSleep) -> None:
    result, provider = run_gen([INVALID, VALID], sleep, max_tokens_total=10)
    assert_failed(result, "budget_exceeded")
    assert len(provider.calls) == 1
    assert result.failure.details["max_tokens"] == 10


def test_budget_large_enough_is_not_in_the_way(sleep: FakeSleep) -> None:
    result, provider = run_gen([INVALID, INVALID, VALID], sleep, max_calls=3)
    assert_completed(result)
    assert len(provider.calls) == 3


def test_cli_max_calls_exits_1(cli_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tmp_path = cli_env
    doc = write_json(tmp_path / "wf.json", gen_doc())
    mock = write_json(tmp_path / "mock.json", {"responses": {"gen": [INVALID, INVALID, VALID]}})
    argv = [
        "run",
        str(doc),
        "--input",
        "document=x",
        "--provider",
        "mock",
        "--mock",
        str(mock),
        "--runs-dir",
        str(tmp_path / "runs"),
    ]
    assert main([*argv, "--max-calls", "2"]) == 1
    assert "budget_exceeded" in capsys.readouterr().err
    assert main([*argv, "--max-calls", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "completed"
    assert out["usage"]["calls"] == 3


# -- events -------------------------------------------------------------------------------


def test_every_attempt_emits_its_events(sleep: FakeSleep, tmp_path: Path) -> None:
    result, provider = run_gen([INVALID, "junk", INVALID, VALID], sleep, store=RunStore(tmp_path))
    assert_completed(result)
    requests = events(result, "llm_request")
    responses = events(result, "llm_response")
    assert len(requests) == len(responses) == len(provider.calls) == 4
    assert [e["data"]["model_class"] for e in requests] == ["small"] * 3 + ["medium"]
    assert [e["data"]["model_class"] for e in responses] == ["small"] * 3 + ["medium"]
    assert [e["data"]["kind"] for e in requests] == ["initial", "repair", "repair", "escalation"]
    for request, response, call in zip(requests, responses, provider.calls, strict=True):
        assert request["node_id"] == response["node_id"] == "gen"
        assert request["data"]["prompt_hash"] == response["data"]["prompt_hash"]
        assert request["data"]["prompt_hash"] == call.prompt_hash()
        assert response["data"]["input_tokens"] > 0
        assert response["data"]["output_tokens"] > 0
        assert "latency_ms" in response["data"]
        assert response["data"]["model"] == "mock-model"
    failed = events(result, "validation_failed")
    assert [(e["data"]["attempt"], e["data"]["error_type"]) for e in failed] == [
        (1, "schema_error"),
        (2, "json_error"),
        (3, "schema_error"),
    ]
    assert all(e["data"]["model_class"] == "small" for e in failed)
    assert failed[0]["data"]["violations"] == [
        {"pointer": "/count", "message": "'three' is not of type 'integer'"}
    ]
    repairs = events(result, "repair_attempt")
    assert [e["data"]["attempt"] for e in repairs] == [2, 3]
    assert [e["data"]["violations"] for e in repairs] == [
        failed[0]["data"]["violations"],
        failed[1]["data"]["violations"],
    ]
    assert all(e["data"]["model_class"] == "small" for e in repairs)
    assert [e["data"]["request_chars"] for e in repairs] == [
        provider.calls[1].size_chars(),
        provider.calls[2].size_chars(),
    ]
    (escalated,) = events(result, "escalated")
    assert (escalated["data"]["from"], escalated["data"]["to"]) == ("small", "medium")
    # order of one attempt: request → response → validation_failed → repair/escalation
    order = [
        e["type"]
        for e in result.events
        if e["type"]
        in {"llm_request", "llm_response", "validation_failed", "repair_attempt", "escalated"}
    ]
    assert order == [
        *("llm_request", "llm_response", "validation_failed", "repair_attempt"),
        *("llm_request", "llm_response", "validation_failed", "repair_attempt"),
        *("llm_request", "llm_response", "validation_failed", "escalated"),
        *("llm_request", "llm_response"),
    ]
    # events.jsonl holds the same events
    assert result.run_dir is not None
    lines = (result.run_dir / "events.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == json.loads(json.dumps(result.events))
    # and the op record lists every attempt
    record = op_record(result.run_dir, "gen")
    assert [a["model_class"] for a in record["attempts"]] == ["small"] * 3 + ["medium"]
    assert record["attempts"][-1]["ok"] is True
    assert result.usage.calls == 4
    assert result.usage.input_tokens == sum(e["data"]["input_tokens"] for e in responses)


# -- the fix-only repair packet ------------------------------------------------------------


def _document(size: int) -> str:
    sentence = "Revenue in the northern region grew while logistics costs fell sharply. "
    text = "CONTEXT-MARKER " + sentence * (size // len(sentence) + 1)
    return text[:size]


def test_repair_packet_is_fix_only(sleep: FakeSleep) -> None:
    bad = {"title": 7, "count": "three", "extra": True}
    document = _document(20_000)
    result, provider = run_gen([bad, VALID], sleep, inputs={"document": document})
    assert_completed(result)
    original, repair = provider.calls
    assert document in user_text(original)
    repair_text = all_text(repair)
    violations = events(result, "validation_failed")[0]["data"]["violations"]
    assert {v["pointer"] for v in violations} == {"/", "/title", "/count"}
    # the contract, the invalid output and every violation with its pointer …
    assert json.dumps(SCHEMA, ensure_ascii=False) in repair_text
    assert json.dumps(bad) in repair_text
    for v in violations:
        assert f"- {v['pointer']}: {v['message']}" in repair_text
    # … and not the original context or prompt
    assert "CONTEXT-MARKER" not in repair_text
    assert "Revenue in the northern region" not in repair_text
    assert "Write the report header" not in repair_text
    assert repair.response_schema == SCHEMA
    assert repair.model_class == "small"


def test_repair_packet_size_ratio(sleep: FakeSleep) -> None:
    """MEASURE: the repair request vs re-sending the whole conversation plus the error."""
    bad = {"title": 7, "count": "three"}
    bad_text = json.dumps(bad)
    result, provider = run_gen([bad_text, VALID], sleep, inputs={"document": _document(20_000)})
    assert_completed(result)
    original, repair = provider.calls
    violations = events(result, "validation_failed")[0]["data"]["violations"]
    violation_text = "\n".join(f"- {v['pointer']}: {v['message']}" for v in violations)
    whole_conversation = original.size_chars() + len(bad_text) + len(violation_text)
    ratio = repair.size_chars() / whole_conversation
    print(
        f"\nrepair packet: {repair.size_chars()} chars; original request {original.size_chars()}"
        f" + invalid output {len(bad_text)} + violations {len(violation_text)}"
        f" = {whole_conversation} chars; ratio = {ratio:.4f}"
    )
    assert original.size_chars() > 20_000
    assert ratio <= 1 / 3


def test_repair_packet_of_a_large_invalid_output_still_omits_the_context(
    sleep: FakeSleep,
) -> None:
    schema = {
        "type": "object",
        "properties": {"items": {"type": "array", "items": {"type": "integer"}}},
        "required": ["items"],
    }
    bad = {"items": [*range(100), "x"]}
    result, provider = run_gen(
        [bad, {"items": [1]}],
        sleep,
        doc=gen_doc(outputSchema=schema),
        inputs={"document": _document(20_000)},
    )
    assert result.status == "completed"
    repair_text = all_text(provider.calls[1])
    assert "- /items/100: 'x' is not of type 'integer'" in repair_text
    assert "CONTEXT-MARKER" not in repair_text


def test_retry_after_is_a_floor_but_capped() -> None:
    from lattice.contracts.policies import RetrySettings

    settings = RetrySettings(jitter=0.0, max_retry_after=60.0)
    assert settings.delay(0, 7.0) == 7.0
    assert settings.delay(0, 0.1) == 1.0  # backoff wins over a smaller Retry-After
    assert settings.delay(0, 86_400.0) == 60.0

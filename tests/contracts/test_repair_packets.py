"""What a failed attempt is called and what the next request says about it.

Each case of the contracts issue (truncated JSON, a trailing comma, prose, prose and a
fence, a list too long, a string too long, a missing field that depends on the input)
runs through a one-node workflow with a scripted MockProvider and is checked three ways:
the category (``validation_failed`` events, FailureReports), the violation text, and the
request that follows (the repair packet). Then: salvage and ``strictOutput``, the input
lines a packet quotes (``repairContextChars``), the exhaustion budget
(``maxAttemptsTotal``) and the best effort on the ``failed`` port.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lattice.contracts.engine import Contract, ContractEngine
from lattice.contracts.packets import repair_context
from lattice.ir import ir_to_dict
from lattice.llm.base import LLMRequest, Message
from lattice.llm.mock import MockProvider
from lattice.lower import lower, lower_document
from lattice.runtime import Runner, RunResult, RunStore
from lattice.runtime.settings import RuntimeSettings
from tests.builders import chain, conn, find, node, op_record, workflow

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "service": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "region": {"type": "string"}},
            "required": ["name", "region"],
            "additionalProperties": False,
        },
        "severity": {"enum": ["low", "medium", "high", "critical"]},
        "summary": {"type": "string", "maxLength": 300},
        "actions": {
            "type": "array",
            "maxItems": 4,
            "items": {
                "type": "object",
                "properties": {"owner": {"type": "string"}, "task": {"type": "string"}},
                "required": ["owner", "task"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["service", "severity", "summary", "actions"],
    "additionalProperties": False,
}
VALID: dict[str, Any] = {
    "service": {"name": "payments-api", "region": "eu-west-1"},
    "severity": "critical",
    "summary": "Card payments failed for 14 minutes after the 4.2.1 deploy.",
    "actions": [{"owner": "ana", "task": "roll back 4.2.1"}, {"owner": "bo", "task": "postmortem"}],
}
TEXT = json.dumps(VALID)
LOG = "\n".join(
    f"09:{minute:02d} payments-api eu-west-1 p99 latency {200 + minute * 7} ms, error rate {minute}%"
    for minute in range(60)
)
EVIDENCE = "09:14 incident commander: severity is critical, card payments are failing"
LOG_WITH_EVIDENCE = LOG + "\n" + EVIDENCE + "\n" + LOG.replace("09:", "10:")


class FakeSleep:
    async def __call__(self, seconds: float) -> None:
        return None


def gen_doc(**data: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "prompt": "Write the incident report for this log:\n{{ $in.log }}",
        "outputSchema": SCHEMA,
        "modelClass": "small",
    }
    fields.update(data)
    return chain(node("gen", "prompt", **fields))


def run(
    items: list[Any], doc: dict[str, Any] | None = None, store: RunStore | None = None
) -> tuple[RunResult, MockProvider]:
    provider = MockProvider({"gen": items})
    runner = Runner(
        lower(doc or gen_doc()),
        provider=provider,
        store=store if store is not None else RunStore(None),
        settings=RuntimeSettings(sleep=FakeSleep()),
    )
    return runner.run({"log": LOG_WITH_EVIDENCE}), provider


def events(result: RunResult, type_: str) -> list[dict[str, Any]]:
    return [e["data"] for e in result.events if e["type"] == type_]


def user_text(call: LLMRequest) -> str:
    return "\n".join(m.content for m in call.messages if m.role == "user")


def without(key: str) -> dict[str, Any]:
    return {k: v for k, v in VALID.items() if k != key}


def wrong_severities(count: int) -> list[dict[str, Any]]:
    """``count`` answers whose severity is wrong each in its own way (a model that repeats
    the very violations it was shown is not repaired again)."""
    return [dict(VALID, severity=f"sev{n}") for n in range(count)]


# -- the cases of the issue ---------------------------------------------------------------------


def test_truncated_json_is_a_json_error_whose_packet_quotes_the_parser() -> None:
    truncated = TEXT[: TEXT.index('"postmortem"')]
    result, provider = run([truncated, VALID])
    assert result.status == "completed"
    (failed,) = events(result, "validation_failed")
    assert failed["error_type"] == "json_error"
    (violation,) = failed["violations"]
    assert violation["pointer"] == "/"
    column = len(truncated) + 1
    assert violation["message"] == (
        "the output is cut off: the text ends inside an object, a list and an object (the "
        "outermost opened at line 1, column 1); the parser stopped with 'Expecting value' at "
        f"line 1, column {column}, near: …{truncated[-40:]}<<HERE>>"
    )
    packet = user_text(provider.calls[1])
    assert f"Violations:\n- /: {violation['message']}\n" in packet
    assert "Invalid output:\n" + truncated + "\n\nReply with the corrected artifact only." in packet
    # never the inner fragments' problems
    assert "required property" not in packet
    assert "explanatory" not in packet
    assert "Lines of the original input" not in packet


def test_truncated_json_every_time_fails_as_json_error_and_escalates_with_the_truth() -> None:
    truncated = TEXT[:-30]
    result, provider = run([truncated] * 9, gen_doc(escalate={"maxClass": "medium"}))
    # the same cut-off answer again after its repair: the next class is asked at once
    assert [c.model_class for c in provider.calls] == ["small", "small", "medium"]
    assert result.status == "failed" and result.failure is not None
    assert result.failure.category == "json_error"
    assert result.failure.summary.startswith("the output is cut off")
    assert result.failure.details["parser"]["cut_off"] is True
    assert result.failure.details["parser"]["parser_message"] == "Expecting value"
    assert "best_effort" not in result.failure.details  # nothing ever parsed
    escalation = user_text(provider.calls[2])
    assert "A previous attempt at this artifact failed validation:\n- /: the output is cut off" in (
        escalation
    )
    assert "required property" not in escalation


def test_trailing_comma_is_a_json_error_not_multiple_artifacts() -> None:
    broken = TEXT[:-1] + ",}"
    result, provider = run([broken, VALID])
    (failed,) = events(result, "validation_failed")
    assert failed["error_type"] == "json_error"
    column = len(broken)
    assert failed["violations"] == [
        {
            "pointer": "/",
            "message": "the output is not valid JSON: Expecting property name enclosed in "
            f"double quotes at line 1, column {column}, near: …{broken[-41:-1]}<<HERE>>}}",
        }
    ]
    packet = user_text(provider.calls[1])
    assert f"line 1, column {column}" in packet
    assert "Invalid output:\n" + broken + "\n" in packet
    assert "JSON values" not in packet


@pytest.mark.parametrize(
    ("reply", "stripped"),
    [
        (
            "Here is the incident report:\n" + TEXT + "\nLet me know if anything is missing.",
            ["prose"],
        ),
        (
            "Sure!\n```json\n" + json.dumps(VALID, indent=2) + "\n```\nHope it helps.",
            ["fence", "prose"],
        ),
    ],
    ids=["prose", "prose-and-fence"],
)
def test_one_valid_value_in_prose_is_salvaged_without_a_round_trip(
    reply: str, stripped: list[str], tmp_path: Path
) -> None:
    result, provider = run([reply], store=RunStore(tmp_path))
    assert result.status == "completed"
    assert result.vars["gen"]["result"] == VALID
    assert len(provider.calls) == 1
    assert not events(result, "validation_failed")
    (salvaged,) = events(result, "output_salvaged")
    assert salvaged["attempt"] == 1
    assert salvaged["model_class"] == "small"
    assert salvaged["stripped"] == stripped
    assert salvaged["before"] == reply[: reply.index("{")].strip()
    assert salvaged["after"] == reply[reply.rindex("}") + 1 :].strip()
    assert result.run_dir is not None
    (attempt,) = op_record(result.run_dir, "gen")["attempts"]
    assert attempt["ok"] is True
    assert attempt["salvaged"]["stripped"] == stripped


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (
            "Here is the incident report:\n" + TEXT,
            "the output wraps its JSON in explanatory text; reply with the JSON only",
        ),
        (
            "Sure!\n```json\n" + TEXT + "\n```\nHope it helps.",
            "the output has text outside its JSON block; reply with the JSON only",
        ),
    ],
    ids=["prose", "prose-and-fence"],
)
def test_strict_output_keeps_prose_a_violation(reply: str, message: str) -> None:
    result, provider = run([reply, VALID], gen_doc(strictOutput=True))
    assert result.status == "completed"
    assert len(provider.calls) == 2
    assert not events(result, "output_salvaged")
    (failed,) = events(result, "validation_failed")
    assert failed["error_type"] == "explanatory_text"
    assert failed["violations"] == [{"pointer": "/", "message": message}]
    packet = user_text(provider.calls[1])
    assert f"- /: {message}" in packet
    assert "Invalid output:\n" + reply + "\n" in packet


def test_a_list_too_long_states_the_limit_and_not_the_list() -> None:
    long_list = dict(VALID, actions=[{"owner": f"o{i}", "task": f"task {i}"} for i in range(6)])
    result, provider = run([long_list, VALID])
    (failed,) = events(result, "validation_failed")
    assert failed["error_type"] == "schema_error"
    assert failed["violations"] == [
        {"pointer": "/actions", "message": "has 6 items, at most 4 allowed"}
    ]
    packet = user_text(provider.calls[1])
    assert "Violations:\n- /actions: has 6 items, at most 4 allowed\n" in packet
    assert "Invalid output:\n" + json.dumps(long_list) + "\n" in packet
    assert "Lines of the original input" not in packet  # shortening needs no input
    assert "09:14" not in packet


def test_a_string_too_long_states_the_limit_and_quotes_an_excerpt() -> None:
    summary = "Card payments failed after the deploy. " * 10
    too_long = dict(VALID, summary=summary)
    result, provider = run([too_long, VALID])
    (failed,) = events(result, "validation_failed")
    assert failed["error_type"] == "schema_error"
    message = f"is {len(summary)} characters, at most 300 allowed ('{summary[:52]}…')"
    assert failed["violations"] == [{"pointer": "/summary", "message": message}]
    packet = user_text(provider.calls[1])
    assert f"- /summary: {message}\n" in packet
    assert "Lines of the original input" not in packet


def test_a_missing_field_that_depends_on_the_input_brings_the_lines_that_mention_it() -> None:
    result, provider = run([without("severity"), VALID])
    assert result.status == "completed"
    (failed,) = events(result, "validation_failed")
    assert failed["error_type"] == "schema_error"
    assert failed["violations"] == [
        {"pointer": "/", "message": "'severity' is a required property"}
    ]
    packet = user_text(provider.calls[1])
    assert packet == (
        "The previous output broke the contract.\n\n"
        "Violations:\n- /: 'severity' is a required property\n\n"
        "Lines of the original input that mention 'severity', 'low', 'medium', 'high', "
        "'critical' (use them to fill in or correct those values):\n"
        f"{EVIDENCE}\n\n"
        "Invalid output:\n" + json.dumps(without("severity")) + "\n\n"
        "Reply with the corrected artifact only."
    )
    context = (
        "\nLines of the original input that mention 'severity', 'low', 'medium', 'high', "
        f"'critical' (use them to fill in or correct those values):\n{EVIDENCE}\n"
    )
    (repair,) = events(result, "repair_attempt")
    assert repair["context_chars"] == len(context)
    # the original prompt is not repeated: the packet is a fraction of the first request
    assert provider.calls[1].size_chars() < provider.calls[0].size_chars() / 3


def test_a_wrong_enum_value_brings_the_lines_that_mention_the_options() -> None:
    result, provider = run([dict(VALID, severity="sev1"), VALID])
    (failed,) = events(result, "validation_failed")
    assert failed["violations"] == [
        {
            "pointer": "/severity",
            "message": "'sev1' is not one of ['low', 'medium', 'high', 'critical']",
        }
    ]
    assert EVIDENCE in user_text(provider.calls[1])


def test_repair_context_chars_caps_and_turns_off_the_input_lines() -> None:
    off, off_provider = run([without("severity"), VALID], gen_doc(repairContextChars=0))
    on, on_provider = run([without("severity"), VALID])
    assert off.status == on.status == "completed"
    assert "Lines of the original input" not in user_text(off_provider.calls[1])
    with_lines = on_provider.calls[1].size_chars()
    without_lines = off_provider.calls[1].size_chars()
    assert with_lines - without_lines == events(on, "repair_attempt")[0]["context_chars"]
    assert events(off, "repair_attempt")[0]["context_chars"] == 0


def test_repair_context_prefers_the_field_name_and_stays_under_its_cap() -> None:
    messages = (
        Message("system", "severity rules (never quoted: not the input)"),
        Message("user", "\n".join([*(f"line {i}: high load" for i in range(200)), EVIDENCE])),
    )
    terms = ["severity", "low", "medium", "high", "critical"]
    context = repair_context(messages, terms, 300)
    assert len(context) <= 300
    assert EVIDENCE in context
    assert "never quoted" not in context
    assert "line 0: high load" in context  # the options fill what the cap leaves
    assert repair_context(messages, terms, 0) == ""
    assert repair_context(messages, [], 2000) == ""
    assert repair_context(messages, ["nowhere"], 2000) == ""


# -- the exhaustion budget -----------------------------------------------------------------------


def test_max_attempts_total_caps_the_ladder() -> None:
    result, provider = run(wrong_severities(9), gen_doc(maxAttemptsTotal=4))
    assert result.status == "failed" and result.failure is not None
    assert [c.model_class for c in provider.calls] == ["small"] * 3 + ["medium"]
    assert result.failure.category == "schema_error"
    assert result.failure.details["max_attempts_total"] == 4
    assert len(result.failure.attempts) == 4


def test_max_attempts_total_of_one_is_a_single_call() -> None:
    result, provider = run([without("severity"), VALID], gen_doc(maxAttemptsTotal=1))
    assert result.status == "failed"
    assert len(provider.calls) == 1


def test_without_a_budget_exhaustion_costs_three_per_class() -> None:
    result, provider = run(wrong_severities(9))
    assert result.status == "failed" and result.failure is not None
    assert len(provider.calls) == 9
    assert "max_attempts_total" not in result.failure.details


def test_the_same_mistake_over_again_costs_one_call_per_class_after_the_first_repair() -> None:
    result, provider = run([without("severity")] * 9)
    assert result.status == "failed" and result.failure is not None
    assert [c.model_class for c in provider.calls] == ["small", "small", "medium", "large"]


# -- best effort ----------------------------------------------------------------------------------


def test_the_failed_port_carries_the_best_effort_already_parsed() -> None:
    doc = workflow(
        [
            node("start", "start"),
            node(
                "gen",
                "prompt",
                prompt="Report for {{ $in.log }}",
                outputSchema=SCHEMA,
                escalate=False,
            ),
            node("ok", "end", output="ok"),
            node("fallback", "end", output="$vars.gen.error"),
        ],
        [conn("start", "gen"), conn("gen", "ok"), conn("gen", "fallback", "failed")],
    )
    two_wrong = dict(VALID, severity="sev1", summary="x" * 400)
    one_wrong = without("severity")
    result, _ = run([two_wrong, one_wrong, TEXT[:-5]], doc)
    assert result.status == "completed"
    report = result.output
    assert report["category"] == "json_error"
    assert report["details"]["best_effort"] == {
        "attempt": 2,
        "error_type": "schema_error",
        "violations": [{"pointer": "/", "message": "'severity' is a required property"}],
        "value": one_wrong,
    }
    assert [a["error_type"] for a in report["attempts"]] == [
        "schema_error",
        "schema_error",
        "json_error",
    ]


def test_failure_report_best_effort_property() -> None:
    result, _ = run(wrong_severities(9))
    assert result.failure is not None
    assert result.failure.best_effort == dict(VALID, severity="sev8")
    assert result.failure.details["best_effort"]["attempt"] == 9


# -- lowering the new node fields ---------------------------------------------------------------


def test_the_new_fields_are_lowered_onto_the_op() -> None:
    ir = lower(gen_doc(strictOutput=True, maxAttemptsTotal=5, repairContextChars=500))
    op = ir_to_dict(ir)["ops"]["gen"]
    assert (op["strictOutput"], op["maxAttemptsTotal"], op["repairContextChars"]) == (True, 5, 500)
    plain = ir_to_dict(lower(gen_doc()))["ops"]["gen"]
    assert not {"strictOutput", "maxAttemptsTotal", "repairContextChars"} & set(plain)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("strictOutput", "yes", "data.strictOutput must be true or false"),
        ("maxAttemptsTotal", 0, "data.maxAttemptsTotal must be >= 1"),
        ("maxAttemptsTotal", 2.5, "data.maxAttemptsTotal must be an integer"),
        ("repairContextChars", -1, "data.repairContextChars must be >= 0"),
    ],
)
def test_invalid_new_fields_are_lowering_errors(field: str, value: Any, message: str) -> None:
    result = lower_document(gen_doc(**{field: value}))
    (diagnostic,) = find(result, "invalid-field")
    assert diagnostic.message == message


# -- the engine directly ------------------------------------------------------------------------


def test_validate_is_strict_and_salvage_is_the_engine_s_choice() -> None:
    engine = ContractEngine(Contract(schema=SCHEMA))
    reply = "Here you go:\n" + TEXT
    assert engine.validate(reply, salvage=True) == VALID
    with pytest.raises(Exception) as caught:
        engine.validate(reply)
    assert getattr(caught.value, "error_type", None) == "explanatory_text"


def test_a_call_builds_a_passing_attempt_s_record_only_for_a_caller_that_keeps_it() -> None:
    import asyncio

    from lattice.contracts.calls import CallEnv

    engine = ContractEngine(Contract(schema=SCHEMA))
    messages = (Message("user", "Report the incident."),)

    def call(answers: list[str], *, records: bool) -> tuple[Any, list[dict[str, Any]], list[str]]:
        events: list[str] = []
        env = CallEnv(
            provider=MockProvider({"n": answers}),
            emit=lambda type_, data: events.append(type_),
            records=records,
        )
        value, attempts = asyncio.run(engine.run(messages, env, node_id="n"))
        return value, attempts, events

    value, attempts, events = call([TEXT], records=False)
    assert value == VALID and attempts == []  # nothing kept for a caller that drops it
    assert events == ["llm_request", "llm_response"]
    value, attempts, _ = call([TEXT], records=True)
    assert [a["number"] for a in attempts] == [1] and attempts[0]["ok"] is True
    assert attempts[0]["prompt_hash"] == LLMRequest(messages, response_schema=SCHEMA).prompt_hash()
    assert attempts[0]["completion"] == TEXT
    # a failed attempt is recorded whatever the caller keeps, and so is the one after it
    value, attempts, events = call(["{", TEXT], records=False)
    assert value == VALID
    assert [(a["number"], a.get("ok"), a.get("error_type")) for a in attempts] == [
        (1, None, "json_error"),
        (2, True, None),
    ]
    assert all(len(a["prompt_hash"]) == 64 for a in attempts)

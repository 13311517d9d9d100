"""LLMPrimitive: the contract engine from Python, without a workflow document.

Every test scripts a MockProvider keyed by the block's name and runs with a fake
``sleep``. The parity tests run the same script through a one-node workflow and
through a block and compare what each sent, recorded and emitted.
"""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel, ConfigDict, model_validator

from lattice import LatticeRunError, LatticeUserError, LLMPrimitive, MockProvider, Response
from lattice.contracts.policies import RetrySettings
from lattice.llm.base import LLMRequest, LLMResponse
from lattice.llm.disabled import DisabledProvider
from lattice.lower import lower
from lattice.runtime import Runner, RunResult, RunStore
from lattice.runtime.settings import RuntimeSettings
from tests.builders import chain, node, op_record


class Report(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: str
    count: int


class Meeting(BaseModel):
    start: int
    end: int

    @model_validator(mode="after")
    def _ordered(self) -> Meeting:
        if self.end <= self.start:
            raise ValueError("end must be after start")
        return self


SCHEMA = Report.model_json_schema()
VALID = {"title": "Quarterly report", "count": 3}
INVALID = {"title": "Quarterly report", "count": "three"}
OTHER_INVALID = {"title": "Quarterly report", "count": "three (again)"}
SYSTEM = "You write report headers for the finance team."
LLM_EVENTS = {
    "llm_request",
    "llm_response",
    "validation_failed",
    "repair_attempt",
    "escalated",
    "retry",
    "output_salvaged",
}


class FakeSleep:
    """An injectable ``sleep`` that records the delays it was asked for and returns at once."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


@pytest.fixture
def sleep() -> FakeSleep:
    return FakeSleep()


def block(
    items: list[Any],
    sleep: FakeSleep,
    *,
    models: dict[str, str | None] | None = None,
    **kwargs: Any,
) -> tuple[LLMPrimitive[Any], MockProvider]:
    """A block named ``gen`` answering from ``items`` (output_model Report unless overridden)."""
    provider = MockProvider({"gen": items})
    fields: dict[str, Any] = {"system_prompt": SYSTEM, "output_model": Report}
    fields.update(kwargs)
    settings = RuntimeSettings(sleep=sleep, models=models or {}, retry=same_jitter())
    return LLMPrimitive(name="gen", provider=provider, settings=settings, **fields), provider


def same_jitter() -> RetrySettings:
    """Retry settings whose jitter repeats (a workflow and a block compared delay for delay)."""
    return RetrySettings(rng=random.Random(0))


def types(response: Response[Any] | RunResult) -> list[str]:
    return [e["type"] for e in response.events if e["type"] in LLM_EVENTS]


def user_text(call: LLMRequest) -> str:
    return "\n".join(m.content for m in call.messages if m.role == "user")


def all_text(call: LLMRequest) -> str:
    return "\n".join(m.content for m in call.messages)


# -- the contract ---------------------------------------------------------------------------


def test_valid_first_time_gives_a_model_instance_after_one_call(sleep: FakeSleep) -> None:
    gen, provider = block([VALID], sleep)
    response = gen.run("Write the header for the Q3 sales report")
    assert response.ok and response.status == "completed"
    assert isinstance(response.data, Report)
    assert response.data == Report(title="Quarterly report", count=3)
    assert response.value == VALID
    assert response.error is None and response.failure is None and response.error_type is None
    assert response.unwrap() is response.data
    assert len(provider.calls) == 1
    assert [a["kind"] for a in response.attempts] == ["initial"]
    assert response.attempts[0]["ok"] is True
    assert response.usage.calls == 1
    assert response.usage.output_tokens > 0
    assert types(response) == ["llm_request", "llm_response"]
    # the request: the model's JSON Schema is the contract, the block's name keys the script
    (request,) = provider.calls
    assert request.node_id == request.op_id == "gen"
    assert request.response_schema == SCHEMA
    assert request.model_class == "default"
    assert request.temperature == 0.0
    assert request.system is not None
    assert request.system.startswith(SYSTEM + "\n\n")
    assert json.dumps(SCHEMA, ensure_ascii=False) in request.system
    assert "missing_information" in request.system
    assert user_text(request) == "Write the header for the Q3 sales report"
    assert sleep.delays == []


def test_events_have_the_shape_of_run_events(sleep: FakeSleep) -> None:
    seen: list[dict[str, Any]] = []
    gen, provider = block([INVALID, VALID], sleep, on_event=seen.append)
    response = gen.run("Q3")
    assert seen == response.events
    assert [e["seq"] for e in response.events] == list(range(1, len(response.events) + 1))
    for event in response.events:
        assert set(event) == {"seq", "ts", "run_id", "type", "op_id", "node_id", "data"}
        assert event["run_id"] == response.call_id
        assert event["op_id"] == event["node_id"] == "gen"
        assert event["ts"].endswith("Z")
    request_events = [e for e in response.events if e["type"] == "llm_request"]
    assert [e["data"]["prompt_hash"] for e in request_events] == [
        c.prompt_hash() for c in provider.calls
    ]


def test_schema_error_is_repaired_with_a_fix_only_packet(sleep: FakeSleep) -> None:
    payload = "CONTEXT-MARKER " + "Revenue in the northern region grew. " * 200
    gen, provider = block([INVALID, VALID], sleep)
    response = gen.run(payload, context={"ledger": "LEDGER-MARKER rows"})
    assert response.ok
    assert response.data == Report(**VALID)
    assert [a["kind"] for a in response.attempts] == ["initial", "repair"]
    assert [a.get("error_type") for a in response.attempts] == ["schema_error", None]
    assert types(response) == [
        *("llm_request", "llm_response", "validation_failed", "repair_attempt"),
        *("llm_request", "llm_response"),
    ]
    original, repair = provider.calls
    assert payload in user_text(original)
    assert "LEDGER-MARKER" in user_text(original)
    repair_text = all_text(repair)
    # the contract, the invalid output and the violation …
    assert "You repair a JSON artifact" in repair_text
    assert json.dumps(SCHEMA, ensure_ascii=False) in repair_text
    assert json.dumps(INVALID) in repair_text
    assert "- /count: 'three' is not of type 'integer'" in repair_text
    # … and not the payload, the context or the block's own system prompt
    assert "CONTEXT-MARKER" not in repair_text
    assert "northern region" not in repair_text
    assert "LEDGER-MARKER" not in repair_text
    assert SYSTEM not in repair_text
    assert repair.size_chars() < original.size_chars() / 3
    assert repair.response_schema == SCHEMA
    assert repair.node_id == "gen"


def test_pydantic_validators_are_part_of_the_contract(sleep: FakeSleep) -> None:
    backwards = {"start": 5, "end": 2}
    gen, provider = block([backwards, {"start": 2, "end": 5}], sleep, output_model=Meeting)
    response = gen.run("Book the review")
    assert response.ok
    assert response.data == Meeting(start=2, end=5)
    (failed,) = [e for e in response.events if e["type"] == "validation_failed"]
    assert failed["data"]["error_type"] == "schema_error"
    assert failed["data"]["violations"] == [
        {"pointer": "/", "message": "Value error, end must be after start"}
    ]
    assert "- /: Value error, end must be after start" in user_text(provider.calls[1])
    # the check adds no rule line: the rules are those of a plain schema contract
    plain, _ = block([], sleep, output_model=None, output_schema=Meeting.model_json_schema())
    assert provider.calls[0].messages == plain.render("Book the review")


def test_failures_escalate_to_the_next_class(sleep: FakeSleep) -> None:
    gen, provider = block(
        [INVALID, OTHER_INVALID, "not json", VALID],
        sleep,
        model_class="small",
        models={"small": "tiny-1", "medium": "mid-1", "large": "big-1"},
    )
    response = gen.run("Q3 sales")
    assert response.ok
    assert [c.model_class for c in provider.calls] == ["small", "small", "small", "medium"]
    assert [c.model for c in provider.calls] == ["tiny-1", "tiny-1", "tiny-1", "mid-1"]
    assert [a["kind"] for a in response.attempts] == ["initial", "repair", "repair", "escalation"]
    (escalated,) = [e for e in response.events if e["type"] == "escalated"]
    assert escalated["data"] == {"from": "small", "to": "medium", "error_type": "json_error"}
    # the escalated call is the original prompt plus what went wrong, not a repair packet
    assert "Q3 sales" in user_text(provider.calls[3])
    assert "A previous attempt at this artifact failed validation" in user_text(provider.calls[3])
    assert {k: v["calls"] for k, v in response.usage.by_class.items()} == {"small": 3, "medium": 1}
    assert response.usage.by_model["mid-1"]["calls"] == 1


def test_exhausted_ladder_returns_a_failed_response_with_every_attempt(sleep: FakeSleep) -> None:
    script = [OTHER_INVALID, INVALID] * 2
    gen, provider = block(script, sleep, model_class="small", escalation="medium", repair=2)
    response = gen.run("Q3 sales")
    assert not response.ok and response.status == "failed"
    assert response.data is None and response.value is None
    assert response.error_type == "schema_error"
    assert isinstance(response.error, LatticeRunError)
    failure = response.failure
    assert failure is not None
    assert (failure.category, failure.node_id, failure.op_id) == ("schema_error", "gen", "gen")
    assert failure.run_id == response.call_id
    assert failure.details["action"] == "fail"
    assert "attempts" not in failure.details
    assert [a["model_class"] for a in failure.attempts] == ["small", "small", "medium", "medium"]
    assert [a["kind"] for a in failure.attempts] == ["initial", "repair", "escalation", "repair"]
    assert failure.attempts == response.attempts
    assert all(a["violations"] for a in failure.attempts)
    assert len(provider.calls) == 4
    json.dumps(failure.to_json())  # a FailureReport is JSON
    with pytest.raises(LatticeRunError) as raised:
        response.unwrap()
    assert raised.value is response.error
    # the last attempt with the fewest violations, parsed, to go on with knowingly
    assert response.best_effort == INVALID
    assert failure.best_effort == INVALID
    assert failure.details["best_effort"] == {
        "attempt": 4,
        "error_type": "schema_error",
        "violations": [{"pointer": "/count", "message": "'three' is not of type 'integer'"}],
        "value": INVALID,
    }


def test_best_effort_is_the_attempt_with_the_fewest_violations(sleep: FakeSleep) -> None:
    worst = {"title": 1, "count": "three"}
    gen, _ = block([worst, INVALID, '{"title": "cut'], sleep, escalation=False)
    response = gen.run("Q3 sales")
    assert response.error_type == "json_error"
    assert response.best_effort == INVALID
    assert response.failure is not None
    assert response.failure.details["best_effort"]["attempt"] == 2
    nothing, _ = block(["no json"] * 3, sleep, escalation=False)
    failed = nothing.run("Q3 sales")
    assert failed.best_effort is None
    assert failed.failure is not None and "best_effort" not in failed.failure.details


def test_prose_around_a_valid_answer_is_salvaged_unless_strict(sleep: FakeSleep) -> None:
    reply = "Here is the header:\n```json\n" + json.dumps(VALID) + "\n```"
    gen, provider = block([reply], sleep)
    response = gen.run("Q3 sales")
    assert response.ok and response.data == Report(**VALID)
    assert len(provider.calls) == 1
    (salvaged,) = [e["data"] for e in response.events if e["type"] == "output_salvaged"]
    assert salvaged["stripped"] == ["fence", "prose"]
    assert response.attempts[0]["salvaged"] == {
        "stripped": ["fence", "prose"],
        "before": "Here is the header:\n```json",
        "after": "```",
        "chars": len("Here is the header:\n```json") + 3,
    }
    strict, strict_provider = block([reply, VALID], sleep, strict_output=True)
    response = strict.run("Q3 sales")
    assert response.ok
    assert [a.get("error_type") for a in response.attempts] == ["explanatory_text", None]
    assert "You repair a JSON artifact" in all_text(strict_provider.calls[1])


def test_max_attempts_total_bounds_the_calls_of_one_call(sleep: FakeSleep) -> None:
    gen, provider = block([INVALID] * 9, sleep, model_class="small", max_attempts_total=3)
    response = gen.run("Q3 sales")
    assert response.status == "failed"
    assert len(provider.calls) == 3
    assert response.failure is not None
    assert response.failure.details["max_attempts_total"] == 3
    single, _ = block([], sleep, model_class="small", max_attempts_total=1)
    assert single.get_policy_stack("schema_error") == ("fail",)
    assert single.get_policy_stack("rate_limit_error") == ("fail",)


def test_a_repair_packet_quotes_the_input_lines_the_missing_field_needs(sleep: FakeSleep) -> None:
    class Ticket(BaseModel):
        category: Literal["billing", "outage", "other"]
        summary: str

    log = "\n".join(f"line {i}: customer wrote again" for i in range(100))
    payload = log + "\nagent note: this is an outage of the checkout page\n" + log
    gen, provider = block(
        [{"summary": "checkout down"}, {"category": "outage", "summary": "checkout down"}],
        sleep,
        output_model=Ticket,
    )
    response = gen.run(payload)
    assert response.ok
    packet = user_text(provider.calls[1])
    assert "- /: 'category' is a required property" in packet
    assert "agent note: this is an outage of the checkout page" in packet
    assert "line 5: customer wrote again" not in packet
    small, small_provider = block(
        [{"summary": "checkout down"}, {"category": "outage", "summary": "checkout down"}],
        sleep,
        output_model=Ticket,
        repair_context_chars=0,
    )
    assert small.run(payload).ok
    assert "agent note" not in user_text(small_provider.calls[1])


def test_api_key_error_bubbles_after_one_call(sleep: FakeSleep) -> None:
    gen, provider = block([{"$error": "api_key_error", "message": "bad key"}, VALID], sleep)
    response = gen.run("Q3 sales")
    assert response.status == "failed"
    assert response.error_type == "api_key_error"
    assert response.error is not None and response.error.message == "bad key"
    assert len(provider.calls) == 1
    assert sleep.delays == []
    assert types(response) == ["llm_request"]
    assert response.failure is not None
    assert [a["error_type"] for a in response.failure.attempts] == ["api_key_error"]
    assert "API key" in response.failure.recovery_action
    assert gen.get_policy_stack("api_key_error") == ("fail",)


def test_rate_limit_is_retried_after_a_delay(sleep: FakeSleep) -> None:
    gen, provider = block([{"$error": "rate_limit_error", "retry_after": 7}, VALID], sleep)
    response = gen.run("Q3 sales")
    assert response.ok
    assert len(provider.calls) == 2
    assert provider.calls[0].messages == provider.calls[1].messages
    assert len(sleep.delays) == 1 and sleep.delays[0] >= 7
    assert [a["kind"] for a in response.attempts] == ["initial", "retry"]
    assert types(response) == ["llm_request", "retry", "llm_request", "llm_response"]


def test_missing_information_halts_the_call(sleep: FakeSleep) -> None:
    gen, provider = block([{"error": "missing_information", "details": "Which quarter?"}], sleep)
    response = gen.run("Write the header")
    assert response.status == "halted"
    assert response.error_type == "missing_information"
    assert response.failure is not None
    assert "Which quarter?" in response.failure.summary
    assert "payload or context" in response.failure.recovery_action
    assert len(provider.calls) == 1


def test_a_buggy_provider_is_an_internal_error_response(sleep: FakeSleep) -> None:
    class Broken:
        name = "broken"

        async def complete(self, request: LLMRequest) -> LLMResponse:
            raise KeyError("oops")

    gen = LLMPrimitive(name="gen", output_model=Report, provider=Broken())
    response = gen.run("Q3")
    assert response.status == "failed"
    assert response.error_type == "internal_error"
    assert response.error is not None and "KeyError" in response.error.message
    assert isinstance(response.error.__cause__, KeyError)


# -- payload and context ------------------------------------------------------------------


def test_context_blocks_reach_the_prompt(sleep: FakeSleep) -> None:
    gen, provider = block([VALID], sleep)
    response = gen.run(
        {"quarter": "Q3", "regions": ["north", "south"]},
        context={"customer": Report(title="ACME", count=2), "notes": "CALL BACK", "empty": ""},
    )
    assert response.ok
    user = user_text(provider.calls[0])
    assert user == (
        '{"quarter":"Q3","regions":["north","south"]}\n\n# Input\n'
        '## customer\n{"title":"ACME","count":2}\n\n## notes\nCALL BACK'
    )
    assert (
        gen.render(
            {"quarter": "Q3", "regions": ["north", "south"]},
            context={"customer": {"title": "ACME", "count": 2}, "notes": "CALL BACK"},
        )
        == provider.calls[0].messages
    )


def test_free_text_block_sends_the_plain_prompt(sleep: FakeSleep) -> None:
    gen, provider = block(["Sales grew 4% in Q3."], sleep, output_model=None, system_prompt=None)
    response = gen.run("Summarise Q3", context={"figures": {"growth": 0.04}})
    assert response.ok
    assert response.data == response.value == "Sales grew 4% in Q3."
    (request,) = provider.calls
    assert [m.role for m in request.messages] == ["user"]
    assert request.response_schema is None
    assert user_text(request) == 'Summarise Q3\n\n# Input\n## figures\n{"growth":0.04}'


def test_invariants_are_checked_and_repaired(sleep: FakeSleep) -> None:
    code = "Change it like this:\ndef f(x):\n    return x + 1\n"
    gen, provider = block(
        [code, "Add one to the input."], sleep, output_model=None, invariants=["no_code"]
    )
    response = gen.run("Describe the change")
    assert response.ok
    assert response.data == "Add one to the input."
    assert [a.get("error_type") for a in response.attempts] == ["code_in_output", None]
    # like a free-text workflow op: the first call is the plain prompt, the repair names the rule
    assert "No source code anywhere" not in all_text(provider.calls[0])
    assert "No source code anywhere" in all_text(provider.calls[1])
    assert "return x + 1" in user_text(provider.calls[1])


@pytest.mark.parametrize("payload", [object(), {"when": object()}], ids=["object", "nested"])
def test_a_payload_that_is_not_json_raises(payload: Any, sleep: FakeSleep) -> None:
    gen, provider = block([VALID], sleep)
    with pytest.raises(LatticeUserError, match="payload is not a JSON value"):
        gen.run(payload)
    assert provider.calls == []


# -- sync, async, concurrency ---------------------------------------------------------------


def test_sync_and_async_entry_points_agree(sleep: FakeSleep) -> None:
    sync_block, sync_provider = block([INVALID, VALID], sleep)
    async_block, async_provider = block([INVALID, VALID], sleep)
    sync = sync_block.run("Q3", context={"notes": "n"})
    asynchronous = asyncio.run(async_block.arun("Q3", context={"notes": "n"}))
    assert sync.data == asynchronous.data == Report(**VALID)
    assert sync_provider.calls == async_provider.calls
    assert types(sync) == types(asynchronous)
    assert sync.call_id != asynchronous.call_id


def test_one_block_serves_concurrent_calls_independently(sleep: FakeSleep) -> None:
    provider = MockProvider(default=VALID, latency=0.01)
    gen = LLMPrimitive(name="gen", output_model=Report, provider=provider)

    async def both() -> list[Response[Report]]:
        return list(await asyncio.gather(gen.arun("first"), gen.arun("second")))

    first, second = asyncio.run(both())
    assert first.ok and second.ok
    assert first.usage.calls == second.usage.calls == 1
    assert [e["seq"] for e in first.events] == [e["seq"] for e in second.events] == [1, 2]
    assert first.call_id != second.call_id
    assert {user_text(c) for c in provider.calls} == {"first", "second"}


def test_run_inside_an_event_loop_says_to_use_arun(sleep: FakeSleep) -> None:
    gen, provider = block([VALID], sleep)

    async def inside() -> None:
        gen.run("Q3")

    with pytest.raises(LatticeUserError, match="arun"):
        asyncio.run(inside())
    assert provider.calls == []


# -- parity with a one-node workflow --------------------------------------------------------

TICKET = {"ticket": "The March invoice charged us twice."}
ASK = "Summarise the ticket as a report header"


def _strip_latency(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Attempts or event data without the measured latency (the only thing that differs)."""
    return [{k: v for k, v in item.items() if k != "latency_ms"} for item in items]


def _through_workflow(
    items: list[Any], sleep: FakeSleep, tmp_path: Path, **data: Any
) -> tuple[RunResult, MockProvider, list[dict[str, Any]]]:
    doc = chain(
        node(
            "gen",
            "subAgent",
            agentDefinition=SYSTEM,
            prompt=ASK,
            outputSchema=SCHEMA,
            model="haiku",
            **data,
        )
    )
    doc["nodes"][0]["data"]["inputs"] = {
        "type": "object",
        "properties": {"ticket": {"type": "string"}},
    }
    provider = MockProvider({"gen": items})
    runner = Runner(
        lower(doc),
        provider=provider,
        store=RunStore(tmp_path),
        settings=RuntimeSettings(sleep=sleep, retry=same_jitter()),
    )
    result = runner.run(TICKET)
    if result.failure is not None:
        attempts = result.failure.attempts
    else:
        assert result.run_dir is not None
        attempts = op_record(result.run_dir, "gen")["attempts"]
    return result, provider, attempts


SCENARIOS = {
    "valid": ([VALID], {}, {}),
    "salvaged": (["Sure! " + json.dumps(VALID) + "\nAnything else?"], {}, {}),
    "repaired": (["Sure! " + json.dumps(INVALID), INVALID, VALID], {}, {}),
    "strict": (
        ["Sure! " + json.dumps(VALID), VALID],
        {"strictOutput": True},
        {"strict_output": True},
    ),
    "budget": (
        [INVALID] * 5,
        {"maxAttemptsTotal": 4, "repairContextChars": 0},
        {"max_attempts_total": 4, "repair_context_chars": 0},
    ),
    "escalated": ([INVALID, "not json", INVALID, VALID], {}, {}),
    "ladder-exhausted": (
        [INVALID] * 4,
        {"repair": {"maxAttempts": 2}, "escalate": {"maxClass": "medium"}},
        {"repair": 2, "escalation": "medium"},
    ),
    "api-key": ([{"$error": "api_key_error", "message": "bad key"}], {}, {}),
    "rate-limit": ([{"$error": "rate_limit_error", "retry_after": 1}, VALID], {}, {}),
    "policy-override": (
        [INVALID, VALID],
        {"policies": {"schema_error": ["escalate", "fail"]}},
        {"policies": {"schema_error": ["escalate", "fail"]}},
    ),
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_workflow_and_primitive_make_the_same_calls(
    scenario: str, tmp_path: Path, sleep: FakeSleep
) -> None:
    items, node_data, block_args = SCENARIOS[scenario]
    result, wf_provider, wf_attempts = _through_workflow(items, sleep, tmp_path, **node_data)
    gen, provider = block(list(items), sleep, model_class="small", **block_args)
    response = gen.run(ASK, context={"inputs": TICKET})

    # the same requests, byte for byte (so the same prompt hashes)
    assert provider.calls == wf_provider.calls
    assert len(provider.calls) >= 1
    # the same attempts (kind, class, messages, completion, errors, violations, tokens)
    assert _strip_latency(json.loads(json.dumps(response.attempts))) == _strip_latency(wf_attempts)
    # the same LLM events, in the same order, with the same data
    assert types(response) == types(result)
    llm = [e for e in result.events if e["type"] in LLM_EVENTS]
    assert [e["node_id"] for e in llm] == ["gen"] * len(llm)
    assert _strip_latency([e["data"] for e in response.events]) == _strip_latency(
        [e["data"] for e in llm]
    )
    # the same outcome
    if result.status == "completed":
        assert response.ok
        assert response.value == result.vars["gen"]["result"]
        assert response.data == Report(**result.vars["gen"]["result"])
    else:
        assert result.failure is not None and response.failure is not None
        assert response.status == result.status
        assert response.error_type == result.failure.category
        assert response.failure.summary == result.failure.summary
    assert response.usage.to_json() == result.usage.to_json()


def test_parity_scenarios_cover_repair_escalation_and_bubbling(
    tmp_path: Path, sleep: FakeSleep
) -> None:
    """The parity table above exercises every LLM event type and both outcomes."""
    seen: set[str] = set()
    outcomes: set[str] = set()
    for items, _, block_args in SCENARIOS.values():
        gen, _ = block(list(items), sleep, model_class="small", **block_args)
        response = gen.run(ASK, context={"inputs": TICKET})
        seen.update(types(response))
        outcomes.add(response.status)
    assert seen == LLM_EVENTS
    assert outcomes == {"completed", "failed"}


# -- recovery policies ----------------------------------------------------------------------


def test_default_policy_stacks(sleep: FakeSleep) -> None:
    gen, _ = block([], sleep, model_class="small")
    assert gen.contract.ladder == ("small", "medium", "large")
    assert gen.get_policy_stack("schema_error") == ("repair", "escalate", "fail")
    assert gen.get_policy_stack("json_error") == ("repair", "escalate", "fail")
    assert gen.get_policy_stack("rate_limit_error") == ("retry", "fail")
    assert gen.get_policy_stack("api_key_error") == ("fail",)
    assert gen.get_policy_stack("context_length_error") == ("escalate", "fail")
    assert gen.get_policy_stack("missing_information") == ("halt",)
    assert gen.get_policy_stack("something_new") == ("fail",)


def test_policy_stacks_leave_out_what_cannot_apply(sleep: FakeSleep) -> None:
    fixed, _ = block([], sleep, model_class="small", escalation=False)
    assert fixed.contract.ladder == ("small",)
    assert fixed.get_policy_stack("schema_error") == ("repair", "fail")
    assert fixed.get_policy_stack("context_length_error") == ("fail",)
    once, _ = block([], sleep, model_class="medium", repair=1)
    assert once.contract.ladder == ("medium", "large")
    assert once.get_policy_stack("schema_error") == ("escalate", "fail")
    no_retries = LLMPrimitive(
        name="gen",
        provider=MockProvider({"gen": []}),
        settings=RuntimeSettings(retry=RetrySettings(max_retries=0)),
    )
    assert no_retries.get_policy_stack("rate_limit_error") == ("fail",)
    # repair applies to output errors only; an override cannot make it fix a rate limit
    odd, _ = block([], sleep, policies={"rate_limit_error": ["repair", "retry", "fail"]})
    assert odd.get_policy_stack("rate_limit_error") == ("retry", "fail")


def test_policy_overrides_change_the_stack_and_the_behaviour(sleep: FakeSleep) -> None:
    strict, provider = block([INVALID, VALID], sleep, policies={"schema_error": ["fail"]})
    assert strict.get_policy_stack("schema_error") == ("fail",)
    response = strict.run("Q3")
    assert response.error_type == "schema_error"
    assert len(provider.calls) == 1
    patient, provider = block(
        [{"$error": "api_key_error"}, VALID], sleep, policies={"api_key_error": ["retry", "fail"]}
    )
    assert patient.get_policy_stack("api_key_error") == ("retry", "fail")
    assert patient.run("Q3").ok
    assert len(provider.calls) == 2


def test_settings_policies_are_the_base_the_block_overrides(sleep: FakeSleep) -> None:
    settings = RuntimeSettings(policies={"schema_error": ("repair", "fail")})
    gen = LLMPrimitive(
        name="gen", output_model=Report, provider=MockProvider({"gen": []}), settings=settings
    )
    assert gen.get_policy_stack("schema_error") == ("repair", "fail")
    assert gen.get_policy_stack("api_key_error") == ("fail",)


# -- construction -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": ""}, "name must be a non-empty string"),
        ({"output_schema": SCHEMA}, "not both"),
        ({"output_model": dict}, "pydantic BaseModel subclass"),
        ({"output_model": None, "output_schema": {"type": "objekt"}}, "not a valid JSON Schema"),
        ({"model_class": "smal"}, "did you mean 'small'"),
        ({"invariants": ["no_cod"]}, "unknown invariant 'no_cod' (did you mean 'no_code'?)"),
        ({"invariants": "no_code"}, "list of names"),
        ({"invariants": [{"max": 3}]}, "an invariant is a name"),
        ({"policies": {"schema_error": ["repair", "bubble"]}}, "'bubble' is called 'fail'"),
        ({"policies": {"schema_error": "fail"}}, "non-empty list of actions"),
        ({"policies": {"schema_error": []}}, "non-empty list of actions"),
        ({"repair": 0}, "repair"),
        ({"repair": True}, "repair"),
        ({"escalation": "huge"}, "escalation must be"),
        ({"temperature": -1}, "temperature"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_attempts_total": 0}, "max_attempts_total must be an integer >= 1"),
        ({"max_attempts_total": 2.0}, "max_attempts_total must be an integer >= 1"),
        ({"strict_output": "yes"}, "strict_output must be True or False"),
        ({"repair_context_chars": -1}, "repair_context_chars must be an integer >= 0"),
        ({"provider": object()}, "provider must be"),
        ({"provider": MockProvider({"other": []})}, "no responses (and no default) for 'gen'"),
    ],
)
def test_construction_mistakes_raise_user_errors(kwargs: dict[str, Any], message: str) -> None:
    fields: dict[str, Any] = {
        "name": "gen",
        "output_model": Report,
        "provider": MockProvider({"gen": []}),
    }
    fields.update(kwargs)
    with pytest.raises(LatticeUserError) as raised:
        LLMPrimitive(**fields)
    assert message in str(raised.value)


def test_constructor_is_keyword_only() -> None:
    with pytest.raises(TypeError):
        LLMPrimitive("gen")  # type: ignore[misc]


def test_a_block_is_immutable(sleep: FakeSleep) -> None:
    gen, _ = block([], sleep)
    with pytest.raises(AttributeError, match="immutable"):
        gen.name = "other"  # type: ignore[misc]
    with pytest.raises(AttributeError, match="immutable"):
        del gen.provider
    assert gen.name == "gen"
    assert "gen" in repr(gen) and "Report" in repr(gen)


def test_temperature_and_model_reach_the_request(sleep: FakeSleep) -> None:
    gen, provider = block([VALID], sleep, temperature=0.7, top_p=0.9, max_tokens=300, model="gpt-x")
    assert gen.run("Q3").ok
    (request,) = provider.calls
    assert (request.temperature, request.top_p, request.max_tokens) == (0.7, 0.9, 300)
    assert request.model == "gpt-x"


@pytest.fixture
def clean_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cwd without lattice.toml and no LATTICE_* overrides."""
    monkeypatch.chdir(tmp_path)
    for name in ("LATTICE_CONFIG", "LATTICE_PROVIDER"):
        monkeypatch.delenv(name, raising=False)
    for cls in ("small", "medium", "large", "default"):
        monkeypatch.delenv(f"LATTICE_MODEL_{cls.upper()}", raising=False)
    return tmp_path


def test_without_a_provider_the_configured_one_is_used(clean_config: Path) -> None:
    gen = LLMPrimitive(name="gen", output_model=Report)
    assert isinstance(gen.provider, DisabledProvider)
    response = gen.run("Q3")
    assert response.status == "failed"
    assert response.error_type == "provider_disabled"
    assert response.failure is not None and "provider=" in response.failure.recovery_action


def test_config_supplies_models_attempts_and_temperature(clean_config: Path) -> None:
    (clean_config / "lattice.toml").write_text(
        '[llm]\ntemperature = 0.3\n[llm.models]\nsmall = "tiny-x"\n[runtime]\nmax_attempts = 2\n',
        encoding="utf-8",
    )
    provider = MockProvider({"gen": [VALID]})
    gen = LLMPrimitive(
        name="gen",
        output_model=Report,
        model_class="small",
        provider=provider,
        config="lattice.toml",
    )
    assert gen.contract.max_attempts == 2
    assert gen.run("Q3").ok
    (request,) = provider.calls
    assert (request.model, request.temperature) == ("tiny-x", 0.3)


def test_a_bad_config_is_a_user_error(clean_config: Path) -> None:
    (clean_config / "lattice.toml").write_text("[llm]\nprovider = 3\n", encoding="utf-8")
    with pytest.raises(LatticeUserError):
        LLMPrimitive(name="gen", output_model=Report)

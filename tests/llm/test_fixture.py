"""FixtureProvider: replay by prompt hash, record from a live provider; make_provider choices."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import respx

from lattice.config import LatticeConfig
from lattice.errors import LatticeRunError, LatticeUserError
from lattice.llm import DisabledProvider, MockProvider
from lattice.llm.base import LLMProvider, LLMRequest, LLMResponse, Message
from lattice.llm.fixture import FixtureProvider, read_fixtures
from lattice.llm.openai_provider import OpenAIProvider
from lattice.llm.wrappers import LimitedProvider, RouterProvider
from lattice.service.providers import make_provider
from tests import respx_httpx2


def req(text: str = "Classify: refund please", **overrides: Any) -> LLMRequest:
    fields: dict[str, Any] = {
        "messages": (Message("system", "contract"), Message("user", text)),
        "model_class": "small",
        "node_id": "classify",
        "op_id": "classify",
    }
    fields.update(overrides)
    return LLMRequest(**fields)


def complete(provider: LLMProvider, request: LLMRequest) -> LLMResponse:
    return asyncio.run(provider.complete(request))


def write_lines(path: Path, *entries: Any) -> Path:
    path.write_text(
        "".join((e if isinstance(e, str) else json.dumps(e)) + "\n" for e in entries),
        encoding="utf-8",
    )
    return path


# -- replay ---------------------------------------------------------------------------------


def test_replay_by_prompt_hash(tmp_path: Path) -> None:
    request = req()
    fixtures = write_lines(
        tmp_path / "f.jsonl",
        {
            "prompt_hash": request.prompt_hash(),
            "completion": '{"label": "billing"}',
            "meta": {
                "model": "gpt-x",
                "input_tokens": 12,
                "output_tokens": 4,
                "finish_reason": "length",
            },
            "prompt_preview": "Classify: refund please",
        },
    )
    response = complete(FixtureProvider(fixtures), request)
    assert response.text == '{"label": "billing"}'
    assert (response.usage.input_tokens, response.usage.output_tokens) == (12, 4)
    assert response.model == "gpt-x"
    assert response.finish_reason == "length"


def test_replay_is_independent_of_the_concrete_model_and_newlines(tmp_path: Path) -> None:
    fixtures = write_lines(
        tmp_path / "f.jsonl", {"prompt_hash": req("a\nb").prompt_hash(), "completion": "ok"}
    )
    provider = FixtureProvider(fixtures)
    assert complete(provider, req("a\r\nb", model="anthropic:claude-x")).text == "ok"
    response = complete(provider, req("a\rb"))
    assert response.model == "fixture"  # no meta: defaults
    assert (response.usage.input_tokens, response.usage.output_tokens) == (0, 0)


def test_json_completion_is_serialised(tmp_path: Path) -> None:
    fixtures = write_lines(
        tmp_path / "f.jsonl",
        {"prompt_hash": req().prompt_hash(), "completion": {"label": "café"}},
    )
    assert json.loads(complete(FixtureProvider(fixtures), req()).text) == {"label": "café"}


def test_later_line_wins_and_blank_lines_are_skipped(tmp_path: Path) -> None:
    h = req().prompt_hash()
    fixtures = write_lines(
        tmp_path / "f.jsonl",
        {"prompt_hash": h, "completion": "old"},
        "",
        "   ",
        {"prompt_hash": h, "completion": "new"},
    )
    assert complete(FixtureProvider(fixtures), req()).text == "new"


def test_missing_prompt_is_fixture_missing_with_hash_and_preview(tmp_path: Path) -> None:
    fixtures = write_lines(tmp_path / "f.jsonl", {"prompt_hash": "0" * 64, "completion": "x"})
    request = req("Classify:   a   very\nspecific ticket")
    with pytest.raises(LatticeRunError) as info:
        complete(FixtureProvider(fixtures), request)
    error = info.value
    assert error.error_type == "fixture_missing"
    assert error.node_id == "classify"
    assert request.prompt_hash() in error.message
    assert "Classify: a very specific ticket" in error.message  # the one-line preview
    assert "--record" in error.message
    assert error.details == {
        "prompt_hash": request.prompt_hash(),
        "prompt_preview": "Classify: a very specific ticket",
    }


def test_missing_file_without_record_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(LatticeUserError) as info:
        FixtureProvider(tmp_path / "nope.jsonl")
    assert "nope.jsonl" in info.value.message
    assert "--record" in info.value.message


@pytest.mark.parametrize(
    "bad",
    ["not json", '["a list"]', '{"completion": "no hash"}', '{"prompt_hash": "abc"}'],
)
def test_malformed_line_names_the_line(tmp_path: Path, bad: str) -> None:
    fixtures = write_lines(tmp_path / "f.jsonl", {"prompt_hash": "a", "completion": "x"}, bad)
    with pytest.raises(LatticeUserError) as info:
        read_fixtures(fixtures)
    assert "f.jsonl:2" in info.value.message


# -- record ---------------------------------------------------------------------------------


def test_record_appends_one_line_per_new_prompt(tmp_path: Path) -> None:
    live = MockProvider({"classify": ['{"label": "billing"}', '{"label": "bug"}']})
    fixtures = tmp_path / "deep" / "dir" / "f.jsonl"
    recorder = FixtureProvider(fixtures, record_with=live)
    first = complete(recorder, req("one"))
    assert first.text == '{"label": "billing"}'
    assert complete(recorder, req("one")).text == '{"label": "billing"}'  # from the table
    assert complete(recorder, req("two")).text == '{"label": "bug"}'
    assert len(live.calls) == 2

    lines = [json.loads(x) for x in fixtures.read_text(encoding="utf-8").splitlines()]
    assert [line["prompt_hash"] for line in lines] == [
        req("one").prompt_hash(),
        req("two").prompt_hash(),
    ]
    assert lines[0] == {
        "prompt_hash": req("one").prompt_hash(),
        "completion": '{"label": "billing"}',
        "meta": {
            "model": "mock-model",
            "model_class": "small",
            "node_id": "classify",
            "input_tokens": first.usage.input_tokens,
            "output_tokens": first.usage.output_tokens,
            "finish_reason": "stop",
        },
        "prompt_preview": "one",
    }
    # what was recorded replays offline, tokens included
    replay = FixtureProvider(fixtures)
    again = complete(replay, req("one"))
    assert again.text == first.text
    assert again.usage == first.usage


def test_record_keeps_existing_lines_and_skips_known_prompts(tmp_path: Path) -> None:
    fixtures = write_lines(
        tmp_path / "f.jsonl", {"prompt_hash": req("known").prompt_hash(), "completion": "k"}
    )
    live = MockProvider(default="fresh")
    recorder = FixtureProvider(fixtures, record_with=live)
    assert complete(recorder, req("known")).text == "k"
    assert complete(recorder, req("new")).text == "fresh"
    assert len(live.calls) == 1
    assert len(fixtures.read_text(encoding="utf-8").splitlines()) == 2


def test_a_failed_live_call_records_nothing(tmp_path: Path) -> None:
    live = MockProvider({"classify": [{"$error": "rate_limit_error", "retry_after": 3}]})
    fixtures = tmp_path / "f.jsonl"
    with pytest.raises(LatticeRunError) as info:
        complete(FixtureProvider(fixtures, record_with=live), req())
    assert info.value.error_type == "rate_limit_error"
    assert not fixtures.exists() or fixtures.read_text(encoding="utf-8") == ""


def test_record_through_the_openai_sdk(tmp_path: Path) -> None:
    reply = {
        "id": "c",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-rec",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "{}"}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
    }
    fixtures = tmp_path / "f.jsonl"
    with respx.mock(base_url="https://api.openai.com/v1", using=respx_httpx2.USING) as router:
        route = router.post("/chat/completions").respond(200, json=reply)
        recorder = FixtureProvider(fixtures, record_with=OpenAIProvider(api_key="sk-test"))
        complete(recorder, req())
        complete(recorder, req())
        assert route.call_count == 1
    [line] = [json.loads(x) for x in fixtures.read_text(encoding="utf-8").splitlines()]
    assert line["completion"] == "{}"
    assert line["meta"]["model"] == "gpt-rec"
    assert (line["meta"]["input_tokens"], line["meta"]["output_tokens"]) == (5, 1)
    assert "sk-test" not in fixtures.read_text(encoding="utf-8")


# -- make_provider ----------------------------------------------------------------------------


def test_make_provider_choices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fixtures = write_lines(tmp_path / "f.jsonl", {"prompt_hash": "a", "completion": "x"})
    mock = tmp_path / "m.json"
    mock.write_text('{"responses": {}}', encoding="utf-8")

    assert isinstance(make_provider(None), DisabledProvider)
    assert isinstance(make_provider("disabled"), DisabledProvider)
    assert isinstance(make_provider(None, mock=mock), MockProvider)
    assert isinstance(make_provider("mock", mock=mock), MockProvider)
    replay = make_provider(None, fixtures=fixtures)
    assert isinstance(replay, FixtureProvider)
    assert replay.record_with is None
    assert isinstance(make_provider("fixture", fixtures=fixtures), FixtureProvider)

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    live = make_provider("openai")
    assert isinstance(live, RouterProvider)
    assert isinstance(live.default, LimitedProvider)
    assert isinstance(live.default.inner, OpenAIProvider)
    recorder = make_provider("openai", fixtures=tmp_path / "new.jsonl", record=True)
    assert isinstance(recorder, FixtureProvider)
    assert isinstance(recorder.record_with, RouterProvider)
    # the configured default provider is used when none is named
    configured = LatticeConfig.model_validate({"llm": {"provider": "openai"}})
    assert isinstance(make_provider(None, config=configured), RouterProvider)
    assert isinstance(
        make_provider(None, fixtures=tmp_path / "n2.jsonl", record=True, config=configured),
        FixtureProvider,
    )


@pytest.mark.parametrize(
    ("name", "kwargs", "message"),
    [
        ("nope", {}, "unknown provider"),
        ("mock", {}, "--mock FILE"),
        ("openai", {"mock": "m.json"}, "--mock is used alone"),
        (None, {"mock": "m.json", "fixtures": "f.jsonl"}, "--mock is used alone"),
        ("openai", {"fixtures": "f.jsonl"}, "--record"),
        ("disabled", {"fixtures": "f.jsonl", "record": True}, "live provider"),
        (None, {"fixtures": "f.jsonl", "record": True}, "live provider"),
        ("openai", {"record": True}, "--fixtures"),
        ("fixture", {}, "--fixtures FILE"),
    ],
)
def test_make_provider_rejects_bad_combinations(
    name: str | None, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(LatticeUserError) as info:
        make_provider(name, **kwargs)
    assert message in info.value.message


def test_disabled_provider_says_how_to_configure() -> None:
    with pytest.raises(LatticeRunError) as info:
        complete(DisabledProvider(), req())
    error = info.value
    assert error.error_type == "provider_disabled"
    assert error.node_id == "classify"
    for hint in ("--provider openai|anthropic", "--mock FILE", "--fixtures FILE", "OPENAI_API_KEY"):
        assert hint in error.message


# -- wrappers ---------------------------------------------------------------------------------


class _Counting:
    """A provider that records how many calls are in flight at once, and which models it saw."""

    name = "counting"

    def __init__(self) -> None:
        self.in_flight = 0
        self.peak = 0
        self.models: list[str | None] = []

    async def complete(self, request: LLMRequest) -> LLMResponse:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        self.models.append(request.model)
        await asyncio.sleep(0.01)
        self.in_flight -= 1
        return LLMResponse(text="ok", model=request.model or "m")


async def _batch(provider: LLMProvider, count: int) -> list[LLMResponse]:
    return await asyncio.gather(*(provider.complete(req(str(i))) for i in range(count)))


def test_limited_provider_caps_calls_in_flight() -> None:
    inner = _Counting()
    limited = LimitedProvider(inner, max_concurrency=2)
    assert len(asyncio.run(_batch(limited, 6))) == 6
    assert inner.peak == 2
    assert limited.name == "counting"


def test_limited_provider_serves_two_event_loops() -> None:
    limited = LimitedProvider(_Counting(), max_concurrency=1)
    assert len(asyncio.run(_batch(limited, 3))) == 3
    assert len(asyncio.run(_batch(limited, 3))) == 3


def test_router_sends_prefixed_models_to_their_provider() -> None:
    default, other = _Counting(), _Counting()
    built: list[str] = []

    def factory(name: str) -> LLMProvider:
        built.append(name)
        return other

    router = RouterProvider(default, factory, ("openai", "anthropic"))
    for model in ("anthropic:claude-x", "anthropic:claude-y", "gpt-4o", None, "ollama:llama3"):
        asyncio.run(router.complete(req(model=model)))
    assert built == ["anthropic"]  # built once, on first use
    assert other.models == ["claude-x", "claude-y"]
    assert default.models == ["gpt-4o", None, "ollama:llama3"]
    assert router.name == "counting"


def test_router_reaches_the_mock_behind_it() -> None:
    mock = MockProvider({"classify": ["x"]})
    router = RouterProvider(mock, lambda name: mock, ("openai",))
    assert router.covers("classify")  # type: ignore[attr-defined]
    asyncio.run(router.complete(req()))
    assert router.checkpoint()["cursor"] == {"classify": 1}  # type: ignore[attr-defined]


def test_recording_a_mock_files_its_answers_under_the_real_prompt_hashes(tmp_path: Path) -> None:
    script = tmp_path / "m.json"
    script.write_text(json.dumps({"responses": {"classify": ["billing"]}}), encoding="utf-8")
    fixtures = tmp_path / "f.jsonl"
    recorder = make_provider(None, mock=script, fixtures=fixtures, record=True)
    assert isinstance(recorder, FixtureProvider)
    assert isinstance(recorder.record_with, MockProvider)
    assert complete(recorder, req()).text == "billing"
    [line] = read_fixtures(fixtures).values()
    assert line["prompt_hash"] == req().prompt_hash()
    assert line["meta"]["model"] == "mock-model"
    assert complete(FixtureProvider(fixtures), req()).text == "billing"  # replays offline
    assert recorder.checkpoint()["cursor"] == {"classify": 1}  # a resumed recording goes on
    recorder.restore({"classify": 0})
    assert recorder.record_with.cursor == {"classify": 0}  # type: ignore[union-attr]
    assert FixtureProvider(fixtures).checkpoint() is None
    with pytest.raises(LatticeUserError, match="--record needs --fixtures"):
        make_provider(None, mock=script, record=True)
    with pytest.raises(LatticeUserError, match="--mock is used alone"):
        make_provider("openai", mock=script, fixtures=fixtures, record=True)

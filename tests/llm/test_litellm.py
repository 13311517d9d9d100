"""The LiteLLM adapter: at the HTTP level against a local OpenAI-compatible server through
LiteLLM's ``openai/`` route (plain, structured, streamed, cut, failing), and with LiteLLM's
own ``mock_response``.

LiteLLM is not part of the ``test`` extra (its dependencies are many and large): these
tests skip without it (``test_litellm_wiring.py`` checks what works without it), except
where ``LATTICE_LITELLM_TESTS=required``, as in the virtualenv of its own that ``.ci/run``
makes for them, where a missing LiteLLM fails.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from lattice.config import LatticeConfig
from lattice.errors import LatticeRunError
from lattice.llm.base import LLMRequest, LLMResponse, Message, ToolCall, ToolDef
from lattice.llm.fake_server import FakeLLMServer, ToolTurn, serve
from lattice.llm.litellm_provider import LiteLLMProvider
from lattice.runtime import Runner, RunStore
from lattice.runtime.settings import RuntimeSettings
from lattice.service.providers import make_provider
from tests.builders import conn, lower_ok, node, workflow
from tests.two_step import two_step_answer, two_step_document

pytestmark = [
    # LiteLLM's own code warns under pydantic 2.14 (not ours to fix, and not errors here)
    pytest.mark.filterwarnings(
        "ignore:Items? .* (is|are) using the `ReadOnly` qualifier:UserWarning"
    ),
    pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince211"),
]

SKIP_REASON = (
    "litellm is not installed: pip install -e '.[litellm]' (.ci/run runs these tests in a "
    "virtualenv of its own; see docs/runtime.md#litellm)"
)


os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no download at import
REQUIRED = os.environ.get("LATTICE_LITELLM_TESTS") == "required"  # .ci/run's LiteLLM venv
litellm = (
    importlib.import_module("litellm")
    if REQUIRED
    else pytest.importorskip("litellm", reason=SKIP_REASON)
)


SCHEMA = {
    "type": "object",
    "properties": {"label": {"type": "string", "enum": ["billing", "bug"]}},
    "required": ["label"],
    "additionalProperties": False,
}
ANSWER = json.dumps({"label": "bug"})


def _answer(body: dict[str, Any]) -> str:
    return ANSWER


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with serve(_answer) as srv:
        yield srv


def _provider(server: FakeLLMServer, **kwargs: Any) -> LiteLLMProvider:
    return LiteLLMProvider(api_base=server.base_url + "/v1", api_key="sk-test", **kwargs)


def _request(**overrides: Any) -> LLMRequest:
    fields: dict[str, Any] = {
        "messages": (Message("system", "You emit one artifact."), Message("user", "Classify: x")),
        "model": "openai/test-model",
        "temperature": 0.2,
        "max_tokens": 300,
        "response_schema": SCHEMA,
        "node_id": "classify",
    }
    fields.update(overrides)
    return LLMRequest(**fields)


def _complete(provider: LiteLLMProvider, request: LLMRequest) -> LLMResponse:
    return asyncio.run(provider.complete(request))


def _failure(provider: LiteLLMProvider, request: LLMRequest) -> LatticeRunError:
    with pytest.raises(LatticeRunError) as info:
        _complete(provider, request)
    return info.value


# -- at the HTTP level, through the openai/ route -----------------------------------------


def test_a_structured_request_and_its_answer(server: FakeLLMServer) -> None:
    response = _complete(_provider(server), _request())
    (received,) = server.received
    assert received.path == "/v1/chat/completions"
    assert received.headers["authorization"] == "Bearer sk-test"
    body = received.body
    assert body["model"] == "test-model"  # LiteLLM takes its route prefix off
    assert body["messages"][0] == {"role": "system", "content": "You emit one artifact."}
    assert body["temperature"] == 0.2 and body["max_tokens"] == 300
    fmt = body["response_format"]
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"]["schema"] == SCHEMA and fmt["json_schema"]["strict"] is True
    reply = server.replies[-1]
    assert response.text == ANSWER
    assert response.usage.input_tokens == reply["usage"]["prompt_tokens"]
    assert response.usage.output_tokens == reply["usage"]["completion_tokens"]
    assert response.finish_reason == "stop"
    assert response.model.endswith("test-model")


def test_the_default_model_and_a_missing_one(
    server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    _complete(_provider(server, default_model="openai/from-argument"), _request(model=None))
    assert server.received[-1].body["model"] == "from-argument"
    monkeypatch.setenv("LATTICE_LITELLM_MODEL", "openai/from-env")
    _complete(_provider(server), _request(model=None))
    assert server.received[-1].body["model"] == "from-env"
    monkeypatch.delenv("LATTICE_LITELLM_MODEL")
    error = _failure(_provider(server), _request(model=None))
    assert error.error_type == "invalid_request"
    assert "LATTICE_LITELLM_MODEL" in error.message


def test_a_server_without_structured_output_gets_the_plain_prompt(server: FakeLLMServer) -> None:
    rejection = {
        "error": {
            "message": "response_format 'json_schema' is not supported by this model",
            "type": "invalid_request_error",
            "param": "response_format",
            "code": None,
        }
    }
    server.failures = [(400, rejection, {})]
    provider = _provider(server)
    request = _request(prompt_schema="THE-SCHEMA", messages=(Message("user", "Use THE-SCHEMA"),))
    assert _complete(provider, request).text == ANSWER
    first, second = (r.body for r in server.received)
    assert "response_format" in first and "response_format" not in second
    assert second["messages"][0]["content"] == "Use THE-SCHEMA"  # the schema in the prompt
    _complete(provider, request)  # remembered for the model: one call
    assert len(server.received) == 3
    assert "response_format" not in server.received[-1].body


def _error(message: str, code: str | None = None, kind: str = "invalid_request_error") -> Any:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


@pytest.mark.parametrize(
    ("status", "payload", "headers", "error_type"),
    [
        (
            429,
            _error("Rate limit reached", "rate_limit_exceeded", "requests"),
            {"retry-after": "7"},
            "rate_limit_error",
        ),
        (401, _error("Incorrect API key provided", "invalid_api_key"), {}, "api_key_error"),
        (
            400,
            _error(
                "This model's maximum context length is 8192 tokens. However, your messages "
                "resulted in 9000 tokens.",
                "context_length_exceeded",
            ),
            {},
            "context_length_error",
        ),
        (400, _error("Invalid value for 'messages'"), {}, "invalid_request"),
        (500, _error("The server had an error", None, "server_error"), {}, "provider_error"),
    ],
    ids=["429", "401", "context-length", "400", "500"],
)
def test_errors_are_mapped_with_one_http_call(
    server: FakeLLMServer,
    status: int,
    payload: Any,
    headers: dict[str, str],
    error_type: str,
) -> None:
    server.fail_with = (status, payload, headers)
    error = _failure(_provider(server), _request(response_schema=None))
    assert error.error_type == error_type, error.message
    assert len(server.received) == 1  # LiteLLM's retries are off: recovery is Lattice's
    assert error.message.startswith("LiteLLM (openai/test-model)")
    assert error.details["sdk_error"]
    if status == 429:
        assert error.details.get("retry_after") == 7.0


def test_missing_credentials_are_a_key_error(server: FakeLLMServer) -> None:
    provider = LiteLLMProvider(api_base=server.base_url + "/v1")  # and no OPENAI_API_KEY
    error = _failure(provider, _request())
    assert error.error_type == "api_key_error", error.message
    assert "credentials" in error.message
    assert server.received == []


def test_a_slow_server_is_a_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    with serve(_answer, latency=1.0) as slow:
        error = _failure(_provider(slow, timeout=0.2), _request())
    assert error.error_type == "timeout_error"


def test_an_unreachable_server_is_a_provider_error() -> None:
    provider = LiteLLMProvider(api_base="http://127.0.0.1:9/v1", api_key="sk-test")
    error = _failure(provider, _request())
    assert error.error_type in ("provider_error", "timeout_error")


# -- streaming -------------------------------------------------------------------------------


def test_a_streamed_answer(server: FakeLLMServer) -> None:
    pieces: list[str] = []
    response = _complete(_provider(server), _request(on_delta=pieces.append))
    body = server.received[-1].body
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert "response_format" in body
    assert len(pieces) > 1 and "".join(pieces) == ANSWER == response.text
    assert response.finish_reason == "stop"
    assert response.usage.output_tokens == server.replies[-1]["usage"]["completion_tokens"]


@pytest.mark.parametrize("style", ["chunked", "eof"])
def test_a_cut_stream_is_a_retryable_error(server: FakeLLMServer, style: str) -> None:
    server.cuts = [(1, style)]
    pieces: list[str] = []
    error = _failure(_provider(server), _request(on_delta=pieces.append))
    assert error.error_type == "provider_error", error.message
    assert "".join(pieces) != ANSWER  # what came was passed on, and never taken for the answer


# -- LiteLLM's own mock_response -------------------------------------------------------------


def greeter() -> dict[str, Any]:
    return workflow(
        [
            node("start", "start"),
            node(
                "greet",
                "prompt",
                prompt="Greet {{ $in.name }}",
                outputSchema={
                    "type": "object",
                    "properties": {"greeting": {"type": "string"}},
                    "required": ["greeting"],
                },
            ),
            node("end", "end", output="$vars.greet.result.greeting"),
        ],
        [conn("start", "greet"), conn("greet", "end")],
    )


def _mocked(answer: Any) -> LiteLLMProvider:
    return LiteLLMProvider(
        default_model="gemini/gemini-2.5-flash", completion_kwargs={"mock_response": answer}
    )


# -- tool calls (the OpenAI shape, through LiteLLM) -----------------------------------------

READ = ToolDef(
    "Read",
    "Read a file.",
    {"type": "object", "properties": {"file_path": {"type": "string"}}, "required": ["file_path"]},
)
TWO_CALLS = ToolTurn(
    [
        ("call_a1", "Read", json.dumps({"file_path": "src/app.py"})),
        ("call_b2", "Read", json.dumps({"file_path": "tests/test_app.py"})),
    ]
)


def _tool_turn(**overrides: Any) -> LLMRequest:
    return _request(tools=(READ,), **overrides)


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_parallel_tool_calls_and_the_transcript(streamed: bool) -> None:
    answers: list[str | ToolTurn] = [TWO_CALLS, ANSWER]
    with serve(lambda body: answers.pop(0)) as server:
        server.piece_chars = 6
        sink = (lambda text: None) if streamed else None
        provider = _provider(server)
        first = _complete(provider, _tool_turn(on_delta=sink))
        assert first.tool_calls == (
            ToolCall("call_a1", "Read", {"file_path": "src/app.py"}),
            ToolCall("call_b2", "Read", {"file_path": "tests/test_app.py"}),
        )
        assert first.finish_reason == "tool_calls"
        body = server.received[-1].body
        assert body["tools"][0]["function"]["name"] == "Read"
        assert "response_format" not in body  # tools and native schemas do not mix

        history = (
            Message("assistant", "", tool_calls=first.tool_calls),
            Message("tool", "def add_todo(): ...", tool_call_id="call_a1"),
            Message("tool", "def test_add(): ...", tool_call_id="call_b2"),
        )
        request = _tool_turn(on_delta=sink)
        final = _complete(provider, replace(request, messages=request.messages + history))
        assert (final.text, final.tool_calls) == (ANSWER, ())
        sent = server.received[-1].body["messages"]
        assert sent[2]["tool_calls"][1]["function"]["arguments"] == TWO_CALLS.calls[1][2]
        assert sent[3] == {
            "role": "tool",
            "tool_call_id": "call_a1",
            "content": "def add_todo(): ...",
        }


@pytest.mark.parametrize("style", ["chunked", "eof"])
def test_a_stream_cut_inside_a_calls_arguments_is_an_error(style: str) -> None:
    with serve(lambda body: TWO_CALLS) as server:
        server.piece_chars = 5
        server.cuts = [(2, style)]
        with pytest.raises(LatticeRunError) as info:
            _complete(_provider(server), _tool_turn(on_delta=lambda text: None))
    assert info.value.error_type == "provider_error"


def test_a_run_with_litellms_mock_response() -> None:
    provider = _mocked(json.dumps({"greeting": "Hello, Ada"}))
    seen: list[dict[str, Any]] = []
    runner = Runner(lower_ok(greeter()), provider=provider, store=RunStore(None))
    runner.subscribe(seen.append)
    result = runner.run({"name": "Ada"})
    assert result.status == "completed", result.failure
    assert result.output == "Hello, Ada"
    deltas = "".join(e["data"]["text"] for e in seen if e["type"] == "llm_delta")
    assert json.loads(deltas) == {"greeting": "Hello, Ada"}  # streamed, since a listener took it
    (response,) = [e for e in seen if e["type"] == "llm_response"]
    assert response["data"]["model"].endswith("gemini-2.5-flash")
    assert response["data"]["output_tokens"] > 0


def test_the_contract_holds_litellm_answers_too() -> None:
    provider = _mocked(json.dumps({"nope": 1}))
    result = Runner(lower_ok(greeter()), provider=provider, store=RunStore(None)).run(
        {"name": "Ada"}
    )
    assert result.status == "failed"
    assert result.failure is not None and result.failure.category == "schema_error"


@pytest.mark.parametrize(
    ("mock", "error_type"),
    [
        ("litellm.RateLimitError", "rate_limit_error"),
        ("litellm.InternalServerError", "provider_error"),
    ],
)
def test_mocked_errors_are_mapped(mock: str, error_type: str) -> None:
    error = _failure(_mocked(mock), _request(model=None))
    assert error.error_type == error_type, error.message


def test_mocked_exceptions_are_mapped() -> None:
    context = litellm.ContextWindowExceededError(
        message="prompt is too long", model="gemini/x", llm_provider="gemini"
    )
    assert _failure(_mocked(context), _request(model=None)).error_type == "context_length_error"
    auth = litellm.AuthenticationError(message="bad key", llm_provider="gemini", model="gemini/x")
    assert _failure(_mocked(auth), _request(model=None)).error_type == "api_key_error"
    timeout = litellm.Timeout(message="too slow", model="gemini/x", llm_provider="gemini")
    assert _failure(_mocked(timeout), _request(model=None)).error_type == "timeout_error"


# -- from the configuration and the command line -----------------------------------------------


def test_the_configured_provider_routes_model_classes(
    server: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")  # LiteLLM's openai/ route reads it
    models = {"small": "litellm:openai/small-model", "medium": "openai/medium-model"}
    config = LatticeConfig.model_validate(
        {
            "llm": {"provider": "litellm", "models": models},
            "providers": {"litellm": {"base_url": server.base_url + "/v1", "timeout": 5}},
        }
    )
    provider = make_provider(None, config=config)
    settings = RuntimeSettings(models=models)
    ir = lower_ok(two_step_document())
    server.answer = two_step_answer
    for _ in range(2):  # two runs, two event loops: LiteLLM's clients follow
        result = Runner(ir, provider=provider, store=RunStore(None), settings=settings).run(
            {"topic": "tides"}
        )
        assert result.status == "completed", result.failure
    assert [r.body["model"] for r in server.received] == ["small-model", "medium-model"] * 2


def test_lattice_run_with_provider_litellm(
    server: FakeLLMServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from lattice.cli import main

    server.answer = two_step_answer
    doc = tmp_path / "two-step.json"
    doc.write_text(json.dumps(two_step_document()), encoding="utf-8")
    config = tmp_path / "lattice.toml"
    config.write_text(f'[providers.litellm]\nbase_url = "{server.base_url}/v1"\n', encoding="utf-8")
    monkeypatch.setenv("LATTICE_LITELLM_MODEL", "openai/cli-model")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    code = main(
        [
            "run",
            str(doc),
            "--provider",
            "litellm",
            "--config",
            str(config),
            "--input",
            "topic=tides",
            "--no-record",
        ]
    )
    assert code == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out) == {"summary": "All about Tides"}
    assert {r.body["model"] for r in server.received} == {"cli-model"}

"""lattice.toml: parsing, validation, environment overrides, ``lattice config show``, and how a
configuration reaches providers (base URL, routing by model class) and the runtime."""

from __future__ import annotations

import asyncio
import io
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import respx

from lattice.cli import main
from lattice.config import LatticeConfig, load_config
from lattice.contracts.policies import DEFAULT_POLICIES
from lattice.errors import LatticeUserError
from lattice.llm import MockProvider
from lattice.llm.base import LLMRequest, Message
from lattice.llm.fake_server import FakeLLMServer, serve
from lattice.llm.wrappers import LimitedProvider, RouterProvider
from lattice.runtime import Runner, RunStore
from lattice.runtime.settings import settings_from_config
from lattice.service.providers import make_provider
from tests import respx_httpx2
from tests.builders import lower_ok
from tests.two_step import two_step_answer, two_step_document

FULL = """
[llm]
provider = "openai"
temperature = 0.3
[llm.models]
small = "openai:gpt-4o-mini"
medium = "gpt-4o"
large = "anthropic:claude-opus-x"

[providers.openai]
base_url = "http://localhost:11434/v1"
timeout = 12.5
max_concurrency = 2
requests_per_minute = 30

[providers.anthropic]
timeout = 90

[runtime]
max_attempts = 2
max_steps = 500
max_visits = 50
max_calls = 40
max_tokens_total = 100000

[policies]
schema_error = ["repair", "fail"]
rate_limit_error = ["retry", "escalate", "fail"]

[prices."gpt-4o-mini"]
input = 0.15
output = 0.6

[secrets]
allow = ["GITHUB_TOKEN"]

[http]
allow_hosts = ["api.github.com"]
deny_hosts = ["169.254.169.254"]

[mcp.servers.time]
command = "mcp-server-time"
args = ["--local"]
"""

MOCK = {
    "responses": {
        "outline": [{"title": "Tides", "points": ["a", "b"]}],
        "summary": [{"summary": "All about Tides"}],
    }
}


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
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


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def cli(capsys: pytest.CaptureFixture[str], *args: Any) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return code, out, err


@pytest.fixture
def doc(tmp_path: Path) -> Path:
    return write(tmp_path / "two-step.json", json.dumps(two_step_document()))


@pytest.fixture
def mock(tmp_path: Path) -> Path:
    return write(tmp_path / "mock.json", json.dumps(MOCK))


# -- parsing --------------------------------------------------------------------------------


def test_full_file_is_parsed(tmp_path: Path) -> None:
    config = load_config(write(tmp_path / "lattice.toml", FULL))
    assert config.source == str(tmp_path / "lattice.toml")
    assert config.llm.provider == "openai"
    assert config.llm.temperature == 0.3
    assert config.llm.models == {
        "small": "openai:gpt-4o-mini",
        "medium": "gpt-4o",
        "large": "anthropic:claude-opus-x",
    }
    openai = config.provider_config("openai")
    assert openai.base_url == "http://localhost:11434/v1"
    assert (openai.timeout, openai.max_concurrency, openai.requests_per_minute) == (12.5, 2, 30)
    assert config.provider_config("anthropic").timeout == 90
    assert config.provider_config("anthropic").base_url is None
    assert config.runtime.max_attempts == 2
    assert config.runtime.max_calls == 40
    assert config.runtime.max_tokens_total == 100_000
    assert (config.runtime.max_steps, config.runtime.max_visits) == (500, 50)
    assert config.policies["schema_error"] == ["repair", "fail"]
    assert config.prices["gpt-4o-mini"].output == 0.6
    assert config.secrets.allow == ["GITHUB_TOKEN"]
    assert config.http.deny_hosts == ["169.254.169.254"]
    assert config.mcp.servers["time"].args == ["--local"]


def test_runtime_settings_from_config(tmp_path: Path) -> None:
    config = load_config(write(tmp_path / "lattice.toml", FULL))
    settings = settings_from_config(config)
    assert dict(settings.models) == config.llm.models
    assert settings.max_attempts == 2
    assert settings.max_calls == 40
    assert settings.max_tokens_total == 100_000
    assert settings.policies["schema_error"] == ("repair", "fail")
    assert settings.policies["rate_limit_error"] == ("retry", "escalate", "fail")
    assert settings.policies["api_key_error"] == DEFAULT_POLICIES["api_key_error"]
    # command-line budgets win
    assert settings_from_config(config, max_calls=3).max_calls == 3
    assert settings_from_config(config, max_tokens_total=9).max_tokens_total == 9


def test_no_file_means_defaults() -> None:
    config = load_config()
    assert config.source is None
    assert config.llm.provider is None
    assert config.llm.models == {}
    assert config.runtime.max_attempts == 3
    assert (
        config.runtime.max_calls == 200
    )  # a default call budget: a loop cannot spend without bound
    assert config.provider_config("openai").timeout == 60


def test_where_the_file_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "lattice.toml", '[llm]\nprovider = "anthropic"\n')
    assert load_config().llm.provider == "anthropic"  # ./lattice.toml
    env_file = write(tmp_path / "env.toml", '[llm]\nprovider = "openai"\n')
    monkeypatch.setenv("LATTICE_CONFIG", str(env_file))
    assert load_config().llm.provider == "openai"  # $LATTICE_CONFIG beats ./lattice.toml
    flag = write(tmp_path / "flag.toml", '[llm]\nprovider = "mock"\n')
    assert load_config(flag).llm.provider == "mock"  # --config beats both


def test_missing_and_broken_files(tmp_path: Path) -> None:
    with pytest.raises(LatticeUserError) as info:
        load_config(tmp_path / "absent.toml")
    assert info.value.error_type == "config_error"
    assert "absent.toml" in info.value.message
    with pytest.raises(LatticeUserError) as info:
        load_config(write(tmp_path / "broken.toml", "[llm\nprovider = 1\n"))
    assert info.value.error_type == "config_error"
    assert "broken.toml" in info.value.message
    assert "TOML" in info.value.message


# -- validation -----------------------------------------------------------------------------

UNKNOWN_KEYS = {
    "top level": ("[lmm]\nprovider = 'openai'\n", "lmm"),
    "llm": ("[llm]\nmodles = {}\n", "llm.modles"),
    "provider table": ("[providers.openai]\nbse_url = 'http://x'\n", "providers.openai.bse_url"),
    "runtime": ("[runtime]\nmax_attempt = 2\n", "runtime.max_attempt"),
    "model class": ("[llm.models]\nhuge = 'gpt'\n", "llm.models.huge"),
    "mcp server": ("[mcp.servers.x]\ncmd = 'y'\n", "mcp.servers.x.cmd"),
}


@pytest.mark.parametrize(("text", "key"), list(UNKNOWN_KEYS.values()), ids=list(UNKNOWN_KEYS))
def test_unknown_keys_are_named(tmp_path: Path, text: str, key: str) -> None:
    with pytest.raises(LatticeUserError) as info:
        load_config(write(tmp_path / "lattice.toml", text))
    assert info.value.error_type == "config_error"
    assert key in info.value.message


def test_unknown_provider_table_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(LatticeUserError) as info:
        load_config(write(tmp_path / "lattice.toml", "[providers.opneai]\nbase_url = 'http://x'\n"))
    assert "opneai" in info.value.message


OUT_OF_RANGE = {
    "max_attempts 0": ("[runtime]\nmax_attempts = 0\n", "runtime.max_attempts"),
    "max_attempts 11": ("[runtime]\nmax_attempts = 11\n", "runtime.max_attempts"),
    "max_attempts text": ("[runtime]\nmax_attempts = 'three'\n", "runtime.max_attempts"),
    "max_calls 0": ("[runtime]\nmax_calls = 0\n", "runtime.max_calls"),
    "max_tokens_total -1": ("[runtime]\nmax_tokens_total = -1\n", "runtime.max_tokens_total"),
    "max_steps 0": ("[runtime]\nmax_steps = 0\n", "runtime.max_steps"),
    "temperature 2.5": ("[llm]\ntemperature = 2.5\n", "llm.temperature"),
    "temperature -0.1": ("[llm]\ntemperature = -0.1\n", "llm.temperature"),
    "timeout 0": ("[providers.openai]\ntimeout = 0\n", "providers.openai.timeout"),
    "max_concurrency 0": (
        "[providers.anthropic]\nmax_concurrency = 0\n",
        "providers.anthropic.max_concurrency",
    ),
    "requests_per_minute -1": (
        "[providers.openai]\nrequests_per_minute = -1\n",
        "providers.openai.requests_per_minute",
    ),
    "unknown action": ("[policies]\nschema_error = ['repair', 'explode']\n", "policies"),
    "empty stack": ("[policies]\nschema_error = []\n", "policies"),
    "negative price": ("[prices.x]\ninput = -1\noutput = 1\n", "prices.x.input"),
}


@pytest.mark.parametrize(("text", "key"), list(OUT_OF_RANGE.values()), ids=list(OUT_OF_RANGE))
def test_out_of_range_values_are_rejected(tmp_path: Path, text: str, key: str) -> None:
    with pytest.raises(LatticeUserError) as info:
        load_config(write(tmp_path / "lattice.toml", text))
    assert info.value.error_type == "config_error"
    assert key in info.value.message


def test_bad_policy_lists_the_actions(tmp_path: Path) -> None:
    with pytest.raises(LatticeUserError) as info:
        load_config(write(tmp_path / "l.toml", "[policies]\nschema_error = ['explode']\n"))
    assert "policies.schema_error" in info.value.message
    assert "repair" in info.value.message


def test_cli_exits_2_on_a_bad_config(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, doc: Path, mock: Path
) -> None:
    bad = write(tmp_path / "bad.toml", "[runtime]\nmax_attempt = 2\n")
    code, out, err = cli(capsys, "config", "show", "--config", bad)
    assert code == 2
    assert out == ""
    assert "runtime.max_attempt" in err
    assert "config_error" in err
    code, out, err = cli(
        capsys, "run", doc, "--config", bad, "--mock", mock, "--input", "topic=t", "--no-record"
    )
    assert code == 2
    assert "runtime.max_attempt" in err
    write(tmp_path / "lattice.toml", "[llm]\ntemperature = 9\n")  # found in the cwd
    code, _, err = cli(capsys, "run", doc, "--mock", mock, "--input", "topic=t", "--no-record")
    assert code == 2
    assert "llm.temperature" in err


# -- environment overrides ------------------------------------------------------------------


def test_environment_overrides_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path / "lattice.toml", FULL)
    monkeypatch.setenv("LATTICE_PROVIDER", "anthropic")
    monkeypatch.setenv("LATTICE_MODEL_SMALL", "anthropic:claude-small")
    monkeypatch.setenv("LATTICE_MODEL_DEFAULT", "gpt-default")
    config = load_config(path)
    assert config.llm.provider == "anthropic"
    assert config.llm.models["small"] == "anthropic:claude-small"
    assert config.llm.models["default"] == "gpt-default"
    assert config.llm.models["medium"] == "gpt-4o"  # untouched
    assert config.llm.temperature == 0.3  # the rest of [llm] stays


def test_environment_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LATTICE_PROVIDER", "openai")
    monkeypatch.setenv("LATTICE_MODEL_LARGE", "gpt-large")
    config = load_config()
    assert config.llm.provider == "openai"
    assert config.llm.models == {"large": "gpt-large"}
    assert config.source is None


def test_empty_environment_values_are_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LATTICE_PROVIDER", "")
    monkeypatch.setenv("LATTICE_MODEL_SMALL", "")
    config = load_config(write(tmp_path / "lattice.toml", FULL))
    assert config.llm.provider == "openai"
    assert config.llm.models["small"] == "openai:gpt-4o-mini"


# -- lattice config show --------------------------------------------------------------------


def test_config_show_never_prints_a_key(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-123")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret-456")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
    monkeypatch.setenv("LATTICE_MODEL_SMALL", "openai:gpt-env")
    path = write(tmp_path / "lattice.toml", FULL)
    code, out, err = cli(capsys, "config", "show", "--config", path)
    assert code == 0, err
    assert "sk-secret-123" not in out + err
    assert "sk-ant-secret-456" not in out + err
    shown = json.loads(out)
    assert shown["environment"]["OPENAI_API_KEY"] == "set (hidden)"
    assert shown["environment"]["ANTHROPIC_API_KEY"] == "set (hidden)"
    assert shown["environment"]["ANTHROPIC_BASE_URL"] == "unset"
    assert shown["source"] == str(path)
    assert shown["llm"]["models"]["small"] == "openai:gpt-env"
    assert shown["providers"]["openai"]["base_url"] == "http://localhost:11434/v1"
    assert shown["runtime"]["max_calls"] == 40


def test_config_show_without_a_file(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "config", "show")
    assert code == 0
    shown = json.loads(out)
    assert shown["source"] is None
    assert shown["environment"]["OPENAI_API_KEY"] == "unset"


# -- providers from configuration -------------------------------------------------------------


def test_disabled_provider_run_says_how_to_configure(
    capsys: pytest.CaptureFixture[str], doc: Path, tmp_path: Path
) -> None:
    for extra in (("--provider", "disabled"), ()):
        code, out, err = cli(
            capsys, "run", doc, "--input", "topic=t", "--runs-dir", tmp_path / "runs", *extra
        )
        assert code == 1
        assert out == ""
        assert "provider_disabled" in err
        assert "--provider openai|anthropic" in err
        assert "--mock FILE" in err


@pytest.mark.parametrize(
    ("provider", "variable"), [("openai", "OPENAI_API_KEY"), ("anthropic", "ANTHROPIC_API_KEY")]
)
def test_no_api_key_exits_2(
    capsys: pytest.CaptureFixture[str], doc: Path, tmp_path: Path, provider: str, variable: str
) -> None:
    runs = tmp_path / "runs"
    for extra in ((), ("--fixtures", tmp_path / "f.jsonl", "--record")):
        code, out, err = cli(
            capsys,
            "run",
            doc,
            "--provider",
            provider,
            "--input",
            "topic=t",
            "--runs-dir",
            runs,
            *extra,
        )
        assert code == 2
        assert out == ""
        assert "api_key_error" in err
        assert variable in err
    assert not runs.exists()  # nothing ran
    assert not (tmp_path / "f.jsonl").exists()


def test_configured_default_provider_is_used(
    capsys: pytest.CaptureFixture[str], doc: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "lattice.toml", '[llm]\nprovider = "openai"\n')
    code, _, err = cli(capsys, "run", doc, "--input", "topic=t", "--runs-dir", tmp_path / "r")
    assert code == 2  # openai without a key: the config's choice was taken
    assert "OPENAI_API_KEY" in err
    monkeypatch.setenv("LATTICE_PROVIDER", "disabled")
    code, _, err = cli(capsys, "run", doc, "--input", "topic=t", "--runs-dir", tmp_path / "r")
    assert code == 1
    assert "provider_disabled" in err


def test_provider_settings_reach_the_client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    config = LatticeConfig.model_validate(
        {
            "providers": {
                "openai": {
                    "base_url": "http://127.0.0.1:9/v1",
                    "timeout": 7,
                    "max_concurrency": 3,
                    "requests_per_minute": 120,
                }
            }
        }
    )
    provider = make_provider("openai", config=config)
    assert isinstance(provider, RouterProvider)
    limited = provider.default
    assert isinstance(limited, LimitedProvider)
    assert limited._interval == 0.5
    client = limited.inner.client  # type: ignore[attr-defined]
    assert str(client.base_url).rstrip("/") == "http://127.0.0.1:9/v1"
    assert client.timeout == 7
    assert client.max_retries == 0


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with serve(two_step_answer) as srv:
        yield srv


def test_configured_base_url_needs_no_key(
    capsys: pytest.CaptureFixture[str], server: FakeLLMServer, doc: Path, tmp_path: Path
) -> None:
    config = write(
        tmp_path / "local.toml",
        f'[llm]\nprovider = "openai"\n[providers.openai]\nbase_url = "{server.base_url}/v1"\n',
    )
    code, out, err = cli(
        capsys,
        "run",
        doc,
        "--config",
        config,
        "--input",
        "topic=tides",
        "--runs-dir",
        tmp_path / "r",
    )
    assert code == 0, err
    assert json.loads(out) == {"summary": "All about Tides"}
    assert [r.path for r in server.received] == ["/v1/chat/completions"] * 2


def test_model_classes_route_to_providers_by_prefix(
    capsys: pytest.CaptureFixture[str],
    server: FakeLLMServer,
    doc: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``small = "openai:gpt-s"`` with default provider anthropic: both classes go to OpenAI."""
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url + "/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    config = write(
        tmp_path / "route.toml",
        '[llm]\nprovider = "anthropic"\n'
        '[llm.models]\nsmall = "openai:gpt-s"\nmedium = "openai:gpt-m"\n',
    )
    code, out, err = cli(
        capsys,
        "run",
        doc,
        "--config",
        config,
        "--input",
        "topic=tides",
        "--runs-dir",
        tmp_path / "r",
    )
    assert code == 0, err
    assert json.loads(out) == {"summary": "All about Tides"}
    assert [(r.path, r.body["model"]) for r in server.received] == [
        ("/v1/chat/completions", "gpt-s"),
        ("/v1/chat/completions", "gpt-m"),
    ]


ANTHROPIC_REPLY = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-x",
    "content": [{"type": "text", "text": "{}"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 1, "output_tokens": 1},
}
OPENAI_REPLY = {
    "id": "c",
    "object": "chat.completion",
    "created": 1,
    "model": "gpt-m",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "{}"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}


def test_small_class_routed_to_anthropic(monkeypatch: pytest.MonkeyPatch) -> None:
    """models {small = "anthropic:claude-x"}, default provider openai: a small request goes to
    the Anthropic endpoint with model "claude-x"; an unprefixed class stays with OpenAI."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    config = LatticeConfig.model_validate(
        {
            "llm": {
                "provider": "openai",
                "models": {"small": "anthropic:claude-x", "medium": "gpt-m"},
            }
        }
    )
    settings = settings_from_config(config)
    provider = make_provider(None, config=config)
    with respx.mock(using=respx_httpx2.USING) as router:
        claude = router.post("https://api.anthropic.com/v1/messages").respond(
            200, json=ANTHROPIC_REPLY
        )
        gpt = router.post("https://api.openai.com/v1/chat/completions").respond(
            200, json=OPENAI_REPLY
        )
        for model_class in ("small", "medium"):
            request = LLMRequest(
                messages=(Message("user", "hi"),),
                model_class=model_class,
                model=settings.models[model_class],
            )
            asyncio.run(provider.complete(request))
        assert claude.call_count == 1
        assert json.loads(claude.calls.last.request.content)["model"] == "claude-x"
        assert gpt.call_count == 1
        assert json.loads(gpt.calls.last.request.content)["model"] == "gpt-m"


def test_run_with_small_class_routed_to_anthropic(
    capsys: pytest.CaptureFixture[str],
    server: FakeLLMServer,
    doc: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url + "/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    config = write(
        tmp_path / "route.toml",
        '[llm]\nprovider = "openai"\n[llm.models]\nsmall = "anthropic:claude-x"\n',
    )
    code, out, err = cli(
        capsys,
        "run",
        doc,
        "--config",
        config,
        "--input",
        "topic=tides",
        "--runs-dir",
        tmp_path / "r",
    )
    assert code == 0, err
    assert json.loads(out) == {"summary": "All about Tides"}
    assert [(r.path, r.body["model"]) for r in server.received] == [
        ("/v1/messages", "claude-x"),
        ("/v1/chat/completions", "gpt-4o-mini"),
    ]


def test_routed_provider_without_key_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], doc: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A class routed to a provider whose key is missing fails before the run starts."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    config = write(
        tmp_path / "route.toml",
        '[llm]\nprovider = "openai"\n[llm.models]\nsmall = "anthropic:claude-x"\n',
    )
    runs = tmp_path / "r"
    code, out, err = cli(
        capsys, "run", doc, "--config", config, "--input", "topic=t", "--runs-dir", runs
    )
    assert code == 2
    assert out == ""
    assert "ANTHROPIC_API_KEY" in err
    assert "api_key_error" in err
    assert not runs.exists()


# -- configuration reaches the runtime ---------------------------------------------------------


def test_config_budget_stops_the_run(
    capsys: pytest.CaptureFixture[str], doc: Path, mock: Path, tmp_path: Path
) -> None:
    config = write(tmp_path / "b.toml", "[runtime]\nmax_calls = 1\n")
    code, _, err = cli(
        capsys, "run", doc, "--config", config, "--mock", mock, "--input", "topic=t", "--no-record"
    )
    assert code == 1
    assert "budget_exceeded" in err
    assert "1 model call," in err


def test_config_policy_changes_recovery(
    capsys: pytest.CaptureFixture[str], doc: Path, tmp_path: Path
) -> None:
    script = {"responses": {"outline": ["not json", "still not json"], "summary": ["{}"]}}
    mock = write(tmp_path / "m.json", json.dumps(script))
    args = ("run", doc, "--mock", mock, "--input", "topic=t", "--no-record", "--json")
    # default policy for json_error: repair → the second (also bad) answer is asked for
    code, out, _ = cli(capsys, *args)
    assert code == 1
    assert json.loads(out)["usage"]["calls"] >= 2
    config = write(tmp_path / "p.toml", '[policies]\njson_error = ["fail"]\n')
    code, out, _ = cli(capsys, *args, "--config", config)
    assert code == 1
    result = json.loads(out)
    assert result["usage"]["calls"] == 1
    assert result["failure"]["category"] == "json_error"


def test_config_step_limit_is_applied(
    capsys: pytest.CaptureFixture[str], doc: Path, mock: Path, tmp_path: Path
) -> None:
    config = write(tmp_path / "s.toml", "[runtime]\nmax_steps = 2\n")
    code, _, err = cli(
        capsys, "run", doc, "--config", config, "--mock", mock, "--input", "topic=t", "--no-record"
    )
    assert code == 1
    assert "step_limit" in err


def test_config_temperature_is_the_default_sampling_temperature() -> None:
    config = LatticeConfig.model_validate({"llm": {"temperature": 0.7}})
    provider = MockProvider(MOCK["responses"])
    runner = Runner(
        lower_ok(two_step_document()),
        provider=provider,
        store=RunStore(None),
        settings=settings_from_config(config),
    )
    assert runner.run({"topic": "t"}).status == "completed"
    assert [call.temperature for call in provider.calls] == [0.7, 0.7]


@pytest.mark.parametrize(("value", "stream"), [('"auto"', None), ("true", True), ("false", False)])
def test_runtime_stream(tmp_path: Path, value: str, stream: bool | None) -> None:
    config = load_config(write(tmp_path / "lattice.toml", f"[runtime]\nstream = {value}\n"))
    assert settings_from_config(config).stream is stream
    assert settings_from_config(LatticeConfig()).stream is None


def test_runtime_stream_is_validated(tmp_path: Path) -> None:
    with pytest.raises(LatticeUserError, match=r"runtime\.stream"):
        load_config(write(tmp_path / "lattice.toml", '[runtime]\nstream = "sometimes"\n'))


TELEMETRY = """
[telemetry]
otlp_endpoint = "http://collector:4318/"
capture_content = true
service_name = "support-bot"
"""


def test_telemetry_section(tmp_path: Path) -> None:
    config = load_config(write(tmp_path / "lattice.toml", TELEMETRY))
    assert config.telemetry.traces_url() == "http://collector:4318/v1/traces"
    telemetry = settings_from_config(config).telemetry
    assert telemetry is not None
    assert telemetry.traces_url == "http://collector:4318/v1/traces"
    assert telemetry.capture_content is True
    assert telemetry.service_name == "support-bot"
    assert settings_from_config(LatticeConfig()).telemetry is None  # off by default


def test_a_traces_url_is_taken_as_it_is(tmp_path: Path) -> None:
    text = '[telemetry]\notlp_endpoint = "https://otel.example/v1/traces"\n'
    config = load_config(write(tmp_path / "lattice.toml", text))
    assert config.telemetry.traces_url() == "https://otel.example/v1/traces"


@pytest.mark.parametrize(
    "endpoint", ["localhost:4318", "grpc://collector:4317", "http://", "", "ftp://x"]
)
def test_telemetry_endpoint_is_validated(tmp_path: Path, endpoint: str) -> None:
    text = f'[telemetry]\notlp_endpoint = "{endpoint}"\n'
    with pytest.raises(LatticeUserError, match=r"telemetry\.otlp_endpoint"):
        load_config(write(tmp_path / "lattice.toml", text))


def test_telemetry_unknown_key_is_named(tmp_path: Path) -> None:
    with pytest.raises(LatticeUserError, match=r"telemetry\.endpoint"):
        load_config(write(tmp_path / "lattice.toml", '[telemetry]\nendpoint = "http://x"\n'))


def test_the_otel_variables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env-collector:4318")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "from-env")
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    config = load_config(write(tmp_path / "lattice.toml", TELEMETRY.replace("true", "false")))
    assert config.telemetry.traces_url() == "http://env-collector:4318/v1/traces"
    assert config.telemetry.service_name == "from-env"
    assert config.telemetry.capture_content is True
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://traces-only:4318/v1/traces")
    assert load_config().telemetry.traces_url() == "http://traces-only:4318/v1/traces"
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert load_config().telemetry.traces_url() is None
    assert settings_from_config(load_config()).telemetry is None

"""What the OpenAI and Anthropic adapters share, run against each real SDK in turn.

HTTP is mocked at the transport (respx), so the SDKs build and parse the wire format
themselves. Each test runs once per row of ``ADAPTERS``; what only one provider does
lives in ``test_openai.py`` or ``test_anthropic.py``.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import respx

from lattice.errors import LatticeUserError
from lattice.llm.sdk_provider import SdkProvider
from tests.llm.sdk_fakes import (
    ADAPTERS,
    KEY,
    Adapter,
    body_of,
    complete,
    failure,
    mock_api,
)

ADAPTER_IDS = [a.name for a in ADAPTERS]


@pytest.fixture(params=ADAPTERS, ids=ADAPTER_IDS)
def adapter(request: pytest.FixtureRequest) -> Adapter:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def api(adapter: Adapter) -> Iterator[respx.MockRouter]:
    with mock_api(adapter.api, assert_all_called=False) as router:
        yield router


@pytest.fixture
def provider(adapter: Adapter) -> SdkProvider:
    return adapter.provider(api_key=KEY)


def route_of(api: respx.MockRouter, adapter: Adapter) -> respx.Route:
    return api.post(adapter.path)


# -- success -----------------------------------------------------------------------------


def test_structured_request_and_response_mapping(
    adapter: Adapter, api: respx.MockRouter, provider: SdkProvider
) -> None:
    route = route_of(api, adapter).respond(
        200, json=adapter.success(adapter.text, finish=adapter.truncated)
    )
    response = complete(provider, adapter.request())

    assert route.call_count == 1
    sent = route.calls.last.request
    credentials = sent.headers.get("x-api-key", "") + sent.headers.get("authorization", "")
    assert KEY in credentials
    body = body_of(route)
    assert body["model"] == adapter.model
    assert body["max_tokens"] == 300
    assert adapter.schema_field in body

    assert response.text == adapter.text
    assert response.usage.input_tokens == adapter.usage[0]
    assert response.usage.output_tokens == adapter.usage[1]
    assert response.model == adapter.response_model
    assert response.finish_reason == adapter.truncated
    assert response.latency_ms >= 0


def test_default_model_from_environment(
    adapter: Adapter, api: respx.MockRouter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(adapter.model_variable, "model-from-env")
    route = route_of(api, adapter).respond(200, json=adapter.success("{}"))
    complete(adapter.provider(api_key=KEY), adapter.request(model=None))
    assert body_of(route)["model"] == "model-from-env"


def test_default_model_is_not_deprecated(
    adapter: Adapter, api: respx.MockRouter, provider: SdkProvider
) -> None:
    route_of(api, adapter).respond(200, json=adapter.success("{}"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        complete(provider, adapter.request(model=None))
    assert not [w for w in caught if issubclass(w.category, DeprecationWarning)]


def test_base_url_argument(adapter: Adapter) -> None:
    with mock_api(adapter.local) as router:
        route = router.post(adapter.path).respond(200, json=adapter.success("{}"))
        complete(adapter.provider(api_key=KEY, base_url=adapter.local), adapter.request())
        assert route.call_count == 1


def test_base_url_from_environment(adapter: Adapter, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(adapter.base_url_variable, adapter.local)
    with mock_api(adapter.local) as router:
        route = router.post(adapter.path).respond(200, json=adapter.success("{}"))
        complete(adapter.provider(api_key=KEY), adapter.request())
        assert route.call_count == 1


def test_no_key_is_a_user_error(adapter: Adapter) -> None:
    with pytest.raises(LatticeUserError) as info:
        adapter.provider()
    assert info.value.error_type == "api_key_error"
    assert adapter.key_variable in info.value.message


# -- errors ------------------------------------------------------------------------------

STATUS_ERRORS = [
    pytest.param(adapter, *case, id=f"{adapter.name}-{name}")
    for adapter in ADAPTERS
    for name, case in adapter.status_errors.items()
]


@pytest.mark.parametrize(
    ("adapter", "status", "payload", "headers", "error_type", "sdk_error"), STATUS_ERRORS
)
def test_status_errors_are_mapped_with_one_http_call(
    adapter: Adapter,
    api: respx.MockRouter,
    provider: SdkProvider,
    status: int,
    payload: Any,
    headers: dict[str, str],
    error_type: str,
    sdk_error: type[Exception],
) -> None:
    route = route_of(api, adapter).respond(status, json=payload, headers=headers)
    error = failure(provider, adapter.request())
    assert error.error_type == error_type
    assert route.call_count == 1  # SDK retries are off: recovery is Lattice's job
    assert isinstance(error.__cause__, sdk_error)
    assert type(error.__cause__) is sdk_error
    assert error.details["sdk_error"] == type(error.__cause__).__name__
    assert error.details["sdk_error"] == sdk_error.__name__
    assert error.node_id == "classify"
    assert adapter.model in error.message
    assert KEY not in error.message


RETRY_AFTER = {
    "seconds": ({"retry-after": "7"}, 7),
    "milliseconds": ({"retry-after-ms": "1500"}, 1.5),
    "absent": ({}, None),
    "unparsable": ({"retry-after": "soon"}, None),
}


@pytest.mark.parametrize(
    ("headers", "retry_after"), list(RETRY_AFTER.values()), ids=list(RETRY_AFTER)
)
def test_rate_limit_carries_retry_after(
    adapter: Adapter,
    api: respx.MockRouter,
    provider: SdkProvider,
    headers: dict[str, str],
    retry_after: float | None,
) -> None:
    route_of(api, adapter).respond(
        429, json=adapter.error("slow down", adapter.rate_limit_kind), headers=headers
    )
    error = failure(provider, adapter.request())
    assert error.error_type == "rate_limit_error"
    if retry_after is None:
        assert "retry_after" not in error.details
    else:
        assert error.details["retry_after"] == retry_after


def test_invalid_request_names_the_status(
    adapter: Adapter, api: respx.MockRouter, provider: SdkProvider
) -> None:
    route_of(api, adapter).respond(422, json=adapter.error("bad field"))
    error = failure(provider, adapter.request())
    assert error.error_type == "invalid_request"
    assert error.details["status"] == 422


@pytest.mark.parametrize(
    "exc", [httpx.ReadTimeout, httpx.ConnectTimeout, httpx.WriteTimeout, httpx.PoolTimeout]
)
def test_timeouts_are_timeout_errors(
    adapter: Adapter, api: respx.MockRouter, provider: SdkProvider, exc: type[Exception]
) -> None:
    route = route_of(api, adapter).mock(side_effect=exc)
    error = failure(provider, adapter.request())
    assert error.error_type == "timeout_error"
    assert route.call_count == 1
    assert isinstance(error.__cause__, adapter.sdk.APITimeoutError)


@pytest.mark.parametrize("exc", [httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError])
def test_connection_errors_are_provider_errors(
    adapter: Adapter, api: respx.MockRouter, provider: SdkProvider, exc: type[Exception]
) -> None:
    route = route_of(api, adapter).mock(side_effect=exc)
    error = failure(provider, adapter.request())
    assert error.error_type == "provider_error"
    assert route.call_count == 1
    assert isinstance(error.__cause__, adapter.sdk.APIConnectionError)
    assert "cannot connect" in error.message


def test_non_json_success_body_is_a_provider_error(
    adapter: Adapter, api: respx.MockRouter, provider: SdkProvider
) -> None:
    route_of(api, adapter).respond(
        200, text="<html>gateway</html>", headers={"content-type": "application/json"}
    )
    assert failure(provider, adapter.request()).error_type == "provider_error"


# -- structured-output fallback ----------------------------------------------------------


def test_rejected_structured_output_falls_back_to_plain_prompting(
    adapter: Adapter, api: respx.MockRouter, provider: SdkProvider
) -> None:
    answer = adapter.success(adapter.text)
    route = route_of(api, adapter).mock(
        side_effect=[
            httpx.Response(400, json=adapter.error(adapter.rejection)),
            httpx.Response(200, json=answer),
            httpx.Response(200, json=answer),
            httpx.Response(200, json=answer),
        ]
    )
    assert complete(provider, adapter.request()).text == adapter.text
    assert route.call_count == 2
    first, second = body_of(route, 0), body_of(route, 1)
    assert adapter.schema_field in first
    assert adapter.schema_field not in second
    assert {k: v for k, v in first.items() if k != adapter.schema_field} == second

    # the model is remembered: the next call goes plain at once
    complete(provider, adapter.request())
    assert route.call_count == 3
    assert adapter.schema_field not in body_of(route)
    # another model still gets structured output
    complete(provider, adapter.request(model="other-model"))
    assert adapter.schema_field in body_of(route)


def test_fallback_failure_is_mapped(
    adapter: Adapter, api: respx.MockRouter, provider: SdkProvider
) -> None:
    route = route_of(api, adapter).mock(
        side_effect=[
            httpx.Response(400, json=adapter.error(f"Unknown parameter: {adapter.schema_field}")),
            httpx.Response(500, json=adapter.error("boom")),
        ]
    )
    error = failure(provider, adapter.request())
    assert error.error_type == "provider_error"
    assert route.call_count == 2
    assert isinstance(error.__cause__, adapter.sdk.InternalServerError)


def test_schema_field_error_without_a_schema_is_not_retried(
    adapter: Adapter, api: respx.MockRouter, provider: SdkProvider
) -> None:
    route = route_of(api, adapter).respond(
        400, json=adapter.error(f"{adapter.schema_field} is not supported")
    )
    error = failure(provider, adapter.request(response_schema=None))
    assert error.error_type == "invalid_request"
    assert error.details["status"] == 400
    assert route.call_count == 1


def test_unrelated_400_mentioning_format_is_not_retried(
    adapter: Adapter, api: respx.MockRouter, provider: SdkProvider
) -> None:
    route = route_of(api, adapter).respond(
        400,
        json=adapter.error("messages.0.content.0.image.source: invalid image format"),
    )
    error = failure(provider, adapter.request())
    assert error.error_type == "invalid_request"
    assert route.call_count == 1

"""httpRequest nodes through whole workflow runs.

Most tests inject an ``httpx.MockTransport`` (``HttpPolicy(transport=...)``) that records
every request and answers from a script; retries use a fake sleep that records the delays
it was asked for. The last section drives a real ``ThreadingHTTPServer`` on 127.0.0.1
through the run's own guarded transport, with 127.0.0.1 in ``allow_hosts``.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import json
import threading
import time
import tracemalloc
import zlib
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import httpx
import pytest

from lattice.contracts.policies import RetrySettings
from lattice.runtime import Runner, RunResult, RunStore
from lattice.runtime.settings import RuntimeSettings
from lattice.tools.http import HttpPolicy
from tests.builders import chain, conn, lower_ok, node, workflow

API = "https://api.test"
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")

Reply = Callable[[httpx.Request], httpx.Response]


# -- doubles --------------------------------------------------------------------------------


class FakeSleep:
    """An injectable ``sleep`` that records the delays it was asked for and returns at once."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


class ScriptedAPI(httpx.MockTransport):
    """A MockTransport that records requests and answers them in order (the last reply repeats).

    ``closed`` counts ``aclose`` calls, which an ``AsyncClient`` makes when it is closed.
    """

    def __init__(self, *replies: Reply) -> None:
        super().__init__(self._handle)
        self.replies = list(replies) or [respond(json={})]
        self.requests: list[httpx.Request] = []
        self.closed = 0

    def _handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        reply = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
        return reply(request)

    async def aclose(self) -> None:
        self.closed += 1


def respond(status: int = 200, **kwargs: Any) -> Reply:
    """A reply building a fresh ``httpx.Response(status, **kwargs)`` for every request."""
    return lambda request: httpx.Response(status, **kwargs)


class Streamed(httpx.AsyncByteStream):
    """A response body that arrives as a stream (httpx reads one given as bytes at once)."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for start in range(0, len(self.data), 1000):
            yield self.data[start : start + 1000]


def streamed(status: int, data: bytes, headers: dict[str, str]) -> Reply:
    """A reply whose body arrives as it would over the network, still encoded."""
    return lambda request: httpx.Response(status, headers=headers, stream=Streamed(data))


def fail_with(kind: type[httpx.TransportError]) -> Reply:
    """A reply raising a transport error (timeout, connection refused, ...)."""

    def reply(request: httpx.Request) -> httpx.Response:
        raise kind(f"simulated {kind.__name__}", request=request)

    return reply


def echo(request: httpx.Request) -> httpx.Response:
    """Answers with what it received."""
    return httpx.Response(
        200,
        json={
            "method": request.method,
            "path": request.url.path,
            "query": dict(request.url.params),
            "authorization": request.headers.get("authorization"),
            "json": json.loads(request.content) if request.content else None,
        },
    )


def body_of(request: httpx.Request) -> Any:
    return json.loads(request.content)


# -- documents and runs ---------------------------------------------------------------------


def http_node(node_id: str = "fetch", **data: Any) -> dict[str, Any]:
    """An httpRequest node (GET ``{API}/items`` unless told otherwise)."""
    return node(node_id, "httpRequest", **{"method": "GET", "url": f"{API}/items", **data})


@dataclass
class Harness:
    """Runs documents against one ScriptedAPI with a fake sleep and jitter-free backoff."""

    api: ScriptedAPI = field(default_factory=ScriptedAPI)
    sleep: FakeSleep = field(default_factory=FakeSleep)

    def run(
        self,
        doc: dict[str, Any],
        inputs: dict[str, Any] | None = None,
        *,
        store: RunStore | None = None,
        secrets_allow: tuple[str, ...] = (),
        retry: RetrySettings | None = None,
        **policy: Any,
    ) -> RunResult:
        settings = RuntimeSettings(
            http=HttpPolicy(transport=self.api, **policy),
            sleep=self.sleep,
            retry=retry or RetrySettings(jitter=0.0),
            secrets_allow=secrets_allow,
            gc_pacing=False,
        )
        runner = Runner(lower_ok(doc), settings=settings, store=store or RunStore(None))
        return runner.run(inputs or {})


@pytest.fixture
def harness() -> Harness:
    return Harness()


def script(harness: Harness, *replies: Reply) -> ScriptedAPI:
    harness.api.replies = list(replies)
    return harness.api


def assert_failed(result: RunResult, category: str, node_id: str = "fetch") -> dict[str, Any]:
    """The run failed at ``node_id`` with ``category``; returns the FailureReport as JSON."""
    assert result.status == "failed", result.output
    assert result.failure is not None
    assert result.failure.category == category, result.failure.summary
    assert result.failure.node_id == node_id
    failed = [e for e in result.events if e["type"] == "run_failed"]
    assert [e["data"]["error_type"] for e in failed] == [category]
    return result.failure.to_json()


def events_of(result: RunResult, type_: str) -> list[dict[str, Any]]:
    return [e for e in result.events if e["type"] == type_]


# -- requests -------------------------------------------------------------------------------


@pytest.mark.parametrize("method", METHODS)
def test_every_method_reaches_the_transport_with_url_query_headers_and_body(
    harness: Harness, method: str
) -> None:
    api = script(harness, respond(200, json={"done": method}))
    data: dict[str, Any] = {
        "method": method,
        "url": f"{API}/items/{{{{ $in.id }}}}",
        "query": {"page": "{{ $in.page }}", "q": "tea & cake"},
        "headers": {"X-Trace": "trace-{{ $in.id }}", "Accept": "application/json"},
    }
    if method != "GET":
        data["body"] = {"id": "{{ $in.id }}", "tags": ["a", "{{ $in.page }}"]}
    result = harness.run(chain(http_node(**data)), {"id": "42", "page": 2})

    assert result.status == "completed", result.failure
    [request] = api.requests
    assert request.method == method
    assert request.url.scheme == "https"
    assert request.url.host == "api.test"
    assert request.url.path == "/items/42"
    assert dict(request.url.params) == {"page": "2", "q": "tea & cake"}
    assert request.headers["x-trace"] == "trace-42"
    assert request.headers["accept"] == "application/json"
    if method == "GET":
        assert request.content == b""
    else:
        assert request.headers["content-type"] == "application/json"
        assert body_of(request) == {"id": "42", "tags": ["a", 2]}
    fetched = result.vars["fetch"]["result"]
    assert fetched["status"] == 200
    assert fetched["body"] == {"done": method}
    assert fetched["headers"]["content-type"] == "application/json"
    assert result.output == fetched
    assert [e["data"] for e in events_of(result, "tool_call")] == [
        {"tool": "http", "method": method}
    ]
    assert [e["data"] for e in events_of(result, "tool_result")] == [
        {"tool": "http", "status": 200}
    ]


def test_values_inserted_into_the_url_are_url_encoded(harness: Harness) -> None:
    # In the path a value keeps its "/" (more URL-template cases: test_http_guard.py).
    api = script(harness, echo)
    doc = chain(http_node(url=f"{API}/users/{{{{ $in.name }}}}/files/{{{{ $in.n }}}}"))
    result = harness.run(doc, {"name": "Ada Lovelace/admin&x=1?y#z", "n": 7})

    assert result.status == "completed", result.failure
    [request] = api.requests
    assert request.url.raw_path == b"/users/Ada%20Lovelace/admin%26x%3D1%3Fy%23z/files/7"
    assert request.url.params == httpx.QueryParams()  # nothing leaked into the query
    assert result.output["body"]["path"] == "/users/Ada Lovelace/admin&x=1?y#z/files/7"


def test_a_query_string_written_in_the_url_is_kept_alongside_query(harness: Harness) -> None:
    api = script(harness, echo)
    doc = chain(
        http_node("plain", url=f"{API}/search?q={{{{ $in.term }}}}&lang=en"),
        http_node("merged", url=f"{API}/search?lang=en", query={"page": "{{ $in.page }}"}),
        http_node("override", url=f"{API}/search?lang=en&x=1", query={"lang": "fr"}),
    )
    result = harness.run(doc, {"term": "a&b c", "page": 3})

    assert result.status == "completed", result.failure
    plain, merged, override = api.requests
    assert dict(plain.url.params) == {"q": "a&b c", "lang": "en"}
    assert dict(merged.url.params) == {"lang": "en", "page": "3"}
    assert dict(override.url.params) == {"lang": "fr", "x": "1"}  # query wins


@pytest.mark.parametrize(
    ("data", "inputs"),
    [
        ({"headers": {"X-User": "{{ $in.name }}"}}, {"name": "Jos\u00e9"}),
        ({"url": f"{API}:port/x"}, {}),
    ],
    ids=["non-ascii-header", "bad-port"],
)
def test_a_request_httpx_cannot_build_is_a_tool_error_and_not_retried(
    harness: Harness, data: dict[str, Any], inputs: dict[str, Any]
) -> None:
    api = script(harness, echo)
    result = harness.run(chain(http_node(**data)), inputs)

    report = assert_failed(result, "tool_error")
    assert "cannot be sent" in report["summary"]
    assert api.requests == []
    assert harness.sleep.delays == []


def test_a_body_string_that_is_one_ref_keeps_the_value_type(harness: Harness) -> None:
    api = script(harness, echo)
    doc = chain(
        http_node(
            "fields",
            method="POST",
            body={
                "count": "{{ $in.count }}",
                "label": "n={{ $in.count }}",
                "item": "{{ $in.item }}",
                "flag": "{{ $in.flag }}",
                "literal": 1.5,
            },
        ),
        http_node("whole", method="PUT", body="{{ $in.item }}"),
    )
    item = {"name": "kettle", "sizes": [1, 2]}
    result = harness.run(doc, {"count": 3, "item": item, "flag": False})

    assert result.status == "completed", result.failure
    fields, whole = api.requests
    assert body_of(fields) == {
        "count": 3,
        "label": "n=3",
        "item": item,
        "flag": False,
        "literal": 1.5,
    }
    assert whole.headers["content-type"] == "application/json"
    assert body_of(whole) == item


def test_a_later_node_reads_an_earlier_response(harness: Harness) -> None:
    api = script(harness, respond(200, json={"id": 17, "owner": {"login": "ada"}}), echo)
    doc = workflow(
        [
            node("start", "start"),
            http_node("first", url=f"{API}/repos/1"),
            http_node(
                "second",
                method="POST",
                url=f"{API}/users/{{{{ $vars.first.result.body.owner.login }}}}",
                body={"repo": "{{ $vars.first.result.body.id }}"},
            ),
            node("end", "end", output="{{ $vars.second.result.body }}"),
        ],
        [conn("start", "first"), conn("first", "second"), conn("second", "end")],
    )
    result = harness.run(doc)

    assert result.status == "completed", result.failure
    assert api.requests[1].url.path == "/users/ada"
    assert result.output["json"] == {"repo": 17}


# -- responses ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content_type", "response_type", "content", "expected"),
    [
        ("application/json", None, b'{"a": [1, 2]}', {"a": [1, 2]}),
        ("application/problem+json; charset=utf-8", None, b'{"title": "x"}', {"title": "x"}),
        ("application/json", None, b"", None),
        ("text/plain; charset=utf-8", None, b'{"a": 1}', '{"a": 1}'),
        ("text/html", None, "<p>caf\u00e9</p>".encode(), "<p>caf\u00e9</p>"),
        ("text/plain", "json", b'{"forced": true}', {"forced": True}),
        ("application/octet-stream", "json", b"[1, 2, 3]", [1, 2, 3]),
        ("application/json", "text", b'{"a": 1}', '{"a": 1}'),
    ],
    ids=[
        "json-auto",
        "json-suffix-auto",
        "empty-json-auto",
        "text-auto",
        "html-auto",
        "forced-json",
        "forced-json-octets",
        "forced-text",
    ],
)
def test_response_bodies_are_decoded_by_content_type_or_response_type(
    harness: Harness,
    content_type: str,
    response_type: str | None,
    content: bytes,
    expected: Any,
) -> None:
    script(harness, respond(200, content=content, headers={"content-type": content_type}))
    data = {"responseType": response_type} if response_type else {}
    result = harness.run(chain(http_node(**data)))

    assert result.status == "completed", result.failure
    assert result.vars["fetch"]["result"]["body"] == expected


def test_a_lone_surrogate_in_a_json_body_becomes_u_fffd(harness: Harness, tmp_path: Path) -> None:
    """``"\\ud800"`` is JSON a server may send and a string no file can hold: the body
    keeps U+FFFD in its place (keys too) and the run folder is written."""
    body = b'{"name": "ok \\ud800", "\\udc00": ["\\ud83d\\ude00"]}'
    script(harness, respond(200, content=body, headers={"content-type": "application/json"}))
    result = harness.run(chain(http_node()), store=RunStore(tmp_path))

    assert result.status == "completed", result.failure
    expected = {"name": "ok \ufffd", "\ufffd": ["\U0001f600"]}
    assert result.vars["fetch"]["result"]["body"] == expected
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert files
    for path in files:
        path.read_bytes().decode("utf-8")  # raises on a file that is not UTF-8


def test_a_forced_json_response_that_is_not_json_fails(harness: Harness) -> None:
    api = script(harness, respond(200, text="<html>oops</html>"))
    result = harness.run(chain(http_node(responseType="json")))

    report = assert_failed(result, "http_error")
    assert "not JSON" in report["summary"]
    assert report["details"]["body_excerpt"] == "<html>oops</html>"
    assert len(api.requests) == 1
    assert harness.sleep.delays == []


def test_redirects_are_not_followed(harness: Harness) -> None:
    api = script(harness, respond(302, headers={"location": "https://elsewhere.test/"}))
    result = harness.run(chain(http_node()))

    assert result.status == "completed", result.failure
    assert len(api.requests) == 1
    assert result.output["status"] == 302
    assert result.output["headers"]["location"] == "https://elsewhere.test/"


# -- failures and retries -------------------------------------------------------------------


def test_a_timeout_is_retried_with_backoff_then_fails_with_timeout_error(
    harness: Harness,
) -> None:
    api = script(harness, fail_with(httpx.ReadTimeout))
    result = harness.run(chain(http_node(timeoutMs=250)))

    report = assert_failed(result, "timeout_error")
    assert "timed out after 0.25s" in report["summary"]
    assert len(api.requests) == 4  # the first try and 3 retries
    assert harness.sleep.delays == [1.0, 2.0, 4.0]
    assert api.requests[0].extensions["timeout"] == {
        "connect": 0.25,
        "read": 0.25,
        "write": 0.25,
        "pool": 0.25,
    }


def test_without_timeout_ms_the_policy_default_applies(harness: Harness) -> None:
    api = script(harness, respond(200, json={}))
    result = harness.run(chain(http_node()), default_timeout_s=12.5)

    assert result.status == "completed", result.failure
    assert api.requests[0].extensions["timeout"]["read"] == 12.5


def test_retry_delays_grow_exponentially_with_bounded_jitter(harness: Harness) -> None:
    api = script(harness, fail_with(httpx.ConnectTimeout))
    result = harness.run(chain(http_node()), retry=RetrySettings(base=0.5, jitter=0.25))

    assert_failed(result, "timeout_error")
    assert len(api.requests) == 4
    for delay, base in zip(harness.sleep.delays, [0.5, 1.0, 2.0], strict=True):
        assert base <= delay <= base * 1.25


def test_a_404_is_an_http_error_with_status_and_excerpt_and_is_not_retried(
    harness: Harness,
) -> None:
    message = "no such item: 42. " + "x" * 2000
    api = script(harness, respond(404, text=message))
    result = harness.run(chain(http_node(url=f"{API}/items/42")))

    report = assert_failed(result, "http_error")
    assert report["details"]["status"] == 404
    excerpt = report["details"]["body_excerpt"]
    assert excerpt.startswith("no such item: 42.")
    assert len(excerpt) <= 500 < len(message)
    assert "404" in report["summary"]
    assert f"GET {API}/items/42" in report["summary"]
    assert len(api.requests) == 1
    assert harness.sleep.delays == []


@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_a_5xx_then_200_is_retried_and_completes(harness: Harness, status: int) -> None:
    api = script(harness, respond(status, text="busy"), respond(200, json={"ok": True}))
    result = harness.run(chain(http_node()))

    assert result.status == "completed", result.failure
    assert result.output["body"] == {"ok": True}
    assert len(api.requests) == 2
    assert harness.sleep.delays == [1.0]


def test_a_429_honours_retry_after(harness: Harness) -> None:
    api = script(
        harness,
        respond(429, text="slow down", headers={"Retry-After": "7"}),
        respond(200, json={"ok": True}),
    )
    result = harness.run(chain(http_node()))

    assert result.status == "completed", result.failure
    assert len(api.requests) == 2
    assert harness.sleep.delays == [7.0]


def test_persistent_5xx_fails_with_http_error_after_the_retries(harness: Harness) -> None:
    api = script(harness, respond(503, text="down for maintenance"))
    result = harness.run(chain(http_node()))

    report = assert_failed(result, "http_error")
    assert report["details"]["status"] == 503
    assert report["details"]["body_excerpt"] == "down for maintenance"
    assert len(api.requests) == 4
    assert harness.sleep.delays == [1.0, 2.0, 4.0]


def test_a_connection_error_is_retried(harness: Harness) -> None:
    api = script(harness, fail_with(httpx.ConnectError), respond(200, json={"ok": 1}))
    result = harness.run(chain(http_node()))

    assert result.status == "completed", result.failure
    assert len(api.requests) == 2
    assert harness.sleep.delays == [1.0]


def test_retries_follow_the_configured_maximum(harness: Harness) -> None:
    api = script(harness, fail_with(httpx.ConnectError))
    result = harness.run(chain(http_node()), retry=RetrySettings(max_retries=1, jitter=0.0))

    report = assert_failed(result, "http_error")
    assert "ConnectError" in report["summary"]
    assert len(api.requests) == 2
    assert harness.sleep.delays == [1.0]


@pytest.mark.parametrize(
    ("size", "ok"), [(100, True), (101, False)], ids=["at-the-cap", "over-the-cap"]
)
def test_the_response_size_cap(harness: Harness, size: int, ok: bool) -> None:
    api = script(harness, respond(200, text="x" * size))
    result = harness.run(chain(http_node()), max_response_bytes=100)

    if ok:
        assert result.status == "completed", result.failure
        assert result.output["body"] == "x" * size
    else:
        report = assert_failed(result, "tool_error")
        assert "larger than 100 bytes" in report["summary"]
        assert report["details"]["limit"] == 100
    assert len(api.requests) == 1
    assert harness.sleep.delays == []


# -- hosts ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "policy", "reason"),
    [
        ("https://db.internal/x", {"deny_hosts": ("*.internal",)}, "deny_hosts"),
        ("https://DB.Internal/x", {"deny_hosts": ("*.internal",)}, "deny_hosts"),
        ("https://db.internal./x", {"deny_hosts": ("*.internal",)}, "deny_hosts"),
        ("https://other.test/x", {"allow_hosts": ("api.test",)}, "allow_hosts"),
        (
            "https://vault.test/x",
            {"allow_hosts": ("*.test",), "deny_hosts": ("vault.test",)},
            "deny_hosts",
        ),
        ("ftp://api.test/x", {}, "http(s)"),
        ("/relative/path", {}, "http(s)"),
    ],
    ids=[
        "denied",
        "denied-any-case",
        "denied-trailing-dot",
        "not-allowed",
        "deny-wins",
        "not-http",
        "not-absolute",
    ],
)
def test_a_refused_url_is_a_tool_error_before_any_request(
    harness: Harness, url: str, policy: dict[str, Any], reason: str
) -> None:
    api = script(harness, respond(200, json={}))
    result = harness.run(chain(http_node(url=url)), **policy)

    report = assert_failed(result, "tool_error")
    assert reason in report["summary"]
    assert api.requests == []
    assert harness.sleep.delays == []


def test_a_host_matching_allow_hosts_is_reached(harness: Harness) -> None:
    api = script(harness, respond(200, json={}))
    result = harness.run(
        chain(http_node(url="https://eu.api.test/x")),
        allow_hosts=("*.api.test",),
        deny_hosts=("*.internal",),
    )

    assert result.status == "completed", result.failure
    assert len(api.requests) == 1


def test_a_templated_value_cannot_move_the_request_to_another_host(harness: Harness) -> None:
    api = script(harness, echo)
    result = harness.run(
        chain(http_node(url="https://api.test/{{ $in.path }}")),
        {"path": "@evil.test/x"},
        allow_hosts=("api.test",),
    )

    assert result.status == "completed", result.failure
    assert api.requests[0].url.host == "api.test"


# -- outputSchema ---------------------------------------------------------------------------

ITEM_SCHEMA = {
    "type": "object",
    "properties": {"id": {"type": "integer"}, "name": {"type": "string"}},
    "required": ["id", "name"],
}


def test_a_body_matching_output_schema_is_stored(harness: Harness) -> None:
    script(harness, respond(200, json={"id": 1, "name": "kettle"}))
    doc = chain(
        http_node(outputSchema=ITEM_SCHEMA),
        node("name", "dataTransform", expression="vars.fetch.result.body.name"),
    )
    result = harness.run(doc)

    assert result.status == "completed", result.failure
    assert result.output == "kettle"


def test_an_output_schema_mismatch_is_a_schema_error_without_repair(harness: Harness) -> None:
    api = script(harness, respond(200, json={"id": "one"}))
    result = harness.run(chain(http_node(outputSchema=ITEM_SCHEMA)))

    report = assert_failed(result, "schema_error")
    pointers = {v["pointer"] for v in report["details"]["violations"]}
    assert pointers == {"/", "/id"}  # name missing at the root, id of the wrong type
    assert "outputSchema" in report["summary"]
    assert len(api.requests) == 1
    assert harness.sleep.delays == []
    assert not events_of(result, "repair_attempt")
    assert "result" not in result.vars.get("fetch", {})


# -- compressed responses -------------------------------------------------------------------


def test_requests_ask_for_no_encoding_unless_the_node_sets_one(harness: Harness) -> None:
    api = script(harness, respond(200, json={}))
    harness.run(chain(http_node(), http_node("other", headers={"accept-encoding": "gzip"})))

    first, second = api.requests
    assert first.headers["accept-encoding"] == "identity"
    assert second.headers["accept-encoding"] == "gzip"


@pytest.mark.parametrize(
    ("encoding", "encode"),
    [
        ("gzip", gzip.compress),
        ("x-gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("deflate", lambda data: zlib.compress(data)[2:-4]),  # no zlib header: raw deflate
        ("identity", lambda data: data),
    ],
    ids=["gzip", "x-gzip", "deflate", "raw-deflate", "identity"],
)
def test_a_compressed_response_is_decoded(
    harness: Harness, encoding: str, encode: Callable[[bytes], bytes]
) -> None:
    data = json.dumps({"items": list(range(2000))}).encode()
    headers = {"content-type": "application/json", "content-encoding": encoding}
    script(harness, streamed(200, encode(data), headers))
    result = harness.run(chain(http_node(headers={"Accept-Encoding": "gzip, deflate"})))

    assert result.status == "completed", result.failure
    assert result.output["body"] == {"items": list(range(2000))}


@pytest.mark.parametrize("encoding", ["br", "gzip, deflate"])
def test_a_response_in_another_encoding_is_refused(harness: Harness, encoding: str) -> None:
    script(harness, streamed(200, b"\x00" * 10, {"content-encoding": encoding}))
    report = assert_failed(harness.run(chain(http_node())), "tool_error")

    assert "decodes only gzip and deflate" in report["summary"]


def test_a_compressed_body_over_the_cap_is_refused(harness: Harness) -> None:
    packed = gzip.compress(b"a" * 10_001)
    script(harness, streamed(200, packed, {"content-encoding": "gzip"}))
    report = assert_failed(harness.run(chain(http_node()), max_response_bytes=10_000), "tool_error")

    assert "response larger than 10000 bytes" in report["summary"]


def test_a_body_that_is_not_what_its_encoding_says_is_an_http_error(harness: Harness) -> None:
    script(harness, streamed(200, b"not gzip at all", {"content-encoding": "gzip"}))
    report = assert_failed(harness.run(chain(http_node())), "http_error")

    assert "cannot be decoded" in report["summary"]


# -- the failed port ------------------------------------------------------------------------


def failed_port_doc(fetch: dict[str, Any]) -> dict[str, Any]:
    return workflow(
        [
            node("start", "start"),
            fetch,
            node("end", "end"),
            node("fallback", "dataTransform", expression="vars.fetch.error"),
            node("end-failed", "end"),
        ],
        [
            conn("start", "fetch"),
            conn("fetch", "end"),
            conn("fetch", "fallback", "failed"),
            conn("fallback", "end-failed"),
        ],
    )


def test_an_http_error_can_take_the_failed_port(harness: Harness) -> None:
    script(harness, respond(404, text="gone"))
    result = harness.run(failed_port_doc(http_node()))

    assert result.status == "completed", result.failure
    assert result.failure is None
    error = result.vars["fetch"]["error"]
    assert result.output == error
    assert error["category"] == "http_error"
    assert error["node_id"] == "fetch"
    assert error["details"]["status"] == 404
    assert error["details"]["body_excerpt"] == "gone"
    assert "result" not in result.vars["fetch"]
    started = [e["op_id"] for e in events_of(result, "op_started")]
    assert started == ["start", "fetch", "fallback", "end-failed"]


def test_the_failed_port_is_not_taken_on_success(harness: Harness) -> None:
    script(harness, respond(200, json={"fine": True}))
    result = harness.run(failed_port_doc(http_node()))

    assert result.status == "completed", result.failure
    assert result.output["body"] == {"fine": True}
    assert "error" not in result.vars["fetch"]


# -- one client per run ---------------------------------------------------------------------


@pytest.fixture
def clients(monkeypatch: pytest.MonkeyPatch) -> list[httpx.AsyncClient]:
    """Every ``httpx.AsyncClient`` created during the test, in order."""
    created: list[httpx.AsyncClient] = []

    class TrackedClient(httpx.AsyncClient):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            created.append(self)

    monkeypatch.setattr(httpx, "AsyncClient", TrackedClient)
    return created


def three_calls() -> dict[str, Any]:
    return chain(
        http_node("one", url=f"{API}/1"),
        http_node("two", url=f"{API}/2", method="POST", body={"n": 2}),
        http_node("three", url=f"{API}/3"),
    )


def test_the_calls_of_a_run_share_one_client_closed_at_the_end(
    harness: Harness, clients: list[httpx.AsyncClient]
) -> None:
    api = script(harness, respond(200, json={}))
    result = harness.run(three_calls())

    assert result.status == "completed", result.failure
    assert len(api.requests) == 3
    assert len(clients) == 1
    assert clients[0].is_closed
    assert api.closed == 1


def test_the_client_is_closed_when_the_run_fails(
    harness: Harness, clients: list[httpx.AsyncClient]
) -> None:
    api = script(harness, respond(200, json={}), respond(500, text="boom"))
    result = harness.run(three_calls(), retry=RetrySettings(max_retries=0))

    assert_failed(result, "http_error", node_id="two")
    assert len(api.requests) == 2
    assert len(clients) == 1
    assert clients[0].is_closed
    assert api.closed == 1


def test_each_run_has_its_own_client(harness: Harness, clients: list[httpx.AsyncClient]) -> None:
    script(harness, respond(200, json={}))
    harness.run(three_calls())
    harness.run(three_calls())

    assert len(clients) == 2
    assert clients[0] is not clients[1]
    assert all(client.is_closed for client in clients)


def test_a_run_without_http_calls_creates_no_client(
    harness: Harness, clients: list[httpx.AsyncClient]
) -> None:
    result = harness.run(chain(node("t", "dataTransform", expression="`1`")))

    assert result.status == "completed", result.failure
    assert clients == []


# -- secrets --------------------------------------------------------------------------------

SECRET = "tok-3f9a-very-secret-71c2"


def secret_doc(name: str = "API_TOKEN", *, then: dict[str, Any] | None = None) -> dict[str, Any]:
    fetch = http_node(
        url=f"{API}/me",
        headers={"Authorization": f"Bearer {{{{ $secrets.{name} }}}}"},
        query={"key": f"{{{{ $secrets.{name} }}}}", "page": "1"},
    )
    return chain(fetch, *([then] if then else []))


def run_files(run_dir: Path | None) -> dict[str, str]:
    assert run_dir is not None
    files = {
        str(p.relative_to(run_dir)): p.read_text(encoding="utf-8", errors="replace")
        for p in sorted(run_dir.rglob("*"))
        if p.is_file()
    }
    assert files
    return files


@pytest.mark.parametrize("fails", [False, True], ids=["completed", "failed"])
def test_a_secret_is_sent_but_never_written_to_the_run_folder(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fails: bool
) -> None:
    monkeypatch.setenv("API_TOKEN", SECRET)
    leak = respond(404, text=f"unknown token {SECRET}")
    # The second call echoes the secret back in an error body (failed) or is skipped.
    then = http_node("again", url=f"{API}/again") if fails else None
    api = script(harness, echo, leak)
    result = harness.run(
        secret_doc(then=then), store=RunStore(tmp_path), secrets_allow=("API_TOKEN",)
    )

    first = api.requests[0]
    assert first.headers["authorization"] == f"Bearer {SECRET}"  # it was really sent
    assert first.url.params["key"] == SECRET
    # echoed back, it enters the state masked: no later node sees the value
    assert result.vars["fetch"]["result"]["body"]["authorization"] == "Bearer ***"
    if fails:
        assert_failed(result, "http_error", node_id="again")
    else:
        assert result.status == "completed", result.failure

    files = run_files(result.run_dir)
    expected = {"events.jsonl", "execir.json", "result.json", "state_final.json"}
    assert expected <= set(files)
    if fails:
        assert "failure_report.json" in files
    for name, text in files.items():
        assert SECRET not in text, f"the secret is written in {name}"
    masked = {name for name, text in files.items() if "***" in text}
    assert {"events.jsonl", "result.json", "state_final.json"} <= masked
    assert "ops.jsonl" in masked
    if fails:
        assert "failure_report.json" in masked
        report = json.loads(files["failure_report.json"])
        assert report["details"]["body_excerpt"] == "unknown token ***"


def test_a_secret_not_allowed_fails_naming_the_config_key(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("API_TOKEN", SECRET)
    api = script(harness, echo)
    result = harness.run(secret_doc(), secrets_allow=("OTHER_TOKEN",))

    report = assert_failed(result, "secret_error")
    assert "$secrets.API_TOKEN" in report["summary"]
    assert "[secrets] allow" in report["summary"]
    assert SECRET not in json.dumps(report)
    assert api.requests == []


@pytest.mark.parametrize("value", ["test", "EMPTY", "ollama", "not-needed", "12345678"])
def test_a_secret_too_plain_to_mask_is_refused_before_anything_is_sent(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, value: str
) -> None:
    """A value that masking could not tell from ordinary words would be written wherever
    a response echoes it: it is refused, not sent."""
    monkeypatch.setenv("API_TOKEN", value)
    api = script(harness, echo)
    result = harness.run(secret_doc(), store=RunStore(tmp_path), secrets_allow=("API_TOKEN",))

    report = assert_failed(result, "secret_error")
    assert "$secrets.API_TOKEN" in report["summary"]
    assert "too short or too plain" in report["summary"]
    assert api.requests == []


def test_an_allowed_secret_missing_from_the_environment_fails(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("API_TOKEN", raising=False)
    api = script(harness, echo)
    result = harness.run(secret_doc(), secrets_allow=("API_TOKEN",))

    report = assert_failed(result, "secret_error")
    assert "environment variable API_TOKEN is not set" in report["summary"]
    assert api.requests == []


# -- end to end: a real server on 127.0.0.1 -------------------------------------------------


class ItemsAPI(ThreadingHTTPServer):
    """A small JSON API: ``GET /items/<id>``, ``POST /items`` (echoes the body with an id),
    ``GET /flaky`` (500 on the first call, then 200), ``GET /slow`` (answers late) and
    ``GET /drip`` (20 bytes, one every 0.5 s) and ``GET /bomb/<gzip|deflate>`` (about
    60 KB that inflate to 64 MB)."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), ItemsHandler)
        self.seen: list[tuple[str, str, int]] = []
        """(method, path, client port) of every request."""
        self.flaky_calls = 0
        self.lock = threading.Lock()
        self.closing = threading.Event()
        """Set at shutdown, so that a late answer does not outlive its test."""

    @property
    def base_url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"


class ItemsHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, so connection reuse is visible
    server: ItemsAPI

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def send_json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.wfile.write(data)  # the client may have given up (a timeout test)

    def record(self) -> None:
        with self.server.lock:
            self.server.seen.append((self.command, self.path, self.client_address[1]))

    def do_GET(self) -> None:
        self.record()
        if self.path.startswith("/items/"):
            item_id = unquote(self.path.removeprefix("/items/"))
            self.send_json(200, {"id": item_id, "name": f"item {item_id}", "price": 4.5})
        elif self.path == "/flaky":
            with self.server.lock:
                self.server.flaky_calls += 1
                first = self.server.flaky_calls == 1
            if first:
                self.send_json(500, {"error": "warming up"})
            else:
                self.send_json(200, {"ok": True})
        elif self.path == "/slow":
            # far past any timeout a test sets, so a loaded machine cannot read it in time
            self.server.closing.wait(10)
            self.send_json(200, {"late": True})
        elif self.path == "/drip":
            self.drip(20, every=0.5)
        elif self.path.startswith("/bomb/"):
            encoding = self.path.removeprefix("/bomb/")
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Encoding", encoding)
            self.send_header("Content-Length", str(len(bomb(encoding))))
            self.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(bomb(encoding))
        else:
            self.send_json(404, {"error": f"no route {self.path}"})

    def drip(self, size: int, *, every: float) -> None:
        """Answer ``size`` bytes, one byte every ``every`` seconds (until shutdown)."""
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(size))
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            for _ in range(size):
                self.wfile.write(b"x")
                self.wfile.flush()
                if self.server.closing.wait(every):
                    return

    def do_POST(self) -> None:
        self.record()
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"null")
        self.send_json(201, {"id": "new-1", "created": body})


BOMB_SIZE = 64 * 1024 * 1024


@functools.cache
def bomb(encoding: str) -> bytes:
    """``BOMB_SIZE`` zero bytes, compressed with ``encoding`` (gzip or deflate)."""
    zeros = bytes(BOMB_SIZE)
    return gzip.compress(zeros, mtime=0) if encoding == "gzip" else zlib.compress(zeros, 9)


SERVED_ITEM_SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "name": {"type": "string"},
        "price": {"type": "number"},
    },
    "required": ["id", "name", "price"],
}


@pytest.fixture
def items_api(monkeypatch: pytest.MonkeyPatch) -> Iterator[ItemsAPI]:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    server = ItemsAPI()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01})
    thread.start()
    try:
        yield server
    finally:
        server.closing.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def run_real(
    doc: dict[str, Any], sleep: FakeSleep, inputs: dict[str, Any] | None = None, **retry: Any
) -> RunResult:
    settings = RuntimeSettings(  # no transport: the guarded one, over real sockets
        http=HttpPolicy(allow_hosts=("127.0.0.1",)),
        sleep=sleep,
        retry=RetrySettings(jitter=0.0, **retry),
        gc_pacing=False,
    )
    return Runner(lower_ok(doc), settings=settings, store=RunStore(None)).run(inputs or {})


def test_end_to_end_against_a_local_server(items_api: ItemsAPI) -> None:
    base = items_api.base_url
    doc = workflow(
        [
            node("start", "start"),
            http_node(
                "item", url=f"{base}/items/{{{{ $in.id }}}}", outputSchema=SERVED_ITEM_SCHEMA
            ),
            http_node(
                "create",
                method="POST",
                url=f"{base}/items",
                body={
                    "name": "{{ $vars.item.result.body.name }}",
                    "price": "{{ $vars.item.result.body.price }}",
                },
            ),
            http_node("flaky", url=f"{base}/flaky"),
            node(
                "end",
                "end",
                output={
                    "fetched": "{{ $vars.item.result.body }}",
                    "created": "{{ $vars.create.result }}",
                    "flaky": "{{ $vars.flaky.result.body }}",
                },
            ),
        ],
        [
            conn("start", "item"),
            conn("item", "create"),
            conn("create", "flaky"),
            conn("flaky", "end"),
        ],
    )
    sleep = FakeSleep()
    result = run_real(doc, sleep, {"id": "A 7"})

    assert result.status == "completed", result.failure
    out = result.output
    assert out["fetched"] == {"id": "A 7", "name": "item A 7", "price": 4.5}
    assert out["created"]["status"] == 201
    assert out["created"]["body"] == {"id": "new-1", "created": {"name": "item A 7", "price": 4.5}}
    assert out["created"]["headers"]["content-type"] == "application/json"
    assert out["flaky"] == {"ok": True}
    assert sleep.delays == [1.0]
    requests = [(method, path) for method, path, _ in items_api.seen]
    assert requests == [
        ("GET", "/items/A%207"),
        ("POST", "/items"),
        ("GET", "/flaky"),
        ("GET", "/flaky"),
    ]
    # One pooled client: every request of the run came over the same keep-alive connection.
    assert len({port for _, _, port in items_api.seen}) == 1


def test_end_to_end_a_real_timeout(items_api: ItemsAPI) -> None:
    doc = chain(http_node(url=f"{items_api.base_url}/slow", timeoutMs=200))
    sleep = FakeSleep()
    result = run_real(doc, sleep, max_retries=1)

    report = assert_failed(result, "timeout_error")
    assert "timed out after 0.2s" in report["summary"]
    assert sleep.delays == [1.0]
    # the server's thread may record the second request after the client gave up on it
    deadline = time.monotonic() + 10
    while len(items_api.seen) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert [path for _, path, _ in items_api.seen] == ["/slow", "/slow"]


def test_the_timeout_bounds_the_whole_call_not_each_read(items_api: ItemsAPI) -> None:
    # Every read gets a byte within 0.5 s, so a per-read timeout of 1 s never trips and
    # the call would take 10 s; the deadline ends it after 1 s.
    doc = chain(http_node(url=f"{items_api.base_url}/drip", timeoutMs=1000))
    started = time.monotonic()
    result = run_real(doc, FakeSleep(), max_retries=0)

    report = assert_failed(result, "timeout_error")
    assert "timed out after 1s" in report["summary"]
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_a_compressed_body_is_refused_before_it_inflates_past_the_cap(
    items_api: ItemsAPI, encoding: str
) -> None:
    # The 64 KB or so on the wire inflate to 64 MB; with a 1 MB cap no more than the cap
    # (and a chunk) may ever be held, not the 64 MB a whole chunk inflated at once makes.
    bomb(encoding)  # made before tracing
    settings = RuntimeSettings(
        http=HttpPolicy(allow_hosts=("127.0.0.1",), max_response_bytes=1_000_000),
        sleep=FakeSleep(),
        gc_pacing=False,
    )
    runner = Runner(
        lower_ok(chain(http_node(url=f"{items_api.base_url}/bomb/{encoding}"))),
        settings=settings,
        store=RunStore(None),
    )
    tracemalloc.start()
    try:
        result = runner.run({})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()

    report = assert_failed(result, "tool_error")
    assert "response larger than 1000000 bytes" in report["summary"]
    assert peak < 16 * 1024 * 1024


def test_end_to_end_a_real_404(items_api: ItemsAPI) -> None:
    doc = chain(http_node(url=f"{items_api.base_url}/nowhere"))
    sleep = FakeSleep()
    result = run_real(doc, sleep)

    report = assert_failed(result, "http_error")
    assert report["details"]["status"] == 404
    assert json.loads(report["details"]["body_excerpt"]) == {"error": "no route /nowhere"}
    assert sleep.delays == []
    assert len(items_api.seen) == 1


# -- error messages never carry a secret ----------------------------------------------------


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("{{ $secrets.API_TOKEN }}/x", "must be an absolute http(s) URL"),
        (f"{API}/bot{{{{ $secrets.API_TOKEN }}}}/..", "may not contain . or .. segments"),
        (f"{API}/bot{{{{ $secrets.API_TOKEN }}}}/x", "returned 404"),
        (f"{API}/bot{{{{ $secrets.API_TOKEN }}}}/a%2Bb", "returned 404"),
    ],
    ids=["base", "dot-segment", "404", "404-encoded"],
)
def test_an_error_taking_the_failed_route_does_not_carry_the_secret(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, url: str, says: str
) -> None:
    # The error lands in $vars.fetch.error, where any later node may read it and send it
    # to another destination: the secret may not be in it, however the URL was made.
    secret = "tok+3f9a/very=secret"  # percent-encoded in a path: tok%2B3f9a/very%3Dsecret
    monkeypatch.setenv("API_TOKEN", secret)
    script(harness, respond(404, text="nope"))
    result = harness.run(failed_port_doc(http_node(url=url)), secrets_allow=("API_TOKEN",))

    assert result.status == "completed", result.failure
    error = result.vars["fetch"]["error"]
    assert says in error["summary"]
    everything = json.dumps([result.vars, result.output, result.events])
    for form in (secret, "tok%2B3f9a", "very%3Dsecret", "tok+3f9a"):
        assert form not in everything


def test_a_404_names_the_secret_by_its_reference(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("API_TOKEN", SECRET)
    script(harness, respond(404, text="nope"))
    doc = failed_port_doc(http_node(url=f"{API}/bot{{{{ $secrets.API_TOKEN }}}}/x?page=2"))
    result = harness.run(doc, secrets_allow=("API_TOKEN",))

    summary = result.vars["fetch"]["error"]["summary"]
    assert summary == f"GET {API}/bot{{{{ $secrets.API_TOKEN }}}}/x returned 404: nope"


def test_an_error_echoing_the_secret_with_non_canonical_escapes_names_its_reference(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``%2D`` and ``%2d`` stand for ``-`` in a URL: a server quoting the token so is
    still quoting the token."""
    monkeypatch.setenv("API_TOKEN", SECRET)
    quoted = SECRET.replace("-", "%2D", 1).replace("-", "%2d")
    script(harness, respond(404, text=f"unknown key={quoted}"))
    doc = failed_port_doc(http_node(url=f"{API}/me?key={{{{ $secrets.API_TOKEN }}}}"))
    result = harness.run(doc, secrets_allow=("API_TOKEN",))

    error = result.vars["fetch"]["error"]
    assert error["details"]["body_excerpt"] == "unknown key={{ $secrets.API_TOKEN }}"


def test_an_error_does_not_show_the_user_and_password_of_the_url(harness: Harness) -> None:
    script(harness, respond(404, text="nope"))
    doc = failed_port_doc(http_node(url="{{ $in.base }}/x"))
    result = harness.run(doc, {"base": "https://bot:pa55word@api.test"})

    summary = result.vars["fetch"]["error"]["summary"]
    assert summary == "GET https://api.test/x returned 404: nope"


def test_an_error_stored_in_state_is_masked_with_the_run_secrets(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The second node does not read the secret, but the server quotes it back in its
    # error body: the report the walk stores for the failed route is masked all the same.
    monkeypatch.setenv("API_TOKEN", SECRET)
    script(harness, respond(404, text=f"unknown token {SECRET}"))
    doc = failed_port_doc(http_node(url=f"{API}/again"))
    result = harness.run(doc, secrets_allow=("API_TOKEN",))

    assert result.status == "completed", result.failure
    error = result.vars["fetch"]["error"]
    assert error["details"]["body_excerpt"] == "unknown token ***"
    assert SECRET not in json.dumps([result.vars, result.output])

"""MockProvider: scripted completions per node, for tests, examples and offline runs.

Script format (docs/mocks.md)::

    {"responses": {"<nodeId>": ["<text or JSON value>", ...]}, "default": "<optional>",
     "tools": {"<mcp or httpRequest nodeId> | <server>/<tool>": [<result>, ...]}}

Each call made for node X takes the next item of X's list (JSON values are
serialised to text); a call for an unlisted node takes ``default``; a node that is
called with neither, or whose list is used up, fails that call with ``mock_exhausted``
and a message showing an answer of the shape the node expects. A classifier (the
``{"branch": <label>}`` op of a natural-language ifElse/switch) may be answered with
its plain label. ``tools`` answers tool calls the same way (``tool_answer``): an mcp or
httpRequest node's list by its id, an MCP tool's by ``server/tool`` (how agents' tool
calls are keyed); a call the script does not list goes to the real server. An item ``{"$error": "<error_type>", "message": ..., "retry_after": ...}``
makes that call fail with that Lattice error type instead (to script provider failures).
An item ``{"$tool_calls": [{"name": "Read", "arguments": {...}}, ...], "text": "…"}``
answers an agent's turn with those tool calls (finish reason ``tool_calls``; ``text``,
optional, is what the model says beside them); the next item answers the next turn. The
calls get the ids ``call_<n>``, numbered on from the tool calls already in the request's
transcript, so a replayed or resumed turn gets the same ids.

The provider's ``checkpoint`` (saved in run folders) is its cursor and a digest of its
script. A resume with the same script goes on from the cursor (past a scripted failure);
a resume with an edited script starts the op that failed again from where the cursor
stood when that op started, so the edited lists are asked afresh.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

from lattice.document.limits import check_json_value
from lattice.errors import LatticeRunError, LatticeUserError
from lattice.llm.base import LLMRequest, LLMResponse, TokenUsage, ToolCall, estimate_tokens
from lattice.llm.examples import branch_labels, example_value
from lattice.text import holds_lone_surrogate

_UNSET: Any = object()
TOOL_CURSOR = "tool:"
"""Prefix of the cursor entries of ``tools`` lists (node ids and ``server/tool`` keys)."""


def read_mock_script(path: str | Path) -> Any:
    """The parsed JSON of the mock script file ``path``; an unreadable file or one that is
    not JSON is a LatticeUserError (``mock_error``)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise LatticeUserError(
            f"cannot read mock script {path}: {exc.strerror}", error_type="mock_error"
        ) from exc
    except json.JSONDecodeError as exc:
        raise LatticeUserError(
            f"mock script {path} is not valid JSON: {exc.msg} (line {exc.lineno})",
            error_type="mock_error",
        ) from None
    except RecursionError:
        raise LatticeUserError(
            f"mock script {path} is not valid JSON: it is nested too deeply",
            error_type="mock_error",
        ) from None


class MockProvider:
    """A scripted provider. ``calls`` keeps every request, in order, for assertions.

    ``latency`` (seconds) makes each call ``await asyncio.sleep``, for concurrency tests.
    ``pieces`` (2 or more) streams the answers of streaming requests (``on_delta`` set)
    in that many pieces, ``latency`` spread evenly before them, for tests and demos of
    live answers; otherwise answers come whole, as they always do without a stream.
    ``keep_calls=False`` keeps none (long-lived use, benchmarks).
    """

    name = "mock"

    def __init__(
        self,
        responses: Mapping[str, list[Any]] | None = None,
        *,
        default: Any = _UNSET,
        latency: float = 0.0,
        pieces: int = 0,
        model: str = "mock-model",
        keep_calls: bool = True,
        tools: Mapping[str, list[Any]] | None = None,
    ) -> None:
        self.responses = {node: list(items) for node, items in (responses or {}).items()}
        self.default = default
        self.tools = {key: list(items) for key, items in (tools or {}).items()}
        self.latency = latency
        self.pieces = pieces
        self.model = model
        self.digest = script_digest(self.responses, default, self.tools)
        """A digest of the script (its lists and default), recorded with the cursor."""
        self.cursor: dict[str, int] = {}
        self.calls: list[LLMRequest] = []
        self.keep_calls = keep_calls

    @classmethod
    def from_script(cls, script: Mapping[str, Any], **kwargs: Any) -> MockProvider:
        """Build from a parsed mock script; a malformed script is a LatticeUserError."""
        check_script(script)
        default = script.get("default", _UNSET)
        tools = script.get("tools") or None
        return cls(script.get("responses", {}), default=default, tools=tools, **kwargs)

    @classmethod
    def from_file(cls, path: str | Path, **kwargs: Any) -> MockProvider:
        """Read a mock script file; unreadable or invalid files are LatticeUserErrors."""
        script = read_mock_script(path)
        try:
            return cls.from_script(script, **kwargs)
        except LatticeUserError as exc:
            message = exc.message.removeprefix("mock script: ")
            raise LatticeUserError(
                f"mock script {path}: {message}", error_type="mock_error"
            ) from None

    def covers(self, node_id: str) -> bool:
        """True when a call for ``node_id`` has a scripted answer (list or default)."""
        return node_id in self.responses or self.default is not _UNSET

    def tool_key(self, node_id: str, server: str | None, tool: str | None) -> str | None:
        """The ``tools`` key that answers a call of ``node_id`` (its id, else
        ``server/tool``); None when the script leaves the call to the real tool.
        ``tool`` None (chosen by a model later) matches any ``server/…`` key."""
        if node_id in self.tools:
            return node_id
        if server is None:
            return None
        if tool is not None:
            key = f"{server}/{tool}"
            return key if key in self.tools else None
        return next((key for key in self.tools if key.startswith(server + "/")), None)

    def tool_answer(self, key: str) -> Any:
        """The next scripted result for the ``tools`` key ``key``; a used-up list, or an
        ``{"$error": …}`` item, fails the call."""
        items = self.tools[key]
        index = self.cursor.get(TOOL_CURSOR + key, 0)
        if index >= len(items):
            raise LatticeRunError(
                f"the mock script's tool results for {key!r} are used up "
                f"({len(items)} given, call {index + 1} asked); add more under "
                f'"tools": {{"{key}": [...]}}',
                error_type="mock_exhausted",
            )
        self.cursor[TOOL_CURSOR + key] = index + 1
        item = items[index]
        if isinstance(item, Mapping) and "$error" in item:
            details = {k: v for k, v in item.items() if k not in ("$error", "message")}
            raise LatticeRunError(
                str(item.get("message") or f"mock {item['$error']}"),
                error_type=str(item["$error"]),
                details=details,
            )
        return item

    def checkpoint(self) -> dict[str, Any]:
        """How far each node's list has been consumed, and the digest of the script it
        was consumed from (saved in run folders for resume)."""
        return {"script": self.digest, "cursor": dict(self.cursor)}

    def restore(self, state: Mapping[str, Any], *, committed: Any = None) -> None:
        """Go on from ``state`` (a ``checkpoint``, or an older plain node → count map).

        ``committed`` is the state as of the last op the run committed, given when the
        resume runs a failed op again: if ``state`` was taken with another script (the
        user edited it since), the cursor goes back to ``committed``, so that op asks
        the edited script afresh; with the same script it goes on from ``state``.
        """
        cursor, digest = _cursor_of(state)
        if committed is not None and digest is not None and digest != self.digest:
            cursor, _ = _cursor_of(committed)
        self.cursor = cursor

    def _next_item(self, node: str, request: LLMRequest) -> Any:
        items = self.responses.get(node)
        if items is None:
            if self.default is _UNSET:
                raise LatticeRunError(
                    f"the mock script has no responses for node {node!r} and no default; "
                    f"add one, for example: {_expected(node, request)}",
                    error_type="mock_exhausted",
                    node_id=node,
                )
            return self.default
        index = self.cursor.get(node, 0)
        if index >= len(items):
            raise LatticeRunError(
                f"the mock script's responses for node {node!r} are used up "
                f"({len(items)} given, call {index + 1} asked); add more, for example "
                f"{_expected(node, request)}",
                error_type="mock_exhausted",
                node_id=node,
            )
        self.cursor[node] = index + 1
        return items[index]

    async def complete(self, request: LLMRequest) -> LLMResponse:
        request.sending()
        if self.keep_calls:
            self.calls.append(request)
        started = time.perf_counter()
        item = self._next_item(request.node_id or request.op_id or "", request)
        streamed = self.pieces > 1 and request.on_delta is not None
        if self.latency and not streamed:
            await asyncio.sleep(self.latency)
        calls: tuple[ToolCall, ...] = ()
        if isinstance(item, str):
            text = _as_branch(item, request.response_schema)
        elif isinstance(item, Mapping) and "$tool_calls" in item:
            text, calls = str(item.get("text") or ""), _tool_calls(item, request)
        elif isinstance(item, Mapping) and "$error" in item:
            details = {k: v for k, v in item.items() if k not in ("$error", "message")}
            raise LatticeRunError(
                str(item.get("message") or f"mock {item['$error']}"),
                error_type=str(item["$error"]),
                node_id=request.node_id,
                details=details,
            )
        else:
            text = json.dumps(item, ensure_ascii=False)
        if streamed and text:
            await self._stream(text, request)
        output = text + "".join(call.name + call.arguments_json() for call in calls)
        return LLMResponse(
            text=text,
            usage=TokenUsage((request.size_chars() + 3) // 4, estimate_tokens(output)),
            model=request.model or self.model,
            latency_ms=(time.perf_counter() - started) * 1000,
            finish_reason="tool_calls" if calls else "stop",
            tool_calls=calls,
        )

    async def _stream(self, text: str, request: LLMRequest) -> None:
        """Pass ``text`` on to ``request.on_delta`` in ``pieces`` pieces, each after its
        share of ``latency``."""
        assert request.on_delta is not None
        size = -(-len(text) // self.pieces) or 1
        for start in range(0, max(len(text), 1), size):
            await asyncio.sleep(self.latency / self.pieces)
            request.on_delta(text[start : start + size])


def check_script(script: Any) -> None:
    """Refuse a malformed mock script with a LatticeUserError naming the key at fault."""
    if not isinstance(script, Mapping):
        _bad('a mock script is a JSON object {"responses": {...}}', prefix="")
    _check_unicode(script)
    unknown = set(script) - {"responses", "default", "description", "tools"}
    if "rows" in unknown:
        _bad(
            '"rows" (answers per dataset row) is for lattice batch only; lattice run and '
            'lattice resume read {"responses": {...}, "default": ...} (to go on with a '
            "batch's failed rows, run the batch again with --retry-failed)"
        )
    if unknown:
        _bad(
            f'unknown keys {sorted(unknown)}: a node\'s answers go under "responses", e.g. '
            f'{{"responses": {{"{sorted(unknown)[0]}": ["…"]}}}}'
        )
    responses = script.get("responses", {})
    if not isinstance(responses, Mapping):
        _bad('"responses" maps node ids to lists of completions, e.g. {"greet": ["hi"]}')
    for node, items in responses.items():
        where = f"responses[{json.dumps(node, ensure_ascii=False)}]"
        if not isinstance(items, list):
            example = json.dumps([items] if isinstance(items, str) else ["…"], ensure_ascii=False)
            _bad(f"{where} must be a list of completions, e.g. {example}")
        for index, item in enumerate(items):
            _check_item(item, f"{where}[{index}]")
    tools = script.get("tools", {})
    if not isinstance(tools, Mapping):
        _bad(
            '"tools" maps mcp/httpRequest node ids or "server/tool" to lists of results, '
            'e.g. {"tools": {"github/get_issue": [{"title": "…"}]}}'
        )
    for key, items in tools.items():
        where = f"tools[{json.dumps(key, ensure_ascii=False)}]"
        if not isinstance(items, list):
            _bad(f'{where} must be a list of tool results, e.g. [{{"ok": true}}]')
        for index, item in enumerate(items):
            if isinstance(item, Mapping) and "$error" in item:
                _check_error_item(item, f"{where}[{index}]")
    if "default" in script:
        _check_item(script["default"], "default")


def _check_unicode(script: Mapping[str, Any]) -> None:
    """Refuse a script holding a lone surrogate (``"\\ud800"`` in JSON), which no run
    folder can record, naming its place (JSON pointer) when it is not nested too deep."""
    if holds_lone_surrogate(dict(script)):
        found = [p for p in check_json_value(dict(script)) if p.code == "invalid-string"]
        where = f"{found[0].pointer}: " if found else ""
        _bad(f"{where}a string holds a lone surrogate (not Unicode text)")


def _check_item(item: Any, where: str) -> None:
    if isinstance(item, Mapping) and "$error" in item:
        _check_error_item(item, where)
    elif isinstance(item, Mapping) and "$tool_calls" in item:
        _check_tool_calls_item(item, where)


def _check_tool_calls_item(item: Mapping[str, Any], where: str) -> None:
    """A scripted agent turn: ``{"$tool_calls": [{"name": tool, "arguments"?: {...}}, ...],
    "text"?: text}``."""
    shape = '{"$tool_calls": [{"name": "Read", "arguments": {"file_path": "README.md"}}]}'
    unknown = sorted(set(item) - {"$tool_calls", "text"})
    if unknown:
        _bad(f'{where}: unknown keys {unknown} beside "$tool_calls" (only "text"), e.g. {shape}')
    calls = item["$tool_calls"]
    if not isinstance(calls, list) or not calls:
        _bad(f'{where}: "$tool_calls" must be a non-empty list of calls, e.g. {shape}')
    if "text" in item and not isinstance(item["text"], str):
        _bad(f'{where}: "text" must be text, e.g. {shape}')
    for index, call in enumerate(calls):
        at = f'{where}["$tool_calls"][{index}]'
        if not isinstance(call, Mapping):
            _bad(f'{at} must be an object {{"name": …, "arguments": {{…}}}}, e.g. {shape}')
        extra = sorted(set(call) - {"name", "arguments"})
        if extra:
            _bad(f'{at}: unknown keys {extra} (a call has "name" and "arguments"), e.g. {shape}')
        if not isinstance(call.get("name"), str) or not call["name"].strip():
            _bad(f'{at}: "name" must be a tool\'s name, e.g. {shape}')
        if not isinstance(call.get("arguments", {}), Mapping):
            _bad(f'{at}: "arguments" must be an object, e.g. {shape}')


NO_TOOLS_NEXT = (
    "grant the agent its tools (--workspace DIR --allow …, or [agents] in lattice.toml) "
    "and start a new run: a resumed run keeps the grants it was started with"
)


def _tool_calls(item: Mapping[str, Any], request: LLMRequest) -> tuple[ToolCall, ...]:
    """A scripted turn's calls, with ids ``call_<n>`` numbered on from the calls already
    in the transcript (deterministic: the same transcript gives the same ids)."""
    if not request.tools:
        raise LatticeRunError(
            f"the mock script answers node {request.node_id!r} with tool calls, but this "
            'request offers no tools (a "$tool_calls" item answers an agent\'s turn): the '
            "node is not an agent, or none of its tools is granted (the warnings at the "
            "start of the run name them)",
            error_type="invalid_request",
            node_id=request.node_id,
            details={"recovery_action": NO_TOOLS_NEXT, "resumable": False},
        )
    before = sum(len(m.tool_calls) for m in request.messages)
    return tuple(
        ToolCall(f"call_{before + n}", str(call["name"]), dict(call.get("arguments") or {}))
        for n, call in enumerate(item["$tool_calls"], 1)
    )


def _check_error_item(item: Mapping[str, Any], where: str) -> None:
    """A scripted failure: ``{"$error": "<error_type>", "message"?: text,
    "retry_after"?: seconds}``."""
    shape = '{"$error": "rate_limit_error", "message": "…", "retry_after": 2}'
    if not isinstance(item["$error"], str) or not item["$error"].strip():
        _bad(f'{where}: "$error" must be an error type (text), e.g. {shape}')
    if "message" in item and not isinstance(item["message"], str):
        _bad(f'{where}: "message" must be text, e.g. {shape}')
    retry_after = item.get("retry_after")
    if retry_after is not None and (
        isinstance(retry_after, bool) or not isinstance(retry_after, int | float) or retry_after < 0
    ):
        _bad(f'{where}: "retry_after" must be a number of seconds (0 or more), e.g. {shape}')


def _bad(message: str, *, prefix: str = "mock script: ") -> NoReturn:
    raise LatticeUserError(prefix + message, error_type="mock_error")


def script_digest(
    responses: Mapping[str, list[Any]],
    default: Any = _UNSET,
    tools: Mapping[str, list[Any]] | None = None,
) -> str:
    """The sha256 of a script's lists, default and tool results (what its answers
    depend on)."""
    script: dict[str, Any] = {"responses": responses}
    if default is not _UNSET:
        script["default"] = default
    if tools:
        script["tools"] = tools
    text = json.dumps(script, sort_keys=True, ensure_ascii=False, default=repr)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _cursor_of(state: Any) -> tuple[dict[str, int], str | None]:
    """The cursor and script digest of a saved state; an older state is the bare cursor
    (no digest)."""
    if not isinstance(state, Mapping):
        return {}, None
    if isinstance(state.get("cursor"), Mapping):
        digest = state.get("script")
        return _cursor_of(state["cursor"])[0], digest if isinstance(digest, str) else None
    return {str(k): int(v) for k, v in state.items() if isinstance(v, int)}, None


def _as_branch(text: str, schema: Any) -> str:
    """A classifier's plain label as its ``{"branch": ...}`` answer; other text as it is."""
    labels = branch_labels(schema)
    if labels is None:
        return text
    wanted = text.strip()
    for label in labels:
        if wanted == label or wanted.lower() == label.lower():
            return json.dumps({"branch": label}, ensure_ascii=False)
    return text


def _expected(node: str, request: LLMRequest) -> str:
    """``"<node>": [<an answer of the shape the node expects>]``."""
    labels = branch_labels(request.response_schema)
    if labels is not None:
        answer: Any = labels[0]
        shape = f" (one of the labels {', '.join(repr(label) for label in labels)})"
    elif request.response_schema is not None:
        answer, shape = example_value(request.response_schema), " (a value of its output schema)"
    else:
        answer, shape = "some text", " (free text)"
    if request.tools:
        call = {"name": request.tools[0].name, "arguments": {}}
        shape += f', or a turn of tool calls: {{"$tool_calls": [{json.dumps(call)}]}}'
    return f'"{node}": [{json.dumps(answer, ensure_ascii=False)}]{shape}'

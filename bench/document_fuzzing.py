"""Mutations of workflow documents, and the counting server their remote ``$ref``s point
at, for fuzzing lowering: ``bench/fuzz_documents.py`` runs them by the thousand, and
the tests (``tests/fuzz``, ``tests/lower/test_property.py``,
``tests/test_untrusted_schemas.py``) sample them.

``mutate(doc, rng, count)`` returns a mutated deep copy of ``doc``: keys dropped,
duplicated, renamed or retyped, values swapped for odd types (non-finite numbers, huge
integers, lone surrogates, long strings), strings truncated, values nested deeper,
random templates and conditions (``{{``, ``$secrets``), odd node ids, sub-flows that
call themselves. ``mutate_text`` garbles the JSON text itself (for the file reader).
Everything is driven by ``rng`` so a seed reproduces a document.

Schemas are mutated too (``odd_schema``): ``$ref`` to URLs (``REMOTE_URL``, which the
bench points at a ``CountingServer``), to files and to pointers that
lead nowhere, ``$id``/``$schema`` URLs, and ``pattern`` / ``patternProperties`` with
nested quantifiers (``CATASTROPHIC_PATTERNS``); conditions get ``matches`` with them.

``probe(doc)`` lowers a document and, when lowering accepts it, emits every format and
builds a Runner; it returns None when all went as the standard says (IR, or a
``LatticeUserError``) and the exception otherwise.
"""

from __future__ import annotations

import copy
import http.server
import itertools
import json
import os
import random
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
CORPUS = Path(os.environ.get("LATTICE_CORPUS") or REPO.parent / "shared" / "corpus" / "ccwf")
_NOT_DOCUMENTS = (".mock.json", ".answers.json", ".inputs.json")

NODE_TYPES = (
    "start",
    "end",
    "prompt",
    "subAgent",
    "ifElse",
    "switch",
    "askUserQuestion",
    "mcp",
    "httpRequest",
    "variableStore",
    "dataTransform",
    "subAgentFlow",
    "skill",
    "codex",
    "group",
)
DATA_KEYS = (
    "prompt",
    "system",
    "agentDefinition",
    "description",
    "model",
    "modelClass",
    "outputSchema",
    "evaluationTarget",
    "branches",
    "options",
    "questionText",
    "multiSelect",
    "expression",
    "input",
    "operation",
    "name",
    "value",
    "url",
    "method",
    "headers",
    "body",
    "query",
    "inputs",
    "output",
    "variables",
    "subAgentFlowId",
    "mode",
    "serverId",
    "toolName",
    "toolDescription",
    "parameterValues",
    "aiParameterConfig",
    "aiToolSelectionConfig",
    "parameters",
    "repair",
    "escalate",
    "invariants",
    "template",
    "temperature",
    "topP",
    "maxTokens",
    "timeoutMs",
    "responseType",
    "policies",
    "scope",
    "useAiSuggestions",
)
TEMPLATE_PIECES = (
    "{{",
    "}}",
    "{{ }}",
    "{",
    "}",
    "$in",
    "$in.",
    "$in.topic",
    "$vars",
    "$vars.",
    "$vars.start.result",
    "$secrets.TOKEN",
    "$secrets",
    "$ctx.run_id",
    "$ctx.nope",
    "$tmp.x",
    '["a\\\'b"]',
    '["x"]',
    "[0]",
    "[-1]",
    ".result",
    ".error",
    " ",
    "\n",
    "name",
    "jmespath: ",
    "== ",
    '"billing"',
    "contains ",
    "matches ",
    '"["',
    "in ",
    "[1, 2]",
    "> ",
    "0.5",
    "exists",
    "vars.",
    "\ud800",
)
REMOTE_URL = "http://127.0.0.1:9/schema.json"
"""Where mutated ``$ref``s point (the bench sets a counting server's URL)."""
CATASTROPHIC_PATTERNS = (
    r"^(a+)+$",
    r"^(a|aa)+$",
    r"^(a|aa|aaa)+$",
    r"^(a|a)+$",
    r"(a|aa)+b",
    r"^(a|a?)+$",
    r"(x+x+)+y",
    r"^(\w+\s?)*$",
    r"^([a-z]+)*[0-9]$",
    r"(a{1000}){1000}",
    r"((a{100}){100}){100}",
    r"(?:(?:a*)*)*b",
    r"(",
)
STALLING_PATTERNS = (r"^(a|aa)+$", r"^(a|aa|aaa)+$", r"^(a|a)+$", r"(a|aa)+b")
"""Those of them on which even the ``regex`` package backtracks for long against ``VICTIM``."""
VICTIM = "a" * 36 + "!"
"""A text on which the catastrophic patterns backtrack for long."""
ODD_IDS = ("a.b", "x y", "{{", "}}", "$in", "a#call", "a__b", "-", "0", "é", "a/b", "~", "\ud800")


def document_paths() -> list[Path]:
    """The corpus documents and every document shipped in the repository."""
    paths = sorted(CORPUS.glob("*.json")) if CORPUS.is_dir() else []
    for root in (REPO / "workflows", REPO / "lattice" / "planner" / "workflows"):
        paths += sorted(p for p in root.glob("**/*.json") if not p.name.endswith(_NOT_DOCUMENTS))
    return [p for p in paths if "mocks" not in p.parts]


def load_documents() -> list[tuple[str, Any]]:
    """``(name, parsed JSON)`` of every document of ``document_paths``."""
    return [(p.name, json.loads(p.read_text(encoding="utf-8"))) for p in document_paths()]


class CountingServer:
    """An HTTP server on 127.0.0.1 (an ephemeral port, a daemon thread) that answers
    every GET with a JSON Schema and records the path of each in ``hits``: whatever
    reaches it was fetched when nothing should have been. ``close()`` stops it."""

    SCHEMA = b'{"type": "string"}'

    def __init__(self, path: str = "/schema.json") -> None:
        self.hits: list[str] = []
        hits, body = self.hits, self.SCHEMA

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                hits.append(self.path)
                self.send_response(200)
                self.send_header("Content-Type", "application/schema+json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}{path}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# -- picking places ------------------------------------------------------------------------


def _body(doc: Any) -> Any:
    if isinstance(doc, dict) and isinstance(doc.get("workflow"), dict) and "nodes" not in doc:
        return doc["workflow"]
    return doc


def _slots(value: Any, depth: int = 0) -> Iterator[tuple[Any, Any]]:
    """Every ``(container, key)`` inside ``value``, depth-first (bounded)."""
    if depth > 40:
        return
    if isinstance(value, dict):
        for key in list(value):
            yield value, key
            yield from _slots(value[key], depth + 1)
    elif isinstance(value, list):
        for index in range(len(value)):
            yield value, index
            yield from _slots(value[index], depth + 1)


def _all_nodes(body: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if not isinstance(body, dict):
        return out
    lists = [body.get("nodes")]
    flows = body.get("subAgentFlows")
    if isinstance(flows, list):
        lists += [f.get("nodes") for f in flows if isinstance(f, dict)]
    for items in lists:
        if isinstance(items, list):
            out += [n for n in items if isinstance(n, dict)]
    return out


def _node_ids(body: Any) -> list[str]:
    return [n["id"] for n in _all_nodes(body) if isinstance(n.get("id"), str)]


# -- values --------------------------------------------------------------------------------


def random_template(rng: random.Random, ids: list[str]) -> str:
    """A string of template fragments: sometimes valid, often not."""
    pieces = list(TEMPLATE_PIECES) + [f"$vars.{i}.result" for i in ids[:5]]
    if rng.random() < 0.5:
        inner = rng.choice(pieces) + "".join(rng.choice(pieces) for _ in range(rng.randint(0, 2)))
        return rng.choice(("", "x ", "Hi ")) + "{{ " + inner + " }}" + rng.choice(("", " y"))
    return "".join(rng.choice(pieces) for _ in range(rng.randint(1, 6)))


def odd_value(rng: random.Random, ids: list[str]) -> Any:  # noqa: C901
    """A value of a type or size documents rarely hold."""
    choice = rng.randrange(24)
    if choice == 0:
        return None
    if choice == 1:
        return rng.choice((True, False))
    if choice == 2:
        return rng.choice((0, -1, 1, 2**31, -(2**63), 10**30, 10**400))
    if choice == 3:
        return rng.choice((0.5, -1e-9, 1e308, float("inf"), float("-inf"), float("nan")))
    if choice == 4:
        return ""
    if choice == 5:
        return "a" * rng.choice((1, 100, 70_000))
    if choice == 6:
        return []
    if choice == 7:
        return {}
    if choice == 8:
        return [[[]]]
    if choice == 9:
        return {"type": rng.choice(("string", ["string"], {"x": 1}, 3, None))}
    if choice == 10:
        return [{"name": rng.choice(("q", 1, None)), "type": rng.choice((["string"], "x", {}))}]
    if choice == 11:
        return rng.choice(ODD_IDS)
    if choice == 12:
        return rng.choice(NODE_TYPES)
    if choice == 13:
        return {"label": random_template(rng, ids), "condition": random_template(rng, ids)}
    if choice == 14:
        return [
            {"label": rng.choice(("a", "", "default", 1)), "condition": random_template(rng, ids)}
            for _ in range(rng.randint(0, 3))
        ]
    if choice == 15:
        return {"maxAttempts": rng.choice((0, 1, 11, "x", 1.5))}
    if choice == 16:
        return {"$ref": "#/nope"} if rng.random() < 0.5 else {"type": "object", "properties": []}
    if choice == 17:
        return {"K": random_template(rng, ids)}
    if choice == 18:
        return rng.choice(ids) if ids else "x"
    if choice == 19:
        return "\ud800" + rng.choice(("", "x"))
    return random_template(rng, ids)


def _outside_refs() -> tuple[str, ...]:
    return (
        REMOTE_URL,
        REMOTE_URL.replace("http:", "https:"),
        REMOTE_URL + "#/definitions/x",
        "file:///etc/passwd",
        "/etc/passwd",
        "schema.json",
        "../secrets.json#/x",
        "urn:example:schema",
        "//127.0.0.1:9/x",
        "",
    )


_LOCAL_REFS = ("#/definitions/nope", "#/$defs/missing", "#nope", "#/properties/a/0", "#", "#/")


def _pattern(rng: random.Random) -> str:
    return rng.choice(STALLING_PATTERNS if rng.random() < 0.5 else CATASTROPHIC_PATTERNS)


def odd_schema(rng: random.Random) -> Any:
    """A JSON Schema that reaches out, points nowhere or backtracks catastrophically."""
    choice = rng.randrange(8)
    if choice == 0:
        return {"$ref": rng.choice(_outside_refs())}
    if choice == 1:
        return {"type": "object", "properties": {"a": {"$ref": rng.choice(_LOCAL_REFS)}}}
    if choice == 2:
        return {
            "type": "object",
            "properties": {"a": {"type": "string", "pattern": _pattern(rng)}},
            "required": ["a"],
        }
    if choice == 3:
        closed = rng.choice(("additionalProperties", "unevaluatedProperties"))
        return {
            "type": "object",
            "patternProperties": {_pattern(rng): {}},
            closed: False,
        }
    if choice == 4:
        return {
            rng.choice(("$id", "$schema")): REMOTE_URL,
            "$defs": {"x": {"$ref": rng.choice((*_outside_refs(), *_LOCAL_REFS))}},
            "$ref": "#/$defs/x",
        }
    if choice == 5:
        return {"$dynamicRef": rng.choice((*_outside_refs(), "#meta"))}
    if choice == 6:
        return {
            "type": "array",
            "items": {"type": "string", "pattern": _pattern(rng)},
        }
    return {"$defs": {"x": {"$ref": "#/$defs/y"}, "y": {"$ref": "#/$defs/x"}}, "$ref": "#/$defs/x"}


def _schema_mutation(nodes: list[dict[str, Any]], rng: random.Random) -> None:
    """One node's schema (or an ifElse condition) given an odd part: the whole schema,
    or one property of it."""
    node = rng.choice(nodes)
    data = node.get("data")
    if not isinstance(data, dict):
        node["data"] = data = {}
    if node.get("type") in ("ifElse", "switch") and rng.random() < 0.7:
        condition = "matches " + json.dumps(_pattern(rng))
        data["branches"] = [{"label": "odd", "condition": condition}, {"label": "else"}]
        inputs = [n.get("data", {}).get("inputs") for n in nodes if n.get("type") == "start"]
        names = [
            name
            for schema in inputs
            if isinstance(schema, dict) and isinstance(schema.get("properties"), dict)
            for name in schema["properties"]
        ]
        if names and rng.random() < 0.5:  # an input: the bench gives it VICTIM half the time
            data["evaluationTarget"] = f"$in.{rng.choice(names)}"
        return
    key = "inputs" if node.get("type") == "start" else "outputSchema"
    schema = data.get(key)
    odd = odd_schema(rng)
    if (
        isinstance(schema, dict)
        and isinstance(schema.get("properties"), dict)
        and rng.random() < 0.5
    ):
        names = list(schema["properties"]) or ["a"]
        schema["properties"][rng.choice(names)] = odd
    else:
        data[key] = odd


def _deepen(value: Any, levels: int, rng: random.Random) -> Any:
    for _ in range(levels):
        value = [value] if rng.random() < 0.5 else {"k": value}
    return value


# -- mutations -----------------------------------------------------------------------------


def _storm(value: Any, rng: random.Random, ids: list[str], depth: int = 0) -> Any:
    """Strings inside ``value`` replaced by random templates (some of them)."""
    if depth > 20:
        return value
    if isinstance(value, str):
        return random_template(rng, ids) if rng.random() < 0.5 else value
    if isinstance(value, list):
        return [_storm(v, rng, ids, depth + 1) for v in value]
    if isinstance(value, dict):
        return {k: _storm(v, rng, ids, depth + 1) for k, v in value.items()}
    return value


def _mutate_once(doc: Any, rng: random.Random) -> Any:  # noqa: C901
    body = _body(doc)
    ids = _node_ids(body)
    nodes = _all_nodes(body)
    kind = rng.randrange(27)
    if kind >= 24 and nodes:
        _schema_mutation(nodes, rng)
        return doc
    if kind == 20 and nodes:  # every string of one node's data may become a template
        node = rng.choice(nodes)
        node["data"] = _storm(node.get("data"), rng, ids)
        return doc
    if kind == 21 and len(nodes) > 1:  # one node takes another's data (or type)
        a, b = rng.sample(nodes, 2)
        if rng.random() < 0.5:
            a["data"] = copy.deepcopy(b.get("data"))
        else:
            a["type"] = b.get("type")
        return doc
    if kind == 22 and nodes and isinstance(body, dict):  # copies of a node, wired in
        node = rng.choice(nodes)
        extra = rng.choice((2, 10, 60))
        node_list = body.get("nodes")
        if isinstance(node_list, list):
            for k in range(extra):
                twin = copy.deepcopy(node)
                twin["id"] = f"{node.get('id')}-{k}"
                node_list.append(twin)
                conns = body.get("connections")
                if isinstance(conns, list) and ids:
                    conns.append({"from": rng.choice(ids), "to": twin["id"]})
                    conns.append({"from": twin["id"], "to": rng.choice(ids)})
        return doc
    if kind == 23 and nodes:  # odd keys
        node = rng.choice(nodes)
        data = node.get("data")
        if isinstance(data, dict):
            data[rng.choice(("", "a/b", "~0", "{{", "$in", "\n"))] = odd_value(rng, ids)
        return doc
    if kind <= 5 and nodes:  # data fields are where most meaning lives
        node = rng.choice(nodes)
        data = node.get("data")
        if not isinstance(data, dict):
            node["data"] = data = {}
        key = rng.choice(DATA_KEYS) if rng.random() < 0.5 or not data else rng.choice(list(data))
        if kind == 0:
            data.pop(key, None)
        elif kind in (1, 2):
            data[key] = random_template(rng, ids)
        else:
            data[key] = odd_value(rng, ids)
        return doc
    if kind == 6 and nodes:
        rng.choice(nodes)["type"] = rng.choice((*NODE_TYPES, "promt", "", 3))
        return doc
    if kind == 7 and nodes:
        node = rng.choice(nodes)
        new = rng.choice((*ODD_IDS, rng.choice(ids) if ids else "x"))
        old = node.get("id")
        node["id"] = new
        for conn in _connections(body):
            if conn.get("from") == old and rng.random() < 0.7:
                conn["from"] = new
            if conn.get("to") == old and rng.random() < 0.7:
                conn["to"] = new
        return doc
    if kind == 8:
        return _subflow(doc, body, rng)
    if kind == 9 and isinstance(body, dict):
        conns = _connections(body)
        if conns and ids:
            conn = rng.choice(conns)
            field = rng.choice(("from", "to", "fromPort", "toPort"))
            conn[field] = rng.choice(
                (rng.choice(ids), "branch-0", "branch-9", "failed", "output", None, 1, "")
            )
        return doc
    slots = list(_slots(doc))
    if not slots:
        return odd_value(rng, ids)
    container, key = rng.choice(slots)
    if kind == 10:  # drop
        if isinstance(container, dict):
            container.pop(key, None)
        elif key < len(container):
            container.pop(key)
    elif kind == 11:  # duplicate
        if isinstance(container, dict):
            container[str(key) + rng.choice(("", "_", "2"))] = copy.deepcopy(container[key])
        else:
            container.insert(key, copy.deepcopy(container[key]))
    elif kind == 12:  # deepen
        levels = rng.choice((2, 10, 65, 120, 600, 1500))
        container[key] = _deepen(container[key], levels, rng)
    elif kind == 13:  # truncate
        value = container[key]
        if isinstance(value, str) and value:
            container[key] = value[: rng.randrange(len(value))]
        elif isinstance(value, list) and value:
            del value[rng.randrange(len(value)) :]
    elif kind == 14:  # rename a key
        if isinstance(container, dict):
            container[rng.choice((*DATA_KEYS, "id", "type", "data", "nodes", ""))] = container.pop(
                key
            )
    elif kind == 15:  # list <-> object
        value = container[key]
        if isinstance(value, list):
            container[key] = {str(i): v for i, v in enumerate(value)}
        elif isinstance(value, dict):
            container[key] = list(value.values())
        else:
            container[key] = [value]
    else:
        container[key] = odd_value(rng, ids)
    return doc


def _connections(body: Any) -> list[dict[str, Any]]:
    conns = body.get("connections") if isinstance(body, dict) else None
    return [c for c in conns if isinstance(c, dict)] if isinstance(conns, list) else []


def _subflow(doc: Any, body: Any, rng: random.Random) -> Any:
    """Add a sub-flow that calls itself (or another) once or several times, and a call to it."""
    if not isinstance(body, dict):
        return doc
    flows = body.get("subAgentFlows")
    if not isinstance(flows, list):
        flows = body["subAgentFlows"] = []
    flow_id = rng.choice(("loop", "f", "sub"))
    calls = rng.randint(1, 4)
    callee = rng.choice([flow_id] + [f.get("id") for f in flows if isinstance(f, dict)])
    inner = [{"id": "s", "type": "start", "data": {}}, {"id": "e", "type": "end", "data": {}}]
    inner += [
        {"id": f"c{i}", "type": "subAgentFlow", "data": {"subAgentFlowId": callee}}
        for i in range(calls)
    ]
    chain = ["s", *[f"c{i}" for i in range(calls)], "e"]
    flows.append(
        {
            "id": flow_id,
            "name": flow_id,
            "nodes": inner,
            "connections": [{"from": a, "to": b} for a, b in itertools.pairwise(chain)],
        }
    )
    nodes = body.get("nodes")
    if isinstance(nodes, list):
        nodes.append({"id": "callsub", "type": "subAgentFlow", "data": {"subAgentFlowId": flow_id}})
    return doc


def mutate(doc: Any, rng: random.Random, count: int = 1) -> Any:
    """A mutated deep copy of ``doc`` (``count`` mutations)."""
    out = copy.deepcopy(doc)
    for _ in range(count):
        try:
            out = _mutate_once(out, rng)
        except RecursionError:  # copying a value nested deeper than Python recurses
            continue
    return out


def mutate_schema(doc: Any, rng: random.Random) -> Any:
    """``doc`` (mutated in place) with one node's schema or condition made odd."""
    nodes = _all_nodes(_body(doc))
    if nodes:
        _schema_mutation(nodes, rng)
    return doc


def mutate_text(text: str, rng: random.Random) -> str:
    """The JSON text garbled: cut, bracket runs, stray bytes."""
    kind = rng.randrange(4)
    if kind == 0 and text:
        return text[: rng.randrange(len(text))]
    if kind == 1:
        n = rng.choice((10, 1000, 100_000))
        return rng.choice(("[", '["', "{", '{"a":')) * n
    if kind == 2 and text:
        at = rng.randrange(len(text))
        return text[:at] + rng.choice(("\x00", "\ud800", "1" * 5000, "NaN", "\\u", "]")) + text[at:]
    return text + rng.choice(("", " ", "x", "}"))


# -- the probe -----------------------------------------------------------------------------


def probe(doc: Any) -> BaseException | None:
    """Lower ``doc`` (a parsed document or a path); when it lowers, emit every format and
    build a Runner. None when all went as the standard says, else the exception."""
    from lattice.errors import LatticeUserError
    from lattice.ir.serialize import check_ir, ir_from_json
    from lattice.lower import lower_document
    from lattice.lower.emit import EMITTERS
    from lattice.runs.store import RunStore
    from lattice.runtime.runner import Runner
    from lattice.runtime.settings import RuntimeSettings

    try:
        result = lower_document(doc)
        if result.ir is not None:
            problems = check_ir(result.ir)
            if problems:
                return AssertionError(
                    "lowering emitted an IR that cannot run: " + "; ".join(problems)
                )
            texts = {name: emit(result.ir) for name, emit in EMITTERS.items()}
            ir_from_json(texts["execir"])
            Runner(result.ir, store=RunStore(None), settings=RuntimeSettings(repo_root=REPO))
    except LatticeUserError:
        return None
    except BaseException as exc:  # the fuzzer reports whatever escapes
        if isinstance(exc, KeyboardInterrupt):
            raise
        return exc
    return None

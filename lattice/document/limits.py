"""Limits on what a workflow document may be, checked before anything else reads it.

A document is untrusted input: it may be huge, nested thousands of levels deep (which
makes recursive code, Python's own ``json`` included, raise RecursionError), or hold
values no JSON document can (non-finite numbers, lone surrogates, numbers too big for a
float). ``check_json_value`` walks a parsed document once, without recursion, and
reports each such value with its JSON pointer, so lowering only ever sees a bounded,
plain JSON value.
"""

from __future__ import annotations

import math
import re
from typing import Any

from lattice.errors import Diagnostic
from lattice.text import is_unicode

MAX_DOCUMENT_BYTES = 16 * 1024 * 1024
"""Largest document file read (16 MiB; a 10,000-node document is about 4 MiB)."""
MAX_JSON_DEPTH = 64
"""Deepest nesting of objects and arrays in a document (real documents stay under 20)."""
MAX_INTEGER_BITS = 1000
"""Integers beyond about ±1e301 are refused: they do not fit a float, which schemas,
sampling settings and comparisons need."""
MAX_DIAGNOSTICS = 100
"""A limit check stops after this many findings: one pointer per problem is enough."""

_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)


def pointer_join(base: str, *parts: str | int) -> str:
    """Append ``parts`` to JSON pointer ``base``, escaping ``~`` and ``/``."""
    out = base
    for part in parts:
        out += "/" + str(part).replace("~", "~0").replace("/", "~1")
    return out


Path = tuple[Any, str | int] | None
"""A place in the value as a linked list ``(parent, key)``; made into a pointer only when
something is reported there (most documents report nothing)."""


def _pointer(base: str, path: Path) -> str:
    keys: list[str | int] = []
    while path is not None:
        path, key = path
        keys.append(key)
    return pointer_join(base, *reversed(keys)) or "/"


def _scalar_problem(item: Any) -> tuple[str, str] | None:
    """``(code, message)`` when a non-container value is not plain JSON, else None."""
    if isinstance(item, str):
        return None if is_unicode(item) else ("invalid-string", _SURROGATE)
    if item is None or isinstance(item, bool):
        return None
    if isinstance(item, int):
        if item.bit_length() > MAX_INTEGER_BITS:
            return "invalid-number", "an integer too large for a number"
        return None
    if isinstance(item, float):
        if math.isfinite(item):
            return None
        return "invalid-number", f"{item!r} is not a JSON number (too large, NaN or infinite)"
    return "invalid-value", f"a Python {type(item).__name__} is not a JSON value"


_SURROGATE = "a string holds a lone surrogate (not Unicode text)"


def check_json_value(value: Any, pointer: str = "") -> list[Diagnostic]:
    """Every way ``value`` is not a bounded, plain JSON value, with its pointer.

    Codes: ``document-too-deep`` (nesting past MAX_JSON_DEPTH), ``invalid-number``
    (NaN, infinities, integers past MAX_INTEGER_BITS), ``invalid-string`` (lone
    surrogates, in keys or values), ``invalid-value`` (a Python object that JSON cannot
    hold, or an object key that is not a string; only possible for documents given as
    dicts). The walk is iterative and stops after MAX_DIAGNOSTICS findings.
    """
    out: list[Diagnostic] = []
    stack: list[tuple[Any, Path, int]] = []

    def visit(item: Any, path: Path, depth: int) -> None:
        if isinstance(item, dict | list):
            if depth >= MAX_JSON_DEPTH:
                message = f"objects and arrays are nested more than {MAX_JSON_DEPTH} levels deep"
                out.append(
                    Diagnostic("document-too-deep", message, pointer=_pointer(pointer, path))
                )
            else:
                stack.append((item, path, depth))
            return
        problem = _scalar_problem(item)
        if problem is not None:
            out.append(Diagnostic(*problem, pointer=_pointer(pointer, path)))

    visit(value, None, 0)
    while stack and len(out) < MAX_DIAGNOSTICS:
        item, path, depth = stack.pop()
        child_depth = depth + 1
        if isinstance(item, list):
            for index, child in enumerate(item):
                if isinstance(child, str) and child.isascii():
                    continue  # the common case, kept cheap
                visit(child, (path, index), child_depth)
            continue
        for key, child in item.items():
            if not isinstance(key, str):
                message = f"object key {key!r} is not a string"
                out.append(Diagnostic("invalid-value", message, pointer=_pointer(pointer, path)))
                continue
            if not is_unicode(key):
                message = f"the object key {key!r} holds a lone surrogate (not Unicode text)"
                out.append(Diagnostic("invalid-string", message, pointer=_pointer(pointer, path)))
                continue
            if isinstance(child, str) and child.isascii():
                continue
            visit(child, (path, key), child_depth)
    return out[:MAX_DIAGNOSTICS]


def _item(container: Any, key: str) -> Any:
    if isinstance(container, dict):
        return container.get(key)
    if isinstance(container, list) and key.isdigit() and int(key) < len(container):
        return container[int(key)]
    return None


def node_id_at(document: Any, pointer: str) -> str | None:
    """The id of the node whose JSON holds ``pointer`` (``/nodes/3/...``,
    ``/workflow/nodes/3/...``, ``/subAgentFlows/0/nodes/1/...``), if any."""
    parts = [p.replace("~1", "/").replace("~0", "~") for p in pointer.split("/")[1:]]
    current = document
    if parts[:1] == ["workflow"]:
        current, parts = _item(current, "workflow"), parts[1:]
    if parts[:1] == ["subAgentFlows"] and len(parts) >= 3:
        current, parts = _item(_item(current, "subAgentFlows"), parts[1]), parts[2:]
    if parts[:1] != ["nodes"] or len(parts) < 2:
        return None
    node = _item(_item(current, "nodes"), parts[1])
    node_id = node.get("id") if isinstance(node, dict) else None
    return node_id if isinstance(node_id, str) and is_unicode(node_id) else None


def text_depth_position(text: str, limit: int = MAX_JSON_DEPTH) -> tuple[int, int] | None:
    """``(line, column)`` (1-based) of the first bracket that nests deeper than ``limit``
    in JSON text, or None. Linear; strings are skipped whole."""
    depth = 0
    for token in _JSON_TOKEN.finditer(text):
        char = token.group()
        if char in "[{":
            depth += 1
            if depth > limit:
                at = token.start()
                line = text.count("\n", 0, at) + 1
                return line, at - (text.rfind("\n", 0, at) + 1) + 1
        elif char in "]}":
            depth -= 1
    return None

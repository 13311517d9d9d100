"""The part of a run's state an op's activity is sent: what the op reads, not the whole.

An op that runs on a worker is sent the state it reads, so a run's history grows with
what its ops read, not with its length times its state. What each kind reads:

- LLM_WRITE and AGENT: their ``reads`` (the prompt's and the variables' references, and
  the upstream results given as context), and ``$in.<name>`` for each variable name (a
  variable's own template reads a bare name from ``$in``);
- TOOL_CALL: its ``reads`` (an HTTP call's url, headers, query and body; an MCP call's
  arguments, or the path a model wrote them to);
- SWITCH (one matching regular expressions runs on a worker): its ``reads`` and the most
  recent result (``last_result``: a switch without an input tests it);
- any other kind: the whole state (its reads are not known exactly).

``$ctx`` (the run's id, start time, workflow and model classes) is always sent whole.
The slice gives an op the same reads as the whole state would, missing values included:
a path that stops at a value that is not an object carries that value, so its error
names the same key. This module does not import ``temporalio``.
"""

from __future__ import annotations

import copy
from typing import Any

from lattice.ir.models import ContractOpBase, Op
from lattice.ir.templates import StatePath, parse_path
from lattice.runtime.state import StateStore

SLICED_KINDS = frozenset({"LLM_WRITE", "AGENT", "TOOL_CALL", "SWITCH"})
"""Op kinds whose reads are known exactly (the module docstring lists them)."""
ROOTS = {"$in": "in", "$vars": "vars", "$tmp": "tmp", "$ctx": "ctx"}
"""A path's root → its key in a state snapshot."""


def paths_read(op: Op, last_result: str | None) -> list[StatePath] | None:
    """The state paths ``op`` reads when it runs, or None when they are not known exactly."""
    if op.kind not in SLICED_KINDS:
        return None
    texts = [p for p in op.reads if not p.startswith("$secrets")]
    if isinstance(op, ContractOpBase):
        texts += [f"$in.{name}" for name in op.variables]
    if op.kind == "SWITCH" and last_result:
        texts.append(last_result)
    return [parse_path(text) for text in dict.fromkeys(texts)]


def state_for(op: Op, state: StateStore, last_result: str | None) -> dict[str, Any]:
    """The state snapshot ``op``'s activity is sent: the paths it reads, or the whole."""
    paths = paths_read(op, last_result)
    if paths is None:
        return state.snapshot()
    whole = {"in": state.inputs, "vars": state.vars, "tmp": state.tmp, "ctx": state.ctx}
    out: dict[str, Any] = {"in": {}, "vars": {}, "tmp": {}, "ctx": state.ctx}
    placed: set[tuple[Any, ...]] = {("ctx",)}
    for path in sorted(paths, key=lambda p: len(p.keys)):
        keys = (ROOTS[path.root], *path.keys)
        _copy_path(whole, out, keys, placed)
    return copy.deepcopy(out)


def _copy_path(
    whole: dict[str, Any], out: dict[str, Any], keys: tuple[Any, ...], placed: set[tuple[Any, ...]]
) -> None:
    """Copy what reading ``keys`` in ``whole`` sees into ``out``: the value, or the object
    a missing key is missing from, or the value that is not an object it stops at.
    ``placed`` holds the prefixes copied whole (``out`` shares them with ``whole``, so
    nothing is written inside them)."""
    source: Any = whole[keys[0]]
    target = out[keys[0]]
    for depth in range(1, len(keys) + 1):
        if keys[:depth] in placed:
            return
        if depth == len(keys):
            break
        key = keys[depth]
        if not isinstance(source, dict) or not isinstance(key, str):
            break  # a list, or a value that is not an object: copied whole, as read
        if key not in source:
            return  # missing from an object: the (possibly empty) object says so
        if depth == len(keys) - 1:
            target[key] = source[key]
            placed.add(keys[: depth + 1])
            return
        source = source[key]
        target = target.setdefault(key, {})
    _place(out, keys[:depth], source, placed)


def _place(out: dict[str, Any], keys: tuple[Any, ...], value: Any, placed: set[Any]) -> None:
    """Put ``value`` at ``keys`` (object keys only) in ``out``."""
    target = out
    for key in keys[:-1]:
        target = target.setdefault(key, {})
    target[keys[-1]] = value
    placed.add(keys)

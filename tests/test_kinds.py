"""Error types and event kinds are named by their enums (``ErrorType``, ``EventKind``).

Read from the package's source with ``ast``: no event is emitted with a literal kind and
no error type is given as a literal, so every kind and type the code can write is a member
(the events of whole runs are checked against the enums in tests/runtime/test_examples.py).
The members' values are the codes earlier versions wrote, so their run folders still read.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

from lattice.errors import ErrorType, LatticeRunError
from lattice.events import EventKind

PACKAGE = Path(__file__).resolve().parents[1] / "lattice"
EMITTERS = {"emit", "emit1", "emit2", "_transient"}
ERROR_TYPE = "error_type"


def _named(node: ast.AST) -> str | None:
    """The name an expression reads: ``x.name``, ``name``, ``x["name"]``, ``x.get("name")``."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        return str(node.slice.value)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    ):
        return str(node.args[0].value)
    return None


def _literal(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _stray(node: ast.AST) -> list[ast.AST]:
    """The literals ``node`` gives as an event kind or an error type."""
    if isinstance(node, ast.Call) and _named(node.func) in EMITTERS and node.args:
        return [node.args[0]] if _literal(node.args[0]) else []
    if isinstance(node, ast.Call) and _named(node.func) == "provider_error" and node.args:
        return [node.args[0]] if _literal(node.args[0]) else []
    if isinstance(node, ast.keyword) and node.arg == ERROR_TYPE:
        return [node.value] if _literal(node.value) else []
    if isinstance(node, ast.Assign | ast.AnnAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        named = any(_named(t) == ERROR_TYPE for t in targets)
        return [node.value] if named and _literal(node.value) else []  # type: ignore[list-item]
    if isinstance(node, ast.Dict):
        return [
            value
            for key, value in zip(node.keys, node.values, strict=True)
            if isinstance(key, ast.Constant) and key.value == ERROR_TYPE and _literal(value)
        ]
    if isinstance(node, ast.Compare):
        sides = [node.left, *node.comparators]
        if any(_named(side) in (ERROR_TYPE, "type") for side in sides):
            return [side for side in sides if _literal(side) and _is_code(side)]
    if isinstance(node, ast.arguments):
        named = [*node.posonlyargs, *node.args, *node.kwonlyargs]
        defaults = [*[None] * (len(node.posonlyargs) + len(node.args) - len(node.defaults))]
        pairs = zip(named, [*defaults, *node.defaults, *node.kw_defaults], strict=True)
        return [d for a, d in pairs if a.arg == ERROR_TYPE and d is not None and _literal(d)]
    return []


def _is_code(node: ast.AST) -> bool:
    value = node.value if isinstance(node, ast.Constant) else None
    return value in set(EventKind) or value in set(ErrorType)


def stray_literals(source: str) -> list[int]:
    """Lines of ``source`` that name an event kind or an error type by a literal."""
    return sorted(n.lineno for node in ast.walk(ast.parse(source)) for n in _stray(node))


def test_the_scan_finds_literals() -> None:
    source = (
        "ctx.emit('op_started', {})\n"
        "raise LatticeRunError('x', error_type='state_error')\n"
        "class E(LatticeRunError):\n    error_type = 'dead_end'\n"
        "if exc.error_type == 'json_error': pass\n"
        "if event['type'] == 'run_started': pass\n"
        "def f(*, error_type: str = 'invariant_error'): pass\n"
        "line = {'error_type': 'interrupted'}\n"
        "ctx.emit(EventKind.OP_STARTED, {})\n"
        "if event['type'] == 'text': pass\n"
    )
    assert stray_literals(source) == [1, 2, 4, 5, 6, 7, 8]


def test_no_module_names_a_kind_or_an_error_type_by_a_literal() -> None:
    found = {
        f"{path.relative_to(PACKAGE.parent)}:{line}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for line in stray_literals(path.read_text(encoding="utf-8"))
    }
    assert sorted(found) == []


def test_members_are_their_values_in_json_and_text() -> None:
    event = {"type": EventKind.RUN_FAILED, "data": {"error_type": ErrorType.STATE_ERROR}}
    assert json.dumps(event) == '{"type": "run_failed", "data": {"error_type": "state_error"}}'
    assert f"{EventKind.OP_STARTED}" == "op_started"
    assert LatticeRunError("x", error_type=ErrorType.DEAD_END).error_type == "dead_end"
    # what a folder of an earlier version holds is read as a member
    assert EventKind("tool_call_finished") is EventKind.TOOL_CALL_FINISHED
    assert ErrorType("missing_information") is ErrorType.MISSING_INFORMATION


def test_the_documented_event_kinds_are_the_members() -> None:
    runs = (PACKAGE.parent / "docs" / "runs.md").read_text(encoding="utf-8")
    table = runs.split("## events.jsonl", 1)[1].split("## ", 1)[0]
    for kind in EventKind:
        assert f"`{kind.value}`" in table, kind

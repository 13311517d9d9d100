"""The package's layering, read from its import graph (docs/architecture.md).

Every import counts, at module level or inside a function: a module may import its own
package and the packages of lower layers, never a higher one; and no modules import
each other in a circle.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "lattice"

LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"errors", "files", "masking", "patterns", "schema_formats", "schemas", "text"}),
    frozenset({"document", "ir", "prompts", "permissions"}),
    frozenset({"llm"}),
    frozenset({"contracts"}),
    frozenset({"config"}),
    frozenset({"tools"}),
    frozenset({"workspace"}),
    frozenset({"agents"}),
    frozenset({"lower"}),
    frozenset({"runs"}),
    frozenset({"telemetry"}),
    frozenset({"runtime"}),
    frozenset({"service"}),
    frozenset({"primitive", "planner", "testing", "batch", "evals", "durable", "services"}),
    frozenset({"cli", "server"}),
)
"""Lowest first. ``lattice/__init__.py`` (the public facade) may import anything."""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(path: Path, known: set[str]) -> set[str]:
    """The lattice modules ``path`` imports (``from pkg import mod`` counts ``pkg.mod``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name in known}


def import_graph() -> dict[str, set[str]]:
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    known = set(paths)
    return {name: imported_modules(path, known) - {name} for name, path in paths.items()}


def layer_of(module: str) -> int:
    unit = module.split(".")[1]
    for index, units in enumerate(LAYERS):
        if unit in units:
            return index
    raise AssertionError(f"{module} belongs to no layer: add its package to LAYERS")


def layering_violations(graph: dict[str, set[str]]) -> list[str]:
    problems = []
    for module, imports in sorted(graph.items()):
        if module == "lattice":
            continue
        for target in sorted(imports):
            if target == "lattice":
                problems.append(f"{module} imports the facade lattice/__init__.py")
            elif layer_of(target) > layer_of(module):
                problems.append(f"{module} imports {target}, a higher layer")
    return problems


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Circles of imports, found by depth-first search."""
    found: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                found.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return found


def test_the_graph_is_read() -> None:
    graph = import_graph()
    assert len(graph) > 50
    assert "lattice.runtime.settings" in graph["lattice.runtime.runner"]


def test_every_module_belongs_to_a_layer_and_imports_only_downwards() -> None:
    assert layering_violations(import_graph()) == []


def test_no_modules_import_each_other_in_a_circle() -> None:
    assert cycles(import_graph()) == []


@pytest.mark.parametrize(
    ("module", "target"),
    [
        ("lattice.lower.llm_nodes", "lattice.runtime.runner"),
        ("lattice.contracts.engine", "lattice.runs.store"),
        ("lattice.tools.http", "lattice.cli.main"),
        ("lattice.config", "lattice.runtime.settings"),
    ],
)
def test_an_upward_import_is_caught(module: str, target: str) -> None:
    graph = import_graph()
    graph[module] = {*graph[module], target}
    assert layering_violations(graph) == [f"{module} imports {target}, a higher layer"]


def test_a_circle_is_caught() -> None:
    graph = import_graph()
    graph["lattice.runtime.state"] = {*graph["lattice.runtime.state"], "lattice.runtime.runner"}
    found = cycles(graph)
    assert found, "the added import closes a circle"
    assert any({"lattice.runtime.state", "lattice.runtime.runner"} <= set(c) for c in found)


BENCH = PACKAGE.parent / "bench"


def imports_of_tests(path: Path) -> list[str]:
    """The ``tests`` modules ``path`` imports (at module level or inside a function)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        found += [name for name in names if name == "tests" or name.startswith("tests.")]
    return found


def test_benches_import_no_test_module() -> None:
    """A bench runs the product (and what bench/ shares between benches and tests): tests
    change freely, and a bench that imports them breaks unseen."""
    benches = sorted(BENCH.glob("*.py"))
    assert len(benches) > 5
    imports = {p.name: imports_of_tests(p) for p in benches}
    assert {name: found for name, found in imports.items() if found} == {}


ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"
_NAMED = re.compile(
    r"`((?:[A-Za-z_][A-Za-z0-9_]*/)*(?:[A-Za-z_][A-Za-z0-9_]*\.py|[A-Za-z_][A-Za-z0-9_]*/))`"
)
"""A module (``walk.py``, ``runtime/walk.py``) or a folder (``runtime/``) named in the doc."""


def named_in_doc(text: str) -> tuple[set[str], list[str]]:
    """The modules and folders of ``lattice/`` that ``text`` names, relative to
    ``lattice/``, and the names it gives that are neither.

    In a row of the table of folders a name is relative to that row's folder (its first
    cell's first name), then to ``lattice/``; elsewhere, to ``lattice/``. A name starting
    ``lattice/``, ``tests/`` or ``bench/`` is relative to the repository."""
    found: set[str] = set()
    unknown: list[str] = []
    for line in text.splitlines():
        names = _NAMED.findall(line)
        bases = [""]
        if line.startswith("| `") and names and names[0].endswith("/"):
            bases = [names[0], ""]
        for name in names:
            if name.split("/")[0] in {"lattice", "tests", "bench"}:
                if not (PACKAGE.parent / name).exists():
                    unknown.append(name)
                elif name.startswith("lattice/"):
                    found.add(name.removeprefix("lattice/"))
                continue
            for base in bases:
                if (PACKAGE / base / name).exists():
                    found.add(base + name)
                    break
            else:
                if name.endswith(".py"):  # a folder may be a run folder's (``ops/``)
                    unknown.append(name)
    return found, unknown


def package_modules() -> set[str]:
    """Every module of ``lattice/`` as the doc names it: ``runtime/walk.py``; a package by
    its folder, ``runtime/`` (``lattice/__init__.py`` by its file)."""
    names = set()
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel == "__init__.py":
            names.add(rel)
        elif path.name == "__init__.py":
            names.add(rel.removesuffix("__init__.py"))
        else:
            names.add(rel)
    return names


def test_the_architecture_doc_names_every_module_and_no_other() -> None:
    found, unknown = named_in_doc(ARCHITECTURE.read_text(encoding="utf-8"))
    assert unknown == [], "docs/architecture.md names what lattice/ does not have"
    assert sorted(package_modules() - found) == [], "docs/architecture.md does not name these"


def test_a_module_missing_from_the_doc_or_a_name_without_a_module_is_caught() -> None:
    row = "| `runtime/` | the walk (`walk.py`), a gone module (`gone.py`) and `runs/store.py` |"
    found, unknown = named_in_doc(row + "\nSee `runtime/state.py` and `lattice/gone.py`.")
    assert {"runtime/", "runtime/walk.py", "runs/store.py", "runtime/state.py"} <= found
    assert unknown == ["gone.py", "lattice/gone.py"]
    assert "runtime/runner.py" in package_modules() - found

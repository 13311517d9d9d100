"""How large lattice/'s functions and classes are (issue 38: units a person can hold).

    python bench/unit_sizes.py            # counts over 60/300 lines, and the units over 80/400
    python bench/unit_sizes.py --list     # every function over 60 and class over 300 lines

A unit's length runs from its ``def``/``class`` line to its last line (docstring and
comments included, decorators not). A unit over the hard limits (80 lines for a function,
400 for a class) carries its reason on the line above it, as a comment starting
``# long:``; ``tests/test_unit_sizes.py`` fails on one that does not.
"""

from __future__ import annotations

import argparse
import ast
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "lattice"
FUNCTION_LIMIT = 80
CLASS_LIMIT = 400
REASON = "# long:"


@dataclass(frozen=True)
class Unit:
    """One function or class of lattice/: where it is and how long."""

    path: str
    name: str
    kind: str  # "function" or "class"
    line: int
    length: int
    reason: str | None

    def __str__(self) -> str:
        why = f"  ({self.reason})" if self.reason else ""
        return f"{self.length:4d}  {self.path}:{self.line}  {self.name}{why}"


def _reason(lines: list[str], node: ast.AST) -> str | None:
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])
    above = lines[first - 2].strip() if first >= 2 else ""
    return above[len(REASON) :].strip() if above.startswith(REASON) else None


def units(package: Path = PACKAGE) -> list[Unit]:
    """Every function, method and class of ``package``, nested ones included."""
    found: list[Unit] = []
    for path in sorted(package.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        rel = str(path.relative_to(package.parent))

        def visit(node: ast.AST, prefix: str, rel: str = rel, lines: list[str] = lines) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    kind = "class" if isinstance(child, ast.ClassDef) else "function"
                    name = f"{prefix}{child.name}"
                    assert child.end_lineno is not None
                    length = child.end_lineno - child.lineno + 1
                    found.append(Unit(rel, name, kind, child.lineno, length, _reason(lines, child)))
                    visit(child, f"{name}.")
                else:
                    visit(child, prefix)

        visit(ast.parse(text), "")
    return found


def over(found: list[Unit], kind: str, limit: int) -> list[Unit]:
    """The units of ``kind`` longer than ``limit`` lines, longest first."""
    return sorted(
        (u for u in found if u.kind == kind and u.length > limit), key=lambda u: -u.length
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="list the units over 60/300 lines")
    args = parser.parse_args()
    found = units()
    functions, classes = over(found, "function", 60), over(found, "class", 300)
    print(f"functions over 60 lines: {len(functions)}; classes over 300 lines: {len(classes)}")
    shown = (
        (functions, classes)
        if args.list
        else (
            over(found, "function", FUNCTION_LIMIT),
            over(found, "class", CLASS_LIMIT),
        )
    )
    for group in shown:
        for unit in group:
            print(unit)


if __name__ == "__main__":
    main()

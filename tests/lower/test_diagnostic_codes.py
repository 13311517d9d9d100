"""Every diagnostic code lowering can emit is in the table of docs/documents.md, so the
table cannot fall behind the code."""

from __future__ import annotations

import ast
import re

from tests.conftest import REPO

CODE = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)+")
NOT_CODES = {
    "utf-8",
    "ai-generated",
    "general-purpose",
    "read-only",
    "workspace-write",
    "danger-full-access",
    "sub-agent",
}
"""Strings in the source that look like codes but are not."""


def _source_codes() -> set[str]:
    """The code-shaped string literals of lowering, the document loader and the schema
    checks lowering reports (docstrings are whole sentences, so none of them is one)."""
    codes: set[str] = set()
    package = REPO / "lattice"
    paths = [*(package / "lower").glob("*.py"), *(package / "document").glob("*.py")]
    for path in [*paths, package / "schemas.py"]:
        for item in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            value = item.value if isinstance(item, ast.Constant) else None
            if isinstance(value, str) and CODE.fullmatch(value) and value not in NOT_CODES:
                codes.add(value)
    return codes


def _documented_codes() -> dict[str, str]:
    """Code → severity, from the rows of the table under ``## Diagnostics``."""
    text = (REPO / "docs" / "documents.md").read_text(encoding="utf-8")
    section = text.split("\n## Diagnostics\n", 1)[1].split("\n## ", 1)[0]
    documented: dict[str, str] = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[0] in ("code", "---"):
            continue
        for code in cells[0].split(","):
            documented[code.strip()] = cells[1]
    return documented


def test_every_code_lowering_can_emit_is_in_the_diagnostics_table() -> None:
    codes = _source_codes()
    assert {"mcp-server-unknown", "parallel-shared-node", "invalid-json"} <= codes
    missing = sorted(codes - set(_documented_codes()))
    assert not missing, f"add to the table in docs/documents.md: {missing}"


def test_the_table_lists_no_code_that_does_not_exist() -> None:
    stale = sorted(set(_documented_codes()) - _source_codes())
    assert not stale, f"codes in docs/documents.md that nothing emits: {stale}"

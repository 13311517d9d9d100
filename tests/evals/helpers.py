"""Running ``lattice eval`` in this process for the evaluation tests."""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lattice.cli.main import main

EXAMPLES = Path(__file__).resolve().parents[2] / "workflows" / "examples"
TRIAGE = EXAMPLES / "support-triage.json"
TRIAGE_DATASET = EXAMPLES / "support-triage.eval.jsonl"
MOCK_A = EXAMPLES / "support-triage.batch.mock.json"
MOCK_B = EXAMPLES / "support-triage.eval-b.mock.json"
REGRESSED = ["t-012", "t-047", "t-088", "t-123", "t-164", "t-191"]
"""The tickets whose category variant B's mock script gets wrong."""


@dataclass
class Ran:
    code: int
    out: str
    err: str


def run_eval(*args: Any) -> Ran:
    """``lattice eval ARGS`` in this process: its exit code, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["eval", *(str(a) for a in args)])
    assert "Traceback" not in err.getvalue(), err.getvalue()
    return Ran(code, out.getvalue(), err.getvalue())

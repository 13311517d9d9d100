"""A small workflow for batch tests and datasets of rows for it, scripted to complete,
fail or halt by row."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from lattice.cli import main
from tests.builders import conn, node, workflow

ASK_ANSWER = {"approve": "Yes"}


def flow_document() -> dict[str, Any]:
    """``start → classify (LLM, schema) → approve (question) → draft (LLM) → end``; answering
    ``No`` ends at ``no``. A row without an answer halts at ``approve``."""
    return workflow(
        [
            node(
                "start",
                "start",
                inputs={
                    "type": "object",
                    "properties": {"text": {"type": "string", "minLength": 1}},
                    "required": ["text"],
                    "additionalProperties": False,
                },
            ),
            node(
                "classify",
                "prompt",
                prompt="Classify: {{ $in.text }}",
                outputSchema={
                    "type": "object",
                    "properties": {"label": {"type": "string", "enum": ["a", "b"]}},
                    "required": ["label"],
                },
            ),
            node(
                "approve",
                "askUserQuestion",
                questionText="Send it?",
                options=[{"label": "Yes"}, {"label": "No"}],
            ),
            node(
                "draft",
                "prompt",
                prompt="Draft for {{ $in.text }} ({{ $vars.classify.result.label }})",
            ),
            node("end", "end", output="$vars.draft.result"),
            node("no", "end"),
        ],
        [
            conn("start", "classify"),
            conn("classify", "approve"),
            conn("approve", "draft", "branch-0"),
            conn("approve", "no", "branch-1"),
            conn("draft", "end"),
        ],
    )


def row_id(i: int) -> str:
    return f"r{i:04d}"


def is_failing(i: int) -> bool:
    return i % 10 == 3


def is_halting(i: int) -> bool:
    return i % 10 == 7


def dataset(
    folder: Path, rows: int, *, fail: bool = True, halt: bool = True
) -> tuple[Path, Path, Path]:
    """The workflow, ``rows`` rows (every tenth fails from its mock script, every tenth has
    no answer and halts) and the mock script: (workflow, inputs, mock)."""
    flow = folder / "flow.json"
    flow.write_text(json.dumps(flow_document()), encoding="utf-8")
    script: dict[str, Any] = {
        "responses": {"classify": [{"label": "a"}], "draft": ["Dear customer"]},
        "rows": {},
    }
    lines = []
    for i in range(rows):
        rid = row_id(i)
        if fail and is_failing(i):
            script["rows"][rid] = {
                "responses": {
                    "classify": [
                        {"$error": "invalid_request", "message": f"scripted failure of {rid}"}
                    ]
                }
            }
        entry: dict[str, Any] = {"id": rid, "inputs": {"text": f"row {i}"}}
        if not (halt and is_halting(i)):
            entry["answers"] = ASK_ANSWER
        lines.append(json.dumps(entry))
    inputs = folder / "rows.jsonl"
    inputs.write_text("\n".join(lines) + "\n", encoding="utf-8")
    mock = folder / "flow.mock.json"
    mock.write_text(json.dumps(script), encoding="utf-8")
    return flow, inputs, mock


def read_results(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def by_id(path: Path) -> dict[Any, dict[str, Any]]:
    return {line["id"]: line for line in read_results(path)}


def cli(capsys: pytest.CaptureFixture[str], *args: Any) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return code, out, err


@pytest.fixture
def no_terminal(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    monkeypatch.chdir(tmp_path)
    return tmp_path

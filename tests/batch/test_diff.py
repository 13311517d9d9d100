"""``lattice batch diff OLD NEW`` and ``lattice runs diff A B``."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from lattice.batch.diff import json_diff
from tests.batch.helpers import by_id, cli, dataset, no_terminal

__all__ = ["no_terminal"]


def test_json_diff_names_each_change_by_pointer() -> None:
    old = {"a": 1, "b": {"c": [1, 2], "d/e": True}, "gone": 0}
    new = {"a": 1, "b": {"c": [1, 3, 4], "d/e": 1}, "new": None}
    assert json_diff(old, new) == [
        {"path": "/b/c/1", "old": 2, "new": 3},
        {"path": "/b/c/2", "new": 4},
        {"path": "/b/d~1e", "old": True, "new": 1},
        {"path": "/gone", "old": 0},
        {"path": "/new", "new": None},
    ]
    assert json_diff("x", "x") == []
    assert json_diff(None, {"a": 1}) == [{"path": "", "old": None, "new": {"a": 1}}]


def write(path: Path, lines: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_batch_diff_lists_changed_rows_with_a_json_diff_and_counts(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    old = write(
        tmp_path / "old.jsonl",
        [
            {"id": "a", "status": "completed", "result": {"label": "x", "n": 1}},
            {"id": "b", "status": "completed", "result": "same"},
            {"id": "c", "status": "completed", "result": 1},
            {"id": "d", "status": "failed", "error_type": "schema_error", "result": None},
            {"id": "gone", "status": "completed", "result": 1},
        ],
    )
    new = write(
        tmp_path / "new.jsonl",
        [
            {"id": "b", "status": "completed", "result": "same"},
            {"id": "a", "status": "completed", "result": {"label": "y", "n": 1}},
            {"id": "c", "status": "failed", "error_type": "invalid_request", "error": "nope"},
            {"id": "d", "status": "failed", "error_type": "mock_exhausted", "result": None},
            {"id": 9, "status": "halted", "result": None},
        ],
    )
    code, out, _ = cli(capsys, "batch", "diff", old, new)
    assert code == 1
    assert out.splitlines() == [
        "row 9: only in NEW (halted)",
        "row 'a': result changed",
        '    /label: "x" → "y"',
        "row 'c': completed → failed [invalid_request]: nope",
        "    (the whole value): 1 → null",
        "row 'd': failed [schema_error] → failed [mock_exhausted]",
        "row 'gone': only in OLD (completed)",
        "6 rows: 1 unchanged, 1 status changed, 1 error changed, 1 result changed, "
        "1 only in NEW, 1 only in OLD",
    ]
    code, out, _ = cli(capsys, "batch", "diff", old, new, "--json")
    data = json.loads(out)
    assert data["counts"]["rows"] == 6
    assert [row["change"] for row in data["rows"]] == [
        "added",
        "result",
        "status",
        "error",
        "removed",
    ]
    code, out, _ = cli(capsys, "batch", "diff", old, old)
    assert code == 0 and "5 rows: 5 unchanged" in out
    code, _, err = cli(capsys, "batch", "diff", old, tmp_path / "missing.jsonl")
    assert code == 2 and "no results file" in err


def test_runs_diff_compares_path_outputs_and_calls(
    capsys: pytest.CaptureFixture[str], no_terminal: Path
) -> None:
    flow, inputs, mock = dataset(no_terminal, 2, fail=False, halt=False)
    script = json.loads(mock.read_text())
    script["rows"] = {"r0001": {"responses": {"classify": [{"label": "c"}, {"label": "b"}]}}}
    mock.write_text(json.dumps(script))
    out = no_terminal / "out.jsonl"
    code, _, err = cli(
        capsys, "batch", flow, "--inputs", inputs, "-o", out, "--mock", mock, "--progress", "none"
    )
    assert code == 0, err
    rows = by_id(out)
    a, b = rows["r0000"]["run_dir"], rows["r0001"]["run_dir"]
    code, text, _ = cli(capsys, "runs", "diff", a, b)
    assert code == 1
    assert "status: completed (both)" in text
    assert "output: same" in text
    assert "path: same (6 ops)" in text, text
    assert "node classify: calls 1 → 2 (repairs 0 → 1, escalations 0 → 0); output changed" in text
    assert '    /0/label: "a" → "b"' in text
    code, text, _ = cli(
        capsys, "runs", "diff", a, Path(a).name, "--runs-dir", Path(a).parent, "--json"
    )
    assert code == 0
    same = json.loads(text)
    assert same["path"]["same"] and same["nodes"] == {} and same["output"] == []
    code, _, err = cli(capsys, "runs", "diff", a)
    assert code == 2 and "lattice runs diff RUN_A RUN_B" in err
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        nowhere = f"127.0.0.1:{probe.getsockname()[1]}"
    code, _, err = cli(capsys, "runs", "diff", a, b, "--temporal", nowhere)
    assert code == 2  # runs on Temporal are compared on Temporal, not as these folders
    assert f"cannot reach Temporal at {nowhere}" in err

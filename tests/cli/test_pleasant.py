"""The CLI's rough edges a new user met on a fresh clone (issue 39), each with what they
now see: a runs list that stops at 20, a mistyped command with its nearest name, a JSON
array given to ``lattice batch``, a placeholder copied from the docs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lattice.cli import main
from tests.conftest import REPO

EXAMPLES = REPO / "workflows" / "examples"
HELLO = EXAMPLES / "hello-world.json"
HELLO_MOCK = EXAMPLES / "hello-world.mock.json"


def fake_runs(root: Path, count: int) -> list[str]:
    """``count`` run folders (ids in start order), enough for ``runs list`` to list."""
    names = [
        f"20261201T{i // 3600:02d}{i // 60 % 60:02d}{i % 60:02d}-{i:08x}" for i in range(count)
    ]
    for name in names:
        folder = root / name
        folder.mkdir(parents=True)
        (folder / "result.json").write_text(json.dumps({"status": "completed", "workflow": "w"}))
    return names


def test_runs_list_shows_the_latest_20_unless_told(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    names = fake_runs(tmp_path / "runs", 45)
    runs = ["runs", "list", "--runs-dir", str(tmp_path / "runs")]
    assert main(runs) == 0
    out, err = capsys.readouterr()
    shown = [line.split()[0] for line in out.splitlines()]
    assert shown == names[::-1][:20]
    assert "25 older runs not shown" in err and "--all" in err and "--limit" in err
    assert main([*runs, "--limit", "3"]) == 0
    out, err = capsys.readouterr()
    assert [line.split()[0] for line in out.splitlines()] == names[::-1][:3]
    assert "42 older runs" in err
    assert main([*runs, "--all"]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 45 and err == ""
    assert main([*runs, "--all", "--limit", "3"]) == 2


@pytest.mark.parametrize(
    ("argv", "meant"),
    [(["runn", "x.json"], "`run`"), (["serv"], "`serve`"), (["runs", "lsit"], "`list`")],
)
def test_a_mistyped_command_gets_its_nearest_name(
    argv: list[str], meant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as raised:
        main(argv)
    assert raised.value.code == 2
    assert f"did you mean {meant}?" in capsys.readouterr().err


def test_a_command_like_nothing_gets_no_guess(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["zzzz"])
    err = capsys.readouterr().err
    assert "invalid choice: 'zzzz'" in err and "did you mean" not in err


def test_batch_reads_a_pretty_printed_json_array(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = tmp_path / "rows.json"
    rows.write_text(json.dumps([{"id": "a", "inputs": {"name": "Ada"}}, {"name": "Bob"}], indent=2))
    out = tmp_path / "out.jsonl"
    args = ["batch", str(HELLO), "--inputs", str(rows), "--mock", str(HELLO_MOCK)]
    assert main([*args, "-o", str(out), "--no-record"]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(line["status"] for line in lines) == ["completed", "completed"]
    assert sorted(line["line"] for line in lines) == [2, 8]  # where each item starts
    assert "skipped" not in capsys.readouterr().err


def test_batch_says_once_that_a_broken_array_is_not_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = tmp_path / "rows.json"
    rows.write_text('[\n  {"name": "Ada"},\n  {"name": "Bob"},\n]\n')
    args = ["batch", str(HELLO), "--inputs", str(rows), "--mock", str(HELLO_MOCK)]
    assert main([*args, "-o", str(tmp_path / "out.jsonl"), "--no-record"]) == 2
    err = capsys.readouterr().err
    assert "starts like a JSON array but is not valid JSON" in err and "line 4" in err
    assert "skipped" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("value", ["<placeholder>", "<the ticket's text>", " <x> ", "…"])
def test_a_placeholder_from_the_docs_is_refused(
    value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    triage = EXAMPLES / "support-triage.json"
    mock = EXAMPLES / "support-triage.mock.json"
    code = main(["run", str(triage), "--mock", str(mock), "--input", f"ticket={value}",
                 "--runs-dir", str(tmp_path / "runs")])  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err
    assert f"{value.strip()} is a placeholder" in err and "ticket" in err
    assert not (tmp_path / "runs").exists()


def test_angle_brackets_inside_a_value_are_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["run", str(HELLO), "--mock", str(HELLO_MOCK), "--input", "name=<b>Ada</b>",
                 "--no-record"])  # fmt: skip
    assert code == 0, capsys.readouterr().err


def test_an_answer_placeholder_is_refused_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "runs"
    args = ["run", str(HELLO), "--mock", str(HELLO_MOCK), "--input", "name=Ada"]
    assert main([*args, "--runs-dir", str(runs)]) == 0
    (folder,) = runs.iterdir()
    capsys.readouterr()
    assert main(["resume", str(folder), "--answer", "approve=<answer>"]) == 2
    assert "<answer> is a placeholder" in capsys.readouterr().err

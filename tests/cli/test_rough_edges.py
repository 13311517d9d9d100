"""Rough edges a new user met, each with the line they now see."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lattice.cli import main
from tests.conftest import REPO

TRIAGE = REPO / "workflows" / "examples" / "support-triage.json"
TRIAGE_INPUTS = REPO / "workflows" / "examples" / "support-triage.inputs.json"


@pytest.mark.parametrize("flag", ["--max-steps", "--max-visits", "--max-calls"])
@pytest.mark.parametrize("value", ["0", "-3", "many"])
def test_limits_below_one_are_refused(
    flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as raised:
        main(["run", str(TRIAGE), flag, value])
    assert raised.value.code == 2
    assert flag in capsys.readouterr().err


@pytest.mark.parametrize("what", ["lower", "export"])
def test_output_file_problems_are_one_line(
    what: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    command = ["lower", str(TRIAGE)]
    if what == "export":
        mock = REPO / "workflows" / "examples" / "support-triage.mock.json"
        runs = tmp_path / "runs"
        args = ["run", str(TRIAGE), "--mock", str(mock), "--inputs", str(TRIAGE_INPUTS)]
        assert main([*args, "--runs-dir", str(runs)]) == 0
        command = ["export", "sft", str(runs)]
        capsys.readouterr()
    (tmp_path / "file").write_text("x")
    for target, words in [
        (tmp_path / "file" / "out.json", "is not a directory"),
        (tmp_path / "missing" / "out.json", "does not exist"),
        (tmp_path, "is a directory"),
        *([(Path("/proc/out.json"), "No such file")] if Path("/proc/self").is_dir() else []),
    ]:
        assert main([*command, "-o", str(target)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("lattice: error[") and words in err, err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_repair_that_runs_out_says_what_the_answer_got_wrong(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = json.loads((REPO / "workflows" / "examples" / "support-triage.mock.json").read_text())
    script["responses"]["classify"] = [{"category": "billing"}]  # misses required fields
    mock = tmp_path / "bad.mock.json"
    mock.write_text(json.dumps(script))
    code = main(
        ["run", str(TRIAGE), "--mock", str(mock), "--inputs", str(TRIAGE_INPUTS), "--no-record"]
    )
    err = capsys.readouterr().err
    assert code == 1
    assert "[mock_exhausted] at classify" in err
    assert "attempt 1 broke the contract [schema_error]:" in err
    assert "is a required property" in err


def test_without_a_folder_no_resume_is_suggested(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mock = tmp_path / "empty.mock.json"
    mock.write_text(json.dumps({"responses": {}}))
    code = main(
        ["run", str(TRIAGE), "--mock", str(mock), "--inputs", str(TRIAGE_INPUTS), "--no-record"]
    )
    err = capsys.readouterr().err
    assert code == 1
    assert "lattice resume" not in err and "run again" in err


def test_missing_inputs_say_how_to_give_them(capsys: pytest.CaptureFixture[str]) -> None:
    mock = REPO / "workflows" / "examples" / "support-triage.mock.json"
    code = main(["run", str(TRIAGE), "--mock", str(mock), "--no-record"])
    err = capsys.readouterr().err
    assert code == 2
    assert "$in: 'ticket' is a required property" in err
    assert "--input KEY=VALUE" in err and "--inputs FILE" in err

"""``lattice run``, ``lattice resume`` and ``lattice runs`` through ``lattice.cli.main``."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from lattice.cli import main
from tests.builders import approval as approval_document
from tests.builders import chain, conn, node, workflow
from tests.conftest import EXAMPLE_GRANTS, EXAMPLES, example_workspace

TRIAGE = EXAMPLES / "support-triage.json"
TRIAGE_MOCK = EXAMPLES / "support-triage.mock.json"
TRIAGE_INPUTS = EXAMPLES / "support-triage.inputs.json"
JSON_KEYS = {"status", "run_id", "run_dir", "output", "vars", "usage", "failure"}


@pytest.fixture(autouse=True)
def _no_terminal(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """stdin is not a terminal (no interactive questions); runs never land in the repo."""
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    monkeypatch.chdir(tmp_path)


def cli(capsys: pytest.CaptureFixture[str], *args: Any) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    assert "Traceback" not in out, out
    return code, out, err


def write_json(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def run_folders(runs: Path) -> list[Path]:
    return sorted(p for p in runs.iterdir() if p.is_dir()) if runs.exists() else []


def triage(capsys: pytest.CaptureFixture[str], runs: Path, *extra: Any) -> tuple[int, str, str]:
    return cli(
        capsys,
        "run",
        TRIAGE,
        "--provider",
        "mock",
        "--mock",
        TRIAGE_MOCK,
        "--inputs",
        TRIAGE_INPUTS,
        "--runs-dir",
        runs,
        *extra,
    )


@pytest.fixture
def approval(tmp_path: Path) -> tuple[Path, Path]:
    """A document with a question between two LLM nodes, and its mock script."""
    doc = approval_document(
        {
            "type": "object",
            "properties": {"topic": {"type": "string"}, "count": {"type": "integer"}},
            "required": ["topic"],
            "additionalProperties": False,
        }
    )
    mock = {"responses": {"draft": ["a rough note"], "polish": ["a polished note"]}}
    return write_json(tmp_path / "approval.json", doc), write_json(
        tmp_path / "approval.mock.json", mock
    )


def run_approval(
    capsys: pytest.CaptureFixture[str], approval: tuple[Path, Path], runs: Path, *extra: Any
) -> tuple[int, str, str]:
    doc, mock = approval
    return cli(
        capsys, "run", doc, "--mock", mock, "--input", "topic=tea", "--runs-dir", runs, *extra
    )


# -- lattice run ------------------------------------------------------------------------


def test_run_prints_the_output_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    code, out, err = triage(capsys, runs)
    assert code == 0, err
    output = json.loads(out)
    assert output["category"] == "billing"
    assert output["approved"] is True
    assert output["revisions"] == 1
    assert "completed" in err
    [folder] = run_folders(runs)
    assert str(folder) in err
    assert json.loads((folder / "result.json").read_text())["output"] == output
    assert (folder / "workflow.json").exists()


def test_run_json_prints_the_whole_result(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, _ = triage(capsys, tmp_path / "runs", "--json")
    assert code == 0
    result = json.loads(out)
    assert set(result) == JSON_KEYS
    assert result["status"] == "completed"
    assert result["failure"] is None
    assert result["output"]["category"] == "billing"
    assert result["vars"]["revisions"] == 1
    assert result["usage"]["calls"] == 5
    assert Path(result["run_dir"]).name == result["run_id"]
    assert Path(result["run_dir"]).is_dir()


def test_run_no_record_writes_no_folder(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    code, out, _ = triage(capsys, runs, "--no-record", "--json")
    assert code == 0
    assert json.loads(out)["run_dir"] is None
    assert not runs.exists()


def test_run_halted_exits_3(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, approval: tuple[Path, Path]
) -> None:
    runs = tmp_path / "runs"
    code, out, err = run_approval(capsys, approval, runs)
    assert code == 3
    assert out == ""  # no output yet
    assert "halted" in err
    assert "Send the note?" in err
    [folder] = run_folders(runs)
    assert f"lattice resume {folder}" in err
    report = json.loads((folder / "failure_report.json").read_text())
    assert report["details"]["options"] == ["Send", "Discard"]
    assert (folder / "checkpoint.json").exists()


def test_run_halted_json(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, approval: tuple[Path, Path]
) -> None:
    code, out, _ = run_approval(capsys, approval, tmp_path / "runs", "--json")
    assert code == 3
    result = json.loads(out)
    assert set(result) == JSON_KEYS
    assert result["status"] == "halted"
    assert result["output"] is None
    assert result["failure"]["node_id"] == "approve"
    assert result["failure"]["details"]["question"] == "Send the note?"


def test_run_with_answers_file_completes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, approval: tuple[Path, Path]
) -> None:
    answers = write_json(tmp_path / "answers.json", {"approve": "Send"})
    code, out, err = run_approval(capsys, approval, tmp_path / "runs", "--answers", answers)
    assert code == 0, err
    assert json.loads(out) == "a polished note"


def test_run_failed_exits_1(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    doc = write_json(tmp_path / "one.json", chain(node("p", "prompt", prompt="hi")))
    mock = write_json(tmp_path / "one.mock.json", {"responses": {"p": []}})
    runs = tmp_path / "runs"
    code, out, err = cli(capsys, "run", doc, "--mock", mock, "--runs-dir", runs)
    assert code == 1
    assert out == ""
    assert "failed" in err
    assert "mock_exhausted" in err
    [folder] = run_folders(runs)
    assert (folder / "failure_report.json").exists()

    code, out, _ = cli(capsys, "run", doc, "--mock", mock, "--runs-dir", runs, "--json")
    assert code == 1
    result = json.loads(out)
    assert result["status"] == "failed"
    assert result["failure"]["category"] == "mock_exhausted"
    assert result["failure"]["node_id"] == "p"


def test_run_without_a_provider_fails_saying_how_to_configure_one(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    doc = write_json(tmp_path / "one.json", chain(node("p", "prompt", prompt="hi")))
    code, _, err = cli(capsys, "run", doc, "--runs-dir", tmp_path / "runs")
    assert code == 1
    assert "--provider mock" in err


def test_run_step_limit_flag(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    doc = workflow(
        [
            node("start", "start"),
            node("inc", "variableStore", operation="increment", name="n"),
            node(
                "again",
                "ifElse",
                evaluationTarget="$vars.n",
                branches=[
                    {"label": "more", "condition": "< 1000000"},
                    {"label": "done", "condition": "", "isDefault": True},
                ],
            ),
            node("end", "end"),
        ],
        [
            conn("start", "inc"),
            conn("inc", "again"),
            conn("again", "inc", "branch-0"),
            conn("again", "end", "branch-1"),
        ],
    )
    path = write_json(tmp_path / "loop.json", doc)
    code, out, _ = cli(
        capsys, "run", path, "--max-visits", "5", "--runs-dir", tmp_path / "runs", "--json"
    )
    assert code == 1
    result = json.loads(out)
    assert result["failure"]["category"] == "step_limit"
    assert result["vars"]["n"] == 5


# -- lattice run: user mistakes (exit 2, nothing written) -------------------------------


def assert_usage_error(code: int, err: str, runs: Path, *words: str) -> None:
    assert code == 2
    assert err.strip(), "a usage error says what is wrong"
    for word in words:
        assert word in err, err
    assert run_folders(runs) == [], "nothing may be written for a usage error"


def test_unknown_input_key(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    code, _, err = triage(capsys, runs, "--input", "priority=high")
    assert_usage_error(code, err, runs, "priority")
    assert not runs.exists()


def test_input_failing_the_start_schema(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    code, _, err = cli(
        capsys, "run", TRIAGE, "--mock", TRIAGE_MOCK, "--input", "ticket=", "--runs-dir", runs
    )
    assert_usage_error(code, err, runs, "$in/ticket")
    code, _, err = cli(capsys, "run", TRIAGE, "--mock", TRIAGE_MOCK, "--runs-dir", runs)
    assert_usage_error(code, err, runs, "ticket")


def test_input_of_the_wrong_type(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, approval: tuple[Path, Path]
) -> None:
    runs = tmp_path / "runs"
    code, _, err = run_approval(capsys, approval, runs, "--input", "count=many")
    assert_usage_error(code, err, runs, "count")
    code, _, err = run_approval(capsys, approval, runs, "--input", "not-a-pair")
    assert_usage_error(code, err, runs, "KEY=VALUE")


def test_inputs_file_problems(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    base = ("run", TRIAGE, "--mock", TRIAGE_MOCK, "--runs-dir", runs, "--inputs")
    code, _, err = cli(capsys, *base, tmp_path / "missing.json")
    assert_usage_error(code, err, runs, "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    code, _, err = cli(capsys, *base, tmp_path / "bad.json")
    assert_usage_error(code, err, runs, "not valid JSON")
    code, _, err = cli(capsys, *base, write_json(tmp_path / "list.json", ["ticket"]))
    assert_usage_error(code, err, runs, "object")


def test_mock_script_missing_an_llm_node_fails_when_the_node_is_called(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    script = json.loads(TRIAGE_MOCK.read_text())
    del script["responses"]["review"]
    mock = write_json(tmp_path / "short.mock.json", script)
    code, _, err = cli(
        capsys, "run", TRIAGE, "--mock", mock, "--inputs", TRIAGE_INPUTS, "--runs-dir", runs
    )
    assert code == 1
    assert "[mock_exhausted] at review" in err
    assert "no responses for node 'review'" in err and '"review": [{' in err
    (folder,) = run_folders(runs)
    script["responses"]["review"] = json.loads(TRIAGE_MOCK.read_text())["responses"]["review"]
    write_json(mock, script)
    code, _, err = cli(capsys, "resume", folder, "--mock", mock)
    assert code == 0, err


def test_mock_script_need_not_list_nodes_of_branches_not_taken(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    script = json.loads(TRIAGE_MOCK.read_text())
    untaken = ["draft-bug", "draft-general"]  # the ticket is a billing one
    for node_id in untaken:
        del script["responses"][node_id]
    mock = write_json(tmp_path / "short.mock.json", script)
    code, _, err = cli(
        capsys, "run", TRIAGE, "--mock", mock, "--inputs", TRIAGE_INPUTS, "--no-record"
    )
    assert code == 0, err


def test_mock_script_problems(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    base = ("run", TRIAGE, "--inputs", TRIAGE_INPUTS, "--runs-dir", runs)
    code, _, err = cli(capsys, *base, "--mock", tmp_path / "nope.mock.json")
    assert_usage_error(code, err, runs, "nope.mock.json")
    (tmp_path / "bad.mock.json").write_text("[1,")
    code, _, err = cli(capsys, *base, "--mock", tmp_path / "bad.mock.json")
    assert_usage_error(code, err, runs, "not valid JSON")
    bad = write_json(tmp_path / "shape.mock.json", {"responses": {"classify": "not a list"}})
    code, _, err = cli(capsys, *base, "--mock", bad)
    assert_usage_error(code, err, runs, "responses")
    code, _, err = cli(capsys, *base, "--provider", "mock")
    assert_usage_error(code, err, runs, "--mock")
    code, _, err = cli(capsys, *base, "--provider", "no-such-provider")
    assert_usage_error(code, err, runs, "no-such-provider")


def test_unreadable_answers_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, approval: tuple[Path, Path]
) -> None:
    runs = tmp_path / "runs"
    code, _, err = run_approval(capsys, approval, runs, "--answers", tmp_path / "none.json")
    assert_usage_error(code, err, runs, "none.json")
    folder = tmp_path / "a-directory.json"
    folder.mkdir()
    code, _, err = run_approval(capsys, approval, runs, "--answers", folder)
    assert_usage_error(code, err, runs, "a-directory.json")
    wrong = write_json(tmp_path / "wrong.json", {"aprove": "Send"})
    code, _, err = run_approval(capsys, approval, runs, "--answers", wrong)
    assert_usage_error(code, err, runs, f"invalid answers in {wrong}")
    assert "'aprove' is not a question node (questions: approve)" in err


def test_invalid_json_answers(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, approval: tuple[Path, Path]
) -> None:
    runs = tmp_path / "runs"
    (tmp_path / "answers.json").write_text('{"approve": Send}')
    code, _, err = run_approval(capsys, approval, runs, "--answers", tmp_path / "answers.json")
    assert_usage_error(code, err, runs, "not valid JSON")
    (tmp_path / "answers.json").write_text('["Send"]')
    code, _, err = run_approval(capsys, approval, runs, "--answers", tmp_path / "answers.json")
    assert_usage_error(code, err, runs, "object")


@pytest.mark.parametrize(
    ("answers", "words"),
    [
        ({"aprove": "Send"}, ["aprove", "approve"]),
        ({"end": "Send"}, ["end", "not a question"]),
        ({"approve": "Maybe"}, ["Maybe", "Send", "Discard"]),
        ({"approve": 5}, ["5"]),
    ],
    ids=["unknown-node", "not-a-question", "invalid-option", "index-out-of-range"],
)
def test_invalid_answers(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    approval: tuple[Path, Path],
    answers: dict[str, Any],
    words: list[str],
) -> None:
    runs = tmp_path / "runs"
    path = write_json(tmp_path / "answers.json", answers)
    code, _, err = run_approval(capsys, approval, runs, "--answers", path)
    assert_usage_error(code, err, runs, *words)


def test_invalid_documents(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    code, _, err = cli(capsys, "run", tmp_path / "missing.json", "--runs-dir", runs)
    assert_usage_error(code, err, runs, "missing.json")
    (tmp_path / "broken.json").write_text("{")
    code, _, err = cli(capsys, "run", tmp_path / "broken.json", "--runs-dir", runs)
    assert_usage_error(code, err, runs)
    doc = chain(node("p", "prompt", prompt="{{ $vars.nowhere.result }}"))
    path = write_json(tmp_path / "bad-ref.json", doc)
    code, _, err = cli(capsys, "run", path, "--runs-dir", runs)
    assert_usage_error(code, err, runs, "nowhere", "/nodes/1")


# -- lattice resume ---------------------------------------------------------------------


def test_resume_with_an_answer_completes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, approval: tuple[Path, Path]
) -> None:
    runs = tmp_path / "runs"
    assert run_approval(capsys, approval, runs)[0] == 3
    [folder] = run_folders(runs)
    code, out, err = cli(capsys, "resume", folder, "--answer", "approve=Send")
    assert code == 0, err
    assert json.loads(out) == "a polished note"  # the mock continued where it was
    assert run_folders(runs) == [folder]
    assert json.loads((folder / "result.json").read_text())["status"] == "completed"
    assert not (folder / "failure_report.json").exists()
    events = [json.loads(x) for x in (folder / "events.jsonl").read_text().splitlines()]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    calls = [e["node_id"] for e in events if e["type"] == "llm_request"]
    assert calls == ["draft", "polish"]  # draft was not called again

    code, _, err = cli(capsys, "resume", folder)
    assert code == 2
    assert "already completed" in err


def test_resume_by_index_and_json(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, approval: tuple[Path, Path]
) -> None:
    runs = tmp_path / "runs"
    run_approval(capsys, approval, runs)
    [folder] = run_folders(runs)
    code, out, _ = cli(capsys, "resume", folder, "--answer", "approve=1", "--json")
    assert code == 0
    result = json.loads(out)
    assert set(result) == JSON_KEYS
    assert result["output"] == "discarded"
    assert result["vars"]["approve"]["result"] == {"label": "Discard", "index": 1}


def test_resume_without_an_answer_halts_again(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, approval: tuple[Path, Path]
) -> None:
    runs = tmp_path / "runs"
    run_approval(capsys, approval, runs)
    [folder] = run_folders(runs)
    code, out, err = cli(capsys, "resume", folder)
    assert code == 3
    assert out == ""
    assert "halted" in err


def test_resume_mistakes_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, approval: tuple[Path, Path]
) -> None:
    runs = tmp_path / "runs"
    run_approval(capsys, approval, runs)
    [folder] = run_folders(runs)
    before = (folder / "events.jsonl").read_text()
    for answer in ("approve=Maybe", "nobody=Send", "approve"):
        code, _, err = cli(capsys, "resume", folder, "--answer", answer)
        assert code == 2, answer
        assert err.strip()
    assert (folder / "events.jsonl").read_text() == before
    code, _, err = cli(capsys, "resume", tmp_path / "not-a-run")
    assert code == 2
    assert "not-a-run" in err


def test_resume_a_failed_run_with_a_new_mock(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, approval: tuple[Path, Path]
) -> None:
    doc, _ = approval
    short = write_json(
        tmp_path / "short.mock.json", {"responses": {"draft": ["rough"], "polish": []}}
    )
    runs = tmp_path / "runs"
    answers = write_json(tmp_path / "answers.json", {"approve": "Send"})
    code, _, _ = cli(
        capsys,
        "run",
        doc,
        "--mock",
        short,
        "--input",
        "topic=tea",
        "--answers",
        answers,
        "--runs-dir",
        runs,
    )
    assert code == 1
    [folder] = run_folders(runs)
    full = write_json(
        tmp_path / "full.mock.json", {"responses": {"draft": ["rough"], "polish": ["shiny"]}}
    )
    code, out, err = cli(capsys, "resume", folder, "--mock", full)
    assert code == 0, err
    assert json.loads(out) == "shiny"
    result = json.loads((folder / "result.json").read_text())
    assert result["vars"]["draft"]["result"] == "rough"


def test_a_run_whose_failure_a_resume_repeats_is_not_resumed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    code, _, _ = cli(
        capsys,
        "run",
        EXAMPLES / "fix-a-bug.json",
        "--mock",
        EXAMPLES / "fix-a-bug.mock.json",
        "--inputs",
        EXAMPLES / "fix-a-bug.inputs.json",
        "--runs-dir",
        runs,
    )
    assert code == 1  # no tools granted: the script's tool calls fail the agent
    [folder] = run_folders(runs)

    def files() -> dict[str, bytes]:  # owner.lock names the last process to claim it
        found = (p for p in folder.rglob("*") if p.is_file() and p.name != "owner.lock")
        return {str(p.relative_to(folder)): p.read_bytes() for p in found}

    before = files()
    code, out, err = cli(capsys, "resume", folder.name, "--runs-dir", runs)
    assert code == 2
    assert out == ""
    [line] = err.splitlines()
    assert line.startswith(f"lattice: error[not_resumable]: run {folder.name} failed ")
    assert "a resume would repeat" in line
    assert "start a new run" in line
    assert files() == before, "nothing of the folder changes"


def test_resume_a_multi_select_question(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    doc = chain(
        node(
            "pick",
            "askUserQuestion",
            questionText="Which?",
            multiSelect=True,
            options=[{"label": "A"}, {"label": "B"}, {"label": "C"}],
        )
    )
    runs = tmp_path / "runs"
    code, _, _ = cli(capsys, "run", write_json(tmp_path / "multi.json", doc), "--runs-dir", runs)
    assert code == 3
    [folder] = run_folders(runs)
    code, out, _ = cli(capsys, "resume", folder, "--answer", "pick=A,C")
    assert code == 0
    assert json.loads(out) == {"labels": ["A", "C"], "indexes": [0, 2]}


# -- lattice runs -----------------------------------------------------------------------


def test_runs_list_and_show(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, approval: tuple[Path, Path]
) -> None:
    runs = tmp_path / "runs"
    assert triage(capsys, runs)[0] == 0
    [triage_run] = run_folders(runs)
    doc = write_json(tmp_path / "one.json", chain(node("p", "prompt", prompt="hi"), id="one"))
    mock = write_json(tmp_path / "one.mock.json", {"responses": {"p": []}})
    assert cli(capsys, "run", doc, "--mock", mock, "--runs-dir", runs)[0] == 1
    [failed_run] = [f for f in run_folders(runs) if f != triage_run]
    assert run_approval(capsys, approval, runs)[0] == 3
    [halted_run] = [f for f in run_folders(runs) if f not in (triage_run, failed_run)]

    code, out, _ = cli(capsys, "runs", "list", "--runs-dir", runs)
    assert code == 0
    lines = out.strip().splitlines()
    assert len(lines) == 3
    by_id = {line.split()[0]: line for line in lines}
    assert "completed" in by_id[triage_run.name]
    assert "support-triage" in by_id[triage_run.name]
    assert "5 calls" in by_id[triage_run.name]
    assert "failed" in by_id[failed_run.name]
    assert "mock_exhausted" in by_id[failed_run.name]
    assert "halted" in by_id[halted_run.name]
    assert "approve" in by_id[halted_run.name]

    code, out, _ = cli(capsys, "runs", "show", triage_run)
    assert code == 0
    assert triage_run.name in out and "completed" in out
    assert "started by lattice run" in out
    for kind in ("START", "LLM_WRITE", "SWITCH", "STATE", "TRANSFORM", "END"):
        assert kind in out
    for port in ("Billing", "Needs changes", "Revise again", "Approved"):
        assert f"→ {port}" in out
    assert "usage: 5 model calls," in out
    assert "output:" in out

    code, out, _ = cli(capsys, "runs", "show", failed_run)
    assert code == 0
    assert "failed" in out
    assert "failure [mock_exhausted] at p" in out
    assert "lattice resume" in out

    code, out, _ = cli(capsys, "runs", "show", halted_run)
    assert code == 0
    assert "waiting_for_answer" in out
    assert "--answer approve=" in out


def test_runs_list_of_nothing(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, _ = cli(capsys, "runs", "list", "--runs-dir", tmp_path / "none")
    assert code == 0
    assert "no runs" in out
    (tmp_path / "empty").mkdir()
    code, out, _ = cli(capsys, "runs", "--runs-dir", tmp_path / "empty")
    assert code == 0
    assert "no runs" in out


def test_runs_show_mistakes(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = cli(capsys, "runs", "show", tmp_path)
    assert code == 2
    assert "not a run folder" in err
    code, _, err = cli(capsys, "runs", "show")
    assert code == 2
    assert err.strip()


def test_runs_dir_that_is_a_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    not_a_dir = tmp_path / "runs"
    not_a_dir.write_text("")
    code = main(
        [
            "run",
            str(EXAMPLES / "hello-world.json"),
            "--mock",
            str(EXAMPLES / "hello-world.mock.json"),
            "--input",
            "name=Ada",
            "--runs-dir",
            str(not_a_dir),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "runs" in err


def test_runs_show_names_the_error_of_a_routed_failure(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    doc = workflow(
        [
            node("start", "start"),
            node("p", "prompt", prompt="hi"),
            node("end", "end"),
            node("fallback", "end", output="fallback"),
        ],
        [conn("start", "p"), conn("p", "end"), conn("p", "fallback", "failed")],
    )
    path = write_json(tmp_path / "routed.json", doc)
    mock = write_json(tmp_path / "routed.mock.json", {"responses": {"p": []}})
    runs = tmp_path / "runs"
    code, out, _ = cli(capsys, "run", path, "--mock", mock, "--runs-dir", runs)
    assert (code, json.loads(out)) == (0, "fallback")
    [folder] = run_folders(runs)
    code, out, _ = cli(capsys, "runs", "show", folder)
    [line] = [x for x in out.splitlines() if "→ failed" in x]
    assert "mock_exhausted" in line
    assert "None" not in line


def test_argparse_mistakes_exit_2_without_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["run"], ["resume"], ["run", "x.json", "--max-steps", "many"], ["runs", "nope"]):
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 2
        err = capsys.readouterr().err
        assert "usage:" in err
        assert "Traceback" not in err


def _cli_examples() -> list[Path]:
    return sorted(
        p
        for p in EXAMPLES.glob("*.json")
        if not p.name.endswith((".mock.json", ".inputs.json", ".answers.json"))
        and p.with_name(p.stem + ".mock.json").exists()
    )


@pytest.mark.parametrize("path", _cli_examples(), ids=lambda p: p.stem)
def test_every_example_runs_from_the_cli(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, path: Path
) -> None:
    args: list[Any] = ["run", path, "--mock", path.with_name(path.stem + ".mock.json")]
    for kind, flag in (("inputs", "--inputs"), ("answers", "--answers")):
        helper = path.with_name(f"{path.stem}.{kind}.json")
        if helper.exists():
            args += [flag, helper]
    workspace = example_workspace(path, tmp_path)
    if workspace is not None:
        args += ["--workspace", workspace, "--allow", ",".join(EXAMPLE_GRANTS)]
    code, out, err = cli(capsys, *args, "--runs-dir", tmp_path / "runs", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["status"] == "completed"
    assert result["output"] is not None


def test_run_json_masks_the_secrets_of_the_config_it_was_given(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "tok-cli-5e1d-masked"
    monkeypatch.setenv("LATTICE_TEST_CLI_TOKEN", secret)
    config = tmp_path / "elsewhere.toml"
    config.write_text('[secrets]\nallow = ["LATTICE_TEST_CLI_TOKEN"]\n', encoding="utf-8")
    doc = write_json(tmp_path / "wf.json", chain(node("say", "prompt", prompt="Say it")))
    mock = write_json(tmp_path / "mock.json", {"responses": {"say": [f"the token is {secret}"]}})
    code, out, err = cli(
        capsys, "run", doc, "--mock", mock, "--config", config, "--json", "--no-record"
    )
    assert code == 0, err
    assert secret not in out and json.loads(out)["output"] == "the token is ***"


def test_a_script_naming_nodes_the_document_lacks_is_refused_before_the_run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    doc = write_json(tmp_path / "one.json", chain(node("greet", "prompt", prompt="hi")))
    typo = write_json(tmp_path / "typo.mock.json", {"responses": {"greeet": ["hi"]}})
    runs = tmp_path / "runs"
    code, _, err = cli(capsys, "run", doc, "--mock", typo, "--runs-dir", runs)
    assert code == 2
    assert f"mock script {typo}: responses name node(s) the document does not have" in err
    assert "'greeet' (did you mean 'greet'?)" in err
    assert run_folders(runs) == []

    failing = {"responses": {"greet": [{"$error": "invalid_request", "message": "no"}]}}
    err_mock = write_json(tmp_path / "err.mock.json", failing)
    code, _, _ = cli(capsys, "run", doc, "--mock", err_mock, "--runs-dir", runs)
    assert code == 1
    [folder] = run_folders(runs)
    code, _, err = cli(capsys, "resume", folder, "--mock", typo)
    assert code == 2 and "did you mean 'greet'?" in err


def test_a_batch_script_given_to_run_says_rows_are_for_batch(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    batch_mock = EXAMPLES / "support-triage.batch.mock.json"
    code, _, err = cli(
        capsys, "run", TRIAGE, "--mock", batch_mock, "--inputs", TRIAGE_INPUTS, "--no-record"
    )
    assert code == 2
    assert (
        f'mock script {batch_mock}: "rows" (answers per dataset row) is for lattice batch only'
        in err
    )
    assert "run the batch again with --retry-failed" in err


def test_every_runs_action_takes_a_run_id_or_a_folder(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    assert triage(capsys, runs)[0] == 0
    assert triage(capsys, runs)[0] == 0
    first, second = run_folders(runs)

    by_id = cli(capsys, "runs", "show", first.name, "--runs-dir", runs)
    by_folder = cli(capsys, "runs", "show", first)
    assert by_id[0] == by_folder[0] == 0
    assert by_id[1] == by_folder[1]
    assert f"run {first.name}: completed" in by_id[1]

    code, out, _ = cli(capsys, "runs", "diff", first.name, second.name, "--runs-dir", runs)
    assert code == 0, out

    code, _, err = cli(capsys, "runs", "show", "20990101T000000-00000000", "--runs-dir", runs)
    assert code == 2
    assert "no run folder 20990101T000000-00000000" in err


def test_runs_show_counts_calls_as_the_runs_usage_does(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A request that got no answer is a request, not a call: the op's line, the usage
    line and ``lattice run``'s summary all say so."""
    mock = write_json(
        tmp_path / "m.json",
        {"responses": {"greet": [{"$error": "auth_error", "message": "bad key"}]}},
    )
    runs = tmp_path / "runs"
    code, _, err = cli(
        capsys,
        "run",
        EXAMPLES / "hello-world.json",
        "--mock",
        mock,
        "--input",
        "name=Ada",
        "--runs-dir",
        runs,
    )
    assert code == 1
    assert "0 model calls (1 request)," in err
    [folder] = run_folders(runs)
    code, out, _ = cli(capsys, "runs", "show", folder)
    [op_line] = [line for line in out.splitlines() if "LLM_WRITE" in line]
    assert " ms  0 model calls (1 request)  ✗ auth_error" in op_line
    assert "usage: 0 model calls (1 request)," in out


def test_runs_show_says_how_long_the_run_ran(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Each stretch from a start or resume to the last event before the next counts; the
    wait for the resume does not."""
    folder = tmp_path / "runs" / "20261126T100000-0000aaaa"
    folder.mkdir(parents=True)
    stamps = [
        ("run_started", "2026-11-26T10:00:00.000Z"),
        ("op_started", "2026-11-26T10:00:01.500Z"),
        ("run_halted", "2026-11-26T10:00:05.250Z"),
        ("run_resumed", "2026-11-26T11:30:00.000Z"),
        ("run_finished", "2026-11-26T11:30:02.000Z"),
    ]
    events = [
        {"seq": n, "ts": ts, "run_id": folder.name, "type": kind, "data": {}}
        for n, (kind, ts) in enumerate(stamps, start=1)
    ]
    (folder / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    code, out, _ = cli(capsys, "runs", "show", folder.name, "--runs-dir", folder.parent)
    assert code == 0
    assert out.splitlines()[0].startswith(f"run {folder.name}: ? in 7.25s")


def test_an_input_no_run_folder_can_record_is_refused_before_the_folder(
    capsys: pytest.CaptureFixture[str], approval: tuple[Path, Path], tmp_path: Path
) -> None:
    """``{"topic": "\\ud800"}`` is JSON Python reads, and a string no file can hold: the
    run is refused with the input's place (exit 2), not ended by a traceback after its
    folder was made."""
    doc, mock = approval
    inputs = tmp_path / "inputs.json"
    inputs.write_text('{"topic": "tea \\ud800"}', encoding="utf-8")
    runs = tmp_path / "runs"
    code, _, err = cli(capsys, "run", doc, "--mock", mock, "--inputs", inputs, "--runs-dir", runs)
    assert code == 2, err
    assert "$in/topic: a string holds a lone surrogate" in err
    assert run_folders(runs) == []


def test_a_mock_script_no_run_folder_can_record_is_refused_before_the_folder(
    capsys: pytest.CaptureFixture[str], approval: tuple[Path, Path], tmp_path: Path
) -> None:
    """A mock answer spelling a lone surrogate (``"\\ud800"``) is refused with its place
    (exit 2, one line), not ended by a traceback."""
    doc, _ = approval
    mock = tmp_path / "surrogate.mock.json"
    mock.write_text('{"responses": {"draft": ["ok \\ud800"]}}', encoding="utf-8")
    runs = tmp_path / "runs"
    code, _, err = cli(capsys, "run", doc, "--mock", mock, "--input", "topic=t", "--runs-dir", runs)
    assert code == 2, err
    assert "/responses/draft/0: a string holds a lone surrogate" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert run_folders(runs) == []

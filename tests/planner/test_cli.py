"""``lattice plan`` end to end, offline, through ``lattice.cli.main`` (fixtures and mock scripts)."""

from __future__ import annotations

import copy
import io
import json
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from lattice.cli import main
from lattice.planner.passes import PASSES as PASS_SPECS
from tests.builders import op_records as read_op_records_of
from tests.conftest import REPO

PASSES = REPO / "lattice" / "planner" / "workflows"
SAMPLE = REPO / "workflows" / "examples" / "todo-app"
TARGET = "src/todo/store.py"
GOAL = "Move reading and writing the data file out of the store into its own module"
CHAIN: list[tuple[str, list[str]]] = [
    ("project", []),
    ("architecture", []),
    ("scaffold", []),
    ("test", []),
    ("implementation", [TARGET]),
    ("refactor", [GOAL]),
]
MARKERS = {
    "src/todo/store.py": "TODO_STORE_ADD_STUB",
    "src/todo/cli.py": "TODO_CLI_STUB",
    "tests/test_store.py": "TODO_TEST_MARKER",
}
"""A string only that file of the sample project contains."""


@pytest.fixture(autouse=True)
def _no_terminal(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A fresh copy of the sample project."""
    target = tmp_path / "todo-app"
    shutil.copytree(SAMPLE, target, ignore=shutil.ignore_patterns(".lattice"))
    return target


def cli(capsys: pytest.CaptureFixture[str], *args: Any) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return code, out, err


def authored(pass_name: str) -> dict[str, Any]:
    """The authored artifact of a pass for the sample project (its mock script's answer)."""
    script = json.loads((PASSES / "mocks" / f"{pass_name}.mock.json").read_text(encoding="utf-8"))
    artifact = script["responses"]["plan"][0]
    assert isinstance(artifact, dict)
    return artifact


def write_mock(path: Path, *answers: Any) -> Path:
    path.write_text(json.dumps({"responses": {"plan": list(answers)}}), encoding="utf-8")
    return path


def replay(
    capsys: pytest.CaptureFixture[str], project: Path, pass_name: str, *extra: Any
) -> tuple[int, str, str]:
    return cli(
        capsys,
        "plan",
        pass_name,
        *extra,
        "--project",
        project,
        "--fixtures",
        PASSES / f"{pass_name}.fixtures.jsonl",
    )


def approve(capsys: pytest.CaptureFixture[str], project: Path, artifact_id: str) -> None:
    code, _, err = cli(capsys, "artifacts", "approve", artifact_id, "--project", project)
    assert code == 0, err


def run_until(capsys: pytest.CaptureFixture[str], project: Path, last: str) -> None:
    """Replay the chain up to and including ``last``, approving each artifact."""
    for name, extra in CHAIN:
        code, _, err = replay(capsys, project, name, *extra)
        assert code == 0, err
        approve(capsys, project, f"{name}-1")
        if name == "test":
            code, _, err = cli(capsys, "artifacts", "lock", "test-1", "--project", project)
            assert code == 0, err
        if name == last:
            return


def run_dirs(project: Path) -> list[Path]:
    runs = project / ".lattice" / "runs"
    return sorted(p for p in runs.iterdir() if p.is_dir()) if runs.exists() else []


def run_of(project: Path, artifact_id: str) -> Path:
    """The run folder that produced an artifact."""
    record = json.loads((project / ".lattice/artifacts" / f"{artifact_id}.json").read_text())
    return project / record["run"]["run_dir"]


def op_record(run_dir: Path, node: str = "plan") -> dict[str, Any]:
    (record,) = read_op_records_of(run_dir, node)
    return record


def prompt_text(run_dir: Path) -> str:
    """Every message the run sent to the model, as one text."""
    return "\n".join(
        m["content"] for attempt in op_record(run_dir)["attempts"] for m in attempt["messages"]
    )


def masked(record: dict[str, Any]) -> dict[str, Any]:
    """An artifact record without what changes from run to run (times, run ids)."""
    out = copy.deepcopy(record)
    out["created_at"] = "<time>"
    out["run"] = {k: "<run>" if v else v for k, v in out["run"].items()}
    for entry in out["history"]:
        entry["at"] = "<time>"
    return out


# -- the chain ---------------------------------------------------------------------------


def test_every_pass_replays_offline_and_saves_its_artifact(
    capsys: pytest.CaptureFixture[str], project: Path, snapshot: Any
) -> None:
    saved: dict[str, dict[str, Any]] = {}
    for name, extra in CHAIN:
        code, out, err = replay(capsys, project, name, *extra)
        assert code == 0, err
        assert json.loads(out) == authored(name)  # stdout: the artifact
        assert f"saved {PASS_SPECS[name].artifact_type} {name}-1 (draft)" in err
        assert f"lattice artifacts approve {name}-1" in err
        record = json.loads((project / ".lattice/artifacts" / f"{name}-1.json").read_text())
        assert record["status"] == "draft"
        assert record["content"] == authored(name)
        assert record["warnings"] == []
        [run_dir] = [d for d in run_dirs(project) if d.name == record["run"]["run_id"]]
        assert record["run"]["run_dir"] == f".lattice/runs/{run_dir.name}"
        assert (run_dir / "result.json").exists()
        saved[name] = record
        approve(capsys, project, f"{name}-1")
        if name == "test":
            assert cli(capsys, "artifacts", "lock", "test-1", "--project", project)[0] == 0
    assert [r["inputs"] for r in saved.values()][1:3] == [
        [
            {
                "id": "project-1",
                "type": "ProjectPlan",
                "content_hash": saved["project"]["content_hash"],
            }
        ],
        [
            {
                "id": "project-1",
                "type": "ProjectPlan",
                "content_hash": saved["project"]["content_hash"],
            },
            {
                "id": "architecture-1",
                "type": "ArchitecturePlan",
                "content_hash": saved["architecture"]["content_hash"],
            },
        ],
    ]
    assert saved["implementation"]["subject"] == TARGET
    assert saved["refactor"]["subject"] == GOAL
    for name, record in saved.items():
        assert masked(record) == snapshot(name=name)


def test_the_chain_lists_its_artifacts(capsys: pytest.CaptureFixture[str], project: Path) -> None:
    run_until(capsys, project, "refactor")
    code, out, _ = cli(capsys, "artifacts", "list", "--project", project)
    assert code == 0
    lines = out.splitlines()
    assert [line.split()[:3] for line in lines] == [
        ["project-1", "ProjectPlan", "approved"],
        ["architecture-1", "ArchitecturePlan", "approved"],
        ["scaffold-1", "ScaffoldPlan", "approved"],
        ["test-1", "TestPlan", "locked"],
        ["implementation-1", "ImplementationPlan", "approved"],
        ["refactor-1", "RefactorPlan", "approved"],
    ]
    assert TARGET in lines[4]


def test_plan_json_prints_the_run_result(capsys: pytest.CaptureFixture[str], project: Path) -> None:
    code, out, err = replay(capsys, project, "project", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["status"] == "completed"
    assert result["output"] == authored("project")
    assert "saved ProjectPlan project-1" in err


def test_runs_dir_option(capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path) -> None:
    runs = tmp_path / "elsewhere"
    code, _, err = replay(capsys, project, "project", "--runs-dir", runs)
    assert code == 0, err
    [run_dir] = [p for p in runs.iterdir() if p.is_dir()]
    assert not (project / ".lattice" / "runs").exists()
    record = json.loads((project / ".lattice/artifacts/project-1.json").read_text())
    assert record["run"] == {"run_id": run_dir.name, "run_dir": str(run_dir.resolve())}


# -- required inputs -----------------------------------------------------------------------


def test_a_missing_document_is_named_and_nothing_is_written(
    capsys: pytest.CaptureFixture[str], project: Path
) -> None:
    (project / "glossary.md").unlink()
    code, out, err = replay(capsys, project, "project")
    assert code == 2
    assert out == ""
    assert "error[missing_input]" in err
    assert "glossary.md" in err
    assert "requirements.md" not in err  # only what is missing
    assert not (project / ".lattice").exists()


def test_every_missing_input_is_listed_at_once(
    capsys: pytest.CaptureFixture[str], project: Path
) -> None:
    (project / "requirements.md").unlink()
    code, _, err = replay(capsys, project, "test")
    assert code == 2
    for name in ("ProjectPlan", "ArchitecturePlan", "ScaffoldPlan", "requirements.md"):
        assert name in err
    assert "lattice plan project" in err  # how to make the first one
    assert not (project / ".lattice").exists()


def test_an_unapproved_input_is_refused_with_the_command_that_approves_it(
    capsys: pytest.CaptureFixture[str], project: Path
) -> None:
    assert replay(capsys, project, "project")[0] == 0
    before = run_dirs(project)
    code, out, err = replay(capsys, project, "architecture")
    assert code == 2
    assert out == ""
    assert "ProjectPlan project-1 is draft" in err
    assert f"lattice artifacts approve project-1 --project {project}" in err
    assert run_dirs(project) == before  # no run started
    approve(capsys, project, "project-1")
    assert replay(capsys, project, "architecture")[0] == 0


def test_the_refactor_pass_needs_a_locked_test_plan(
    capsys: pytest.CaptureFixture[str], project: Path
) -> None:
    for name, extra in CHAIN[:4]:
        assert replay(capsys, project, name, *extra)[0] == 0
        approve(capsys, project, f"{name}-1")
    code, _, err = replay(capsys, project, "refactor", GOAL)
    assert code == 2
    assert "TestPlan test-1 is approved, and the refactor pass needs it locked" in err
    assert f"lattice artifacts lock test-1 --project {project}" in err


def test_the_newest_artifact_of_a_type_is_the_input(
    capsys: pytest.CaptureFixture[str], project: Path
) -> None:
    assert replay(capsys, project, "project")[0] == 0
    approve(capsys, project, "project-1")
    assert replay(capsys, project, "project")[0] == 0  # project-2, a draft
    code, _, err = replay(capsys, project, "architecture")
    assert code == 2
    assert "ProjectPlan project-2 is draft" in err


def test_an_approved_input_edited_afterwards_is_refused(
    capsys: pytest.CaptureFixture[str], project: Path
) -> None:
    run_until(capsys, project, "project")
    path = project / ".lattice/artifacts/project-1.json"
    record = json.loads(path.read_text())
    record["content"]["requirements"][0]["priority"] = "could"
    path.write_text(json.dumps(record))
    code, _, err = replay(capsys, project, "architecture")
    assert code == 2
    assert "ProjectPlan project-1 was changed after it was approved" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["implementation"], "plans one file"),
        (["refactor"], "needs a goal"),
        (["refactor", "  "], "needs a goal"),
        (["project", "extra"], "takes no argument"),
    ],
)
def test_pass_arguments(
    capsys: pytest.CaptureFixture[str], project: Path, args: list[str], message: str
) -> None:
    code, _, err = cli(capsys, "plan", *args, "--project", project, "--mock", "none.json")
    assert code == 2
    assert message in err


def test_project_must_be_a_directory(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = cli(capsys, "plan", "project", "--project", tmp_path / "nope")
    assert code == 2
    assert "not a directory" in err


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("src/todo/legacy.py", "src/todo/legacy.py in the ScaffoldPlan (it plans: "),
        ("src/todo/missing.py", "the target file src/todo/missing.py (not found"),
        ("../outside.py", "outside the project directory"),
    ],
)
def test_implementation_target_checks(
    capsys: pytest.CaptureFixture[str], project: Path, target: str, message: str
) -> None:
    run_until(capsys, project, "test")
    (project / "src/todo/legacy.py").write_text("x = 1\n")  # exists, but is not planned
    code, _, err = replay(capsys, project, "implementation", target)
    assert code == 2
    assert message in err


def test_target_file_relative_to_the_current_directory(
    capsys: pytest.CaptureFixture[str], project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_until(capsys, project, "test")
    monkeypatch.chdir(project.parent)
    code, _, err = replay(capsys, project, "implementation", f"todo-app/{TARGET}")
    assert code == 0, err
    record = json.loads((project / ".lattice/artifacts/implementation-1.json").read_text())
    assert record["subject"] == TARGET


# -- forbidden inputs ----------------------------------------------------------------------


def test_project_pass_leaves_source_code_and_tests_out_of_the_prompt(
    capsys: pytest.CaptureFixture[str], project: Path
) -> None:
    code, _, err = replay(capsys, project, "project")
    assert code == 0, err
    assert "excluded from the prompt" in err
    for path in MARKERS:
        assert path in err
    [run_dir] = run_dirs(project)
    sent = prompt_text(run_dir)
    assert "A user can add a todo with a title" in sent  # requirements.md is in
    for marker in MARKERS.values():
        assert marker not in sent
    events = (run_dir / "events.jsonl").read_text()
    for marker in MARKERS.values():
        assert marker not in events
    plan = json.loads((run_dir / "checkpoint.json").read_text())["meta"]["plan"]
    assert plan["excluded"] == sorted(["src/todo/__init__.py", *MARKERS])


def test_implementation_pass_sees_only_its_target_file(
    capsys: pytest.CaptureFixture[str], project: Path
) -> None:
    run_until(capsys, project, "test")
    code, _, err = replay(capsys, project, "implementation", TARGET)
    assert code == 0, err
    assert "the implementation pass sees only its target file" in err
    assert "src/todo/cli.py" in err
    run_dir = run_of(project, "implementation-1")
    sent = prompt_text(run_dir)
    assert MARKERS[TARGET] in sent
    assert MARKERS["src/todo/cli.py"] not in sent
    assert MARKERS["tests/test_store.py"] not in sent


def test_refactor_pass_sees_the_layout_but_no_file_contents(
    capsys: pytest.CaptureFixture[str], project: Path
) -> None:
    run_until(capsys, project, "implementation")
    code, _, err = replay(capsys, project, "refactor", GOAL)
    assert code == 0, err
    run_dir = run_of(project, "refactor-1")
    inputs = json.loads((run_dir / "input.json").read_text())
    assert inputs["layout"] == [
        "README.md",
        "constraints.md",
        "glossary.md",
        "requirements.md",
        "src/todo/__init__.py",
        "src/todo/cli.py",
        "src/todo/store.py",
        "tests/test_store.py",
    ]  # .gitignore and .lattice/ are hidden
    sent = prompt_text(run_dir)
    assert "src/todo/store.py" in sent
    for marker in MARKERS.values():
        assert marker not in sent


# -- contracts through the CLI ---------------------------------------------------------------


def test_code_in_an_artifact_is_repaired_then_saved(
    capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path
) -> None:
    with_code = authored("project")
    with_code["requirements"][0]["statement"] = (
        "Adding works like this:\ndef add(title):\n    return store.append(title)"
    )
    mock = write_mock(tmp_path / "code.mock.json", with_code, authored("project"))
    code, out, err = cli(capsys, "plan", "project", "--project", project, "--mock", mock)
    assert code == 0, err
    assert json.loads(out) == authored("project")
    [run_dir] = run_dirs(project)
    first, second = op_record(run_dir)["attempts"]
    assert first["error_type"] == "code_in_output"
    assert first["violations"][0]["pointer"] == "/requirements/0/statement"
    assert second["kind"] == "repair"
    packet = "\n".join(m["content"] for m in second["messages"])
    assert "/requirements/0/statement: contains source code" in packet
    assert "A user can add a todo with a title" not in packet  # fix-only: no original context
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    [repair] = [e for e in events if e["type"] == "repair_attempt"]
    assert repair["data"]["error_type"] == "code_in_output"
    record = json.loads((project / ".lattice/artifacts/project-1.json").read_text())
    assert record["content"] == authored("project")


def test_an_artifact_that_never_validates_fails_the_pass(
    capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path
) -> None:
    bad = {"name": "todo"}
    mock = tmp_path / "bad.mock.json"
    mock.write_text(json.dumps({"responses": {}, "default": bad}))
    code, out, err = cli(capsys, "plan", "project", "--project", project, "--mock", mock)
    assert code == 1
    assert out == ""
    assert "schema_error" in err
    assert not (project / ".lattice" / "artifacts").exists()


def test_missing_information_halts_then_resume_and_from_run_save_the_artifact(
    capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path
) -> None:
    question = {"error": "missing_information", "details": "Which platforms must it run on?"}
    mock = write_mock(tmp_path / "halt.mock.json", question, authored("project"))
    code, out, err = cli(capsys, "plan", "project", "--project", project, "--mock", mock)
    assert code == 3
    assert out == ""
    [run_dir] = run_dirs(project)
    assert f"lattice resume {run_dir} --answer plan=" in err
    assert f"lattice plan project --project {project} --from-run {run_dir}" in err
    assert not (project / ".lattice" / "artifacts").exists()
    report = json.loads((run_dir / "failure_report.json").read_text())
    assert report["category"] == "missing_information"
    assert report["details"]["missing"] == "Which platforms must it run on?"

    code, _, err = cli(capsys, "plan", "project", "--project", project, "--from-run", run_dir)
    assert code == 2
    assert "is halted; finish it first" in err

    code, _, err = cli(capsys, "resume", run_dir, "--answer", "plan=Linux, macOS and Windows")
    assert code == 0, err
    last = op_record(run_dir)["attempts"][-1]
    assert "Linux, macOS and Windows" in last["messages"][-1]["content"]

    code, out, err = cli(capsys, "plan", "project", "--project", project, "--from-run", run_dir)
    assert code == 0, err
    assert json.loads(out) == authored("project")
    record = json.loads((project / ".lattice/artifacts/project-1.json").read_text())
    assert record["run"] == {"run_id": run_dir.name, "run_dir": f".lattice/runs/{run_dir.name}"}
    assert record["status"] == "draft"

    code, _, err = cli(capsys, "plan", "project", "--project", project, "--from-run", run_dir)
    assert code == 2
    assert "already saved as project-1" in err


def test_from_run_checks_the_pass_and_the_project(
    capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path
) -> None:
    assert replay(capsys, project, "project")[0] == 0
    [run_dir] = run_dirs(project)
    code, _, err = cli(capsys, "plan", "scaffold", "--project", project, "--from-run", run_dir)
    assert code == 2
    assert "a run of the project pass, not of the scaffold pass" in err
    other = tmp_path / "other"
    other.mkdir()
    code, _, err = cli(capsys, "plan", "project", "--project", other, "--from-run", run_dir)
    assert code == 2
    assert "ran over the project" in err
    code, _, err = cli(capsys, "plan", "project", "--project", project, "--from-run", tmp_path)
    assert code == 2
    assert "not a resumable run folder" in err


def test_answers_file_supplies_information_up_front(
    capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path
) -> None:
    mock = write_mock(tmp_path / "m.json", authored("project"))
    answers = tmp_path / "answers.json"
    answers.write_text(json.dumps({"plan": "It must also run on FreeBSD."}))
    code, _, err = cli(
        capsys, "plan", "project", "--project", project, "--mock", mock, "--answers", answers
    )
    assert code == 0, err
    assert "It must also run on FreeBSD." in prompt_text(run_dirs(project)[0])


def test_a_mock_without_the_plan_node_fails_its_call_showing_the_expected_answer(
    capsys: pytest.CaptureFixture[str], project: Path, tmp_path: Path
) -> None:
    mock = tmp_path / "m.json"
    mock.write_text(json.dumps({"responses": {"other": ["x"]}}))
    code, _, err = cli(capsys, "plan", "project", "--project", project, "--mock", mock)
    assert code == 1
    assert "[mock_exhausted]" in err
    assert "no responses for node 'plan'" in err and '"plan": [{' in err


# -- the documented chains run as written ------------------------------------------------------


def documented_chain(page: Path) -> list[list[str]]:
    """The ``lattice`` commands of the page's ```sh block that starts with ``P=…``."""
    text = page.read_text(encoding="utf-8")
    start = text.index("P=workflows/examples/todo-app F=lattice/planner/workflows\n")
    block = text[start : text.index("```", start)].replace("\\\n", " ")
    commands = []
    for line in block.splitlines()[1:]:
        for part in line.split(" && "):
            words = shlex.split(part, comments=True)
            if words:
                assert words[0] == "lattice", line
                commands.append(words[1:])
    return commands


@pytest.mark.parametrize("page", ["README.md", "docs/planner.md"])
def test_the_documented_offline_chain_runs(
    capsys: pytest.CaptureFixture[str], project: Path, page: str
) -> None:
    assert (REPO / "lattice" / "planner" / "workflows").resolve() == PASSES.resolve()
    values = {"$P": str(project), "$F": str(PASSES)}
    commands = documented_chain(REPO / page)
    assert sum(1 for c in commands if c[0] == "plan") == len(CHAIN)
    for words in commands:
        args = [values.get(w, w) for w in words]
        args = [a.replace("$F/", f"{PASSES}/") for a in args]
        code, _, err = cli(capsys, *args)
        assert code == 0, (words, err)
    _, out, _ = cli(capsys, "artifacts", "list", "--project", project)
    assert len(out.splitlines()) == len(CHAIN)

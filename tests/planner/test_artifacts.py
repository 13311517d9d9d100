"""The artifact store (``lattice.planner.artifacts``) and ``lattice artifacts list|show|approve|lock``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lattice.cli import main
from lattice.errors import LatticeUserError
from lattice.planner.artifacts import ArtifactStore, content_hash
from lattice.planner.inputs import gather_inputs, is_source, is_test, walk_files
from lattice.planner.passes import PASSES
from lattice.planner.run import reference_warnings
from tests.conftest import REPO

PASSES_DIR = REPO / "lattice" / "planner" / "workflows"


def authored(pass_name: str) -> dict[str, Any]:
    script = json.loads(
        (PASSES_DIR / "mocks" / f"{pass_name}.mock.json").read_text(encoding="utf-8")
    )
    artifact = script["responses"]["plan"][0]
    assert isinstance(artifact, dict)
    return artifact


def save(store: ArtifactStore, pass_name: str = "project", content: Any = None) -> str:
    artifact = store.create(
        artifact_type=PASSES[pass_name].artifact_type,
        pass_name=pass_name,
        content=content if content is not None else authored(pass_name),
        run={"run_id": "r1", "run_dir": ".lattice/runs/r1"},
    )
    return artifact.id


@pytest.fixture
def store(tmp_path: Path) -> ArtifactStore:
    return ArtifactStore(tmp_path)


def cli(capsys: pytest.CaptureFixture[str], *args: Any) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return code, out, err


# -- the store -------------------------------------------------------------------------------


def test_create_numbers_drafts_per_pass(store: ArtifactStore) -> None:
    assert save(store) == "project-1"
    assert save(store) == "project-2"
    assert save(store, "architecture") == "architecture-1"
    first = store.get("project-1")
    assert first.status == "draft"
    assert first.content_hash == content_hash(authored("project"))
    assert first.content_hash.startswith("sha256:") and len(first.content_hash) == 71
    assert first.history == [{"status": "draft", "at": first.created_at}]
    assert [a.id for a in store.all()] == ["project-1", "project-2", "architecture-1"]
    latest = store.latest("ProjectPlan")
    assert latest is not None and latest.id == "project-2"
    assert store.latest("TestPlan") is None


def test_content_hash_ignores_key_order() -> None:
    assert content_hash({"a": 1, "b": [1, 2]}) == content_hash({"b": [1, 2], "a": 1})
    assert content_hash({"a": 1}) != content_hash({"a": 2})


def test_the_file_round_trips(store: ArtifactStore) -> None:
    artifact_id = save(store)
    data = json.loads(store.path(artifact_id).read_text())
    assert list(data) == [
        "id",
        "type",
        "pass",
        "status",
        "content_hash",
        "run",
        "subject",
        "inputs",
        "warnings",
        "created_at",
        "history",
        "content",
    ]
    assert store.get(artifact_id).to_json() == data


def test_lifecycle_goes_forward_one_step_at_a_time(store: ArtifactStore) -> None:
    artifact_id = save(store)
    with pytest.raises(LatticeUserError, match="is a draft; approve it before locking it"):
        store.lock(artifact_id)
    approved = store.approve(artifact_id)
    assert approved.status == "approved"
    assert [h["status"] for h in approved.history] == ["draft", "approved"]
    with pytest.raises(LatticeUserError, match="already approved; only a draft can be approved"):
        store.approve(artifact_id)
    locked = store.lock(artifact_id)
    assert locked.status == "locked"
    assert store.get(artifact_id).status == "locked"  # saved
    with pytest.raises(LatticeUserError, match="already locked"):
        store.lock(artifact_id)
    with pytest.raises(LatticeUserError, match="already locked; only a draft"):
        store.approve(artifact_id)


def test_an_edited_draft_is_revalidated_and_rehashed_on_approval(store: ArtifactStore) -> None:
    artifact_id = save(store)
    path = store.path(artifact_id)
    data = json.loads(path.read_text())
    produced = data["content_hash"]
    data["content"]["open_questions"] = []
    path.write_text(json.dumps(data))
    assert not store.get(artifact_id).intact
    approved = store.approve(artifact_id)
    assert approved.intact
    assert approved.content_hash != produced
    assert approved.history[-1]["edited"] == {"from": produced}


def test_an_edited_draft_that_breaks_the_schema_cannot_be_approved(store: ArtifactStore) -> None:
    artifact_id = save(store)
    path = store.path(artifact_id)
    data = json.loads(path.read_text())
    data["content"]["requirements"][0]["priority"] = "urgent"
    del data["content"]["goals"]
    path.write_text(json.dumps(data))
    with pytest.raises(LatticeUserError) as caught:
        store.approve(artifact_id)
    assert caught.value.error_type == "artifact_invalid"
    assert "/: 'goals' is a required property" in caught.value.message
    assert "/requirements/0/priority: 'urgent' is not one of" in caught.value.message
    assert store.get(artifact_id).status == "draft"


def test_an_approved_artifact_changed_afterwards_cannot_be_locked_or_used(
    store: ArtifactStore, tmp_path: Path
) -> None:
    artifact_id = save(store)
    store.approve(artifact_id)
    path = store.path(artifact_id)
    data = json.loads(path.read_text())
    data["content"]["name"] = "renamed"
    path.write_text(json.dumps(data))
    with pytest.raises(LatticeUserError, match="changed after it was approved"):
        store.lock(artifact_id)
    (tmp_path / "constraints.md").write_text("- none\n")
    with pytest.raises(LatticeUserError, match="ProjectPlan project-1 was changed after it was"):
        gather_inputs(PASSES["architecture"], tmp_path, store=store)


@pytest.mark.parametrize("bad", ["nope", "project-0", "../x-1", "project-9"])
def test_unknown_ids_are_user_errors(store: ArtifactStore, bad: str) -> None:
    save(store)
    with pytest.raises(LatticeUserError, match="artifacts here: project-1"):
        store.get(bad)


def test_a_broken_artifact_file_is_a_user_error(store: ArtifactStore) -> None:
    artifact_id = save(store)
    store.path(artifact_id).write_text("{}")
    with pytest.raises(LatticeUserError, match="not a valid artifact file"):
        store.get(artifact_id)


# -- ids across artifacts --------------------------------------------------------------------


def test_reference_warnings_name_ids_the_inputs_do_not_define() -> None:
    project = authored("project")
    architecture = authored("architecture")
    assert reference_warnings("ArchitecturePlan", architecture, {"ProjectPlan": project}) == []
    architecture["components"][0]["requirement_ids"].append("R9")
    architecture["components"][0]["depends_on"].append("storage")
    architecture["decisions"][0]["constraint_ids"] = ["C7", "C8"]
    for component in architecture["components"]:
        component["requirement_ids"] = [r for r in component["requirement_ids"] if r != "R6"]
    assert reference_warnings("ArchitecturePlan", architecture, {"ProjectPlan": project}) == [
        "components[].requirement_ids[]: R9 is not requirement id(s) of the ProjectPlan",
        "components[].depends_on[]: storage is not component id(s) of the ArchitecturePlan",
        "decisions[].constraint_ids[]: C7, C8 are not constraint id(s) of the ProjectPlan",
        "requirements served by no component: R6",
    ]


def test_reference_warnings_for_test_and_implementation_plans() -> None:
    sources = {
        "ProjectPlan": authored("project"),
        "ArchitecturePlan": authored("architecture"),
        "ScaffoldPlan": authored("scaffold"),
    }
    test_plan = authored("test")
    assert reference_warnings("TestPlan", test_plan, sources) == []
    test_plan["cases"] = [c for c in test_plan["cases"] if "R5" not in c["requirement_ids"]]
    test_plan["cases"][0]["file_id"] = "F42"
    assert reference_warnings("TestPlan", test_plan, sources) == [
        "cases[].file_id: F42 is not file id(s) of the ScaffoldPlan",
        "requirements neither tested nor listed as untested: R5",
    ]
    plan = authored("implementation")
    plan["steps"][0]["test_case_ids"] = ["T99"]
    assert reference_warnings(
        "ImplementationPlan", plan, {"TestPlan": authored("test"), **sources}
    ) == ["steps[].test_case_ids[]: T99 is not test case id(s) of the TestPlan"]


def test_an_implementation_plan_must_be_for_its_target_file() -> None:
    sources = {"ScaffoldPlan": authored("scaffold"), "TestPlan": authored("test")}
    plan = authored("implementation")
    assert reference_warnings("ImplementationPlan", plan, sources, "src/todo/store.py") == []
    plan["target"]["file_id"] = "F3"
    assert reference_warnings("ImplementationPlan", plan, sources, "src/todo/cli.py") == [
        "target.path: src/todo/store.py is not the target file src/todo/cli.py",
        "target.file_id: F3 is src/todo/cli.py in the ScaffoldPlan, not src/todo/store.py",
    ]


# -- the project directory -------------------------------------------------------------------


def test_walk_and_classify_files(tmp_path: Path) -> None:
    for name in [
        "README.md",
        ".env",
        ".git/config",
        ".lattice/artifacts/project-1.json",
        "node_modules/x/index.js",
        "src/app/__pycache__/m.cpython-311.pyc",
        "src/app/main.py",
        "src/app/data.json",
        "web/app.test.ts",
        "tests/fixtures/data.json",
        "pkg/store_test.go",
    ]:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
    files = list(walk_files(tmp_path))
    assert files == [
        "README.md",
        "pkg/store_test.go",
        "src/app/data.json",
        "src/app/main.py",
        "tests/fixtures/data.json",
        "web/app.test.ts",
    ]
    assert [f for f in files if is_source(f)] == [
        "pkg/store_test.go",
        "src/app/main.py",
        "web/app.test.ts",
    ]
    assert [f for f in files if is_test(f)] == [
        "pkg/store_test.go",
        "tests/fixtures/data.json",
        "web/app.test.ts",
    ]


# -- lattice artifacts -----------------------------------------------------------------------


def test_artifacts_cli(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, err = cli(capsys, "artifacts", "list", "--project", tmp_path)
    assert (code, out) == (0, "")
    assert "no artifacts" in err
    store = ArtifactStore(tmp_path)
    save(store)
    code, out, _ = cli(capsys, "artifacts", "list", "--project", tmp_path)
    assert code == 0
    assert out.split()[:3] == ["project-1", "ProjectPlan", "draft"]

    code, out, _ = cli(capsys, "artifacts", "show", "project-1", "--project", tmp_path)
    assert code == 0
    assert json.loads(out) == store.get("project-1").to_json()
    code, out, _ = cli(capsys, "artifacts", "show", "project-1", "--content", "--project", tmp_path)
    assert json.loads(out) == authored("project")

    code, _, err = cli(capsys, "artifacts", "lock", "project-1", "--project", tmp_path)
    assert code == 2
    assert "error[artifact_status]" in err
    assert f"lattice artifacts approve project-1 --project {tmp_path}" in err

    code, _, err = cli(capsys, "artifacts", "approve", "project-1", "--project", tmp_path)
    assert code == 0
    assert "approved ProjectPlan project-1" in err
    assert f"next: lattice plan architecture --project {tmp_path}" in err
    code, _, err = cli(capsys, "artifacts", "approve", "project-1", "--project", tmp_path)
    assert code == 2
    assert "already approved" in err

    code, _, err = cli(capsys, "artifacts", "lock", "project-1", "--project", tmp_path)
    assert code == 0
    assert "locked ProjectPlan project-1" in err

    code, out, _ = cli(capsys, "artifacts", "list", "--json", "--project", tmp_path)
    [row] = json.loads(out)
    assert row["status"] == "locked"
    assert "content" not in row
    assert [h["status"] for h in row["history"]] == ["draft", "approved", "locked"]


def test_artifacts_cli_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = cli(capsys, "artifacts", "show", "--project", tmp_path)
    assert code == 2
    assert "lattice artifacts show ID" in err
    code, _, err = cli(capsys, "artifacts", "approve", "project-7", "--project", tmp_path)
    assert code == 2
    assert "no artifact 'project-7'" in err
    assert "there are none yet" in err

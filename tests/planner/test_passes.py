"""The compiler passes as workflows: documents, schemas, contracts, shipped fixtures."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from lattice.cli import main
from lattice.cli.parser import PASS_NAMES
from lattice.contracts.engine import ContractEngine
from lattice.contracts.errors import NeedsHuman, OutputInvalid
from lattice.ir.models import LLMWriteOp
from lattice.llm.fixture import read_fixtures
from lattice.llm.mock import MockProvider
from lattice.lower import lower_document
from lattice.planner import make_fixtures
from lattice.planner.passes import PASSES
from lattice.planner.run import load_pass, run_pass
from lattice.runtime.llm_op import contract_for
from lattice.runtime.settings import RuntimeSettings
from tests.conftest import REPO

PASSES_DIR = REPO / "lattice" / "planner" / "workflows"
SCHEMAS_DIR = REPO / "lattice" / "planner" / "schemas"
SAMPLE = REPO / "workflows" / "examples" / "todo-app"
PLAN_TYPES = [spec.artifact_type for spec in PASSES.values()]
NAMES = list(PASSES)


def authored(pass_name: str) -> dict[str, Any]:
    script = json.loads((PASSES_DIR / "mocks" / f"{pass_name}.mock.json").read_text())
    artifact = script["responses"]["plan"][0]
    assert isinstance(artifact, dict)
    return artifact


def schema(name: str) -> dict[str, Any]:
    data = json.loads((SCHEMAS_DIR / f"{name}.json").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def plan_op(pass_name: str) -> LLMWriteOp:
    ir, _ = load_pass(PASSES[pass_name])
    [op] = [op for op in ir.ops.values() if isinstance(op, LLMWriteOp)]
    return op


def engine(pass_name: str) -> ContractEngine:
    return ContractEngine(contract_for(plan_op(pass_name), RuntimeSettings()))


# -- the documents ---------------------------------------------------------------------------


def test_the_passes_are_the_documents_under_lattice_passes() -> None:
    assert tuple(PASSES) == PASS_NAMES
    assert sorted(p.stem for p in PASSES_DIR.glob("*.json")) == sorted(PASSES)


@pytest.mark.parametrize("pass_name", NAMES)
def test_each_pass_lowers_without_diagnostics(pass_name: str) -> None:
    result = lower_document(PASSES[pass_name].workflow)
    assert result.ir is not None
    assert result.diagnostics == []


def test_lattice_check_is_clean_on_every_pass(capsys: pytest.CaptureFixture[str]) -> None:
    for path in sorted(PASSES_DIR.glob("*.json")):
        assert main(["check", str(path)]) == 0
        _, err = capsys.readouterr()
        assert f"{path}: ok (3 ops, 0 warning(s))" in err


@pytest.mark.parametrize("pass_name", NAMES)
def test_each_pass_draws_as_mermaid(pass_name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lower", str(PASSES[pass_name].workflow), "--emit", "mermaid"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("flowchart TD")
    assert f"LLM_WRITE: Build the {PASSES[pass_name].artifact_type}" in out


@pytest.mark.parametrize("pass_name", NAMES)
def test_the_llm_node_is_an_artifact_builder_under_no_code(pass_name: str) -> None:
    op = plan_op(pass_name)
    assert op.source_node == "plan"
    assert op.template == "artifact-builder@1"
    assert op.invariants == ["no_code"]
    assert op.output_schema == schema(PASSES[pass_name].artifact_type)
    assert op.context == []  # every input is named in the prompt, none appended twice


@pytest.mark.parametrize("pass_name", NAMES)
def test_inlined_schema_equals_the_schema_file(pass_name: str) -> None:
    document = json.loads(PASSES[pass_name].workflow.read_text(encoding="utf-8"))
    [node] = [n for n in document["nodes"] if n["type"] == "prompt"]
    assert node["data"]["outputSchema"] == schema(PASSES[pass_name].artifact_type)


@pytest.mark.parametrize("pass_name", NAMES)
def test_the_documents_read_only_their_inputs(pass_name: str) -> None:
    """The pass's ``$in`` is exactly what lattice.planner.passes gathers (documents, artifacts, subject)."""
    spec = PASSES[pass_name]
    ir, _ = load_pass(spec)
    expected = {key for _, key in spec.documents} | {need.key for need in spec.artifacts}
    expected |= {"target": {"target_file"}, "goal": {"goal"}, None: set()}[spec.subject]
    expected |= {"layout"} if spec.layout else set()
    assert set(ir.inputs_schema["properties"]) == expected
    assert set(ir.inputs_schema["required"]) == expected


# -- the schemas -----------------------------------------------------------------------------


def _objects(node: Any, pointer: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(node, dict):
        if node.get("type") == "object":
            yield pointer or "/", node
        for key, child in node.items():
            yield from _objects(child, f"{pointer}/{key}")
    elif isinstance(node, list):
        for i, child in enumerate(node):
            yield from _objects(child, f"{pointer}/{i}")


@pytest.mark.parametrize("name", [*PLAN_TYPES, "FailureReport"])
def test_schemas_are_valid_and_closed(name: str) -> None:
    data = schema(name)
    jsonschema.Draft202012Validator.check_schema(data)
    assert data["title"] == name
    for pointer, node in _objects(data):
        if name == "FailureReport" and pointer != "/":
            continue  # details and attempts are open objects
        assert node.get("additionalProperties") is False, pointer
        assert sorted(node["required"]) == sorted(node["properties"]), pointer


@pytest.mark.parametrize("name", PLAN_TYPES)
def test_plan_schemas_suit_strict_structured_outputs(name: str) -> None:
    from lattice.llm.openai_provider import strict_compatible

    assert strict_compatible(schema(name))
    text = json.dumps(schema(name))
    for keyword in ("$schema", "$id", "$ref", "minLength", "format"):
        assert f'"{keyword}"' not in text  # keep them portable across providers


@pytest.mark.parametrize("pass_name", NAMES)
def test_the_authored_answers_are_valid_artifacts(pass_name: str) -> None:
    engine(pass_name).validate(json.dumps(authored(pass_name)))


ITEMS_WITH_IDS = {
    "ProjectPlan": [("requirements", "R"), ("constraints", "C")],
    "ArchitecturePlan": [("decisions", "D")],
    "ScaffoldPlan": [("files", "F")],
    "TestPlan": [("cases", "T")],
    "ImplementationPlan": [("steps", "S")],
    "RefactorPlan": [("moves", "M"), ("invariants_preserved", "I")],
}


@pytest.mark.parametrize("name", PLAN_TYPES)
def test_items_later_passes_cite_have_id_patterns(name: str) -> None:
    for key, prefix in ITEMS_WITH_IDS[name]:
        item = schema(name)["properties"][key]["items"]
        assert item["properties"]["id"]["pattern"] == f"^{prefix}[1-9][0-9]*$"


def test_failure_report_schema_matches_real_reports(tmp_path: Path) -> None:
    project = tmp_path / "todo-app"
    shutil.copytree(SAMPLE, project, ignore=shutil.ignore_patterns(".lattice"))
    provider = MockProvider({"plan": [{"error": "missing_information", "details": "Who uses it?"}]})
    outcome = run_pass("project", project, provider=provider)
    assert outcome.result.status == "halted"
    assert outcome.artifact is None
    assert outcome.result.run_dir is not None
    report = json.loads((outcome.result.run_dir / "failure_report.json").read_text())
    jsonschema.validate(report, schema("FailureReport"))
    assert report["category"] == "missing_information"


# -- the contract of each pass ------------------------------------------------------------------


@pytest.mark.parametrize("pass_name", NAMES)
def test_missing_information_halts_for_a_human(pass_name: str) -> None:
    text = json.dumps({"error": "missing_information", "details": "What is the data file?"})
    with pytest.raises(NeedsHuman) as caught:
        engine(pass_name).validate(text)
    assert caught.value.error_type == "missing_information"
    assert caught.value.details == {"missing": "What is the data file?"}


@pytest.mark.parametrize("pass_name", NAMES)
def test_json_only_and_exactly_one_artifact(pass_name: str) -> None:
    artifact = json.dumps(authored(pass_name))
    cases = {
        "explanatory_text": f"Here is the plan:\n{artifact}\nHope it helps!",
        "multiple_artifacts": f"{artifact}\n{artifact}",
        "json_error": "I cannot produce a plan today.",
    }
    for error_type, text in cases.items():
        with pytest.raises(OutputInvalid) as caught:
            engine(pass_name).validate(text)
        assert caught.value.error_type == error_type


@pytest.mark.parametrize("pass_name", NAMES)
def test_schema_conformance(pass_name: str) -> None:
    artifact = authored(pass_name)
    artifact["extra"] = True
    with pytest.raises(OutputInvalid) as caught:
        engine(pass_name).validate(json.dumps(artifact))
    assert caught.value.error_type == "schema_error"
    assert caught.value.violations[0]["pointer"] == "/"


@pytest.mark.parametrize("pass_name", NAMES)
def test_no_code_in_planning_artifacts(pass_name: str) -> None:
    artifact = authored(pass_name)
    key = next(k for k, v in artifact.items() if isinstance(v, str))
    artifact[key] = "Do it like this:\n```python\nprint('hi')\n```"
    with pytest.raises(OutputInvalid) as caught:
        engine(pass_name).validate(json.dumps(artifact))
    assert caught.value.error_type == "code_in_output"
    assert caught.value.violations[0]["pointer"] == f"/{key}"


@pytest.mark.parametrize("pass_name", NAMES)
def test_the_prompt_states_the_rules_and_the_schema(pass_name: str, tmp_path: Path) -> None:
    project = tmp_path / "todo-app"
    shutil.copytree(SAMPLE, project, ignore=shutil.ignore_patterns(".lattice"))
    chain = make_fixtures.CHAIN
    provider = MockProvider({"plan": [authored(name) for name, _ in chain]})
    from lattice.planner.artifacts import ArtifactStore

    store = ArtifactStore(project)
    for name, subject in chain:
        outcome = run_pass(name, project, subject, provider=provider, runs_dir=tmp_path / "runs")
        assert outcome.artifact is not None, outcome.result.failure
        store.approve(outcome.artifact.id)
        if name == "test":
            store.lock(outcome.artifact.id)
        if name == pass_name:
            break
    request = provider.calls[-1]
    system, user = (m.content for m in request.messages)
    assert system.startswith("You are the " + pass_name + " pass")
    for rule in (
        "Reply with JSON only",
        "Exactly one artifact (one JSON value)",
        "It must validate against the JSON Schema below",
        "No source code anywhere in the artifact",
        '{"error": "missing_information"',
    ):
        assert rule in system
    assert json.dumps(schema(PASSES[pass_name].artifact_type), ensure_ascii=False) in system
    assert request.response_schema == schema(PASSES[pass_name].artifact_type)
    assert user.startswith("Write the ")
    # the request the mock got is the one the shipped fixtures answer
    fixtures = read_fixtures(PASSES_DIR / f"{pass_name}.fixtures.jsonl")
    assert request.prompt_hash() in fixtures


# -- the shipped fixtures -----------------------------------------------------------------------


@pytest.mark.parametrize("pass_name", NAMES)
def test_each_fixtures_file_answers_its_pass_with_the_authored_artifact(pass_name: str) -> None:
    table = read_fixtures(PASSES_DIR / f"{pass_name}.fixtures.jsonl")
    [entry] = table.values()
    assert json.loads(entry["completion"]) == authored(pass_name)
    assert entry["meta"]["node_id"] == "plan"
    assert entry["meta"]["model_class"] == "default"


def test_documents_and_fixtures_are_up_to_date(capsys: pytest.CaptureFixture[str]) -> None:
    """Fails when a pass document, schema, template or sample document changed the prompts:
    run ``python -m lattice.planner.make_fixtures`` and commit what it rewrites."""
    code = make_fixtures.main(["--check"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "up to date" in err


def test_every_pass_and_schema_file_is_package_data() -> None:
    """``lattice plan`` reads these from the installed package: each one must match a
    package-data pattern of pyproject.toml (a wheel leaves out anything that does not)."""
    import fnmatch
    import tomllib

    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = config["tool"]["setuptools"]["package-data"]["lattice"]
    package = REPO / "lattice"
    shipped = [
        p.relative_to(package).as_posix()
        for folder in (PASSES_DIR, SCHEMAS_DIR)
        for p in folder.rglob("*")
        if p.is_file() and p.suffix != ".py" and "__pycache__" not in p.parts
    ]
    assert len(shipped) > 20

    def globbed(path: str, pattern: str) -> bool:  # setuptools globs: "*" stays in its folder
        parts, wanted = path.split("/"), pattern.split("/")
        return len(parts) == len(wanted) and all(map(fnmatch.fnmatch, parts, wanted))

    missing = [f for f in shipped if not any(globbed(f, pat) for pat in patterns)]
    assert missing == []

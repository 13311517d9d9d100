"""The shipped V->P->V->C pipeline (workflows/pipelines/vpvc.json), end to end and offline.

Every run uses the sample repository as ``--repo``: the built-in ``retrieve_context`` tool
reads it and the coder's patches are checked against it with ``patch_applies``.
"""

from __future__ import annotations

import copy
import json
import shlex
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from lattice.cli import main
from lattice.llm.mock import MockProvider
from lattice.lower import lower, lower_document
from lattice.runtime import Runner, RunResult, RunStore
from lattice.runtime.settings import RuntimeSettings
from tests.builders import describe
from tests.builders import op_records as records_of_op
from tests.conftest import REPO

PIPELINES = REPO / "workflows" / "pipelines"
SCHEMAS = REPO / "lattice" / "planner" / "schemas"
VPVC = PIPELINES / "vpvc.json"
SAMPLE_REPO = PIPELINES / "sample-repo"
MOCK = PIPELINES / "vpvc.mock.json"
INPUTS = json.loads((PIPELINES / "vpvc.inputs.json").read_text(encoding="utf-8"))
SCRIPT = json.loads(MOCK.read_text(encoding="utf-8"))["responses"]
LLM_NODES = {
    "validate_task": "ValidatorDecision",
    "validate_plan": "ValidatorDecision",
    "validate_patch": "ValidatorDecision",
    "planner": "PlannerOutput",
    "planner_strong": "PlannerOutput",
    "coder": "CoderOutput",
    "coder_strong": "CoderOutput",
}


def document() -> dict[str, Any]:
    data = json.loads(VPVC.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def schema_file(name: str) -> dict[str, Any]:
    data = json.loads((SCHEMAS / f"{name}.json").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


# -- the document --------------------------------------------------------------------------------


def test_the_pipeline_checks_without_errors_or_warnings() -> None:
    result = lower_document(VPVC)
    assert result.ir is not None
    assert result.diagnostics == [], describe(result.diagnostics)


@pytest.mark.parametrize("name", sorted(set(LLM_NODES.values())))
def test_schema_files_are_valid_json_schemas(name: str) -> None:
    schema = schema_file(name)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["title"] == name
    assert schema["additionalProperties"] is False
    assert set(schema["required"]) == set(schema["properties"])  # strict structured outputs


def test_prompt_nodes_inline_the_schema_files() -> None:
    """Documents cannot reference schema files ($ref is not resolved), so the pipeline
    inlines them; this keeps the copies equal to lattice/planner/schemas/*.json."""
    nodes = {n["id"]: n for n in document()["nodes"]}
    llm = {node_id for node_id, n in nodes.items() if n["type"] == "prompt"}
    assert llm == set(LLM_NODES)
    for node_id, name in LLM_NODES.items():
        assert nodes[node_id]["data"]["outputSchema"] == schema_file(name), node_id


def test_strong_nodes_are_one_model_class_up() -> None:
    nodes = {n["id"]: n["data"] for n in document()["nodes"]}
    for base in ("planner", "coder"):
        assert nodes[base]["modelClass"] == "medium"
        assert nodes[f"{base}_strong"]["modelClass"] == "large"
        assert nodes[base]["prompt"] == nodes[f"{base}_strong"]["prompt"]


def test_llm_nodes_see_only_what_their_prompt_names() -> None:
    """No upstream result is appended as context: each node reads its handoff explicitly."""
    ir = lower(VPVC)
    for node_id in LLM_NODES:
        assert ir.ops[node_id].context == [], node_id  # type: ignore[union-attr]


def test_validator_decision_ties_retry_and_route_to_the_action() -> None:
    validator = jsonschema.Draft202012Validator(schema_file("ValidatorDecision"))
    accept = SCRIPT["validate_plan"][1]
    assert validator.is_valid(accept)
    assert not validator.is_valid({**accept, "action": "retry"})  # retry is null
    assert not validator.is_valid({**accept, "action": "reroute"})  # route is null
    assert validator.is_valid(SCRIPT["validate_plan"][0])
    assert validator.is_valid(SCRIPT["validate_task"][0])


def test_plans_cannot_name_files_outside_the_repository() -> None:
    validator = jsonschema.Draft202012Validator(schema_file("PlannerOutput"))
    plan = SCRIPT["planner"][1]
    assert validator.is_valid(plan)
    for path in ("../etc/passwd", "/etc/passwd", "src/../../x", "C:/x"):
        assert not validator.is_valid({**plan, "files_to_touch": [path]}), path


def test_mock_and_inputs_fit_the_document() -> None:
    schemas = {node_id: schema_file(name) for node_id, name in LLM_NODES.items()}
    assert set(SCRIPT) == set(LLM_NODES)
    for node_id, items in SCRIPT.items():
        for item in items:
            jsonschema.validate(item, schemas[node_id])
    jsonschema.validate(INPUTS, lower(VPVC).inputs_schema or {})


# -- running it ----------------------------------------------------------------------------------


def run(
    responses: dict[str, list[Any]], tmp_path: Path, *, repo: Path = SAMPLE_REPO
) -> tuple[RunResult, MockProvider]:
    script = {node_id: [] for node_id in LLM_NODES}
    script.update(copy.deepcopy(responses))
    provider = MockProvider(script)
    runner = Runner(
        lower(VPVC),
        provider=provider,
        store=RunStore(tmp_path / "runs"),
        settings=RuntimeSettings(repo_root=repo.resolve()),
        workflow=document(),
    )
    return runner.run(INPUTS), provider


def op_records(result: RunResult, op_id: str) -> list[dict[str, Any]]:
    assert result.run_dir is not None
    return records_of_op(result.run_dir, op_id)


def user_prompts(result: RunResult, op_id: str) -> list[str]:
    """The user message of the first attempt of every visit of ``op_id``, from the run folder."""
    return [
        record["attempts"][0]["messages"][-1]["content"] for record in op_records(result, op_id)
    ]


def branches(result: RunResult) -> list[tuple[str, str]]:
    return [(e["node_id"], e["data"]["port"]) for e in result.events if e["type"] == "branch_taken"]


def routes(result: RunResult) -> list[str]:
    """The action taken at each verdict switch, in order."""
    return [
        f"{node}:{port}"
        for node, port in branches(result)
        if node in ("task_route", "plan_route", "patch_route")
    ]


def decision(action: str, **extra: Any) -> dict[str, Any]:
    base = copy.deepcopy(SCRIPT["validate_plan"][1])
    base.update({"action": action, **extra})
    return base


RETRY_PLAN = SCRIPT["validate_plan"][0]
REROUTE = SCRIPT["validate_task"][0]
ACCEPT_PLAN = SCRIPT["validate_plan"][1]
ACCEPT_PATCH = SCRIPT["validate_patch"][0]
PLAN_V1, PLAN_V2 = SCRIPT["planner"]
STALE_PATCH, GOOD_PATCH = SCRIPT["coder"]


@pytest.fixture(scope="module")
def tour(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunResult, MockProvider]:
    """The shipped mock: reroute, one planner retry, one repaired patch, accepted."""
    return run(SCRIPT, tmp_path_factory.mktemp("tour"))


def test_the_shipped_mock_run_completes_with_the_accepted_patch(
    tour: tuple[RunResult, MockProvider],
) -> None:
    result, provider = tour
    assert result.status == "completed", result.failure
    assert routes(result) == [
        "task_route:Reroute",
        "plan_route:Retry",
        "plan_route:Accept",
        "patch_route:Accept",
    ]
    output = result.output
    assert output["status"] == "accepted"
    assert output["patch"] == GOOD_PATCH["patch_unified_diff"]
    assert output["retries"] == {"planner": 1, "coder": 0, "reroutes": 1}
    assert [c.node_id for c in provider.calls] == [
        "validate_task",
        "planner",
        "validate_plan",
        "planner",
        "validate_plan",
        "coder",
        "coder",
        "validate_patch",
    ]
    # The sample repository is data: the run never changed it.
    assert "if quantity > available" not in (SAMPLE_REPO / "inventory" / "stock.py").read_text(
        encoding="utf-8"
    )


def test_retry_adds_the_validators_prompt_patch_to_the_next_prompt(
    tour: tuple[RunResult, MockProvider],
) -> None:
    result, provider = tour
    patch = RETRY_PLAN["retry"]["prompt_patch"]
    first, second = user_prompts(result, "planner")
    assert patch not in first
    assert "# Instruction for this attempt\nNone: this is the first attempt." in first
    assert f"# Instruction for this attempt\n{patch}" in second
    # the same request as the provider saw it
    planner_calls = [c for c in provider.calls if c.node_id == "planner"]
    assert patch in planner_calls[1].messages[-1].content
    # the retry was counted and guarded
    assert ("planner_retry_limit", "Retry") in [(node, port) for node, port in branches(result)]


def test_reroute_retrieves_context_and_the_planner_sees_the_snippets(
    tour: tuple[RunResult, MockProvider],
) -> None:
    result, _ = tour
    [retrieval] = op_records(result, "retrieve")
    assert (
        retrieval["inputs"]["$vars.verdict.decision.route.required_context"]
        == REROUTE["route"]["required_context"]
    )
    snippets = retrieval["output"]["snippets"]
    assert snippets and retrieval["output"]["truncated"] is False
    assert {"inventory/stock.py", "docs/usage.md"} <= {s["path"] for s in snippets}
    stock = next(s for s in snippets if s["path"] == "inventory/stock.py")
    first_plan_prompt = user_prompts(result, "planner")[0]
    assert f"### inventory/stock.py (lines {stock['start']}-{stock['end']})" in first_plan_prompt
    assert "self._counts[sku] = self._counts.get(sku, 0) - quantity" in first_plan_prompt


def test_a_patch_that_does_not_apply_is_repaired_naming_the_hunk(
    tour: tuple[RunResult, MockProvider],
) -> None:
    result, provider = tour
    [coder] = op_records(result, "coder")
    first, repair = coder["attempts"]
    assert first["error_type"] == "patch_does_not_apply"
    assert repair["kind"] == "repair"
    packet = repair["messages"][-1]["content"]
    assert (
        "- /patch_unified_diff: inventory/stock.py: hunk 1 (@@ -16,7 +16,10 @@) does not apply: "
        "line 20 is '        self._counts[sku] = self._counts.get(sku, 0) - quantity', "
        "the hunk expects '        self._counts[sku] -= quantity'"
    ) in packet
    assert "# Current files" not in packet  # fix-only: the packet does not repeat the prompt
    assert coder["output"] == GOOD_PATCH
    # the coder read the files it patches, restricted by the plan's files_to_touch
    [read] = op_records(result, "read_files")
    assert read["inputs"]["$vars.current_plan.result.files_to_touch"] == PLAN_V2["files_to_touch"]
    assert {s["path"] for s in read["output"]["snippets"]} == set(PLAN_V2["files_to_touch"])
    assert provider.calls[5].messages[-1].content.count("### ") == 2


def test_each_step_sees_the_handoff_brief_not_the_history(
    tour: tuple[RunResult, MockProvider],
) -> None:
    result, _ = tour
    [coder_prompt] = user_prompts(result, "coder")
    accept_brief = json.dumps(ACCEPT_PLAN["handoff_brief"], separators=(",", ":"))
    assert f"# Brief from the validator\n{accept_brief}" in coder_prompt
    history = [
        *RETRY_PLAN["reasons"],
        RETRY_PLAN["retry"]["prompt_patch"],
        *REROUTE["handoff_brief"]["do_next"],
        PLAN_V1["plan_steps"][-1] + '"]',  # the rejected plan's step list
    ]
    for text in history:
        assert text not in coder_prompt, text
    # the planner's retry sees the plan validator's brief, not the task validator's
    second_plan_prompt = user_prompts(result, "planner")[1]
    assert json.dumps(RETRY_PLAN["handoff_brief"], separators=(",", ":")) in second_plan_prompt
    assert REROUTE["handoff_brief"]["do_next"][0] not in second_plan_prompt


def test_abort_ends_with_the_reasons(tmp_path: Path) -> None:
    reasons = ["The task asks to delete the repository's tests, which its constraints forbid."]
    abort = decision("abort", reasons=reasons, confidence=0.97)
    result, provider = run({"validate_task": [abort]}, tmp_path)
    assert result.status == "completed"
    assert result.output == {
        "status": "aborted",
        "validator": "validate_task",
        "reasons": reasons,
        "confidence": 0.97,
        "open_questions": abort["handoff_brief"]["open_questions"],
    }
    assert [c.node_id for c in provider.calls] == ["validate_task"]


def test_a_retry_before_planning_guides_the_first_plan(tmp_path: Path) -> None:
    guidance = "Change Stock.remove only; leave the report alone."
    retry = decision(
        "retry",
        retry={"strategy": "narrow the scope", "max_additional_tries": 0, "prompt_patch": guidance},
    )
    abort = decision("abort", reasons=["The plan cannot meet the constraints."])
    result, _ = run(
        {"validate_task": [retry], "planner": [PLAN_V2], "validate_plan": [abort]}, tmp_path
    )
    [prompt] = user_prompts(result, "planner")
    assert f"# Instruction for this attempt\n{guidance}" in prompt
    assert result.vars["planner_retries"] == 0  # guidance, not a re-run
    assert result.output["status"] == "aborted"
    assert result.output["validator"] == "validate_plan"
    assert result.output["reasons"] == ["The plan cannot meet the constraints."]


def test_escalate_runs_the_planner_one_model_class_up(tmp_path: Path) -> None:
    escalate = decision("escalate", reasons=["The plan misreads how counts are stored."])
    result, provider = run(
        {
            "validate_task": [ACCEPT_PLAN],
            "planner": [PLAN_V1],
            "validate_plan": [escalate, RETRY_PLAN, escalate],
            "planner_strong": [PLAN_V2, PLAN_V2],
        },
        tmp_path,
    )
    assert [(c.node_id, c.model_class) for c in provider.calls] == [
        ("validate_task", "medium"),
        ("planner", "medium"),
        ("validate_plan", "medium"),
        ("planner_strong", "large"),
        ("validate_plan", "medium"),
        ("planner_strong", "large"),  # a retry after escalating stays on the stronger model
        ("validate_plan", "medium"),
    ]
    assert RETRY_PLAN["retry"]["prompt_patch"] in provider.calls[5].messages[-1].content
    # escalating again from the strongest planner stops the run
    assert result.output["status"] == "stopped"
    assert "strongest planner" in result.output["why"]
    assert result.output["validator"] == "validate_plan"


def test_planner_retries_are_capped_at_two(tmp_path: Path) -> None:
    result, provider = run(
        {
            "validate_task": [ACCEPT_PLAN],
            "planner": [PLAN_V1] * 3,
            "validate_plan": [RETRY_PLAN] * 3,
        },
        tmp_path,
    )
    assert [c.node_id for c in provider.calls].count("planner") == 3
    assert result.output["status"] == "stopped"
    assert "2 retries" in result.output["why"]
    assert result.output["reasons"] == RETRY_PLAN["reasons"]
    assert result.vars["planner_retries"] == 3


def test_coder_retry_and_escalation(tmp_path: Path) -> None:
    coder_patch = "Name the SKU in the error message exactly as the caller passed it."
    retry = decision(
        "retry",
        retry={"strategy": "wording", "max_additional_tries": 1, "prompt_patch": coder_patch},
    )
    result, provider = run(
        {
            "validate_task": [ACCEPT_PLAN],
            "planner": [PLAN_V2],
            "validate_plan": [ACCEPT_PLAN],
            "coder": [GOOD_PATCH, GOOD_PATCH],
            "validate_patch": [retry, decision("escalate"), ACCEPT_PATCH],
            "coder_strong": [GOOD_PATCH],
        },
        tmp_path,
    )
    assert result.status == "completed", result.failure
    assert result.output["status"] == "accepted"
    assert routes(result)[-3:] == [
        "patch_route:Retry",
        "patch_route:Escalate",
        "patch_route:Accept",
    ]
    prompts = user_prompts(result, "coder")
    assert coder_patch not in prompts[0] and coder_patch in prompts[1]
    [strong] = [c for c in provider.calls if c.node_id == "coder_strong"]
    assert strong.model_class == "large"
    assert result.output["retries"]["coder"] == 1


def test_reroutes_are_capped_at_two(tmp_path: Path) -> None:
    result, _ = run(
        {
            "validate_task": [REROUTE],
            "planner": [PLAN_V1, PLAN_V1],
            "validate_plan": [REROUTE, REROUTE],
        },
        tmp_path,
    )
    assert len(op_records(result, "retrieve")) == 2
    assert result.output["status"] == "stopped"
    assert "more than 2 times" in result.output["why"]


def test_a_plan_that_creates_a_new_file(tmp_path: Path) -> None:
    new_file = "--- /dev/null\n+++ b/inventory/errors.py\n@@ -0,0 +1,2 @@\n+class OutOfStock(ValueError):\n+    pass\n"
    coder = {**GOOD_PATCH, "patch_unified_diff": new_file, "touched_files": ["inventory/errors.py"]}
    plan = {**PLAN_V2, "files_to_touch": ["inventory/errors.py"]}
    result, provider = run(
        {
            "validate_task": [ACCEPT_PLAN],
            "planner": [plan],
            "validate_plan": [ACCEPT_PLAN],
            "coder": [coder],
            "validate_patch": [ACCEPT_PATCH],
        },
        tmp_path,
    )
    assert result.output["status"] == "accepted"
    coder_prompt = next(c for c in provider.calls if c.node_id == "coder").messages[-1].content
    assert "(none: the files to touch do not exist yet)" in coder_prompt


# -- the command line: mock, fixtures, --repo -----------------------------------------------------


def cli_run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(
        [
            "run",
            str(VPVC),
            "--inputs",
            str(PIPELINES / "vpvc.inputs.json"),
            "--no-record",
            *args,
        ]
    )
    out, err = capsys.readouterr()
    return code, out, err


def test_the_shipped_fixtures_replay_offline(
    capsys: pytest.CaptureFixture[str], tour: tuple[RunResult, MockProvider]
) -> None:
    fixtures = PIPELINES / "vpvc.fixtures.jsonl"
    code, out, err = cli_run(capsys, "--repo", str(SAMPLE_REPO), "--fixtures", str(fixtures))
    assert code == 0, err
    assert json.loads(out) == tour[0].output
    lines = fixtures.read_text(encoding="utf-8").splitlines()
    assert len(lines) == len(tour[1].calls)  # one fixture per model call, nothing stale


def test_recording_the_mock_reproduces_the_shipped_fixtures(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    recorded = tmp_path / "vpvc.fixtures.jsonl"
    code, _, err = cli_run(
        capsys,
        "--repo",
        str(SAMPLE_REPO),
        "--mock",
        str(MOCK),
        "--fixtures",
        str(recorded),
        "--record",
    )
    assert code == 0, err
    shipped = (PIPELINES / "vpvc.fixtures.jsonl").read_text(encoding="utf-8")
    assert recorded.read_text(encoding="utf-8") == shipped, (
        "the prompts changed: re-record workflows/pipelines/vpvc.fixtures.jsonl with the "
        "command in workflows/pipelines/README.md"
    )


def test_the_pipeline_needs_a_repository(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli_run(capsys, "--mock", str(MOCK))
    assert code == 2
    assert "error[config_error]" in err and "--repo DIR" in err


# -- every shipped workflow checks -----------------------------------------------------------------


def workflow_files() -> list[Path]:
    """JSON files under workflows/ and lattice/planner/workflows/ shaped like a workflow (nodes +
    connections, maybe wrapped)."""
    found = []
    candidates = [*(REPO / "workflows").rglob("*.json"), *(REPO / "lattice").rglob("*.json")]
    for path in sorted(candidates):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            continue
        if isinstance(data, dict) and isinstance(data.get("workflow"), dict):
            data = data["workflow"]
        if isinstance(data, dict) and "nodes" in data and "connections" in data:
            found.append(path)
    return found


def test_the_walk_finds_the_shipped_workflows_and_only_them() -> None:
    names = {p.relative_to(REPO).as_posix() for p in workflow_files()}
    assert {
        "workflows/pipelines/vpvc.json",
        "workflows/examples/support-triage.json",
        "lattice/planner/workflows/project.json",
        "lattice/planner/workflows/refactor.json",
    } <= names
    assert not any(n.endswith((".mock.json", ".inputs.json", ".answers.json")) for n in names)
    assert not any(
        n.startswith(("lattice/planner/schemas/", "workflows/pipelines/sample-repo/"))
        for n in names
    )


@pytest.mark.parametrize("path", workflow_files(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_lattice_check_passes_on_every_shipped_workflow(
    path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["check", str(path)])
    _, err = capsys.readouterr()
    assert code == 0, err


def documented_runs(page: Path) -> list[list[str]]:
    """The ``lattice run …vpvc.json …`` commands of the sh blocks of ``page``."""
    text = page.read_text(encoding="utf-8")
    commands = []
    for block in text.split("```sh\n")[1:]:
        body = block.split("```", 1)[0].replace("\\\n", " ")
        for line in body.splitlines():
            words = shlex.split(line, comments=True)
            if (
                words[:2] == ["lattice", "run"]
                and "--provider" not in words
                and str(VPVC.relative_to(REPO)) in words
            ):
                commands.append(words[1:])
    return commands


@pytest.mark.parametrize("page", ["README.md", "workflows/pipelines/README.md"])
def test_the_documented_offline_commands_run(
    page: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    commands = documented_runs(REPO / page)
    assert commands
    for words in commands:
        if "--record" in words:  # re-recording: write elsewhere, compare below
            continue
        code = main([*words, "--no-record"])
        out, err = capsys.readouterr()
        assert code == 0, (words, err)
        assert json.loads(out)["status"] == "accepted"

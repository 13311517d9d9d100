"""The Runner over whole workflows: every shipped example (with its mock, inputs and
answers) and the corpus of real cc-wf-studio documents, recorded to run folders."""

from __future__ import annotations

import itertools
import json
import re
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from lattice.errors import ErrorType
from lattice.events import EventKind
from lattice.ir import ir_to_dict
from lattice.ir.models import AskOp, ContractOpBase, ExecIR, LLMWriteOp
from lattice.llm.mock import MockProvider
from lattice.lower import lower
from lattice.runs.oplog import op_entries
from lattice.runtime import RunLimits, Runner, RunResult, RunStore
from lattice.runtime.settings import AgentSettings, RuntimeSettings
from lattice.workspace.grants import WorkspaceGrant
from tests.builders import chain, conn, corpus_params, node, op_record, workflow
from tests.conftest import (
    CORPUS,
    EXAMPLE_GRANTS,
    EXAMPLES,
    corpus_document,
    corpus_files,
    example_files,
    example_workspace,
)

RUN_FILES = {
    "workflow.json",
    "execir.json",
    "input.json",
    "state_initial.json",
    "events.jsonl",
    "state_final.json",
    "result.json",
}
EVENT_KEYS = {"seq", "ts", "run_id", "type", "data"}
KINDS = frozenset(EventKind)
ERROR_TYPES = frozenset({None, *ErrorType})
TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")


def helper(path: Path, kind: str) -> Path:
    return path.with_name(path.name.removesuffix(".json") + f".{kind}.json")


def read_helper(path: Path, kind: str) -> dict[str, Any]:
    file = helper(path, kind)
    return json.loads(file.read_text(encoding="utf-8")) if file.exists() else {}


def document(path: Path) -> dict[str, Any]:
    raw = json.loads(path.read_text(encoding="utf-8"))
    assert isinstance(raw, dict)
    return raw


def mocked_examples() -> list[Path]:
    return [p for p in example_files() if helper(p, "mock").exists()]


def run_example(path: Path, root: Path | None) -> tuple[RunResult, MockProvider, ExecIR]:
    ir = lower(path)
    provider = MockProvider.from_file(helper(path, "mock"))
    settings = RuntimeSettings(sleep=no_sleep)  # tool retries need no real waiting here
    workspace = example_workspace(path, root or Path(tempfile.mkdtemp()))
    if workspace is not None:
        grant = WorkspaceGrant(root=workspace, **dict.fromkeys(EXAMPLE_GRANTS, True))
        settings = replace(settings, agents=AgentSettings(grant=grant))
    runner = Runner(
        ir,
        provider=provider,
        store=RunStore(root),
        answers=read_helper(path, "answers"),
        workflow=document(path),
        settings=settings,
    )
    # runner.ir: the IR the run ran (its prompt steps are the main agent's under a grant)
    return runner.run(read_helper(path, "inputs")), provider, runner.ir


async def no_sleep(seconds: float) -> None:
    return None


def branches(result: RunResult) -> list[tuple[str, str]]:
    return [(e["node_id"], e["data"]["port"]) for e in result.events if e["type"] == "branch_taken"]


def read_events(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "events.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def check_events(events: list[dict[str, Any]], run_id: str) -> None:
    assert events, "no events"
    seqs = [e["seq"] for e in events]
    assert all(b > a for a, b in itertools.pairwise(seqs)), seqs
    assert seqs[0] == 1
    for event in events:
        assert set(event) >= EVENT_KEYS, event
        assert set(event) <= EVENT_KEYS | {"op_id", "node_id", "branch"}, event
        assert event["run_id"] == run_id
        assert TS.match(event["ts"]), event["ts"]
        assert isinstance(event["data"], dict)
        if "op_id" in event:
            assert event["node_id"]
        # no stray kind or error type: every one written is a member of its enum
        assert event["type"] in KINDS, event
        assert event["data"].get("error_type") in ERROR_TYPES, event
    assert events[0]["type"] == EventKind.RUN_STARTED


def check_run_folder(result: RunResult, ir: ExecIR, inputs: dict[str, Any]) -> None:
    """The files of a run folder (docs/runs.md), consistent with the RunResult."""
    run_dir = result.run_dir
    assert run_dir is not None and run_dir.is_dir()
    assert run_dir.name == result.run_id
    names = {p.name for p in run_dir.iterdir() if p.is_file()}
    assert names >= RUN_FILES, sorted(names)
    assert not [n for n in names if n.endswith(".tmp")], "temp files left behind"
    if result.status == "completed":
        assert "failure_report.json" not in names
    else:
        assert "failure_report.json" in names
        report = json.loads((run_dir / "failure_report.json").read_text())
        assert report == result.failure.to_json()  # type: ignore[union-attr]

    def load(name: str) -> Any:
        return json.loads((run_dir / name).read_text(encoding="utf-8"))

    assert load("execir.json") == ir_to_dict(ir)
    assert load("input.json") == inputs
    initial = load("state_initial.json")
    assert initial["in"] == inputs
    assert initial["vars"] == {} and initial["tmp"] == {}
    assert initial["ctx"]["run_id"] == result.run_id
    assert load("state_final.json") == json.loads(json.dumps(result.state))
    saved = load("result.json")
    assert saved["status"] == result.status
    assert saved["run_id"] == result.run_id
    assert saved["output"] == json.loads(json.dumps(result.output))
    assert saved["workflow"] == ir.workflow.id
    assert "finished_at" in saved
    for key in ("run_dir", "vars", "usage", "failure"):
        assert key in saved

    events = read_events(run_dir)
    check_events(events, result.run_id)
    assert events == json.loads(json.dumps(result.events))
    finished = [e for e in events if e["type"] == "op_finished"]
    assert finished, "no op finished (not even the start)"
    entries = op_entries(run_dir)
    assert len(entries) == len(finished)
    # ops of the main walk are numbered 0001, 0002, …; ops of a branch by branch: 0002.1.0001, …
    counts: dict[str | None, int] = {}
    labels = {}
    for event in finished:
        branch = event.get("branch")
        counts[branch] = counts.get(branch, 0) + 1
        label = f"{branch}.{counts[branch]:04d}" if branch else f"{counts[branch]:04d}"
        labels[label] = event
    by_label = {entry.record()["seq"]: entry for entry in entries}  # type: ignore[index]
    assert {str(k) if isinstance(k, str) else f"{k:04d}" for k in by_label} == set(labels)
    for seq, entry in by_label.items():
        record = entry.record()
        assert record is not None
        label = seq if isinstance(seq, str) else f"{seq:04d}"
        event = labels[label]
        assert (entry.label, entry.name) == (
            label,
            re.sub(r"[^A-Za-z0-9_.-]+", "_", record["op_id"]),
        )
        assert record.get("branch") == event.get("branch")
        assert record["op_id"] == event["op_id"]
        assert record["kind"] == ir.ops[record["op_id"]].kind
        assert record["node_id"] == ir.ops[record["op_id"]].source_node
        assert "inputs" in record and "duration_ms" in record
        if "port" in event["data"]:
            assert record["port"] == event["data"]["port"]
        if record["kind"] == "LLM_WRITE" and record.get("port") == "default":
            # every attempt is recorded: what was sent, what came back
            assert record["attempts"], record
            last = record["attempts"][-1]
            assert last["messages"] and isinstance(last["completion"], str)
            assert len(last["prompt_hash"]) == 64
            assert record["output"] == json.loads(json.dumps(record["output"]))


# -- shipped examples -------------------------------------------------------------------

EXPECTED_BRANCHES: dict[str, list[tuple[str, str]]] = {
    "support-triage": [
        ("route", "Billing"),
        ("approved", "Needs changes"),
        ("revision-limit", "Revise again"),
        ("route", "Billing"),
        ("approved", "Approved"),
    ],
    "brainstorm-ideas": [("more", "More ideas"), ("more", "More ideas"), ("more", "Enough")],
    "content-moderation": [
        ("trusted", "Community"),
        ("moderate", "Safe"),
        ("link-check", "Has links"),
    ],
    "incident-response": [("security-check", "Security incident")],
    "code-review-fix": [("verdict", "Blocking")],
    "hello-world": [],
}


@pytest.fixture(scope="module")
def example_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("runs")
    return {path.stem: run_example(path, root) for path in mocked_examples()}


def test_every_example_has_a_mock() -> None:
    assert mocked_examples(), f"no examples with a mock script in {EXAMPLES}"
    assert {p.stem for p in mocked_examples()} >= set(EXPECTED_BRANCHES)


@pytest.mark.parametrize("path", mocked_examples(), ids=lambda p: p.stem)
def test_example_runs_to_completion(path: Path, example_runs: dict[str, Any]) -> None:
    result, provider, ir = example_runs[path.stem]
    assert result.status == "completed", result.failure
    assert result.failure is None
    assert result.output is not None
    assert result.events[-1]["type"] == "run_finished"
    assert result.usage.calls == len(provider.calls)
    # the mock script is consumed in order and never beyond its lists
    script = read_helper(path, "mock")["responses"]
    for node_id, count in _calls_per_node(provider).items():
        assert count <= len(script.get(node_id, [])), node_id
    if path.stem in EXPECTED_BRANCHES:
        assert branches(result) == EXPECTED_BRANCHES[path.stem]
    check_run_folder(result, ir, read_helper(path, "inputs"))


def _calls_per_node(provider: MockProvider) -> dict[str, int]:
    counts: dict[str, int] = {}
    for request in provider.calls:
        counts[request.node_id or ""] = counts.get(request.node_id or "", 0) + 1
    return counts


def test_support_triage_output_and_review_loop(example_runs: dict[str, Any]) -> None:
    result, provider, _ = example_runs["support-triage"]
    output = result.output
    assert output["category"] == "billing"
    assert output["urgency"] == 4
    assert output["approved"] is True
    assert output["revisions"] == 1
    assert output["subject"] == "Refund of the duplicate charge for INV-2291"
    assert "refund" in output["reply"]
    assert _calls_per_node(provider) == {"classify": 1, "draft-billing": 2, "review": 2}
    assert result.vars["revisions"] == 1
    assert result.vars["classify"]["result"] == {"category": "billing", "urgency": 4}
    # the second draft saw the reviewer's feedback
    second_draft = [r for r in provider.calls if r.node_id == "draft-billing"][1]
    assert "INV-2291" in second_draft.messages[-1].content
    assert result.vars["feedback"] in second_draft.messages[-1].content


def test_example_outputs(example_runs: dict[str, Any]) -> None:
    outputs = {stem: run[0].output for stem, run in example_runs.items()}
    assert outputs["hello-world"] == "Welcome aboard, Ada: your first Lattice workflow just ran!"
    assert outputs["brainstorm-ideas"]["ranking"][0]["idea"] == "SMS reminders 48h and 2h before"
    assert outputs["content-moderation"]["decision"]["action"] == "hold"
    assert outputs["code-review-fix"].startswith("--- a/app/users.py")
    # without its services (tests/examples runs it with them) the request fails and the
    # sub-flow's helpdesk note stands in
    onboarding = outputs["employee-onboarding"]
    assert onboarding["welcome"]["subject"].startswith("Welcome")
    assert onboarding["provisioning"]["via"] == "IT helpdesk, by hand"


def test_examples_without_tool_backends_take_their_failed_ports(
    example_runs: dict[str, Any],
) -> None:
    """Without their stand-ins (no config: MCP servers are not configured and httpRequest
    refuses the loopback address the inputs name), every TOOL_CALL fails and its node's
    `failed` port leads to a fallback. tests/examples/ runs them with their stand-ins."""
    assert example_runs, "no example ran"
    checked = 0
    for stem, (result, _, ir) in example_runs.items():
        tool_ops = {i for i, op in ir.ops.items() if op.kind == "TOOL_CALL"}
        for event in result.events:
            if event["type"] == "op_finished" and event["op_id"] in tool_ops:
                assert event["data"]["port"] == "failed", stem
                error = result.vars[event["node_id"]]["error"]
                assert error["category"] in ("tool_error", "http_error", "internal_error"), stem
                assert error["summary"], stem
                checked += 1
    assert checked, "no example ran a TOOL_CALL, so nothing here was checked"


def test_examples_run_the_same_twice(tmp_path: Path) -> None:
    path = EXAMPLES / "support-triage.json"
    first, _, _ = run_example(path, tmp_path)
    second, _, _ = run_example(path, tmp_path)
    assert first.run_id != second.run_id
    assert first.output == second.output
    assert first.vars == second.vars
    assert [e["type"] for e in first.events] == [e["type"] for e in second.events]
    hashes = [
        [e["data"]["prompt_hash"] for e in r.events if e["type"] == "llm_request"]
        for r in (first, second)
    ]
    assert hashes[0] == hashes[1]
    assert len({p.name for p in tmp_path.iterdir()}) == 2


SNAPSHOT_EXAMPLES = ["support-triage", "brainstorm-ideas", "incident-response"]


@pytest.mark.parametrize("stem", SNAPSHOT_EXAMPLES)
def test_event_type_sequence_snapshot(
    stem: str, example_runs: dict[str, Any], snapshot: Any
) -> None:
    result, _, _ = example_runs[stem]
    # a kind in memory is an EventKind (a str); its text is what events.jsonl holds
    sequence = [
        f"{e['type']} {e['op_id']}" if "op_id" in e else str(e["type"]) for e in result.events
    ]
    assert sequence == snapshot


# -- run folders of failed and halted runs ----------------------------------------------


def test_failed_run_folder(tmp_path: Path) -> None:
    doc = chain(node("p", "prompt", prompt="hi"))
    ir = lower(doc)
    result = Runner(
        ir, provider=MockProvider({"p": []}), store=RunStore(tmp_path), workflow=doc
    ).run({})
    assert result.status == "failed"
    check_run_folder(result, ir, {})
    assert (result.run_dir / "checkpoint.json").exists()  # type: ignore[operator]
    report = json.loads((result.run_dir / "failure_report.json").read_text())  # type: ignore[operator]
    assert set(report) >= {
        "phase",
        "run_id",
        "op_id",
        "node_id",
        "category",
        "summary",
        "details",
        "attempts",
        "blocking",
        "recovery_action",
    }
    assert report["category"] == "mock_exhausted"
    assert report["node_id"] == "p"
    assert report["blocking"] is True
    assert str(result.run_dir) in report["recovery_action"]
    events = read_events(result.run_dir)  # type: ignore[arg-type]
    assert events[-1]["type"] == "run_failed"
    assert op_record(result.run_dir, "p")["error"]["error_type"] == "mock_exhausted"


def test_halted_run_folder(tmp_path: Path) -> None:
    doc = workflow(
        [
            node("start", "start"),
            node(
                "q",
                "askUserQuestion",
                questionText="Ship it?",
                options=[{"label": "Ship"}, {"label": "Hold"}],
            ),
            node("end", "end"),
        ],
        [conn("start", "q"), conn("q", "end", "branch-0"), conn("q", "end", "branch-1")],
    )
    ir = lower(doc)
    result = Runner(ir, store=RunStore(tmp_path), workflow=doc).run({})
    assert result.status == "halted"
    check_run_folder(result, ir, {})
    events = read_events(result.run_dir)  # type: ignore[arg-type]
    assert events[-1]["type"] == "run_halted"
    assert not [e for e in events if e["type"] in ("run_failed", "run_finished")]


def test_workflow_json_is_only_written_when_the_document_is_given(tmp_path: Path) -> None:
    ir = lower(chain())
    result = Runner(ir, store=RunStore(tmp_path)).run({})
    assert result.status == "completed"
    assert not (result.run_dir / "workflow.json").exists()  # type: ignore[operator]
    assert (result.run_dir / "execir.json").exists()  # type: ignore[operator]


def test_in_memory_runs_write_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = EXAMPLES / "support-triage.json"
    result, _, _ = run_example(path, None)
    assert result.status == "completed"
    assert result.run_dir is None
    assert list(tmp_path.iterdir()) == []
    check_events(result.events, result.run_id)


# -- the corpus of real documents -------------------------------------------------------


def sample(schema: dict[str, Any]) -> Any:
    """A small instance of a simple JSON Schema (enough for tool-argument ops)."""
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "object":
        props = schema.get("properties") or {}
        return {key: sample(props.get(key, {})) for key in schema.get("required", [])}
    return {"string": "sample", "number": 1, "integer": 1, "boolean": True, "array": []}.get(
        kind if isinstance(kind, str) else "", "sample"
    )


def corpus_run(path: Path, root: Path) -> tuple[RunResult, MockProvider, ExecIR]:
    """Run a corpus document offline: first option of every question, first label of
    every classifier, a default completion for every other LLM node."""
    ir = lower(path)
    answers = {op.source_node: 0 for op in ir.ops.values() if isinstance(op, AskOp)}
    responses = {
        op.source_node: [
            {"branch": op.labels[0]}
            if isinstance(op, LLMWriteOp) and op.labels
            else sample(op.output_schema)
        ]
        * 20
        for op in ir.ops.values()
        if isinstance(op, ContractOpBase) and op.output_schema is not None
    }
    provider = MockProvider(responses, default="Done.")
    schema = ir.inputs_schema or {}
    inputs = {key: f"sample {key}" for key in schema.get("required", [])}
    runner = Runner(
        ir,
        provider=provider,
        store=RunStore(root),
        answers=answers,
        limits=RunLimits(max_steps=500),
        workflow=document(path),
    )
    return runner.run(inputs), provider, ir


@pytest.mark.parametrize("path", corpus_params(corpus_files(), CORPUS))
def test_corpus_document_runs(path: Path, tmp_path: Path) -> None:
    result, provider, ir = corpus_run(path, tmp_path)
    has_tools = any(op.kind == "TOOL_CALL" for op in ir.ops.values())
    if result.status == "failed" and has_tools:
        # tool backends are not configured offline; the failure must be that, clearly
        assert result.failure is not None
        assert result.failure.category == "tool_error", result.failure.summary
        failed = ir.ops[result.failure.op_id]  # type: ignore[index]
        # the tool call itself, or the LLM op that needs the server's tool schemas first
        assert failed.kind == "TOOL_CALL" or getattr(failed, "tool_server", None), failed
    else:
        assert result.status == "completed", result.failure
        assert result.output == "Done."
        assert result.usage.calls == len(provider.calls) > 0
        for op in ir.ops.values():
            if isinstance(op, AskOp) and op.source_node in result.vars:
                assert result.vars[op.source_node]["result"]["index"] == 0
    inputs = {k: f"sample {k}" for k in (ir.inputs_schema or {}).get("required", [])}
    check_run_folder(result, ir, inputs)


def test_several_corpus_documents_complete(tmp_path: Path) -> None:
    files = corpus_files()
    if not files:
        pytest.skip(f"corpus of real documents not found: {CORPUS}")
    completed = [p.name for p in files if corpus_run(p, tmp_path)[0].status == "completed"]
    assert len(completed) >= 5, completed


def test_corpus_question_halts_without_an_answer(tmp_path: Path) -> None:
    path = corpus_document(
        "breaking-brake__cc-wf-studio__resources__samples__getting-started-sample.json"
    )
    ir = lower(path)
    runner = Runner(
        ir,
        provider=MockProvider(default="Done."),
        store=RunStore(tmp_path),
        workflow=document(path),
    )
    inputs = {k: "x" for k in ir.inputs_schema.get("required", [])}
    result = runner.run(inputs)
    assert result.status == "halted"
    assert result.failure is not None
    assert result.failure.node_id == "ask-confirm"
    assert result.failure.details["options"] == ["Yes, proceed", "No, start over"]
    resumed = Runner.resume(
        result.run_dir,  # type: ignore[arg-type]
        answers={"ask-confirm": "Yes, proceed"},
        provider=MockProvider(default="Done."),
    )
    assert resumed.status == "completed"
    assert resumed.vars["ask-confirm"]["result"] == {"label": "Yes, proceed", "index": 0}


def test_a_generated_run_id_whose_folder_exists_is_drawn_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import lattice.runtime.runner as runner_module

    ids = iter(["20261122T101500-0000beef", "20261122T101500-0000beef", "20261122T101500-0000cafe"])
    monkeypatch.setattr(runner_module, "new_run_id", lambda: next(ids))
    (tmp_path / "20261122T101500-0000beef").mkdir()
    ir = lower(workflow([node("start", "start"), node("end", "end")], [conn("start", "end")]))
    result = Runner(ir, store=RunStore(tmp_path)).run()
    assert result.status == "completed"
    assert result.run_id == "20261122T101500-0000cafe"
    assert not list((tmp_path / "20261122T101500-0000beef").iterdir())  # untouched


def test_a_run_id_chosen_by_the_caller_never_reuses_a_folder(tmp_path: Path) -> None:
    from lattice.errors import LatticeUserError

    (tmp_path / "mine").mkdir()
    ir = lower(workflow([node("start", "start"), node("end", "end")], [conn("start", "end")]))
    with pytest.raises(LatticeUserError, match="already exists"):
        Runner(ir, store=RunStore(tmp_path)).run(run_id="mine")


def test_run_ids_are_sortable_folder_names_with_32_random_bits() -> None:
    from lattice.runs.oplog import safe_name
    from lattice.runs.store import new_run_id

    ids = {new_run_id() for _ in range(200)}
    assert len(ids) == 200
    for run_id in ids:
        assert re.fullmatch(r"\d{8}T\d{6}-[0-9a-f]{8}", run_id) and safe_name(run_id) == run_id


def test_reseeding_random_does_not_repeat_run_ids() -> None:
    import random

    from lattice.runs.store import new_run_id

    random.seed(0)
    first = new_run_id()
    random.seed(0)
    assert new_run_id() != first


def test_a_runs_folder_that_cannot_be_made_is_a_clear_error_not_a_retry(tmp_path: Path) -> None:
    from lattice.errors import LatticeUserError

    (tmp_path / "taken").write_text("a file where the runs folder should go")
    ir = lower(workflow([node("start", "start"), node("end", "end")], [conn("start", "end")]))
    with pytest.raises(LatticeUserError, match="cannot create run folder"):
        Runner(ir, store=RunStore(tmp_path / "taken" / "runs")).run()

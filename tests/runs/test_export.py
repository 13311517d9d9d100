"""lattice export sft: training examples from run folders (docs/export.md).

Update the snapshots with ``python -m pytest tests/test_export.py --snapshot-update`` after an
intended change to the export format or to a prompt, and review the diff of ``__snapshots__/``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from syrupy.assertion import SnapshotAssertion

from lattice.cli import main
from lattice.errors import LatticeUserError
from lattice.llm.mock import MockProvider
from lattice.lower import lower
from lattice.runs.export import ExportStats, export_examples, to_jsonl
from lattice.runtime import Runner, RunStore
from lattice.runtime.settings import RuntimeSettings
from tests.builders import chain, node, op_record
from tests.conftest import EXAMPLES, REPO

PIPELINES = REPO / "workflows" / "pipelines"
CLASSIFY_SCHEMA = {
    "type": "object",
    "properties": {"label": {"type": "string", "enum": ["bug", "question"]}},
    "required": ["label"],
    "additionalProperties": False,
}


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def run_workflow(
    doc: Any,
    responses: dict[str, list[Any]],
    runs: Path,
    run_id: str,
    inputs: dict[str, Any] | None = None,
    *,
    settings: RuntimeSettings | None = None,
) -> Path:
    runner = Runner(
        lower(doc),
        provider=MockProvider(responses),
        store=RunStore(runs),
        settings=settings or RuntimeSettings(),
    )
    result = runner.run(inputs or {}, run_id=run_id)
    assert result.run_dir is not None
    return result.run_dir


def triage_doc() -> Any:
    return chain(
        node(
            "classify",
            "prompt",
            prompt="Classify this ticket: {{ $in.ticket }}",
            outputSchema=CLASSIFY_SCHEMA,
            modelClass="small",
        ),
        node("reply", "prompt", prompt="Answer the {{ $vars.classify.result.label }}."),
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four runs: a clean one, a repaired one, a failed one and the shipped support-triage."""
    root = tmp_path_factory.mktemp("runs")
    ticket = {"ticket": "The export button crashes the app."}
    run_workflow(
        triage_doc(),
        {"classify": [{"label": "bug"}], "reply": ["Sorry! A fix ships on Friday."]},
        root,
        "run-1-clean",
        ticket,
    )
    run_workflow(
        triage_doc(),
        {
            "classify": ['Sure, it is a bug: {"label": "Bug"}', '```json\n{"label": "bug"}\n```'],
            "reply": ["Thanks, we are on it."],
        },
        root,
        "run-2-repaired",
        ticket,
    )
    run_workflow(
        triage_doc(),
        {"classify": [{"label": "question"}], "reply": []},
        root,
        "run-3-failed",
        ticket,
    )
    example = EXAMPLES / "support-triage.json"
    run_workflow(
        example,
        read_json(EXAMPLES / "support-triage.mock.json")["responses"],
        root,
        "run-4-support-triage",
        read_json(EXAMPLES / "support-triage.inputs.json"),
    )
    return root


def export(paths: list[Path], **kwargs: Any) -> list[dict[str, Any]]:
    return list(export_examples(paths, **kwargs))


def lines(paths: list[Path], **kwargs: Any) -> list[str]:
    return to_jsonl(export_examples(paths, **kwargs)).splitlines()


# -- snapshots --------------------------------------------------------------------------------


def test_sft_lines_of_the_support_triage_example(runs: Path, snapshot: SnapshotAssertion) -> None:
    assert lines([runs / "run-4-support-triage"]) == snapshot


def test_sft_lines_of_a_repaired_op(runs: Path, snapshot: SnapshotAssertion) -> None:
    assert lines([runs / "run-2-repaired"], include_repaired=True) == snapshot


def test_validator_lines_of_the_vpvc_pipeline(tmp_path: Path, snapshot: SnapshotAssertion) -> None:
    responses = read_json(PIPELINES / "vpvc.mock.json")["responses"]
    folder = run_workflow(
        PIPELINES / "vpvc.json",
        responses,
        tmp_path,
        "run-vpvc",
        read_json(PIPELINES / "vpvc.inputs.json"),
        settings=RuntimeSettings(repo_root=(PIPELINES / "sample-repo").resolve()),
    )
    examples = export([folder], fmt="validator")
    assert [e["label"] for e in examples] == ["reroute", "retry", "accept", "accept"]
    assert [e["meta"]["node_id"] for e in examples] == [
        "validate_task",
        "validate_plan",
        "validate_plan",
        "validate_patch",
    ]
    plan_check = examples[1]
    assert plan_check["decision"] == responses["validate_plan"][0]
    assert plan_check["inputs"]["$vars.planner_retries"] == 0
    assert plan_check["inputs"]["$vars.current_plan.result.files_to_touch"] == [
        "inventory/stock.py"
    ]
    assert [m["role"] for m in plan_check["messages"]] == ["system", "user"]
    assert lines([folder], fmt="validator") == snapshot
    # the chat export of the same run: the repaired coder op is left out by default
    chat = export([folder])
    assert "coder" not in [e["meta"]["node_id"] for e in chat]
    assert len(chat) == 6


# -- what is exported -------------------------------------------------------------------------


def test_one_chat_example_per_accepted_op(runs: Path) -> None:
    [classify, reply] = export([runs / "run-1-clean"])
    assert [m["role"] for m in classify["messages"]] == ["system", "user", "assistant"]
    assert (
        classify["messages"][1]["content"]
        == "Classify this ticket: The export button crashes the app."
    )
    assert classify["messages"][2] == {"role": "assistant", "content": '{"label": "bug"}'}
    assert classify["meta"] == {
        "run_id": "run-1-clean",
        "workflow": "wf",
        "node_id": "classify",
        "op_id": "classify",
        "seq": 2,
        "model": "mock-model",
        "model_class": "small",
        "attempts": 1,
        "repaired": False,
        "prompt_hash": classify["meta"]["prompt_hash"],
    }
    record = op_record(runs / "run-1-clean", "classify")
    assert classify["meta"]["prompt_hash"] == record["attempts"][0]["prompt_hash"]
    # a free-text op: no system part, the text itself as the answer
    assert reply["messages"][-1] == {
        "role": "assistant",
        "content": "Sorry! A fix ships on Friday.",
    }


def test_repaired_ops_are_left_out_unless_asked_for(runs: Path) -> None:
    stats = ExportStats()
    default = list(export_examples([runs / "run-2-repaired"], stats=stats))
    assert [e["meta"]["node_id"] for e in default] == ["reply"]
    assert stats.skipped == {"repaired": 1}
    [classify, _] = export([runs / "run-2-repaired"], include_repaired=True)
    record = op_record(runs / "run-2-repaired", "classify")
    original, repair = record["attempts"]
    assert repair["kind"] == "repair"
    # the prompt is the original one, never the repair packet; the answer is the final output
    assert classify["messages"][:-1] == original["messages"]
    assert "broke the contract" not in json.dumps(classify["messages"])
    assert classify["messages"][-1]["content"] == '{"label": "bug"}'  # no fences
    assert classify["meta"]["repaired"] is True
    assert classify["meta"]["attempts"] == 2


def test_failed_ops_and_runs(runs: Path) -> None:
    stats = ExportStats()
    examples = list(export_examples([runs / "run-3-failed"], stats=stats))
    assert [e["meta"]["node_id"] for e in examples] == ["classify"]  # accepted before the failure
    assert stats.skipped == {"op_failed": 1}
    stats = ExportStats()
    assert list(export_examples([runs / "run-3-failed"], only_completed=True, stats=stats)) == []
    assert stats.skipped == {"run_not_completed": 1}


def test_a_runs_folder_expands_in_name_order_and_filters_by_node(runs: Path) -> None:
    everything = export([runs], include_repaired=True)
    assert [e["meta"]["run_id"] for e in everything] == [
        "run-1-clean",
        "run-1-clean",
        "run-2-repaired",
        "run-2-repaired",
        "run-3-failed",
        *["run-4-support-triage"] * 5,
    ]
    only = export([runs], nodes={"classify", "review"}, only_completed=True)
    assert [(e["meta"]["run_id"], e["meta"]["node_id"]) for e in only] == [
        ("run-1-clean", "classify"),
        ("run-4-support-triage", "classify"),
        ("run-4-support-triage", "review"),
        ("run-4-support-triage", "review"),
    ]


def test_validator_format_skips_other_outputs(runs: Path) -> None:
    stats = ExportStats()
    assert list(export_examples([runs / "run-1-clean"], fmt="validator", stats=stats)) == []
    assert stats.skipped == {"not_a_validator_decision": 2}


def test_bad_paths_and_formats(tmp_path: Path) -> None:
    with pytest.raises(LatticeUserError, match="not a run folder"):
        export([tmp_path])
    with pytest.raises(LatticeUserError, match="not a run folder"):
        export([tmp_path / "missing"])
    with pytest.raises(LatticeUserError, match="unknown export format"):
        export([tmp_path], fmt="csv")  # type: ignore[arg-type]


# -- secrets -----------------------------------------------------------------------------------

KEY = "sk-live-0123456789abcdef"


def leaky_doc() -> Any:
    return chain(node("echo", "prompt", prompt="Say something."))


def test_secrets_redacted_in_the_folder_stay_redacted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    folder = run_workflow(leaky_doc(), {"echo": [f"my key is {KEY}"]}, tmp_path, "run-secret")
    monkeypatch.delenv("OPENAI_API_KEY")
    text = to_jsonl(export_examples([folder]))
    assert KEY not in text
    assert "my key is ***" in text


def test_secrets_known_at_export_time_are_masked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = run_workflow(leaky_doc(), {"echo": [f"my key is {KEY}"]}, tmp_path, "run-unmasked")
    assert KEY in (folder / "result.json").read_text(encoding="utf-8")  # no key was set then
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    assert main(["export", "sft", str(folder)]) == 0
    out, _ = capsys.readouterr()
    assert KEY not in out and "my key is ***" in out


# -- the command line --------------------------------------------------------------------------


def test_cli_writes_jsonl_and_a_summary(
    runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "train.jsonl"
    code = main(
        ["export", "sft", str(runs), "-o", str(target), "--node", "classify", "--include-repaired"]
    )
    _, err = capsys.readouterr()
    assert code == 0
    examples = [json.loads(line) for line in target.read_text(encoding="utf-8").splitlines()]
    assert [e["meta"]["run_id"] for e in examples] == [
        "run-1-clean",
        "run-2-repaired",
        "run-3-failed",
        "run-4-support-triage",
    ]
    assert err.startswith(
        "lattice: exported 4 example(s) from 11 LLM op(s) in 4 run(s); skipped: 7 node_filtered"
    )
    assert f"to {target}" in err


def test_cli_stdout_only_completed_and_validator_format(
    runs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["export", "sft", str(runs / "run-3-failed"), "--only-completed"]) == 0
    out, err = capsys.readouterr()
    assert out == ""
    assert "skipped: 1 run_not_completed" in err
    assert main(["export", "sft", str(runs), "--format", "validator"]) == 0
    out, _ = capsys.readouterr()
    assert out == ""


def test_cli_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", "sft", str(tmp_path)]) == 2
    assert "not a run folder" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["export", "sft"])
    with pytest.raises(SystemExit):
        main(["export", "sft", str(tmp_path), "--format", "csv"])

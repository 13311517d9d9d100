"""``lattice mock init``: the script it writes runs each document to completion offline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lattice.cli import main
from lattice.llm.examples import example_value
from lattice.lower import lower
from lattice.service.mocks import answers_file, mock_script, needs_mcp
from tests.conftest import CORPUS, REPO, corpus_files

WORKFLOWS = sorted(
    p
    for p in (REPO / "workflows").rglob("*.json")
    if not p.name.endswith((".mock.json", ".answers.json", ".inputs.json"))
)


def offline(paths: list[Path]) -> list[Path]:
    """The documents that need no MCP server."""
    return [p for p in paths if not needs_mcp(lower(p))]


def run_with_init(path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mock = tmp_path / "flow.mock.json"
    assert main(["mock", "init", str(path), "-o", str(mock)]) == 0
    args = ["run", str(path), "--mock", str(mock), "--no-record"]
    answers = tmp_path / "flow.answers.json"
    if answers.exists():
        args += ["--answers", str(answers)]
    shipped = path.with_name(path.name.removesuffix(".json") + ".inputs.json")
    ir = lower(path)
    if shipped.exists():
        args += ["--inputs", str(shipped)]
    elif ir.inputs_schema:
        inputs = tmp_path / "inputs.json"
        inputs.write_text(json.dumps(example_value(ir.inputs_schema)))
        args += ["--inputs", str(inputs)]
    code = main(args)
    err = capsys.readouterr().err
    assert code == 0, err
    assert "completed" in err


def test_the_shipped_workflows_are_walked() -> None:
    assert len(offline(WORKFLOWS)) >= 7


@pytest.mark.parametrize("path", offline(WORKFLOWS), ids=lambda p: p.name)
def test_mock_init_runs_each_shipped_workflow(
    path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_with_init(path, tmp_path, capsys)


def test_mock_init_runs_each_corpus_document(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if not CORPUS.is_dir():
        pytest.skip(f"the corpus is not beside this checkout ({CORPUS})")
    documents = offline(corpus_files())
    assert len(documents) >= 10
    for number, path in enumerate(documents):
        folder = tmp_path / str(number)
        folder.mkdir()
        run_with_init(path, folder, capsys)


def test_the_script_has_the_shapes_nodes_expect() -> None:
    ir = lower(REPO / "workflows" / "examples" / "support-triage.json")
    script = mock_script(ir)["responses"]
    classify = next(op for op in ir.ops.values() if op.source_node == "classify")
    assert set(script) >= {"classify", "review"}
    assert isinstance(script["review"][0], dict)
    assert len(script["review"]) == 3  # on the revision loop
    assert getattr(classify, "output_schema", None) is not None
    assert answers_file(ir) == {}


def test_questions_get_their_first_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = REPO / "workflows" / "examples" / "release-announcement.json"
    mock = tmp_path / "release.mock.json"
    assert main(["mock", "init", str(path), "-o", str(mock)]) == 0
    answers = json.loads((tmp_path / "release.answers.json").read_text())
    ir = lower(path)
    asks = [op for op in ir.ops.values() if op.kind == "ASK"]
    assert answers == {ask.source_node: ask.options[0].label for ask in asks}  # type: ignore[attr-defined]
    assert "--answers" in capsys.readouterr().err


def test_the_run_hint_names_the_inputs_a_run_needs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    triage = REPO / "workflows" / "examples" / "support-triage.json"
    assert main(["mock", "init", str(triage), "-o", str(tmp_path / "t.mock.json")]) == 0
    hint = capsys.readouterr().err.splitlines()[-1]
    assert hint.endswith(f"--inputs {triage.with_name('support-triage.inputs.json')}")
    copy = tmp_path / "triage.json"  # no inputs file beside it
    copy.write_text(triage.read_text())
    assert main(["mock", "init", str(copy), "-o", str(tmp_path / "c.mock.json")]) == 0
    hint = capsys.readouterr().err.splitlines()[-1]
    assert "--input ticket=…" in hint and "--inputs" not in hint


def test_a_document_without_questions_gets_no_answers_file_nor_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """README and docs/mocks.md: the answers file exists only when there are questions."""
    path = REPO / "workflows" / "examples" / "hello-world.json"
    mock = tmp_path / "flow.mock.json"
    assert main(["mock", "init", str(path), "-o", str(mock)]) == 0
    hint = capsys.readouterr().err.splitlines()[-1]
    assert not (tmp_path / "flow.answers.json").exists()
    assert hint.startswith(f"lattice: run it: lattice run {path} --mock {mock}")
    assert "--answers" not in hint

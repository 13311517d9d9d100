"""Every real cc-wf-studio document of the corpus lowers, deterministically, to valid ExecIR."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from lattice import cli
from lattice.ir import IR_VERSION, execir_json_schema, ir_from_json, ir_to_dict, ir_to_json
from lattice.ir.models import AgentOp
from lattice.lower import lower, lower_document
from tests.builders import corpus_params, describe, validate_ir
from tests.conftest import CORPUS, DEVELOPMENT_CORPUS, REPO, corpus_dir, corpus_files

CORPUS_FILES = corpus_files()
PARAMS = corpus_params(CORPUS_FILES, CORPUS)


def _document_node_ids(path: Path) -> set[str]:
    raw = json.loads(path.read_text(encoding="utf-8"))
    doc = raw["workflow"] if "nodes" not in raw else raw
    return {n["id"] for n in doc["nodes"]}


def test_missing_corpus_gives_one_skipped_param(tmp_path: Path) -> None:
    params = corpus_params([], tmp_path / "nowhere")
    assert len(params) == 1
    (param,) = params
    assert param.id == "corpus-missing"
    (mark,) = param.marks
    assert mark.name == "skip"
    assert "corpus" in mark.kwargs["reason"] and "nowhere" in mark.kwargs["reason"]


def test_corpus_dir_is_lattice_corpus_when_set(tmp_path: Path) -> None:
    assert corpus_dir({"LATTICE_CORPUS": str(tmp_path)}) == tmp_path
    assert corpus_dir({"LATTICE_CORPUS": ""}) == DEVELOPMENT_CORPUS
    assert corpus_dir({}) == DEVELOPMENT_CORPUS


@pytest.mark.skipif(
    CORPUS != DEVELOPMENT_CORPUS or not CORPUS.is_dir(),
    reason=f"development corpus not found or not in use: {CORPUS}",
)
def test_corpus_is_all_there() -> None:
    """The corpus tests skip when the development corpus is absent, but not when it is
    there and emptied (a folder given as LATTICE_CORPUS may hold any number)."""
    assert len(CORPUS_FILES) >= 14, CORPUS_FILES


def test_execir_schema_is_a_valid_draft_2020_12_schema() -> None:
    schema = execir_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"


@pytest.mark.parametrize("path", PARAMS)
def test_corpus_document_lowers_without_errors(path: Path) -> None:
    result = lower_document(path)
    assert result.errors == [], describe(result.diagnostics)
    assert result.ir is not None
    ir = result.ir
    assert ir.ir_version == IR_VERSION
    assert ir.ops, "a real document lowers to at least one op"
    assert ir.ops[ir.entry].kind == "START"
    assert any(op.kind == "END" for op in ir.ops.values())
    # Warnings travel with the IR.
    assert [d.code for d in ir.diagnostics] == [d.code for d in result.warnings]


@pytest.mark.parametrize("path", PARAMS)
def test_corpus_ir_matches_the_execir_json_schema(path: Path) -> None:
    ir = lower(path)
    data = validate_ir(ir)
    assert set(data) >= {"irVersion", "workflow", "entry", "inputsSchema", "ops", "diagnostics"}
    jsonschema.Draft202012Validator.check_schema(data["inputsSchema"])


@pytest.mark.parametrize("path", PARAMS)
def test_corpus_ops_carry_provenance(path: Path) -> None:
    ir = lower(path)
    node_ids = _document_node_ids(path)
    assert ir.ops and node_ids
    for op_id, op in ir.ops.items():
        assert op.source_node in node_ids, f"{op_id} has no document node behind it"
        assert op_id == op.source_node or op_id.startswith(op.source_node + "#")
        writes = getattr(op, "writes", None)
        if writes is not None:
            assert writes.startswith(f"$vars.{op.source_node}.")


@pytest.mark.parametrize("path", PARAMS)
def test_corpus_lowering_is_deterministic(path: Path) -> None:
    first = ir_to_json(lower(path))
    second = ir_to_json(lower(path))
    assert first.encode("utf-8") == second.encode("utf-8")
    assert first.endswith("\n")


@pytest.mark.parametrize("path", PARAMS)
def test_corpus_ir_round_trips_through_json(path: Path) -> None:
    ir = lower(path)
    text = ir_to_json(ir)
    again = ir_from_json(text)
    assert again == ir
    assert ir_to_json(again) == text
    assert ir_from_json(ir_to_dict(ir)) == ir
    assert ir_from_json(text.encode("utf-8")) == ir


def _toolless_only(out: str) -> tuple[str, ...]:
    """``out`` when it is only the list of nodes that run without tools."""
    return (out,) if out.startswith("without tools in this run") else ()


@pytest.mark.parametrize("path", PARAMS)
def test_cli_check_accepts_corpus_document(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["check", str(path)]) == 0
    captured = capsys.readouterr()
    has_agents = any(isinstance(op, AgentOp) for op in lower(path).ops.values())
    assert captured.out.startswith("agent nodes (no workspace; grants nothing):\n") == has_agents
    assert has_agents or captured.out in ("", *_toolless_only(captured.out))
    assert f"{path}: ok (" in captured.err
    assert "Traceback" not in captured.err
    assert "error[" not in captured.err


@pytest.mark.parametrize("path", PARAMS)
def test_cli_lower_prints_the_ir(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["lower", str(path)]) == 0
    captured = capsys.readouterr()
    assert captured.out == ir_to_json(lower(path))
    assert "error[" not in captured.err


@pytest.mark.parametrize("path", PARAMS)
def test_cli_lower_emitters_and_output_file(
    path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["lower", str(path), "--emit", "mermaid"]) == 0
    assert capsys.readouterr().out.startswith("flowchart TD\n")
    assert cli.main(["lower", str(path), "--emit", "dot"]) == 0
    dot = capsys.readouterr().out
    assert dot.startswith("digraph ") and dot.rstrip().endswith("}")
    target = tmp_path / "ir.json"
    assert cli.main(["lower", str(path), "-o", str(target)]) == 0
    assert capsys.readouterr().out == ""
    assert target.read_text(encoding="utf-8") == ir_to_json(lower(path))


_HASH_SCRIPT = """
import hashlib, sys
from pathlib import Path
from lattice.ir import ir_to_json
from lattice.lower import lower
digest = hashlib.sha256()
for name in sys.argv[1:]:
    digest.update(ir_to_json(lower(Path(name))).encode("utf-8"))
print(digest.hexdigest())
"""


@pytest.mark.skipif(not CORPUS_FILES, reason=f"corpus of real documents not found: {CORPUS}")
def test_corpus_ir_is_identical_across_processes_and_hash_seeds() -> None:
    """Same document → byte-identical IR, even when set/dict hashing differs between runs."""
    expected = hashlib.sha256()
    assert CORPUS_FILES
    for path in CORPUS_FILES:
        expected.update(ir_to_json(lower(path)).encode("utf-8"))
    for seed in ("1", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", _HASH_SCRIPT, *map(str, CORPUS_FILES)],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        )
        assert out.stdout.strip() == expected.hexdigest()

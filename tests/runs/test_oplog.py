"""Op records as lines of one file (``ops.jsonl``, ``lattice.runs.oplog``): what a run
writes, the one reader every view goes through, folders written before it (a file per
record in ``ops/``), torn lines and records written twice."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from lattice.batch.diff import diff_runs
from lattice.llm.mock import MockProvider
from lattice.lower import lower
from lattice.runs.export import export_examples, is_run_folder
from lattice.runs.oplog import OPS_FILE, op_entries, op_line, read_op_records
from lattice.runs.view import show_run
from lattice.runtime import Runner, RunStore
from tests.builders import chain, node


def counter_run(tmp_path: Path, n: int) -> Path:
    ops = [node(f"n{i}", "variableStore", operation="increment", name="count") for i in range(n)]
    result = Runner(lower(chain(*ops)), store=RunStore(tmp_path / f"runs{n}")).run()
    assert result.status == "completed" and result.run_dir is not None
    return result.run_dir


def three_calls() -> dict[str, Any]:
    return chain(
        node("a", "prompt", prompt="A"),
        node("b", "prompt", prompt="B {{ $vars.a.result }}"),
        node("c", "prompt", prompt="C {{ $vars.b.result }}"),
    )


def to_old_layout(folder: Path) -> None:
    """Rewrite ``folder``'s op records as a folder written before ``ops.jsonl`` kept them:
    one indented JSON file per record, ``ops/<label>-<op>.json``."""
    (folder / "ops").mkdir()
    for entry in op_entries(folder):
        text = json.dumps(entry.record(), indent=2, ensure_ascii=False) + "\n"
        (folder / "ops" / f"{entry.label}-{entry.name}.json").write_text(text)
    (folder / OPS_FILE).unlink()


def test_a_run_appends_its_records_to_one_file_however_many_ops_it_has(tmp_path: Path) -> None:
    small, large = counter_run(tmp_path, 10), counter_run(tmp_path, 100)
    names = {p.name for p in small.iterdir()}
    assert names == {p.name for p in large.iterdir()}  # no file per op
    assert OPS_FILE in names and "ops" not in names
    lines = (large / OPS_FILE).read_text().splitlines()
    assert len(lines) == 102  # the start and end ops have records too
    first = json.loads(lines[0])
    assert (first["label"], first["op"], first["record"]["seq"]) == ("0001", "start", 1)
    records = read_op_records(large)
    assert [r["seq"] for r in records] == list(range(1, 103))
    assert [r["op_id"] for r in records[-3:]] == ["n98", "n99", "end"]


def test_an_old_folder_reads_as_the_new_one_does(tmp_path: Path) -> None:
    """Views, SFT export and runs diff read a folder of ``ops/`` files as they read the
    same run's ``ops.jsonl``."""
    doc = three_calls()
    new = Runner(lower(doc), provider=MockProvider(default="x"), store=RunStore(tmp_path)).run()
    assert new.run_dir is not None
    old = tmp_path / "old" / new.run_dir.name
    shutil.copytree(new.run_dir, old)
    to_old_layout(old)
    assert not (old / OPS_FILE).exists() and is_run_folder(old)
    assert read_op_records(old) == read_op_records(new.run_dir)
    assert show_run(old) == show_run(new.run_dir)
    assert [r["op_id"] for r in read_op_records(old)] == ["start", "a", "b", "c", "end"]
    exported = list(export_examples([old], include_repaired=True))
    assert exported == list(export_examples([new.run_dir], include_repaired=True))
    assert [e["meta"]["op_id"] for e in exported] == ["a", "b", "c"]
    diff = diff_runs(old, new.run_dir)
    assert not diff.changed and diff.a.path == diff.b.path == ["start", "a", "b", "c", "end"]


def test_an_old_folder_resumes_and_reads_its_records_and_the_new_ones_as_one(
    tmp_path: Path,
) -> None:
    doc = three_calls()
    failed = Runner(
        lower(doc), provider=MockProvider({"a": ["A!"]}), store=RunStore(tmp_path), workflow=doc
    ).run()
    assert failed.status == "failed" and failed.run_dir is not None
    folder = failed.run_dir
    to_old_layout(folder)
    resumed = Runner.resume(folder, provider=MockProvider(default="x"))
    assert resumed.status == "completed"
    assert sorted(p.name for p in (folder / "ops").iterdir()) == [
        "0001-start.json",
        "0002-a.json",
        "0003-b.json",  # b ran out of mock answers
    ]
    records = read_op_records(folder)
    assert [(r["seq"], r["op_id"], "error" in r) for r in records] == [
        (1, "start", False),
        (2, "a", False),
        (3, "b", True),
        (4, "b", False),  # run again by the resume, written to ops.jsonl
        (5, "c", False),
        (6, "end", False),
    ]
    shown = show_run(folder).splitlines()
    assert [line.split()[:3] for line in shown[1:7]] == [
        ["1", "START", "start"],
        ["2", "LLM_WRITE", "a"],
        ["3", "LLM_WRITE", "b"],
        ["4", "LLM_WRITE", "b"],
        ["5", "LLM_WRITE", "c"],
        ["6", "END", "end"],
    ]


def test_a_torn_last_record_is_left_out_and_cut_when_the_run_resumes(tmp_path: Path) -> None:
    doc = three_calls()
    failed = Runner(
        lower(doc), provider=MockProvider({"a": ["A!"]}), store=RunStore(tmp_path), workflow=doc
    ).run()
    assert failed.run_dir is not None
    folder = failed.run_dir
    before = read_op_records(folder)
    with open(folder / OPS_FILE, "a") as handle:  # killed while writing a record
        handle.write(op_line("0004", "c", '{"seq":4,"op_id":"c","out')[:-1])
    assert read_op_records(folder) == before
    resumed = Runner.resume(folder, provider=MockProvider(default="x"))
    assert resumed.status == "completed"
    event = next(e for e in resumed.events if e["type"] == "run_resumed")
    assert OPS_FILE in event["data"]["dropped_torn_lines"]
    lines = (folder / OPS_FILE).read_text().splitlines()
    assert all(isinstance(json.loads(line)["record"], dict) for line in lines)
    assert [r["op_id"] for r in read_op_records(folder)] == ["start", "a", "b", "b", "c", "end"]


def test_records_come_in_op_order_and_the_last_of_a_label_and_op_wins(tmp_path: Path) -> None:
    def line(label: str, op: str, **record: Any) -> str:
        return op_line(label, op, json.dumps({"op_id": op, **record}))

    lines = [
        line("10000", "late"),
        line("0005.2.0001", "branch"),
        line("9999", "before"),
        line("0005", "fork#join"),
        line("0003", "a", output=1),
        line("0003", "a", output=2),  # written again by a resume
        line("0003", "b"),  # another op at the same label: kept too
        "not json\n",
        # written by something else than op_line (spaced, keys in another order): parsed
        json.dumps({"record": {"op_id": "x"}, "op": "x", "label": "0004"}) + "\n",
        # a record that is no object: left out
        '{"label":"0006","op":"y","record":[1]}\n',
    ]
    (tmp_path / OPS_FILE).write_text("".join(lines))
    entries = op_entries(tmp_path)
    assert [(e.label, e.name) for e in entries] == [
        ("0003", "a"),
        ("0003", "b"),
        ("0004", "x"),
        ("0005", "fork_join"),
        ("0005.2.0001", "branch"),
        ("9999", "before"),
        ("10000", "late"),
    ]
    records = read_op_records(tmp_path)
    assert records[0] == {"op_id": "a", "output": 2}
    assert [r["op_id"] for r in records] == ["a", "b", "x", "fork#join", "branch", "before", "late"]


def test_a_folder_of_runs_in_both_layouts_exports_as_one(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs")
    for _ in range(2):
        Runner(lower(three_calls()), provider=MockProvider(default="x"), store=store).run()
    first, second = sorted((tmp_path / "runs").iterdir())
    to_old_layout(first)
    examples = list(export_examples([tmp_path / "runs"]))
    assert [e["meta"]["run_id"] for e in examples] == [first.name] * 3 + [second.name] * 3

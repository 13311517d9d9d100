"""The journal's copies of the files a resume reads (docs/runs.md, journal.jsonl): only
the journal is forced to disk, so after a power cut its copies stand in for files the
cut lost or left behind, and folders written before the copies existed still open."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import lattice.runs.journal as journal_module
from lattice.llm.mock import MockProvider
from lattice.runs.checkpoint import load_checkpoint, read_checkpoint
from lattice.runs.export import is_run_folder
from lattice.runs.folder import load_run_json
from lattice.runs.view import list_runs, show_run
from lattice.runtime import Runner
from tests.runs.test_durability import failed_run


def lines(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (folder / "journal.jsonl").read_text().splitlines()]


def test_the_journal_copies_the_starting_files_first_and_each_checkpoint(tmp_path: Path) -> None:
    folder = failed_run(tmp_path)
    journal = lines(folder)
    first, last = journal[0], journal[-1]
    assert first["kind"] == "files"
    for name in ("workflow.json", "execir.json", "input.json", "state_initial.json"):
        assert first["files"][name] == (folder / name).read_text()
    assert json.loads(first["files"]["checkpoint.json"])["status"] == "running"
    assert last["kind"] == "files" and list(last["files"]) == ["checkpoint.json"]
    assert last["files"]["checkpoint.json"] == (folder / "checkpoint.json").read_text()


def test_files_a_power_cut_lost_come_back_from_the_journal(tmp_path: Path) -> None:
    folder = failed_run(tmp_path)
    execir = (folder / "execir.json").read_text()
    # as a power cut may leave files that were never forced to disk
    (folder / "execir.json").unlink()
    (folder / "state_initial.json").write_text('{"in": {}, "va')
    (folder / "checkpoint.json").write_text("")
    assert load_checkpoint(folder) == read_checkpoint(folder)
    assert (load_checkpoint(folder) or {})["status"] == "failed"
    assert "failed" in list_runs(tmp_path)
    assert show_run(folder).startswith(f"run {folder.name}: failed")
    assert load_run_json(folder, "execir.json") == json.loads(execir)  # the panel's canvas
    assert is_run_folder(folder)  # SFT export
    resumed = Runner.resume(folder, provider=MockProvider(default="x"))
    assert resumed.status == "completed", resumed.failure
    assert (folder / "execir.json").read_text() == execir  # the digest still matches
    assert json.loads((folder / "state_initial.json").read_text())["vars"] == {}


def test_a_checkpoint_file_behind_its_journal_copy_reads_as_the_journal_says(
    tmp_path: Path,
) -> None:
    """Killed (or cut) between the journal's copy and the file: the file still holds the
    previous version; every reader takes the journal's."""
    folder = failed_run(tmp_path)
    start = lines(folder)[0]["files"]["checkpoint.json"]
    (folder / "checkpoint.json").write_text(start)  # "running", as at the start
    assert json.loads(start)["status"] == "running"
    assert (load_checkpoint(folder) or {})["status"] == "failed"
    assert f"{folder.name}  failed" in list_runs(tmp_path)
    resumed = Runner.resume(folder, provider=MockProvider(default="x"))
    assert resumed.status == "completed"
    assert (load_checkpoint(folder) or {})["status"] == "completed"
    assert json.loads((folder / "checkpoint.json").read_text())["status"] == "completed"


def test_a_folder_written_before_the_journal_held_copies_still_opens(tmp_path: Path) -> None:
    folder = failed_run(tmp_path)
    old = [line for line in lines(folder) if line["kind"] != "files"]
    (folder / "journal.jsonl").write_text("".join(json.dumps(line) + "\n" for line in old))
    checkpoint = json.loads((folder / "checkpoint.json").read_text())
    assert load_checkpoint(folder) == checkpoint and checkpoint["status"] == "failed"
    assert f"{folder.name}  failed" in list_runs(tmp_path)
    assert show_run(folder).startswith(f"run {folder.name}: failed")
    resumed = Runner.resume(folder, provider=MockProvider(default="x"))
    assert resumed.status == "completed", resumed.failure
    assert (load_checkpoint(folder) or {})["status"] == "completed"


def test_the_last_whole_copy_is_found_however_far_from_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read from the journal's end a window at a time: a copy before many op lines, a
    torn copy after it, and an op line holding a copy-like value are told apart."""
    monkeypatch.setattr(journal_module, "_TAIL", 64)
    copy = {"kind": "files", "files": {"checkpoint.json": '{"status": "failed"}'}}
    fake = {"kind": "op", "changes": [["set", "$vars.x", {"kind": "files", "files": {}}]]}
    text = json.dumps({"kind": "files", "files": {"checkpoint.json": "{}"}}) + "\n"
    text += json.dumps(copy, separators=(",", ":")) + "\n"
    text += "".join(json.dumps({"kind": "op", "pad": "y" * n}) + "\n" for n in range(0, 900, 90))
    text += json.dumps(fake) + "\n"
    text += '{"kind":"files","files":{"checkpoint.json":"{\\"status\\": \\"comp'  # torn
    (tmp_path / "journal.jsonl").write_text(text)
    assert journal_module.journaled_copy(tmp_path, "checkpoint.json") == '{"status": "failed"}'
    assert journal_module.journaled_copy(tmp_path, "execir.json") is None
    assert journal_module.journaled_copy(tmp_path / "nowhere", "checkpoint.json") is None

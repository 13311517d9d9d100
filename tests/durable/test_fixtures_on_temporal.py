"""``--fixtures FILE`` (and ``--record``) with ``--engine temporal``: the table travels
with the run, workers replay it, and what they record reaches the file of the process
that started the run (``fixtures.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES
from tests.durable.helpers import example, run_locally
from tests.durable.test_cli import lattice, worker  # noqa: F401 (the worker fixture)

pytest.importorskip("temporalio")


def test_fixtures_recorded_on_temporal_replay_there_and_locally(
    temporal_address: str,
    worker: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    ir, script, inputs = example("support-triage")
    expected = run_locally(ir, script, inputs).output
    doc, mock, given = (
        str(EXAMPLES / f"support-triage{suffix}")
        for suffix in (".json", ".mock.json", ".inputs.json")
    )
    on_temporal = ["--engine", "temporal", "--temporal", temporal_address, "--task-queue", worker]
    fixtures = tmp_path / "triage.fixtures.jsonl"

    missing = lattice(
        "run", doc, "--inputs", given, "--fixtures", str(fixtures), *on_temporal, cwd=tmp_path
    )
    assert missing.returncode == 2 and "does not exist" in missing.stderr, missing.stderr

    recorded = lattice(
        "run",
        doc,
        "--inputs",
        given,
        "--mock",
        mock,
        "--fixtures",
        str(fixtures),
        "--record",
        *on_temporal,
        cwd=tmp_path,
    )
    assert recorded.returncode == 0, recorded.stderr
    assert json.loads(recorded.stdout) == expected
    lines = [json.loads(line) for line in fixtures.read_text(encoding="utf-8").splitlines()]
    assert len(lines) == 5 and all("prompt_hash" in line for line in lines)  # 5 model calls
    assert "recorded 5 fixture(s) on the workers" in recorded.stderr

    replayed = lattice(
        "run", doc, "--inputs", given, "--fixtures", str(fixtures), *on_temporal, cwd=tmp_path
    )
    assert replayed.returncode == 0, replayed.stderr
    assert json.loads(replayed.stdout) == expected
    assert fixtures.read_text(encoding="utf-8").count("\n") == 5  # replaying records nothing

    local = lattice("run", doc, "--inputs", given, "--fixtures", str(fixtures), cwd=tmp_path)
    assert local.returncode == 0, local.stderr
    assert json.loads(local.stdout) == expected  # the same file, on the local engine

    other = tmp_path / "other.inputs.json"
    other.write_text(json.dumps({**inputs, "ticket": "Something else entirely"}), encoding="utf-8")
    unknown = lattice(
        "run", doc, "--inputs", str(other), "--fixtures", str(fixtures), *on_temporal, cwd=tmp_path
    )
    assert unknown.returncode == 1, unknown.stderr
    assert "fixture_missing" in unknown.stderr and "no fixture for prompt hash" in unknown.stderr

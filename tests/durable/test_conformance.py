"""The engine conformance test: one walk, two engines, the same run.

Every shipped example (with its ``.mock.json``, inputs, answers and project) and every
corpus document (``LATTICE_CORPUS``, with the mock script and answers ``lattice mock
init`` would write for it) runs on the local engine, with a run folder, and on Temporal's
dev server; the two runs are compared field by field: the result (status, output, the
variables, usage, the failure report), the op records, and the events (each track's
kinds, ops and data, in order).

What may differ is normalised explicitly, each difference named once in
``KNOWN_DIFFERENCES``; everything else must be equal.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from lattice.config import AgentsConfig, LatticeConfig
from lattice.ir.models import ExecIR
from lattice.llm.mock import MockProvider
from lattice.lower.compiler import lower_document
from lattice.runs.oplog import label_key, read_op_records, record_label
from lattice.runs.store import RunStore
from lattice.runtime.runner import Runner
from lattice.runtime.settings import settings_from_config
from lattice.service.mocks import plan_mocks
from tests.conftest import (
    CORPUS,
    EXAMPLES,
    corpus_files,
    example_files,
    example_workspace,
)

pytest.importorskip("temporalio")  # the temporal_address fixture says how to install it

from lattice.durable.temporal.client import follow, run_result, start_run
from tests.durable.helpers import with_worker

KNOWN_DIFFERENCES = {
    "ts": "an event's time: each engine's clock (Temporal's is the workflow's)",
    "seq": "an event's number: branches running at once interleave differently, so "
    "events are compared track by track, in order",
    "run_id": "each run has its own id",
    "duration_ms": "how long an op took (an event's data, an op record)",
    "latency_ms": "how long a model call took (an attempt, an llm_response event)",
    "started_at": "when the run started ($ctx.started_at in the state an op read)",
    "run_dir": "a local run has a folder, a run on Temporal none",
    "recovery_action": "what a failure report says to do names the run's folder locally "
    "and Temporal's way to run again on Temporal",
}
"""Fields whose values differ between the engines by design, and why."""
AT_ONCE = (
    "an agent's tool calls of one turn run at once and each reports as it finishes: "
    "their tool_call_finished events are compared in call order (their records, the "
    "transcript, keep the call order on both engines)"
)
RUN_SECONDS = 300.0
"""How long a run on Temporal may take at most (a bound on a loaded machine, not a timing)."""
RECORD_ORDER = (
    "op records are compared in label order: a run folder's reader sorts them so, "
    "Temporal's record query keeps them as they end (a fork's after its branches')"
)
SHELL_TIMING = re.compile(r"(Ran \d+ tests? in )\d+\.\d+s")
"""A test runner's own timing in a shell command's output (an agent's tool result):
the same command takes its own time on each engine; normalised to ``<time>``, and so is
the prompt hash of the agent turns whose conversation holds it (``prompt_hash``)."""


@dataclass
class Case:
    """One document to run on both engines."""

    name: str
    ir: ExecIR
    script: dict[str, Any]
    inputs: dict[str, Any]
    answers: dict[str, Any]
    project: Path | None
    """The folder the example's agents work in (copied per run), or None."""


def _read(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def example_case(path: Path) -> Case:
    ir = lower_document(path).ir
    assert ir is not None
    project = path.with_name(f"{path.stem}-project")
    return Case(
        path.stem,
        ir,
        _read(path.with_name(f"{path.stem}.mock.json")),
        _read(path.with_name(f"{path.stem}.inputs.json")),
        _read(path.with_name(f"{path.stem}.answers.json")),
        project if project.is_dir() else None,
    )


def corpus_case(path: Path) -> Case:
    ir = lower_document(path).ir
    assert ir is not None
    plan = plan_mocks(ir)
    required = (ir.inputs_schema or {}).get("required", [])
    return Case(
        path.stem, ir, plan.script, {k: f"sample {k}" for k in required}, plan.answers, None
    )


EXAMPLE_PATHS = [p for p in example_files() if p.with_name(f"{p.stem}.mock.json").exists()]


def config_for(case: Case, tmp: Path) -> LatticeConfig:
    """The configuration an engine runs ``case`` with (a local run's, a worker's): its
    project granted as the examples' tests grant it, on a fresh copy at the same place
    under ``tmp`` for each engine (a shell command's output may name its paths)."""
    if case.project is None:
        return LatticeConfig()
    shutil.rmtree(tmp / case.project.name, ignore_errors=True)  # the other engine's run
    workspace = example_workspace(EXAMPLES / f"{case.name}.json", tmp)
    agents = AgentsConfig(
        workspace=str(workspace), allow=["read", "write", "shell"]
    )  # EXAMPLE_GRANTS
    return LatticeConfig(agents=agents)


# -- the two engines --------------------------------------------------------------------


@dataclass
class Observed:
    """What one engine's run gives: its result, its events and its op records."""

    result: dict[str, Any]
    events: list[dict[str, Any]]
    records: list[dict[str, Any]]


def run_local(case: Case, tmp: Path) -> Observed:
    runner = Runner(
        case.ir,
        provider=MockProvider.from_script(case.script),
        store=RunStore(tmp / "runs"),
        answers=case.answers,
        settings=settings_from_config(config_for(case, tmp)),
    )
    result = runner.run(case.inputs)
    assert result.run_dir is not None
    events = [
        json.loads(line)
        for line in (result.run_dir / "events.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    return Observed(result.to_json(), events, read_op_records(result.run_dir))


def run_on_temporal(case: Case, address: str, tmp: Path) -> Observed:
    config = config_for(case, tmp)

    async def body(client: Any, queue: str) -> Observed:
        handle = await start_run(
            client,
            case.ir,
            run_id=f"conformance-{uuid.uuid4().hex[:12]}",
            inputs=case.inputs,
            answers=case.answers,
            provider={"mock_script": case.script},
            task_queue=queue,
            settings=settings_from_config(config),
        )
        outcome = await asyncio.wait_for(follow(handle), RUN_SECONDS)
        record = await handle.query("record")
        if outcome.get("status") == "waiting":
            await handle.cancel()
        return Observed(run_result(outcome).to_json(), record["events"], record["ops"])

    return asyncio.run(with_worker(address, body, config))


# -- comparing --------------------------------------------------------------------------


def normalised(value: Any, timed: bool = False) -> Any:
    """``value`` with every field of ``KNOWN_DIFFERENCES`` taken out, at any depth, and
    shell timings (``SHELL_TIMING``) replaced; ``timed``: inside a transcript whose
    tool results held one (its turns' prompt hashes differ by it)."""
    if isinstance(value, dict):
        if "turns" in value and SHELL_TIMING.search(json.dumps(value)):
            timed = True
        return {
            k: normalised(v, timed)
            for k, v in value.items()
            if k not in KNOWN_DIFFERENCES and not (timed and k == "prompt_hash")
        }
    if isinstance(value, list):
        return [normalised(v, timed) for v in value]
    if isinstance(value, str):
        return SHELL_TIMING.sub(r"\1<time>s", value)
    return value


def in_label_order(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(records, key=lambda r: label_key(record_label(r["seq"], 0)))


def by_track(events: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Each track's events (``main``: the run's own walk), in order, normalised; the
    ``tool_call_finished`` events of one agent turn in call order (``AT_ONCE``)."""
    tracks: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        tracks.setdefault(event.get("branch") or "main", []).append(normalised(event))
    for track, kept in tracks.items():
        runs = itertools.groupby(kept, key=lambda e: e["type"] == "tool_call_finished")
        tracks[track] = [
            event
            for at_once, run in runs
            for event in (sorted(run, key=lambda e: e["data"]["call_id"]) if at_once else run)
        ]
    return tracks


def differences(local: Any, temporal: Any, where: str = "") -> list[str]:
    """Where ``temporal`` differs from ``local`` (both normalised), each as
    ``path: local != temporal``."""
    if isinstance(local, dict) and isinstance(temporal, dict):
        found = []
        for key in dict.fromkeys([*local, *temporal]):
            if key not in temporal or key not in local:
                side = "temporal" if key not in temporal else "local"
                found.append(f"{where}.{key}: missing on {side}")
            else:
                found += differences(local[key], temporal[key], f"{where}.{key}")
        return found
    if isinstance(local, list) and isinstance(temporal, list) and len(local) == len(temporal):
        return [
            d
            for i, (x, y) in enumerate(zip(local, temporal, strict=True))
            for d in differences(x, y, f"{where}[{i}]")
        ]
    if local != temporal:
        return [f"{where}: {str(local)[:150]} != {str(temporal)[:150]}"]
    return []


def compare(local: Observed, temporal: Observed) -> None:
    """Every difference between the engines' runs but ``KNOWN_DIFFERENCES``."""
    found = differences(normalised(local.result), normalised(temporal.result), "result")
    mine, theirs = in_label_order(local.records), in_label_order(temporal.records)  # RECORD_ORDER
    assert [r["seq"] for r in theirs] == [r["seq"] for r in mine]
    found += differences(normalised(mine), normalised(theirs), "ops")
    local_tracks, temporal_tracks = by_track(local.events), by_track(temporal.events)
    assert list(temporal_tracks) == list(local_tracks)
    for track, events in local_tracks.items():
        kinds = [(e["type"], e.get("op_id")) for e in events]
        assert [(e["type"], e.get("op_id")) for e in temporal_tracks[track]] == kinds, track
        found += differences(events, temporal_tracks[track], f"events[{track}]")
    assert not found, "\n".join(found)


@pytest.mark.parametrize("path", EXAMPLE_PATHS, ids=lambda p: p.stem)
def test_an_example_runs_the_same_on_both_engines(
    temporal_address: str, tmp_path: Path, path: Path
) -> None:
    case = example_case(path)
    compare(run_local(case, tmp_path), run_on_temporal(case, temporal_address, tmp_path))


def corpus_params() -> list[Any]:
    files = corpus_files()
    if not files:
        return [
            pytest.param(
                None,
                marks=pytest.mark.skip(
                    reason=f"corpus of real documents not found: {CORPUS} (set LATTICE_CORPUS)"
                ),
                id="no-corpus",
            )
        ]
    return [pytest.param(p, id=p.stem.rsplit("__", 1)[-1]) for p in files]


@pytest.mark.parametrize("path", corpus_params())
def test_a_corpus_document_runs_the_same_on_both_engines(
    temporal_address: str, tmp_path: Path, path: Path
) -> None:
    case = corpus_case(path)
    compare(run_local(case, tmp_path), run_on_temporal(case, temporal_address, tmp_path))

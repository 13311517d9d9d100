"""LoopStore writes the folder a RunStore writes, without waiting on the disk on the loop."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from lattice.config import LatticeConfig, RunsConfig
from lattice.lower import lower
from lattice.runs.store import RunStore
from lattice.runs.view import show_run
from lattice.server.store import LoopStore
from lattice.service.runs import ProviderSpec, RunOptions, prepare_resume, prepare_run
from tests.server.helpers import script, steps

VOLATILE = {
    "duration_ms",
    "ts",
    "started_at",
    "finished_at",
    "latency_ms",
    "run_id",
    "owner",
    "run_dir",
    "recovery_action",
}


def scrub(value: Any) -> Any:
    """``value`` without what differs between two runs of the same thing."""
    if isinstance(value, dict):
        return {k: scrub(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [scrub(v) for v in value]
    if isinstance(value, str) and value.count("T") and value[:4].isdigit() and "-" in value:
        return "<id>"
    return value


def folder_contents(folder: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            text = path.read_text()
            if path.suffix == ".jsonl":
                out[path.name] = [scrub(json.loads(line)) for line in text.splitlines()]
            else:
                out[str(path.relative_to(folder))] = scrub(json.loads(text))
    return out


@pytest.mark.parametrize("durability", ["fsync", "os"])
def test_a_loop_store_writes_what_a_run_store_writes(tmp_path: Path, durability: str) -> None:
    ir = lower(steps(3))
    config = LatticeConfig(runs=RunsConfig(durability=durability))  # type: ignore[arg-type]
    folders = {}
    for kind in (RunStore, LoopStore):

        async def go(kind: type[RunStore] = kind) -> Path:
            prepared = prepare_run(
                ir,
                config=config,
                options=RunOptions(provider=ProviderSpec(script=script(3, given=2))),
                inputs={},
                runs_dir=tmp_path / kind.__name__,
                store_type=kind,
            )
            result = await prepared.arun()
            assert result.status == "failed"
            store = prepared.runner.store
            if isinstance(store, LoopStore):
                await store.settle()
            assert result.run_dir is not None
            again = prepare_resume(
                result.run_dir,
                provider=ProviderSpec(script=script(3)),
                config=config,
                store_type=kind,
            )
            resumed = await again.arun()
            assert resumed.status == "completed"
            if isinstance(again.store, LoopStore):
                await again.store.settle()
            return result.run_dir

        folders[kind] = asyncio.run(go())
    plain, loop = (folder_contents(folders[k]) for k in (RunStore, LoopStore))
    assert sorted(plain) == sorted(loop)
    assert plain == loop
    assert "ops/0002-s0.json" in loop
    assert "s2" in show_run(folders[LoopStore])

"""LoopStore writes the folder a RunStore writes, without waiting on the disk on the loop."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lattice.config import LatticeConfig, RunsConfig
from lattice.lower import lower
from lattice.runs.store import RunStore
from lattice.runs.view import show_run
from lattice.server.store import LoopStore
from lattice.service.runs import ProviderSpec, RunOptions, prepare_resume, prepare_run
from tests.builders import op_names
from tests.runs.test_fsync import SyncLog
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


def parsed(line: dict[str, Any]) -> dict[str, Any]:
    """A journal line with the files it copies read as JSON (to scrub them)."""
    if line.get("kind") == "files":
        return {**line, "files": {k: json.loads(v) for k, v in line["files"].items()}}
    return line


def folder_contents(folder: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            text = path.read_text()
            if path.suffix == ".jsonl":
                out[path.name] = [scrub(parsed(json.loads(line))) for line in text.splitlines()]
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
    assert "0002-s0" in op_names(folders[LoopStore])
    assert "s2" in show_run(folders[LoopStore])


def test_a_loop_store_never_syncs_on_the_loops_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server's runs share one event loop: every sync of their folders (the journal,
    the run's folder and the runs folder with its first commit, the journal again when
    the run stops) runs on a worker thread."""
    log = SyncLog(monkeypatch)
    config = LatticeConfig(runs=RunsConfig(durability="fsync"))

    async def go() -> Path:
        prepared = prepare_run(
            lower(steps(3)),
            config=config,
            options=RunOptions(provider=ProviderSpec(script=script(3))),
            inputs={},
            runs_dir=tmp_path,
            store_type=LoopStore,
        )
        prepared.runner.subscribe(log.listener)
        result = await prepared.arun()
        assert isinstance(prepared.runner.store, LoopStore)
        await prepared.runner.store.settle()
        assert result.status == "completed" and result.run_dir is not None
        return result.run_dir

    run_dir = asyncio.run(go())
    on_the_loop = [target for kind, target, main in log.entries if kind != "op" and main]
    assert on_the_loop == []
    synced = [Path(target) for target in log.synced()]
    assert set(synced) == {run_dir / "journal.jsonl", run_dir, tmp_path}
    assert synced[-1] == run_dir / "journal.jsonl"  # the stop


def test_the_server_loads_what_runs_use_before_it_serves(tmp_path: Path) -> None:
    """A bare import defers jsonschema, the guarded transport and the models' validators
    to first use; the server loads them at start-up instead of on the shared loop."""
    code = (
        "import sys, asyncio\n"
        "from pathlib import Path\n"
        "from lattice.server.app import ServerSettings, create_app\n"
        "from lattice.ir.models import ExecIR\n"
        "app = create_app(ServerSettings(runs_dir=Path(sys.argv[1])))\n"
        "before = ('jsonschema' in sys.modules, ExecIR.__pydantic_complete__)\n"
        "async def start():\n"
        "    async with app.router.lifespan_context(app):\n"
        "        return ('jsonschema' in sys.modules and 'lattice.tools.guarded' in sys.modules,\n"
        "                ExecIR.__pydantic_complete__)\n"
        "print(before, asyncio.run(start()))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["(False,", "False)", "(True,", "True)"]

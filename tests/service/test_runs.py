"""The run service (``lattice.service.runs``): what the CLI and the server share to start
and resume runs."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from lattice.config import LatticeConfig
from lattice.errors import InputError, LatticeUserError
from lattice.llm.mock import MockProvider
from lattice.lower import lower
from lattice.runtime.runner import Runner
from lattice.service.providers import ProviderChoice
from lattice.service.runs import (
    ProviderSpec,
    RunOptions,
    prepare_resume,
    prepare_run,
    repo_root,
)
from tests.builders import chain, node


@pytest.fixture
def ir_doc() -> tuple[Any, dict[str, Any]]:
    doc = chain(node("a", "prompt", prompt="first"), node("b", "prompt", prompt="second"))
    return lower(doc), doc


def test_an_inline_script_is_recorded_and_used_again_on_resume(
    tmp_path: Path, ir_doc: tuple[Any, dict[str, Any]]
) -> None:
    ir, doc = ir_doc
    short = {"responses": {"a": ["one"], "b": []}}
    prepared = prepare_run(
        ir,
        config=LatticeConfig(),
        options=RunOptions(provider=ProviderSpec(script=short, latency=0.001)),
        inputs={},
        workflow=doc,
        runs_dir=tmp_path,
    )
    assert isinstance(prepared.runner.provider, MockProvider)
    assert prepared.runner.provider.latency == 0.001
    result = asyncio.run(prepared.arun())
    assert result.status == "failed"
    assert result.run_dir is not None
    meta = json.loads((result.run_dir / "checkpoint.json").read_text())["meta"]
    assert meta["mock_script"] == short
    assert meta["mock_latency"] == 0.001
    assert meta["workflow"] == ir.workflow.id

    again = prepare_resume(result.run_dir, config=LatticeConfig())
    assert isinstance(again.provider, MockProvider)
    assert again.provider.responses == short["responses"]

    full = {"responses": {"a": ["one"], "b": ["two"]}}
    seen: list[Runner] = []
    resumed = prepare_resume(
        result.run_dir, provider=ProviderSpec(script=full), config=LatticeConfig()
    )
    done = asyncio.run(resumed.arun(on_runner=seen.append))
    assert done.status == "completed"
    assert done.output == "two"
    assert len(seen) == 1, "the Runner that continues the folder is handed over"
    events = [
        json.loads(line) for line in (result.run_dir / "events.jsonl").read_text().splitlines()
    ]
    asked = [e["node_id"] for e in events if e["type"] == "llm_request"]
    assert asked == ["a", "b", "b"], "a completed op is not asked again"


def test_a_resumed_run_can_be_stopped_through_the_runner_handed_over(tmp_path: Path) -> None:
    doc = chain(*(node(f"n{i}", "prompt", prompt=f"step {i}") for i in range(4)))
    ir = lower(doc)
    script = {"responses": {f"n{i}": ["ok"] for i in range(4)}}
    first = prepare_run(
        ir,
        config=LatticeConfig(),
        options=RunOptions(provider=ProviderSpec(script={"responses": {"n0": ["ok"]}})),
        inputs={},
        runs_dir=tmp_path,
    )
    failed = asyncio.run(first.arun())
    assert failed.status == "failed" and failed.run_dir is not None

    def stop_at_once(runner: Runner) -> None:
        runner.subscribe(
            lambda event: (
                runner.request_stop(event["run_id"]) if event["type"] == "op_finished" else None
            )
        )

    resumed = prepare_resume(
        failed.run_dir, provider=ProviderSpec(script=script), config=LatticeConfig()
    )
    stopped = asyncio.run(resumed.arun(on_runner=stop_at_once))
    assert stopped.status == "interrupted"


def test_options_are_checked_before_anything_runs(
    tmp_path: Path, ir_doc: tuple[Any, dict[str, Any]]
) -> None:
    ir, _ = ir_doc
    config = LatticeConfig()
    with pytest.raises(LatticeUserError, match="used alone"):
        ProviderSpec(ProviderChoice(name="openai"), script={"responses": {}}).build(config)
    with pytest.raises(LatticeUserError, match="mock scripts only"):
        ProviderSpec(ProviderChoice(name="disabled"), latency=0.5).build(config)
    with pytest.raises(LatticeUserError, match="between 0 and"):
        ProviderSpec(script={"responses": {}}, latency=-1).build(config)
    with pytest.raises(LatticeUserError, match="responses"):
        ProviderSpec(script={"responses": []}).build(config)
    with pytest.raises(InputError, match="not a question node"):
        prepare_run(
            ir,
            config=config,
            options=RunOptions(),
            inputs={},
            answers={"nope": "x"},
            runs_dir=tmp_path,
        )
    with pytest.raises(InputError, match="not a directory"):
        repo_root(str(tmp_path / "missing"))
    assert list(tmp_path.iterdir()) == [], "nothing is written for a bad option"


def test_a_mock_file_with_latency(tmp_path: Path) -> None:
    script = tmp_path / "m.json"
    script.write_text(json.dumps({"responses": {"a": ["x"]}}))
    provider = ProviderSpec(ProviderChoice(mock=str(script)), latency=0.25).build(LatticeConfig())
    assert isinstance(provider, MockProvider)
    assert provider.latency == 0.25
    spec = ProviderSpec(ProviderChoice(mock=str(script)), latency=0.25)
    assert ProviderSpec.from_meta(spec.to_meta()) == ProviderSpec(
        ProviderChoice(mock=str(script.resolve())), latency=0.25
    )

"""What the Temporal tests share: lowering examples, local reference runs, in-process workers."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from lattice.config import LatticeConfig
from lattice.ir.models import ExecIR
from lattice.llm.mock import MockProvider
from lattice.lower.compiler import lower_document
from lattice.runs.store import RunStore
from lattice.runtime.results import RunResult
from lattice.runtime.runner import Runner
from tests.conftest import EXAMPLES

T = TypeVar("T")


def worker_process(
    address: str, queue: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """A ``lattice worker`` process on ``queue``, with this environment (without
    ``LATTICE_CONFIG``) and ``env`` on top."""
    environment = {k: v for k, v in os.environ.items() if k != "LATTICE_CONFIG"} | (env or {})
    return subprocess.Popen(
        [
            *(sys.executable, "-m", "lattice.cli", "worker"),
            *("--temporal", address, "--task-queue", queue),
        ],
        cwd=cwd,
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def example(name: str) -> tuple[ExecIR, dict[str, Any], dict[str, Any]]:
    """A shipped example's ExecIR, mock script and inputs."""
    ir = lower_document(EXAMPLES / f"{name}.json").ir
    assert ir is not None
    return ir, read(EXAMPLES / f"{name}.mock.json"), read(EXAMPLES / f"{name}.inputs.json")


def read(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def run_locally(
    ir: ExecIR,
    script: dict[str, Any],
    inputs: dict[str, Any],
    answers: dict[str, Any] | None = None,
) -> RunResult:
    """The local engine's run of ``ir`` with the mock ``script`` (the reference)."""
    runner = Runner(
        ir, provider=MockProvider.from_script(script), store=RunStore(None), answers=answers
    )
    return runner.run(inputs)


def op_path(events: list[dict[str, Any]]) -> list[str]:
    """The ops a run went through, in order (from its ``op_started`` events)."""
    return [e["op_id"] for e in events if e["type"] == "op_started"]


async def with_worker(
    address: str,
    body: Callable[[Any, str], Awaitable[T]],
    config: LatticeConfig | None = None,
) -> T:
    """``body(client, task_queue)`` while a worker of this process serves a task queue of
    its own (tests running at once never take each other's runs); the client and the
    worker use ``config``'s payload codec."""
    from lattice.durable.temporal.client import connect
    from lattice.durable.temporal.worker import make_worker

    config = config or LatticeConfig()
    client = await connect(address, config.temporal)
    queue = f"test-{uuid.uuid4().hex[:12]}"
    async with make_worker(client, config, task_queue=queue):
        return await body(client, queue)


def history_text(value: Any) -> str:
    """A workflow history as text, its payloads (base64 in JSON) decoded."""
    if isinstance(value, dict):
        parts = []
        for key, item in value.items():
            if key == "data" and isinstance(item, str):
                parts.append(base64.b64decode(item).decode("utf-8", errors="replace"))
            parts.append(history_text(item))
        return "\n".join(parts)
    if isinstance(value, list):
        return "\n".join(history_text(item) for item in value)
    return str(value)

"""Tools on Temporal: an MCP tool call (a local MCP server, started by the worker) and
agents with granted workspace tools (they read, edit and test the worker's files), with a
mock model; each gives the local engine's output."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from lattice.config import LatticeConfig
from lattice.llm.mock import MockProvider
from lattice.runs.store import RunStore
from lattice.runtime.runner import Runner
from lattice.runtime.settings import settings_from_config
from lattice.workspace import sandbox_problem
from tests.agents.test_fix_a_bug import project_tests
from tests.conftest import EXAMPLES
from tests.durable.helpers import example, op_path, with_worker

pytest.importorskip("temporalio")

from lattice.durable.temporal.client import follow, start_run


def on_temporal(
    address: str, name: str, config: LatticeConfig, answers: dict[str, Any] | None = None
) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    """Run example ``name`` with its mock on a worker with ``config``: the outcome, the
    events and the run's record (its op records among them)."""
    ir, script, inputs = example(name)
    events: list[dict[str, Any]] = []

    async def body(client: Any, queue: str) -> tuple[dict[str, Any], dict[str, Any]]:
        handle = await start_run(
            client,
            ir,
            run_id=f"tools-{uuid.uuid4().hex[:10]}",
            inputs=inputs,
            answers=answers,
            provider={"mock_script": script},
            task_queue=queue,
            settings=settings_from_config(config),
        )
        outcome = await follow(handle, events.append)
        return outcome, await handle.query("record")

    outcome, record = asyncio.run(with_worker(address, body, config))
    return outcome, events, record


def locally(name: str, config: LatticeConfig) -> Any:
    ir, script, inputs = example(name)
    runner = Runner(
        ir,
        provider=MockProvider.from_script(script),
        store=RunStore(None),
        settings=settings_from_config(config),
    )
    return runner.run(inputs)


def test_an_mcp_tool_is_called_by_the_worker(temporal_address: str) -> None:
    config = LatticeConfig.model_validate(
        {
            "mcp": {
                "servers": {
                    "pagerduty": {
                        "command": sys.executable,
                        "args": [str(EXAMPLES / "mcp_servers.py"), "pagerduty"],
                        "timeout": 60,
                    }
                }
            }
        }
    )
    local = locally("incident-response", config)
    assert local.status == "completed"
    outcome, events, _ = on_temporal(temporal_address, "incident-response", config)
    assert outcome["status"] == "completed", outcome.get("failure")
    assert outcome["output"] == local.output
    incident = outcome["output"]["incident"]  # the server's answer: computed from the arguments
    assert re.fullmatch(r"P[0-9A-F]{10}", incident["id"])
    assert incident["assigned_to"] == "Dana Whitfield"
    assert op_path(events) == op_path(list(local.events))
    calls = [
        (e["type"], e["op_id"], e["data"]["name"])
        for e in events
        if e["type"] in ("tool_call", "tool_result")
    ]
    assert calls == [
        ("tool_call", "security-page#call", "create_incident"),
        ("tool_result", "security-page#call", "create_incident"),
    ]
    # one session per run on the worker, as in a local run: the op that fills in the
    # tool's arguments opens it (it lists the tools), and the call uses it
    opened = [
        (e["op_id"], e["data"]["server"]) for e in events if e["type"] == "tool_session_opened"
    ]
    assert opened == [("security-page", "pagerduty")]
    assert opened == [
        (e["op_id"], e["data"]["server"])
        for e in local.events
        if e["type"] == "tool_session_opened"
    ]


def granted(project: Path) -> LatticeConfig:
    shutil.copytree(EXAMPLES / "fix-a-bug-project", project)
    return LatticeConfig.model_validate(
        {"agents": {"workspace": str(project), "allow": ["read", "write", "shell"]}}
    )


@pytest.mark.skipif(sandbox_problem() is not None, reason=f"no sandbox: {sandbox_problem()}")
def test_agents_with_granted_tools_change_the_workers_files(
    temporal_address: str, tmp_path: Path
) -> None:
    local = locally("fix-a-bug", granted(tmp_path / "local"))
    assert local.status == "completed"
    project = tmp_path / "worker"
    config = granted(project)
    assert project_tests(project).returncode != 0, "the copied project's test fails first"
    outcome, events, record = on_temporal(temporal_address, "fix-a-bug", config)
    assert outcome["status"] == "completed", outcome.get("failure")
    assert outcome["output"] == local.output
    assert outcome["output"]["tests_passed"] is True
    after = project_tests(project)
    assert after.returncode == 0, after.stderr  # the agent fixed the worker's copy
    assert "return sum(values) / len(values)\n" in (project / "tally/stats.py").read_text()
    calls = {
        op["node_id"]: [
            (call["name"], call["is_error"])
            for turn in op["transcript"]["turns"]
            for call in turn["tool_calls"]
        ]
        for op in record["ops"]
        if "transcript" in op
    }
    assert calls == {
        "explore": [("Glob", False), ("Grep", False), ("Read", False), ("Read", False)],
        "plan": [("Read", False)],
        "fix": [("Edit", False), ("Bash", False)],
    }
    assert [e["type"] for e in events if e["type"] == "agent_tool_refused"] == []


@pytest.mark.skipif(sandbox_problem() is not None, reason=f"no sandbox: {sandbox_problem()}")
def test_prompt_steps_act_as_the_main_agent_on_temporal(
    temporal_address: str, tmp_path: Path
) -> None:
    """Under a grant, add-a-feature's prompt steps are turns of the main agent on a
    worker too: they read and run the worker's files, the plan is confirmed through
    AskUserQuestion with the answer given at the start, and the output is the local
    engine's."""
    answers = json.loads((EXAMPLES / "add-a-feature.answers.json").read_text())

    def config(project: Path) -> LatticeConfig:
        shutil.copytree(EXAMPLES / "add-a-feature-project", project)
        return LatticeConfig.model_validate(
            {"agents": {"workspace": str(project), "allow": ["read", "write", "shell"]}}
        )

    ir, script, inputs = example("add-a-feature")
    local = Runner(
        ir,
        provider=MockProvider.from_script(script),
        store=RunStore(None),
        settings=settings_from_config(config(tmp_path / "local")),
        answers=answers,
    ).run(inputs)
    assert local.status == "completed", local.failure
    outcome, events, record = on_temporal(
        temporal_address, "add-a-feature", config(tmp_path / "worker"), answers=answers
    )
    assert outcome["status"] == "completed", outcome.get("failure")
    assert outcome["output"] == local.output
    assert op_path(events) == op_path(list(local.events))
    tools = {
        op["node_id"]: [
            call["name"] for turn in op["transcript"]["turns"] for call in turn["tool_calls"]
        ]
        for op in record["ops"]
        if "transcript" in op
    }
    assert "AskUserQuestion" in tools["confirm"]  # a prompt step, acting
    assert "Bash" in tools["checks"]
    asked = [e for e in events if e["type"] == "human_answer"]
    assert [e["data"].get("tool") for e in asked] == ["AskUserQuestion"]


@pytest.mark.skipif(sandbox_problem() is not None, reason=f"no sandbox: {sandbox_problem()}")
def test_a_prompt_steps_question_waits_on_temporal_and_its_answer_goes_on(
    temporal_address: str, tmp_path: Path
) -> None:
    """The main agent's AskUserQuestion with no answer given: the run waits (no worker
    held), the answer update continues it, and the agent's earlier turns are not sent
    to the model again."""
    project = tmp_path / "worker"
    shutil.copytree(EXAMPLES / "add-a-feature-project", project)
    config = LatticeConfig.model_validate(
        {"agents": {"workspace": str(project), "allow": ["read", "write", "shell"]}}
    )
    ir, script, inputs = example("add-a-feature")
    events: list[dict[str, Any]] = []

    async def body(client: Any, queue: str) -> tuple[dict[str, Any], dict[str, Any]]:
        handle = await start_run(
            client,
            ir,
            run_id=f"ask-{uuid.uuid4().hex[:10]}",
            inputs=inputs,
            provider={"mock_script": script},
            task_queue=queue,
            settings=settings_from_config(config),
        )
        waiting = await follow(handle)
        await handle.execute_update("answer", args=["confirm", "Yes, implement it"])
        return waiting, await follow(handle, events.append)  # every event, from the first

    waiting, outcome = asyncio.run(with_worker(temporal_address, body, config))
    assert waiting["status"] == "waiting", waiting
    assert waiting["question"]["node_id"] == "confirm"
    assert outcome["status"] == "completed", outcome.get("failure")
    local = Runner(
        ir,
        provider=MockProvider.from_script(script),
        store=RunStore(None),
        settings=settings_from_config(config),
        answers={"confirm": "Yes, implement it"},
    )
    shutil.rmtree(project)
    shutil.copytree(EXAMPLES / "add-a-feature-project", project)
    assert outcome["output"] == local.run(inputs).output
    requests = [e["op_id"] for e in events if e["type"] == "llm_request"]
    assert requests.count("confirm") == len(script["responses"]["confirm"]), (
        "each of the step's model turns is sent once"
    )

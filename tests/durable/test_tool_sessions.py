"""A worker's MCP sessions per run (``tool_sessions.py``): ops of one run share one
session, opened and closed by a task of its own; another run gets its own; a run's
sessions close once it has been idle on the worker, and all of them when it stops."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest

from lattice.durable.temporal import tool_sessions
from lattice.durable.temporal.tool_sessions import RunToolSessions
from lattice.tools.mcp import McpServerSpec, ToolSessions

TIME = {
    "time": McpServerSpec(
        "time",
        command=sys.executable,
        args=("-m", "mcp_server_time", "--local-timezone", "UTC"),
        timeout=30,
    )
}


def test_the_ops_of_a_run_share_one_session_closed_when_the_run_is_idle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tool_sessions, "IDLE_SECONDS", 0.5)
    made: list[ToolSessions] = []

    def make() -> ToolSessions:
        made.append(ToolSessions(TIME))
        return made[-1]

    async def body() -> None:
        runs = RunToolSessions()
        opened: list[tuple[str, Any]] = []

        async def op(run_id: str) -> str:
            view = runs.for_run(run_id, make)
            view.emit = lambda type_, data: opened.append((run_id, data["server"]))
            try:
                tools = await view.list_tools("time")  # opened in another task than this op's
                return sorted(t.name for t in tools)[0]
            finally:
                await view.aclose()

        # two ops of run a, one after the other in tasks of their own, and one of run b
        assert await asyncio.create_task(op("a")) == "convert_time"
        assert await asyncio.create_task(op("a")) == "convert_time"
        await asyncio.create_task(op("b"))
        assert opened == [("a", "time"), ("b", "time")]
        assert len(made) == 2
        await asyncio.sleep(1.0)  # idle: closed by the task that opened them
        assert made[0]._open == {} and made[1]._open == {}
        # a run that comes back after its sessions closed opens them again
        await asyncio.create_task(op("a"))
        assert opened[-1] == ("a", "time") and len(made) == 3
        await runs.aclose()
        assert made[2]._open == {}

    asyncio.run(body())

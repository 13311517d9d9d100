"""The agent loop's own cost per turn: Lattice's AGENT op against PydanticAI's ``Agent`` with
a ``FunctionModel`` and LangGraph's ``create_react_agent``, with the same scripted model
and the same tool.

Each side runs an agent of ``--turns`` turns: every turn but the last calls one tool
(``lookup``, which returns a short text at once), the last answers. The model is a
script on every side (it counts the tool results in the conversation and calls the tool
again or answers), so what is measured is each framework's loop: building the request,
offering the tools, running the call, appending the result, asking again. Lattice runs
the whole op (a one-node workflow lowered to AGENT, its tool granted, the contract
checking the final answer, events, the transcript) in memory, without a run folder.

Trials are interleaved (the order of the three sides rotates from one trial to the
next); a trial runs ``--runs`` agents on each side and takes CPU time
(``time.process_time``) per turn. Ratios (other ÷ Lattice) are taken per trial and
given as min / median / max.

    pip install langgraph pydantic-ai-slim
    python bench/agent_loop_bench.py                 # 9 trials, 200 runs of 8 turns
    python bench/agent_loop_bench.py --quick
    python bench/agent_loop_bench.py --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from lattice.llm.base import LLMRequest, LLMResponse, TokenUsage, ToolCall, ToolDef
from lattice.lower import lower_document
from lattice.runtime import Runner, RunStore
from lattice.runtime.settings import AgentSettings, RuntimeSettings
from lattice.tools.toolset import ToolResult, Toolset
from lattice.workspace.grants import WorkspaceGrant

ANSWER = "done"
TOOL_TEXT = "the value of key is 42"


# -- Lattice ---------------------------------------------------------------------------------


class LookupToolset:
    """One tool, answered at once (offered under ``Read``, a name the grant knows)."""

    name = "bench"

    async def list_tools(self) -> list[ToolDef]:
        schema = {"type": "object", "properties": {"file_path": {"type": "string"}}}
        return [ToolDef("Read", "Look a key up.", schema)]

    async def call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        return ToolResult(TOOL_TEXT)

    async def aclose(self) -> None:
        return None


class ScriptedModel:
    """Calls the tool until ``turns - 1`` results are in the conversation, then answers."""

    name = "scripted"

    def __init__(self, turns: int) -> None:
        self.turns = turns

    async def complete(self, request: LLMRequest) -> LLMResponse:
        done = sum(1 for m in request.messages if m.role == "tool")
        if done < self.turns - 1:
            call = ToolCall(f"call_{done}", "Read", {"file_path": "key"})
            return LLMResponse("", TokenUsage(10, 5), "scripted", 0.0, "tool_calls", (call,))
        return LLMResponse(ANSWER, TokenUsage(10, 5), "scripted")


def lattice_side(turns: int) -> Callable[[], Awaitable[Any]]:
    doc = {
        "id": "bench",
        "name": "bench",
        "nodes": [
            {"id": "start", "type": "start", "position": {"x": 0, "y": 0}, "data": {}},
            {
                "id": "agent",
                "type": "subAgent",
                "position": {"x": 0, "y": 0},
                "data": {"prompt": "Look the key up.", "tools": "Read", "maxTurns": turns + 1},
            },
            {"id": "end", "type": "end", "position": {"x": 0, "y": 0}, "data": {}},
        ],
        "connections": [
            {"id": "a", "from": "start", "to": "agent"},
            {"id": "b", "from": "agent", "to": "end"},
        ],
    }
    ir = lower_document(doc).ir
    assert ir is not None
    root = Path(tempfile.mkdtemp(prefix="agent-bench-"))

    def toolsets(grant: WorkspaceGrant, tools: tuple[str, ...]) -> list[Toolset]:
        return [LookupToolset()]

    settings = RuntimeSettings(
        agents=AgentSettings(grant=WorkspaceGrant(root=root, read=True), toolsets=toolsets),
        max_calls=None,
    )
    runner = Runner(ir, provider=ScriptedModel(turns), store=RunStore(None), settings=settings)

    async def once() -> Any:
        result = await runner.arun({})
        assert result.status == "completed" and result.output == ANSWER, result.failure
        return result

    return once


# -- PydanticAI ------------------------------------------------------------------------------


def pydantic_ai_side(turns: int) -> Callable[[], Awaitable[Any]] | None:
    try:
        from pydantic_ai import Agent
        from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
        from pydantic_ai.models.function import AgentInfo, FunctionModel
    except ImportError:
        return None

    def model(messages: list[Any], info: AgentInfo) -> ModelResponse:
        done = sum(1 for m in messages for part in m.parts if isinstance(part, ToolReturnPart))
        if done < turns - 1:
            return ModelResponse(parts=[ToolCallPart("lookup", {"key": "key"}, f"call_{done}")])
        return ModelResponse(parts=[TextPart(ANSWER)])

    agent = Agent(FunctionModel(model))

    @agent.tool_plain
    def lookup(key: str) -> str:
        """Look a key up."""
        return TOOL_TEXT

    async def once() -> Any:
        result = await agent.run("Look the key up.")
        assert result.output == ANSWER
        return result

    return once


# -- LangGraph -------------------------------------------------------------------------------


def langgraph_side(turns: int) -> Callable[[], Awaitable[Any]] | None:
    try:
        from langchain_core.language_models.chat_models import BaseChatModel
        from langchain_core.messages import AIMessage, ToolMessage
        from langchain_core.outputs import ChatGeneration, ChatResult
        from langchain_core.tools import tool
        from langgraph.prebuilt import create_react_agent
    except ImportError:
        return None

    class Scripted(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "scripted"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

        def _generate(
            self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any
        ) -> ChatResult:
            done = sum(1 for m in messages if isinstance(m, ToolMessage))
            if done < turns - 1:
                call = {"name": "lookup", "args": {"key": "key"}, "id": f"call_{done}"}
                message = AIMessage(content="", tool_calls=[call])
            else:
                message = AIMessage(content=ANSWER)
            return ChatResult(generations=[ChatGeneration(message=message)])

    @tool
    def lookup(key: str) -> str:
        """Look a key up."""
        return TOOL_TEXT

    with warnings.catch_warnings():  # moved to langchain.agents in LangGraph 1.0; still here
        warnings.simplefilter("ignore")
        agent = create_react_agent(Scripted(), [lookup])

    async def once() -> Any:
        result = await agent.ainvoke({"messages": [("user", "Look the key up.")]})
        assert result["messages"][-1].content == ANSWER
        return result

    return once


# -- measuring -------------------------------------------------------------------------------


async def per_turn(
    once: Callable[[], Awaitable[Any]], runs: int, turns: int
) -> tuple[float, float]:
    """(CPU µs, wall µs) per turn over ``runs`` agents."""
    gc.collect()
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(runs):
        await once()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return cpu / (runs * turns) * 1e6, wall / (runs * turns) * 1e6


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    sides: dict[str, Callable[[], Awaitable[Any]]] = {"lattice": lattice_side(args.turns)}
    for name, make in (("pydantic_ai", pydantic_ai_side), ("langgraph", langgraph_side)):
        side = make(args.turns)
        if side is None:
            print(
                f"{name} is not installed: pip install langgraph pydantic-ai-slim", file=sys.stderr
            )
        else:
            sides[name] = side
    for once in sides.values():  # warm up (imports, caches, compiled graphs)
        for _ in range(max(3, args.runs // 10)):
            await once()
    names = list(sides)
    cpu: dict[str, list[float]] = {name: [] for name in names}
    wall: dict[str, list[float]] = {name: [] for name in names}
    for trial in range(args.trials):
        order = names[trial % len(names) :] + names[: trial % len(names)]
        for name in order:
            c, w = await per_turn(sides[name], args.runs, args.turns)
            cpu[name].append(c)
            wall[name].append(w)
    report: dict[str, Any] = {
        "turns": args.turns,
        "runs": args.runs,
        "trials": args.trials,
        "python": sys.version.split()[0],
        "sides": {},
    }
    for name in names:
        ratios = [other / mine for other, mine in zip(cpu[name], cpu["lattice"], strict=True)]
        report["sides"][name] = {
            "cpu_us_per_turn_median": statistics.median(cpu[name]),
            "wall_us_per_turn_median": statistics.median(wall[name]),
            "ratio_to_lattice": {
                "min": min(ratios),
                "median": statistics.median(ratios),
                "max": max(ratios),
            },
        }
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--trials", type=int, default=9)
    parser.add_argument("--quick", action="store_true", help="3 trials of 30 runs")
    parser.add_argument("--json", metavar="FILE", help="write the figures as JSON too")
    args = parser.parse_args()
    if args.quick:
        args.trials, args.runs = 3, 30
    report = asyncio.run(measure(args))
    print(
        f"agent loop, {args.turns} turns per run, {args.runs} runs per trial, "
        f"{args.trials} interleaved trials (CPU time per turn; ratio = side ÷ Lattice)"
    )
    print(f"{'side':<12} {'cpu µs/turn':>12} {'wall µs/turn':>13}   ratio min / median / max")
    for name, side in report["sides"].items():
        r = side["ratio_to_lattice"]
        print(
            f"{name:<12} {side['cpu_us_per_turn_median']:>12.1f} "
            f"{side['wall_us_per_turn_median']:>13.1f}   "
            f"{r['min']:.2f} / {r['median']:.2f} / {r['max']:.2f}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

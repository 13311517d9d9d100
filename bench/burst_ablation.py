"""Where the CPU of 1,000 concurrent 5-call runs goes: the burst of
``compare_langgraph.py --sections concurrent`` (0 ms model calls, GC as the interpreter
sets it, LangGraph imported, so the heap is the benchmark's), timed whole and with one
part taken out at a time, in interleaved trials.

Variants (each monkeypatches the part it names; the runs stay valid):

- ``as it is``;
- ``no events``: ``RunContext.emit`` keeps nothing (a model call's compact
  ``llm_request``/``llm_response`` are still kept);
- ``minimal engine``: ``ContractEngine.run`` builds a request and awaits the provider;
- ``both`` of the above;
- ``bare model op``: the LLM op awaits the provider and writes its state, nothing else;
- ``bare model op, no events``.

    python bench/burst_ablation.py --trials 7

Prints CPU µs a run, min / median [max], and the collections of the last trial.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import compare_langgraph as bench

from lattice.contracts import engine as engine_module
from lattice.llm.base import LLMRequest
from lattice.lower import lower
from lattice.runs.store import RunStore
from lattice.runtime import context as context_module
from lattice.runtime import llm_op
from lattice.runtime.runner import Runner
from lattice.runtime.settings import RuntimeSettings

ORIGINAL = {
    "emit": context_module.RunContext.emit,
    "engine": engine_module.ContractEngine.run,
    "op": llm_op.LLMWriteExecutor.run,
}


def _no_emit(self: Any, type_: str, data: Any = None, *, op: bool = True) -> None:
    return None


async def _minimal_engine(self: Any, messages: Any, env: Any, **call: Any) -> Any:
    request = LLMRequest(messages=messages, node_id=call.get("node_id"), op_id=call.get("op_id"))
    response = await env.provider.complete(request)
    env.usage.calls += 1
    return response.text, []


async def _bare_op(self: Any, ctx: Any) -> Any:
    response = await ctx.llm.provider.complete(None)
    ctx.usage.calls += 1
    ctx.state.write(self.op.writes, response.text)
    ctx.last_result = self.op.writes
    return context_module.Outcome(output=response.text)


VARIANTS: dict[str, dict[str, Any]] = {
    "as it is": {},
    "no events": {"emit": _no_emit},
    "minimal engine": {"engine": _minimal_engine},
    "both": {"emit": _no_emit, "engine": _minimal_engine},
    "bare model op": {"op": _bare_op},
    "bare model op, no events": {"op": _bare_op, "emit": _no_emit},
}


def _apply(patch: dict[str, Any]) -> None:
    context_module.RunContext.emit = patch.get("emit", ORIGINAL["emit"])  # type: ignore[method-assign]
    engine_module.ContractEngine.run = patch.get("engine", ORIGINAL["engine"])  # type: ignore[method-assign]
    llm_op.LLMWriteExecutor.run = patch.get("op", ORIGINAL["op"])  # type: ignore[method-assign]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=7)
    parser.add_argument("--runs", type=int, default=1000)
    args = parser.parse_args()
    ir = lower(bench.llm_document())
    settings = RuntimeSettings(gc_pacing=False)
    runner = Runner(ir, provider=bench.SleepProvider(0.0), store=RunStore(None), settings=settings)
    collections = [0, 0, 0]

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections[info["generation"]] += 1

    async def burst() -> float:
        gc.collect()
        collections[:] = [0, 0, 0]
        cpu = time.process_time()
        results = await asyncio.gather(*(runner.arun({}) for _ in range(args.runs)))
        cpu = time.process_time() - cpu
        assert all(r.status == "completed" and r.usage.calls == 5 for r in results)
        return float(cpu / args.runs * 1e6)

    loop = asyncio.new_event_loop()
    gc.callbacks.append(count)
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    seen: dict[str, list[int]] = {}
    try:
        for patch in VARIANTS.values():  # warm-up
            _apply(patch)
            loop.run_until_complete(burst())
        for _ in range(args.trials):
            for name, patch in VARIANTS.items():
                _apply(patch)
                times[name].append(loop.run_until_complete(burst()))
                seen[name] = list(collections)
    finally:
        _apply({})
        loop.close()
    print(f"{args.runs:,} concurrent runs, 0 ms calls; load {os.getloadavg()[0]:.1f}")
    for name, values in times.items():
        print(
            f"  {name:28s} {min(values):6.1f} / {statistics.median(values):6.1f} "
            f"[{max(values):6.1f}] µs a run; collections {seen[name]}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

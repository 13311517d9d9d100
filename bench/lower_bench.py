"""Benchmark of lowering: how long ``lower_document`` takes for large generated documents.

Generates cc-wf-studio documents of a given number of nodes with a realistic mix
(prompt nodes whose templates read earlier results, deterministic ifElse diamonds
that merge back, variableStore and dataTransform nodes, one start, one end), writes
each to a temporary file and times ``lattice.lower.lower_document`` on it (read +
parse + lower + every static check), reporting the best and the median of a few
repetitions. Growth should be linear: the per-node time at the largest size divided
by the per-node time at the smallest should stay near 1.0.

    python bench/lower_bench.py                      # 1,000, 10,000 and 50,000 nodes
    python bench/lower_bench.py --sizes 1000 5000 20000 --repeat 5
    python bench/lower_bench.py --shapes fanout --fresh  # one shape, each run in a new interpreter
    python bench/lower_bench.py --profile            # cProfile of the largest size

Three shapes (``chain``, ``branchy``, ``fanout``: ``SHAPES``); the sizes are interleaved.
Standard library + lattice (and its dependencies) only. Each timed run starts with the
caches of earlier runs emptied (``cold_caches``), as in a fresh process; ``--fresh`` runs
each in a new interpreter, whose heap grows for that document alone.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import jmespath.parser

from lattice import schemas
from lattice.document import limits as document_limits
from lattice.ir.templates import parse_path
from lattice.lower import lower_document

BLOCK_SIZE = 10
"""Nodes per generated block (see ``_block``)."""


class _Builder:
    def __init__(self) -> None:
        self.nodes: list[dict[str, Any]] = []
        self.connections: list[dict[str, Any]] = []

    def node(self, node_id: str, node_type: str, data: dict[str, Any]) -> str:
        index = len(self.nodes)
        self.nodes.append(
            {
                "id": node_id,
                "type": node_type,
                "name": node_id,
                "position": {"x": 220 * (index % 50), "y": 160 * (index // 50)},
                "data": data,
            }
        )
        return node_id

    def edge(self, source: str, target: str, port: str = "output") -> None:
        self.connections.append(
            {
                "id": f"c{len(self.connections)}",
                "from": source,
                "to": target,
                "fromPort": port,
                "toPort": "input",
            }
        )


ANALYSIS_SCHEMA = {
    "type": "object",
    "properties": {
        "summary": {"type": "string"},
        "score": {"type": "integer", "minimum": 0, "maximum": 5},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["summary", "score", "tags"],
    "additionalProperties": False,
}


def _block(b: _Builder, i: int, previous: str, first_prompt: str | None) -> tuple[str, str]:
    """Append one block of ``BLOCK_SIZE`` nodes after ``previous``; return (exit node, prompt id).

    analyse → check (ifElse on the score) → [deepen (prompt) | skip (variableStore set)]
    → merge (dataTransform, merge-in) → log (variableStore append) → count (increment)
    → pick (dataTransform with an explicit input) → tidy (variableStore get)
    → polish (prompt) → 10 nodes.
    """
    analyse, check, deepen, skip = f"analyse-{i}", f"check-{i}", f"deepen-{i}", f"skip-{i}"
    merge, log, count, pick = f"merge-{i}", f"log-{i}", f"count-{i}", f"pick-{i}"
    tidy, polish = f"tidy-{i}", f"polish-{i}"
    earlier = (
        f"Earlier analysis: {{{{ $vars.{first_prompt}.result.summary }}}}\n" if first_prompt else ""
    )
    b.node(
        analyse,
        "prompt",
        {
            "prompt": "Analyse part {{ part }} of {{ $in.topic }}.\n" + earlier,
            "variables": {"part": str(i)},
            "outputSchema": ANALYSIS_SCHEMA,
            "modelClass": "small",
        },
    )
    b.node(
        check,
        "ifElse",
        {
            "evaluationTarget": f"$vars.{analyse}.result.score",
            "branches": [
                {"label": "Deep", "condition": ">= 3"},
                {"label": "Shallow", "condition": "< 3"},
            ],
        },
    )
    b.node(
        deepen,
        "prompt",
        {
            "prompt": f"Go deeper on: {{{{ $vars.{analyse}.result.summary }}}}",
            "outputSchema": ANALYSIS_SCHEMA,
        },
    )
    b.node(skip, "variableStore", {"operation": "set", "name": f"skipped-{i}", "value": True})
    b.node(
        merge,
        "dataTransform",
        {"expression": f'vars."{deepen}".result.summary || vars."{analyse}".result.summary'},
    )
    b.node(
        log,
        "variableStore",
        {"operation": "append", "name": "log", "value": f"$vars.{merge}.result"},
    )
    b.node(count, "variableStore", {"operation": "increment", "name": "parts", "value": 1})
    b.node(
        pick,
        "dataTransform",
        {"input": f"$vars.{analyse}.result", "expression": "{summary: summary, tags: tags}"},
    )
    b.node(tidy, "variableStore", {"operation": "get", "name": "log"})
    b.node(
        polish,
        "prompt",
        {
            "prompt": (
                f"Polish {{{{ $vars.{pick}.result }}}} given the log {{{{ $vars.{tidy}.result }}}} "
                f"(part {{{{ $vars.{analyse}.result.score }}}}/5)."
            ),
            "modelClass": "medium",
        },
    )
    b.edge(previous, analyse)
    b.edge(analyse, check)
    b.edge(check, deepen, "branch-0")
    b.edge(check, skip, "branch-1")
    b.edge(deepen, merge)
    b.edge(skip, merge)
    for source, target in ((merge, log), (log, count), (count, pick), (pick, tidy), (tidy, polish)):
        b.edge(source, target)
    return polish, analyse


def _branchy_block(b: _Builder, i: int, previous: str, first_prompt: str | None) -> tuple[str, str]:
    """A switch of four branches: classify → route (switch on the score) → [explain
    (prompt) | shorten (dataTransform) | flag (variableStore set) | escalate (prompt)] →
    merge (dataTransform) → note (append) → count (increment) → tidy (dataTransform)."""
    classify, route, merge = f"classify-{i}", f"route-{i}", f"merge-{i}"
    explain, shorten, flag, escalate = f"explain-{i}", f"shorten-{i}", f"flag-{i}", f"escalate-{i}"
    note, count, tidy = f"note-{i}", f"count-{i}", f"tidy-{i}"
    earlier = f" Earlier: {{{{ $vars.{first_prompt}.result.summary }}}}" if first_prompt else ""
    b.node(
        classify,
        "prompt",
        {"prompt": "Classify part {{ $in.topic }}." + earlier, "outputSchema": ANALYSIS_SCHEMA},
    )
    conditions = ["< 2", "== 2", "== 3", "> 3"]
    b.node(
        route,
        "switch",
        {
            "evaluationTarget": f"$vars.{classify}.result.score",
            "branches": [
                {"label": f"L{k}", "condition": c, **({"isDefault": True} if k == 3 else {})}
                for k, c in enumerate(conditions)
            ],
        },
    )
    b.node(explain, "prompt", {"prompt": f"Explain {{{{ $vars.{classify}.result.summary }}}}"})
    b.node(shorten, "dataTransform", {"expression": f'vars."{classify}".result.tags'})
    b.node(flag, "variableStore", {"operation": "set", "name": f"flagged-{i}", "value": True})
    b.node(escalate, "prompt", {"prompt": f"Escalate {{{{ $vars.{classify}.result }}}}"})
    b.node(
        merge,
        "dataTransform",
        {
            "expression": f'vars."{explain}".result || vars."{escalate}".result || vars."{classify}".result.summary'
        },
    )
    b.node(
        note,
        "variableStore",
        {"operation": "append", "name": "log", "value": f"$vars.{merge}.result"},
    )
    b.node(count, "variableStore", {"operation": "increment", "name": "parts", "value": 1})
    b.node(tidy, "dataTransform", {"input": f"$vars.{classify}.result", "expression": "summary"})
    b.edge(previous, classify)
    b.edge(classify, route)
    for k, target in enumerate((explain, shorten, flag, escalate)):
        b.edge(route, target, f"branch-{k}")
        b.edge(target, merge)
    for source, target in ((merge, note), (note, count), (count, tidy)):
        b.edge(source, target)
    return tidy, classify


def _fanout_block(b: _Builder, i: int, previous: str, first_prompt: str | None) -> tuple[str, str]:
    """Three branches in parallel: plan → [draft → review (prompts) | facts (dataTransform)
    → mark (variableStore set) | title (prompt) → shape (dataTransform)] → gather
    (dataTransform, where the branches meet) → log (append)."""
    plan, gather, log = f"plan-{i}", f"gather-{i}", f"log-{i}"
    draft, review, facts, mark = f"draft-{i}", f"review-{i}", f"facts-{i}", f"mark-{i}"
    title, shape = f"title-{i}", f"shape-{i}"
    earlier = f" Earlier: {{{{ $vars.{first_prompt}.result.summary }}}}" if first_prompt else ""
    b.node(
        plan,
        "prompt",
        {"prompt": "Plan {{ $in.topic }}." + earlier, "outputSchema": ANALYSIS_SCHEMA},
    )
    b.node(draft, "prompt", {"prompt": f"Draft {{{{ $vars.{plan}.result.summary }}}}"})
    b.node(review, "prompt", {"prompt": f"Review {{{{ $vars.{draft}.result }}}}"})
    b.node(facts, "dataTransform", {"expression": f'vars."{plan}".result.tags'})
    b.node(mark, "variableStore", {"operation": "set", "name": f"marked-{i}", "value": True})
    b.node(title, "prompt", {"prompt": f"Title for {{{{ $vars.{plan}.result.summary }}}}"})
    b.node(shape, "dataTransform", {"input": f"$vars.{title}.result", "expression": "@"})
    b.node(
        gather,
        "dataTransform",
        {"expression": f'[vars."{review}".result, vars."{facts}".result, vars."{shape}".result]'},
    )
    b.node(
        log,
        "variableStore",
        {"operation": "append", "name": "log", "value": f"$vars.{gather}.result"},
    )
    b.edge(previous, plan)
    for first, second in ((draft, review), (facts, mark), (title, shape)):
        b.edge(plan, first)
        b.edge(first, second)
        b.edge(second, gather)
    b.edge(gather, log)
    return log, plan


SHAPES = {"chain": (_block, 10), "branchy": (_branchy_block, 10), "fanout": (_fanout_block, 9)}
"""Generated document shapes: a block function and the nodes each block adds."""


def generate(size: int, *, far_refs: bool = True, shape: str = "chain") -> dict[str, Any]:
    """A valid document of exactly ``size`` nodes (``size`` >= 4 + BLOCK_SIZE).

    ``shape``: ``chain`` (ifElse diamonds on a chain, ``_block``), ``branchy`` (a switch
    of four branches per block) or ``fanout`` (three branches running in parallel per
    block). With ``far_refs`` every block's first prompt also reads the first block's
    result (like a classification that later steps keep consulting); without it every
    reference points into the same or the previous block.
    """
    block, block_size = SHAPES[shape]
    if size < 4 + BLOCK_SIZE:
        raise ValueError(f"size must be at least {4 + BLOCK_SIZE}")
    b = _Builder()
    b.node(
        "start",
        "start",
        {
            "inputs": {
                "type": "object",
                "properties": {"topic": {"type": "string"}},
                "required": ["topic"],
            }
        },
    )
    b.node("log-init", "variableStore", {"operation": "set", "name": "log", "value": []})
    b.node("parts-init", "variableStore", {"operation": "set", "name": "parts", "value": 0})
    b.edge("start", "log-init")
    b.edge("log-init", "parts-init")
    previous, first_prompt = "parts-init", None
    blocks, rest = divmod(size - 4, block_size)
    for i in range(blocks):
        previous, analyse = block(b, i, previous, first_prompt)
        if far_refs:
            first_prompt = first_prompt or analyse
    for j in range(rest):  # pad with light dataTransform nodes to hit the exact size
        pad = b.node(f"pad-{j}", "dataTransform", {"expression": "vars.parts"})
        b.edge(previous, pad)
        previous = pad
    b.node("end", "end", {"output": "$vars.log"})
    b.edge(previous, "end")
    assert len(b.nodes) == size, (len(b.nodes), size)
    return {
        "id": f"bench-{shape}-{size}",
        "name": f"bench-{shape}-{size}",
        "version": "1.0.0",
        "nodes": b.nodes,
        "connections": b.connections,
    }


class Timing:
    """Wall-clock and CPU seconds of each ``lower_document`` call on one document."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.ops = 0
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self.calls: int | None = None

    @property
    def best_ms(self) -> float:
        return min(self.wall) * 1e3

    @property
    def median_ms(self) -> float:
        return statistics.median(self.wall) * 1e3

    @property
    def cpu_ms(self) -> float:
        return min(self.cpu) * 1e3

    @property
    def us_per_node(self) -> float:
        return self.cpu_ms * 1e3 / self.size


def cold_caches() -> None:
    """Empty the caches an earlier lowering of the same document would have filled (parsed
    state paths, checked schemas, compiled JMESPath): each timed run lowers its document
    as a fresh process would. Warm, a 1,000-node document (its paths and expressions fit
    the caches) looked cheaper per node than a 50,000-node one (they do not)."""
    parse_path.cache_clear()
    schemas._problems.cache_clear()
    jmespath.parser.Parser.purge()


def lower_once(path: Path) -> tuple[float, float, int]:
    """Lower ``path`` once with cold caches: (wall seconds, CPU seconds, ops)."""
    cold_caches()
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    result = lower_document(path)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    if result.ir is None:
        errors = "\n".join(d.format(str(path)) for d in result.errors[:10])
        raise SystemExit(f"generated document does not lower:\n{errors}")
    return wall, cpu, len(result.ir.ops)


def lower_in_fresh_process(path: Path, shape: str) -> tuple[float, float, int]:
    """``lower_once`` in a new interpreter (after a small warm-up document of the same
    shape: imports, registries). Its heap grows for this document alone, as a program's
    does, instead of reusing pages that earlier, larger lowerings left behind."""
    done = subprocess.run(
        [sys.executable, __file__, "--one", str(path), "--shapes", shape],
        capture_output=True,
        text=True,
        check=True,
    )
    wall, cpu, ops = json.loads(done.stdout.strip().splitlines()[-1])
    return float(wall), float(cpu), int(ops)


def time_interleaved(
    paths: dict[int, Path], shape: str, repeat: int, fresh: bool
) -> dict[int, Timing]:
    """``repeat`` rounds, each lowering every size once (the order turning each round),
    so that a change of machine load falls on every size alike."""
    timings = {size: Timing(size) for size in paths}
    sizes = list(paths)
    for round_ in range(repeat):
        shift = round_ % len(sizes)
        for size in sizes[shift:] + sizes[:shift]:
            if fresh:
                wall, cpu, ops = lower_in_fresh_process(paths[size], shape)
            else:
                wall, cpu, ops = lower_once(paths[size])
            timings[size].wall.append(wall)
            timings[size].cpu.append(cpu)
            timings[size].ops = ops
    return timings


def _profiled(path: Path) -> pstats.Stats:
    cold_caches()
    profiler = cProfile.Profile()
    profiler.enable()
    lower_document(path)
    profiler.disable()
    return pstats.Stats(profiler, stream=sys.stdout)


def count_calls(path: Path) -> int:
    """Python function calls made by one lowering: a measure of work that ignores machine load."""
    return int(_profiled(path).total_calls)  # type: ignore[attr-defined]


def _one(path: Path, shape: str) -> int:
    """``--one``: the child of ``lower_in_fresh_process``."""
    document_limits.MAX_DOCUMENT_BYTES = max(
        document_limits.MAX_DOCUMENT_BYTES, path.stat().st_size
    )
    lower_document(generate(4 + 2 * SHAPES[shape][1], shape=shape))  # warm-up
    print(json.dumps(lower_once(path)))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 50000], metavar="N")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per size (default 5)")
    parser.add_argument(
        "--shapes",
        nargs="+",
        choices=sorted(SHAPES),
        default=["chain", "branchy", "fanout"],
        help="document shapes (default: all three)",
    )
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="time each run in a new interpreter (the heap grows for that document alone)",
    )
    parser.add_argument(
        "--no-far-refs",
        action="store_true",
        help="only local references (no prompt reads the first block's result)",
    )
    parser.add_argument(
        "--calls",
        action="store_true",
        help="also count function calls per node (deterministic; one extra profiled run per size)",
    )
    parser.add_argument("--profile", action="store_true", help="cProfile the largest size")
    parser.add_argument("--top", type=int, default=25, help="rows of profile output")
    parser.add_argument("--one", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one is not None:
        return _one(args.one, args.shapes[0])
    sizes = sorted(set(args.sizes))
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    with tempfile.TemporaryDirectory(prefix="lattice-bench-") as tmp:
        for shape in args.shapes:
            _bench_shape(args, shape, sizes, Path(tmp), parser)
    return 0


def _bench_shape(
    args: argparse.Namespace,
    shape: str,
    sizes: list[int],
    tmp: Path,
    parser: argparse.ArgumentParser,
) -> None:
    paths = {}
    for size in sizes:
        try:
            document = generate(size, far_refs=not args.no_far_refs, shape=shape)
        except ValueError as exc:
            parser.error(str(exc))
        paths[size] = tmp / f"bench-{shape}-{size}.json"
        paths[size].write_text(json.dumps(document), encoding="utf-8")
    largest = max(p.stat().st_size for p in paths.values())
    if largest > document_limits.MAX_DOCUMENT_BYTES:  # about 40,000 nodes and up
        print(
            f"(documents up to {largest:,} bytes: the {document_limits.MAX_DOCUMENT_BYTES:,}"
            "-byte document limit is raised for this benchmark)"
        )
        document_limits.MAX_DOCUMENT_BYTES = largest
    lower_document(paths[sizes[0]])  # warm-up: imports, registry, caches
    mix = "local references only" if args.no_far_refs else "with far references"
    where = "each in a fresh interpreter" if args.fresh else "in this process"
    print(
        f"\n{shape}: lower_document, {args.repeat} runs per size, sizes interleaved, {where}, {mix}"
    )
    header = (
        f"{'nodes':>8} {'ops':>8} {'best ms':>9} {'median ms':>10} {'cpu ms':>9} {'µs/node':>8}"
        + (f" {'calls/node':>11}" if args.calls else "")
    )
    print(header)
    print("-" * len(header))
    timings = time_interleaved(paths, shape, args.repeat, args.fresh)
    for size in sizes:
        timing = timings[size]
        if args.calls:
            timing.calls = count_calls(paths[size])
        print(
            f"{size:>8,} {timing.ops:>8,} {timing.best_ms:>9.1f} {timing.median_ms:>10.1f} "
            f"{timing.cpu_ms:>9.1f} {timing.us_per_node:>8.1f}"
            + (f" {timing.calls / size:>11.0f}" if timing.calls is not None else "")
        )
    if len(sizes) > 1:
        small, large = timings[sizes[0]], timings[sizes[-1]]
        ratio = large.us_per_node / small.us_per_node
        verdict = "about linear" if ratio < 1.3 else "SUPER-LINEAR"
        print(
            f"\nper-node time at {large.size:,} / at {small.size:,} nodes: {ratio:.2f} "
            f"({verdict}; 1.0 = linear growth)"
        )
        if small.calls is not None and large.calls is not None:
            call_ratio = (large.calls / large.size) / (small.calls / small.size)
            print(f"per-node calls at {large.size:,} / at {small.size:,} nodes: {call_ratio:.2f}")
    if args.profile:
        print(f"\ncProfile of lowering {sizes[-1]:,} nodes:")
        stats = _profiled(paths[sizes[-1]])
        stats.sort_stats("cumulative").print_stats(args.top)
        stats.sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    sys.exit(main())

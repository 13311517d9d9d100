"""Benchmark of the redactor every text bound for a run folder passes through.

A run with secrets (a provider key in the environment, a ``[secrets] allow`` value) masks
each event line, op record, snapshot and journal line it writes, so the redactor is on
the hot path of every write. This times ``make_redactor(...)(text)`` on the texts a run
writes: event lines without a secret (the usual case: the quick test answers), event
lines holding a URL with percent-escapes (``%20``, ``%2F``), texts holding a secret as it
is, and texts holding it with a non-canonical percent-escape (``%2D`` for ``-``).

Kinds are interleaved (each round times every kind once) and each figure is the time of
one call in ns: min, median and max over the rounds.

    python bench/redaction_bench.py                # 15 rounds
    python bench/redaction_bench.py --rounds 31
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable

from lattice.runs.redaction import make_redactor

SECRET = "sk-proj-Q7mZ4kV9xR2pL8wN3bT6"
TOKEN = "ghp_Z8qW2eR5tY7uI9oP1aS3dF6gH4jK0lX"


def _event(seq: int, value: object) -> str:
    return json.dumps(
        {
            "seq": seq,
            "ts": 1733140000.123 + seq,
            "type": "state_write",
            "op": f"op_{seq % 17}",
            "node": f"node_{seq % 17}",
            "data": {"path": f"$vars.node_{seq % 17}.result", "value": value},
        }
    )


def texts() -> dict[str, list[str]]:
    """The kinds of text timed, 200 of each."""
    plain = [
        _event(i, {"answer": f"the {i}th answer, with some words", "score": i}) for i in range(200)
    ]
    urls = [
        _event(i, {"url": f"https://api.example.com/items/a%20{i}%2Fb?q=x%3Dy&page={i}"})
        for i in range(200)
    ]
    held = [_event(i, {"authorization": f"Bearer {TOKEN}", "n": i}) for i in range(200)]
    escaped = [_event(i, {"echo": f"key={SECRET.replace('-', '%2D')}&n={i}"}) for i in range(200)]
    return {"plain": plain, "url-escapes": urls, "secret": held, "secret-%2D": escaped}


def time_kind(redact: Callable[[str], str], batch: list[str], repeat: int = 20) -> float:
    """ns per call over ``repeat`` passes of ``batch``."""
    start = time.perf_counter_ns()
    for _ in range(repeat):
        for text in batch:
            redact(text)
    return (time.perf_counter_ns() - start) / (repeat * len(batch))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    os.environ["OPENAI_API_KEY"] = SECRET
    os.environ["BENCH_TOKEN"] = TOKEN
    redact = make_redactor(("BENCH_TOKEN",))
    kinds = texts()
    for batch in kinds.values():
        time_kind(redact, batch, 2)  # warm-up
    timings: dict[str, list[float]] = {kind: [] for kind in kinds}
    for round_ in range(args.rounds):
        order = list(kinds)
        order = order[round_ % len(order) :] + order[: round_ % len(order)]
        for kind in order:
            timings[kind].append(time_kind(redact, kinds[kind]))
    print(f"{'kind':<14}{'min ns':>10}{'median ns':>12}{'max ns':>10}")
    for kind, found in timings.items():
        print(f"{kind:<14}{min(found):>10.0f}{statistics.median(found):>12.0f}{max(found):>10.0f}")


if __name__ == "__main__":
    main()

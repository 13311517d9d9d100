"""Fuzz lowering in-process: mutate the shipped and corpus documents, lower each, and when
lowering accepts one, emit every format and build a Runner.

Counts what the standard forbids: any exception other than a ``LatticeUserError``
(a *crash*), and documents that take longer than the per-document time limit
(a *timeout*, interrupted with SIGALRM). Documents slower than ``--slow`` seconds are
listed. Each crash or timeout is written to ``--out`` as ``<n>-<kind>.json`` (the
document, or ``.txt`` for garbled JSON text) with a ``.txt`` note holding the traceback.

    python bench/fuzz_documents.py                       # 10,000 documents, seed 0
    python bench/fuzz_documents.py -n 50000 --seed 7 --out /tmp/fuzz-repro
    python bench/fuzz_documents.py --replay /tmp/fuzz-repro/12-crash.json

Prints crashes and timeouts per 10,000 documents and documents per second.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.fuzz.mutations import load_documents, mutate, mutate_text, probe


class DocumentTimeout(Exception):
    """Raised by SIGALRM when one document takes longer than the limit."""


def _alarm(signum: int, frame: FrameType | None) -> None:
    raise DocumentTimeout


def _signature(exc: BaseException) -> str:
    """Exception type and the innermost lattice frame: one line per distinct crash."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "lattice" in f.filename]
    where = f"{Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else "?"
    return f"{type(exc).__name__} at {where}"


def dump_json(value: Any) -> str:
    """JSON text of ``value`` at any depth (an explicit stack, no recursion); ASCII only,
    non-finite numbers as ``NaN``/``Infinity`` as Python's ``json`` writes them."""
    parts: list[str] = []
    stack: list[Any] = [value]
    close = object()
    while stack:
        item = stack.pop()
        if item is close:
            continue
        if isinstance(item, tuple) and len(item) == 2 and item[0] is close:
            parts.append(item[1])
        elif isinstance(item, dict):
            parts.append("{")
            stack.append((close, "}"))
            entries = list(item.items())
            for i, (key, val) in reversed(list(enumerate(entries))):
                stack.append(val)
                stack.append((close, ("," if i else "") + json.dumps(str(key)) + ":"))
        elif isinstance(item, list):
            parts.append("[")
            stack.append((close, "]"))
            for i, val in reversed(list(enumerate(item))):
                stack.append(val)
                if i:
                    stack.append((close, ","))
        else:
            try:
                parts.append(json.dumps(item))
            except (TypeError, ValueError):
                parts.append(json.dumps(repr(item)))
    return "".join(parts)


def _save(out: Path, n: int, kind: str, doc: Any, text: str | None, note: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    if text is not None:
        (out / f"{n}-{kind}.txt").write_text(text, encoding="utf-8", errors="surrogatepass")
    else:
        (out / f"{n}-{kind}.json").write_text(dump_json(doc), encoding="utf-8")
    (out / f"{n}-{kind}.note").write_text(note, encoding="utf-8")


def run(args: argparse.Namespace) -> int:
    documents = load_documents()
    rng = random.Random(args.seed)
    out = Path(args.out)
    signal.signal(signal.SIGALRM, _alarm)
    crashes: Counter[str] = Counter()
    timeouts = 0
    slow: list[tuple[float, int]] = []
    scratch = Path(tempfile.mkdtemp(prefix="lattice-fuzz-"))
    started = time.perf_counter()
    for n in range(args.count):
        name, base = documents[rng.randrange(len(documents))]
        text: str | None = None
        doc: Any = mutate(base, rng, rng.randint(1, args.max_mutations))
        source: Any = doc
        if rng.random() < args.text_share:  # through the file reader
            try:
                text = json.dumps(doc, ensure_ascii=False)
            except (ValueError, RecursionError):
                text = json.dumps(base, ensure_ascii=False)
            if rng.random() < 0.5:
                text = mutate_text(text, rng)
            path = scratch / "doc.json"
            path.write_text(text, encoding="utf-8", errors="surrogatepass")
            source = path
        t0 = time.perf_counter()
        signal.setitimer(signal.ITIMER_REAL, args.limit)
        try:
            exc = probe(source)
        except DocumentTimeout:
            exc = DocumentTimeout(f"over {args.limit}s")
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        elapsed = time.perf_counter() - t0
        if elapsed > args.slow:
            slow.append((elapsed, n))
        if exc is None:
            continue
        kind = "timeout" if isinstance(exc, DocumentTimeout) else "crash"
        sig = "timeout" if kind == "timeout" else _signature(exc)
        if kind == "timeout":
            timeouts += 1
        else:
            crashes[sig] += 1
        note = f"base: {name}\nsignature: {sig}\nelapsed: {elapsed:.2f}s\n\n" + "".join(
            traceback.format_exception(exc)
        )
        _save(out, n, kind, doc, text, note)
    total = time.perf_counter() - started
    count = args.count
    crashed = sum(crashes.values())
    print(f"documents: {count} in {total:.1f}s ({count / total:.0f} documents/s), seed {args.seed}")
    print(f"crashes: {crashed} ({crashed * 10_000 / count:.1f} per 10,000)")
    print(f"timeouts (> {args.limit:g}s): {timeouts} ({timeouts * 10_000 / count:.1f} per 10,000)")
    for sig, times in crashes.most_common():
        print(f"  {times:5d}  {sig}")
    print(f"slow (> {args.slow:g}s): {len(slow)}")
    for elapsed, n in sorted(slow, reverse=True)[:10]:
        print(f"  #{n}: {elapsed:.2f}s")
    if crashed or timeouts:
        print(f"reproducers in {out}")
    return 1 if crashed or timeouts else 0


def replay(path: Path) -> int:
    """Probe one saved reproducer and print what escapes."""
    source: Any = path
    if path.suffix == ".json":
        try:
            source = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, RecursionError):
            source = path
    exc = probe(source)
    if exc is None:
        print("ok: no crash")
        return 0
    traceback.print_exception(exc)
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--count", type=int, default=10_000, help="documents to try")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-mutations", type=int, default=6, help="mutations per document")
    parser.add_argument("--limit", type=float, default=10.0, help="seconds per document")
    parser.add_argument("--slow", type=float, default=1.0, help="report documents slower than this")
    parser.add_argument(
        "--text-share", type=float, default=0.1, help="share of documents read from a file"
    )
    parser.add_argument("--out", default="fuzz-reproducers", help="folder for reproducers")
    parser.add_argument("--replay", type=Path, help="probe one saved reproducer instead")
    args = parser.parse_args(argv)
    if args.replay is not None:
        return replay(args.replay)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())

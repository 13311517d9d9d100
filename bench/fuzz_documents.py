"""Fuzz lowering in-process: mutate the shipped and corpus documents, lower each, and when
lowering accepts one, emit every format, build a Runner and run it with a mock.

The mutations include schemas (``$ref`` to URLs, files and pointers to nothing,
``pattern`` with nested quantifiers) and ``matches`` conditions; a run gets inputs and
mock answers made from its schemas, half of them with the strings replaced by a text the
catastrophic patterns backtrack on, and an httpRequest answered in-process.

Counts what the standard forbids: any exception other than a ``LatticeUserError``, or a
run that fails as ``internal_error`` (a *crash*); documents that take longer than the
per-document time limit (a *timeout*, interrupted with SIGALRM); and *reaches*: a
request to the local server mutated ``$ref``s point at, any socket connection or name
look-up, and any file opened outside the Python installation, the ``lattice`` package
and the fuzzer's scratch folder (an audit hook, ``sys.addaudithook``, watches while a
document is probed). Documents slower than ``--slow`` seconds are listed. Each crash,
timeout or reach is written to ``--out`` as ``<n>-<kind>.json`` (the document, or
``.txt`` for garbled JSON text) with a ``.note`` holding the traceback.

    python bench/fuzz_documents.py                       # 10,000 documents, seed 0
    python bench/fuzz_documents.py -n 50000 --seed 7 --out /tmp/fuzz-repro
    python bench/fuzz_documents.py --replay /tmp/fuzz-repro/12-crash.json
    python bench/fuzz_documents.py --no-run                # lowering only, as before

Prints crashes, timeouts and reaches per 10,000 documents, documents run, and documents
per second.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import signal
import sys
import sysconfig
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import document_fuzzing
from bench.document_fuzzing import (
    REPO,
    VICTIM,
    CountingServer,
    load_documents,
    mutate,
    mutate_schema,
    mutate_text,
    probe,
)


class DocumentTimeout(Exception):
    """Raised by SIGALRM when one document takes longer than the limit."""


def _alarm(signum: int, frame: FrameType | None) -> None:
    raise DocumentTimeout


class Reaches:
    """What a probed document reached outside the process: requests the counting server
    answered, socket connections and look-ups, files opened outside ``allowed``."""

    def __init__(self, allowed: list[str]) -> None:
        self.allowed = tuple(allowed)
        self.armed = False
        self.seen: list[str] = []
        self.counting = CountingServer()
        sys.addaudithook(self._audit)

    def _audit(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.armed:
            return
        if event in ("socket.connect", "socket.getaddrinfo", "urllib.Request"):
            self.seen.append(f"{event} {args[1] if event == 'socket.connect' else args[0]!r}")
        elif event == "open" and isinstance(args[0], str | bytes):
            path = args[0].decode(errors="replace") if isinstance(args[0], bytes) else args[0]
            if not path.startswith(self.allowed) and path not in sys.path:  # import probes
                self.seen.append(f"open {path!r} {args[1]!r}")

    def take(self) -> list[str]:
        """What was reached since the last call."""
        found = self.seen + [f"GET {path} (counting server)" for path in self.counting.hits]
        self.seen.clear()
        self.counting.hits.clear()
        return found


def allowed_paths(scratch: Path) -> list[str]:
    """Where a probe may open files: the Python installation and the ``lattice`` package
    (modules, package data) and the fuzzer's scratch folder (documents read from a file)."""
    paths = {sys.prefix, sys.base_prefix, *sysconfig.get_paths().values()}
    paths |= {str(REPO / "lattice"), str(scratch)}
    return sorted(str(Path(p).resolve()) + "/" for p in paths if p)


def _victimize(value: Any) -> Any:
    """``value`` with every string replaced by the text catastrophic patterns choke on,
    and that text as the key of every empty object (for ``patternProperties``)."""
    if isinstance(value, str):
        return VICTIM
    if isinstance(value, list):
        return [_victimize(v) for v in value]
    if isinstance(value, dict):
        return {k: _victimize(v) for k, v in value.items()} if value else {VICTIM: 1}
    return value


RUN_STATUSES: Counter[str] = Counter()
"""How the runs of accepted documents ended."""
STOPPED: Counter[str] = Counter()
"""Pattern searches stopped at their time limit, by pattern (evidence the runs reach them)."""


def count_stopped_searches() -> None:
    from lattice import patterns

    init = patterns.PatternTimeout.__init__

    def counting(self: Any, pattern: str, seconds: float) -> None:
        STOPPED[pattern] += 1
        init(self, pattern, seconds)

    patterns.PatternTimeout.__init__ = counting  # type: ignore[method-assign]


def run_with_mock(ir: Any, rng: random.Random) -> BaseException | None:
    """Run ``ir`` with a mock made from its schemas (strings swapped for ``VICTIM`` half
    the time) and an in-process HTTP answer. None when the run ended as the standard
    says (any status, a ``LatticeUserError``), else what escaped or an internal error."""
    import httpx

    from lattice.errors import LatticeUserError
    from lattice.llm.examples import example_value
    from lattice.llm.mock import MockProvider
    from lattice.runs.store import RunStore
    from lattice.runtime import RunLimits, Runner
    from lattice.runtime.settings import RuntimeSettings
    from lattice.service.mocks import mock_script
    from lattice.tools.http import HttpPolicy

    victims = rng.random() < 0.5
    responses = mock_script(ir)["responses"]
    inputs = example_value(ir.inputs_schema) if ir.inputs_schema else {}
    if victims:
        responses = {node: [_victimize(a) for a in answers] for node, answers in responses.items()}
        inputs = _victimize(inputs)
    answer = httpx.Response(200, json={"a": VICTIM if victims else "ok"})
    settings = RuntimeSettings(
        repo_root=REPO, http=HttpPolicy(transport=httpx.MockTransport(lambda request: answer))
    )
    runner = Runner(
        ir,
        provider=MockProvider(responses, default=VICTIM),
        store=RunStore(None),
        settings=settings,
        limits=RunLimits(max_steps=300, max_visits=30),
    )
    try:
        result = runner.run(inputs if isinstance(inputs, dict) else {})
    except LatticeUserError as exc:
        RUN_STATUSES[f"refused ({exc.error_type})"] += 1
        return None
    except Exception as exc:  # the fuzzer reports whatever escapes
        return exc
    failure = result.failure
    RUN_STATUSES[result.status + (f" ({failure.category})" if failure is not None else "")] += 1
    if failure is not None and failure.category == "internal_error":
        return RuntimeError(f"the run failed as internal_error: {failure.summary}")
    return None


def probe_and_run(source: Any, rng: random.Random, run: bool) -> BaseException | None:
    """``probe`` (lowering, emitters, check_ir, a Runner), then a run with a mock."""
    exc = probe(source)
    if exc is not None or not run:
        return exc
    from lattice.lower import lower_document

    try:
        result = lower_document(source)
    except Exception:  # probe said all went as the standard says: a LatticeUserError
        return None
    if result.ir is None:
        return None
    try:
        return run_with_mock(result.ir, rng)
    except Exception as exc:  # making the mock script or inputs (lattice mock init's code)
        return exc


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
    reaches = Reaches(allowed_paths(scratch))
    count_stopped_searches()
    document_fuzzing.REMOTE_URL = reaches.counting.url
    reached = 0
    most, most_cpu = (0.0, 0.0), 0.0
    started = time.perf_counter()
    for n in range(args.count):
        name, base = documents[rng.randrange(len(documents))]
        text: str | None = None
        if rng.random() < args.schema_share:  # a schema or condition made odd, little else
            doc: Any = mutate(base, rng, rng.randint(0, 1))
            with contextlib.suppress(RecursionError):  # a value nested past Python's recursion
                doc = mutate_schema(doc, rng)
        else:
            doc = mutate(base, rng, rng.randint(1, args.max_mutations))
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
        t0, cpu0 = time.perf_counter(), time.process_time()
        signal.setitimer(signal.ITIMER_REAL, args.limit)
        reaches.armed = True
        try:
            exc = probe_and_run(source, rng, args.run)
        except DocumentTimeout:
            exc = DocumentTimeout(f"over {args.limit}s")
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            reaches.armed = False
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        most = max(most, (elapsed, cpu))
        most_cpu = max(most_cpu, cpu)
        if elapsed > args.slow:
            slow.append((elapsed, n))
            note = f"base: {name}\nelapsed: {elapsed:.2f}s wall, {cpu:.2f}s CPU\n"
            _save(out, n, "slow", doc, text, note)
        found = reaches.take()
        if found:
            reached += 1
            note = f"base: {name}\nreached:\n  " + "\n  ".join(found[:20]) + "\n"
            _save(out, n, "reach", doc, text, note)
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
    print(f"reaches (network, files outside the run): {reached}")
    runs = sum(RUN_STATUSES.values())
    print(f"runs: {runs} ({', '.join(f'{k} {v}' for k, v in RUN_STATUSES.most_common())})")
    for sig, times in crashes.most_common():
        print(f"  {times:5d}  {sig}")
    print(f"pattern searches stopped at their time limit: {sum(STOPPED.values())} {dict(STOPPED)}")
    print(
        f"slowest document: {most[0]:.2f}s wall ({most[1]:.2f}s CPU); "
        f"most CPU for one document: {most_cpu:.2f}s"
    )
    print(f"slow (> {args.slow:g}s wall): {len(slow)}")
    for elapsed, n in sorted(slow, reverse=True)[:10]:  # replay: --replay OUT/<n>-slow.json
        print(f"  #{n}: {elapsed:.2f}s")
    if crashed or timeouts or reached or slow:
        print(f"reproducers in {out}")
    return 1 if crashed or timeouts or reached else 0


def replay(path: Path) -> int:
    """Probe one saved reproducer and print what escapes."""
    source: Any = path
    if path.suffix == ".json":
        try:
            source = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, RecursionError):
            source = path
    exc = probe_and_run(source, random.Random(0), True)
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
    parser.add_argument("--slow", type=float, default=5.0, help="report documents slower than this")
    parser.add_argument(
        "--run",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="run the documents lowering accepts, with a mock (default: yes)",
    )
    parser.add_argument(
        "--text-share", type=float, default=0.1, help="share of documents read from a file"
    )
    parser.add_argument(
        "--schema-share",
        type=float,
        default=0.3,
        help="share of documents given a schema or condition mutation and at most one other",
    )
    parser.add_argument("--out", default="fuzz-reproducers", help="folder for reproducers")
    parser.add_argument("--replay", type=Path, help="probe one saved reproducer instead")
    args = parser.parse_args(argv)
    if args.replay is not None:
        return replay(args.replay)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())

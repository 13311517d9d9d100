"""Contracts bench: Lattice's LLMPrimitive, Instructor and PydanticAI on one scripted corpus.

Every framework talks to the same local OpenAI-compatible server (``lattice/llm/fake_server.py``
on 127.0.0.1, which logs every request) through the ``openai`` SDK, asks for the same pydantic
model (enums, nested objects, bounded lists and strings, a pattern, a model validator) about
the same ~20 KB incident log, and gets the same scripted answers: the server answers the
k-th request of a case with the case's k-th answer, whatever the request says, except where
an answer can only be right with the input in view (a missing or wrong ``severity`` or
``category``): those answers are right when the request quotes the log line that settles
them and repeat the mistake otherwise, as a model would.

The corpus (``CASES``, 24 cases) has the kinds of the contracts issue: valid answers (bare,
fenced, indented), prose before or after, prose and a fence, truncated JSON, trailing
commas, a Python dict, a list too long, a string too long, both, missing or wrong values
that depend on the log, a model-validator failure, a wrong type, a pattern, a nested missing
field, two failures in a row, and one case that never gets valid.

Each framework gets three model calls per case: Lattice ``max_attempts_total=3`` (the
default allows up to 3 per class × 3 classes), Instructor ``max_retries=2``, PydanticAI
``retries={"output": 2}``. Instructor runs in ``Mode.JSON_SCHEMA`` and PydanticAI with
``NativeOutput``: like Lattice, both send the schema as ``response_format`` and read the
answer from the message text. Runs are interleaved (case by case, the frameworks in a
rotating order) and repeated ``--trials`` times; the counts are the same every trial, the
timings vary.

Columns: success (valid outputs / cases), requests per valid output (every request of every
case ÷ valid outputs), request bytes per valid output (HTTP request bodies), repair ÷ first
(mean, over the cases that needed a second request, of the second request's bytes ÷ the
first's), and the median wall time of a case.

    pip install -e '.[bench]'          # instructor and pydantic-ai-slim[openai] (optional)
    python bench/contracts_bench.py     # the table (about a minute)
    python bench/contracts_bench.py --trials 1 --cases 8     # smoke run
    python bench/contracts_bench.py --show CASE              # the requests of one case

Without Instructor or PydanticAI installed their rows are left out. Only the standard
library, lattice (with the ``openai`` extra) and the peers are needed; nothing leaves
127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from importlib import metadata
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from lattice import LLMPrimitive  # noqa: E402
from lattice.contracts.packets import REPAIR_CONTEXT_CHARS  # noqa: E402
from lattice.llm.base import LLMRequest  # noqa: E402
from lattice.llm.fake_server import FakeLLMServer, Received  # noqa: E402
from lattice.llm.openai_provider import OpenAIProvider  # noqa: E402
from lattice.runtime.settings import RuntimeSettings  # noqa: E402

MODEL = "bench-model"
SYSTEM = "You read incident logs and write the incident report for the on-call review."
ATTEMPTS = 3

# -- the model ---------------------------------------------------------------------------------


class Severity(StrEnum):
    low = "low"
    medium = "medium"
    high = "high"
    critical = "critical"


class Category(StrEnum):
    network = "network"
    database = "database"
    deploy = "deploy"
    capacity = "capacity"
    security = "security"


class Service(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    region: str
    owner: str = Field(description="The team that owns the service.")


class Action(BaseModel):
    model_config = ConfigDict(extra="forbid")

    owner: str
    task: str = Field(max_length=120)
    due_hours: int = Field(ge=1, le=72)


class Incident(BaseModel):
    """An incident report for the on-call review."""

    model_config = ConfigDict(extra="forbid")

    incident_id: str = Field(pattern=r"^INC-[0-9]{4}$")
    service: Service
    severity: Severity
    category: Category
    summary: str = Field(max_length=300, description="What happened, for the review.")
    customer_impact: bool
    actions: list[Action] = Field(min_length=1, max_length=4)

    @model_validator(mode="after")
    def _critical_means_impact(self) -> Incident:
        if self.severity is Severity.critical and not self.customer_impact:
            raise ValueError("a critical incident must have customer_impact true")
        return self


# -- the corpus -------------------------------------------------------------------------------

SERVICES = [
    ("payments-api", "eu-west-1", "team-pay", Category.deploy),
    ("search-index", "us-east-2", "team-find", Category.capacity),
    ("auth-gateway", "eu-central-1", "team-id", Category.security),
    ("orders-db", "ap-south-1", "team-data", Category.database),
    ("edge-proxy", "us-west-1", "team-net", Category.network),
]
NOISE = [
    "GET /v2/health 200 {ms} ms",
    "worker pool resized to {n} threads",
    "cache hit ratio {n}%",
    "retrying upstream call (attempt {n})",
    "p99 latency {ms} ms over the last minute",
    "queue depth {n}",
    "GC pause {ms} ms",
    "TLS session resumed for client {n}",
    "rate limiter: {n} requests shed",
    "config reload finished in {ms} ms",
]


def incident_log(seed: int, severity: Severity, category: Category) -> tuple[str, dict[str, Any]]:
    """A ~20 KB log of one incident and the valid report for it."""
    rng = random.Random(seed)
    name, region, owner, _ = SERVICES[seed % len(SERVICES)]
    incident_id = f"INC-{1000 + seed:04d}"
    lines = [f"# incident {incident_id}: log export of {name} ({region}), owned by {owner}"]
    minute = 0
    while sum(len(line) + 1 for line in lines) < 19_000:
        minute += 1
        host = f"{name}-{rng.randint(1, 9)}"
        text = rng.choice(NOISE).format(ms=rng.randint(3, 900), n=rng.randint(1, 64))
        lines.append(f"08:{minute // 60:02d}:{minute % 60:02d} {host} INFO {text}")
        if minute == 90:
            lines.append(
                f"08:01:30 {host} WARN incident commander: severity is {severity.value}, "
                f"category {category.value}, customers affected"
            )
    report = {
        "incident_id": incident_id,
        "service": {"name": name, "region": region, "owner": owner},
        "severity": severity.value,
        "category": category.value,
        "summary": f"{name} in {region} degraded for {rng.randint(5, 50)} minutes; "
        "customers saw errors until the change was rolled back.",
        "customer_impact": True,
        "actions": [
            {"owner": owner, "task": "roll back the last change", "due_hours": 1},
            {"owner": owner, "task": "write the postmortem", "due_hours": 48},
        ],
    }
    Incident.model_validate(report)
    return "\n".join(lines), report


Answer = str | Callable[[str], str]


@dataclass
class Case:
    name: str
    kind: str
    log: str
    answers: list[Answer]

    def answer(self, turn: int, request_text: str) -> str:
        item = self.answers[min(turn, len(self.answers) - 1)]
        return item(request_text) if callable(item) else item


def _dumps(value: Any, indent: int | None = None) -> str:
    return json.dumps(value, indent=indent, ensure_ascii=False)


def _needs(evidence: str, right: str, wrong: str) -> Callable[[str], str]:
    """An answer that is right only when the request shows the line that settles it."""
    return lambda text: right if evidence in text else wrong


def build_cases() -> list[Case]:
    cases: list[Case] = []

    def add(kind: str, make: Callable[[dict[str, Any], str], list[Answer]]) -> None:
        seed = len(cases) + 1
        severity = [Severity.critical, Severity.high, Severity.medium][seed % 3]
        category = SERVICES[seed % len(SERVICES)][3]
        log, report = incident_log(seed, severity, category)
        evidence = f"severity is {severity.value}, category {category.value}"
        cases.append(Case(f"{seed:02d}-{kind}", kind, log, make(report, evidence)))

    def without(report: dict[str, Any], key: str) -> dict[str, Any]:
        return {k: v for k, v in report.items() if k != key}

    def actions(report: dict[str, Any], count: int) -> list[dict[str, Any]]:
        owner = report["service"]["owner"]
        return [{"owner": owner, "task": f"follow-up {i}", "due_hours": 24} for i in range(count)]

    long_summary = "The service degraded after the deploy and customers saw errors. " * 7

    add("valid", lambda r, e: [_dumps(r)])
    add("valid-fenced", lambda r, e: ["```json\n" + _dumps(r, 2) + "\n```", _dumps(r)])
    add("valid-indented", lambda r, e: [_dumps(r, 2)])
    add("prose-before", lambda r, e: ["Here is the incident report:\n" + _dumps(r), _dumps(r)])
    add(
        "prose-after",
        lambda r, e: [_dumps(r) + "\n\nLet me know if you need more detail.", _dumps(r)],
    )
    add(
        "prose-fence",
        lambda r, e: ["Sure!\n```json\n" + _dumps(r, 2) + "\n```\nHope this helps.", _dumps(r)],
    )
    add(
        "prose-fence-before",
        lambda r, e: [
            "Based on the log, the report is:\n\n```json\n" + _dumps(r) + "\n```",
            _dumps(r),
        ],
    )
    add("truncated", lambda r, e: [_dumps(r)[:-40], _dumps(r)])
    add("truncated-early", lambda r, e: [_dumps(r, 2)[:200], _dumps(r)])
    add("trailing-comma", lambda r, e: [_dumps(r)[:-1] + ",}", _dumps(r)])
    add(
        "trailing-comma-list",
        lambda r, e: [_dumps(r).replace("}]}", "},]}"), _dumps(r)],
    )
    add("python-dict", lambda r, e: [repr(r), _dumps(r)])
    add("list-too-long", lambda r, e: [_dumps(dict(r, actions=actions(r, 6))), _dumps(r)])
    add("string-too-long", lambda r, e: [_dumps(dict(r, summary=long_summary)), _dumps(r)])
    add(
        "list-and-string",
        lambda r, e: [_dumps(dict(r, summary=long_summary, actions=actions(r, 7))), _dumps(r)],
    )
    add(
        "missing-severity",
        lambda r, e: [
            _dumps(without(r, "severity")),
            _needs(e, _dumps(r), _dumps(without(r, "severity"))),
        ],
    )
    add(
        "wrong-category",
        lambda r, e: [
            _dumps(dict(r, category="infra")),
            _needs(e, _dumps(r), _dumps(dict(r, category="infra"))),
        ],
    )
    add(
        "model-validator",
        lambda r, e: [_dumps(dict(r, severity="critical", customer_impact=False)), _dumps(r)],
    )
    add(
        "wrong-type",
        lambda r, e: [
            _dumps(dict(r, actions=[dict(r["actions"][0], due_hours="one hour")])),
            _dumps(r),
        ],
    )
    add("pattern", lambda r, e: [_dumps(dict(r, incident_id="inc 12")), _dumps(r)])
    add(
        "nested-missing",
        lambda r, e: [_dumps(dict(r, service=without(r["service"], "owner"))), _dumps(r)],
    )
    add(
        "two-rounds",
        lambda r, e: [
            _dumps(r)[:-25],
            _dumps(dict(r, actions=actions(r, 5))),
            _dumps(r),
        ],
    )
    add(
        "prose-fence-schema",
        lambda r, e: [
            "Here you go:\n```json\n" + _dumps(dict(r, actions=actions(r, 6)), 2) + "\n```",
            _dumps(r),
        ],
    )
    add(
        "never-valid",
        lambda r, e: [_dumps(dict(r, summary=long_summary, incident_id="incident twelve"))],
    )
    return cases


# -- the server ----------------------------------------------------------------------------------


class Script:
    """What the server answers: the current case's k-th answer to its k-th request."""

    def __init__(self) -> None:
        self.case: Case | None = None
        self.turn = 0

    def start(self, case: Case) -> None:
        self.case, self.turn = case, 0

    def __call__(self, body: dict[str, Any]) -> str:
        assert self.case is not None
        text = "\n".join(
            m["content"] if isinstance(m.get("content"), str) else json.dumps(m.get("content"))
            for m in body.get("messages", [])
        )
        answer = self.case.answer(self.turn, text)
        self.turn += 1
        return answer


def body_bytes(received: Received) -> int:
    length = received.headers.get("content-length")
    if length is not None:
        return int(length)
    return len(json.dumps(received.body).encode("utf-8"))


# -- the frameworks ---------------------------------------------------------------------------

Runner = Callable[[Case], Awaitable[bool]]


def lattice_runner(base_url: str, **options: Any) -> Runner:
    block = LLMPrimitive(
        name="incident",
        system_prompt=SYSTEM,
        output_model=Incident,
        provider=OpenAIProvider(base_url=base_url, api_key="bench", default_model=MODEL),
        settings=RuntimeSettings(),
        **options,
    )

    async def run(case: Case) -> bool:
        response = await block.arun(case.log)
        return response.ok

    return run


def instructor_runner(base_url: str) -> Runner | None:
    try:
        import instructor
        from openai import AsyncOpenAI
    except ImportError:
        return None
    client = instructor.from_openai(
        AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0),
        mode=instructor.Mode.JSON_SCHEMA,
    )

    async def run(case: Case) -> bool:
        try:
            await client.chat.completions.create(
                model=MODEL,
                response_model=Incident,
                max_retries=ATTEMPTS - 1,  # retries after the first call
                temperature=0,
                messages=[
                    {"role": "system", "content": SYSTEM},
                    {"role": "user", "content": case.log},
                ],
            )
        except Exception:  # InstructorRetryException and friends: no valid output
            return False
        return True

    return run


def pydantic_ai_runner(base_url: str) -> Runner | None:
    try:
        from pydantic_ai import Agent, NativeOutput
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.providers.openai import OpenAIProvider as PAIProvider
    except ImportError:
        return None
    model = OpenAIChatModel(MODEL, provider=PAIProvider(base_url=base_url, api_key="bench"))
    agent = Agent(
        model,
        output_type=NativeOutput(Incident),
        system_prompt=SYSTEM,
        retries={"output": ATTEMPTS - 1},
        model_settings={"temperature": 0},
    )

    async def run(case: Case) -> bool:
        try:
            await agent.run(case.log)
        except Exception:  # UnexpectedModelBehavior: output retries exhausted
            return False
        return True

    return run


def version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        if package == "lattice-lre":
            return "(this checkout)"
        return "not installed"


# -- measuring --------------------------------------------------------------------------------


@dataclass
class Row:
    name: str
    cases: int = 0
    valid: int = 0
    requests: int = 0
    bytes: int = 0
    ratios: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    per_case: dict[str, tuple[bool, list[int]]] = field(default_factory=dict)

    def record(self, case: Case, ok: bool, sizes: list[int], seconds: float) -> None:
        self.cases += 1
        self.valid += ok
        self.requests += len(sizes)
        self.bytes += sum(sizes)
        if len(sizes) > 1:
            self.ratios.append(sizes[1] / sizes[0])
        self.seconds.append(seconds)
        self.per_case[case.name] = (ok, sizes)


async def measure(
    runners: dict[str, Runner],
    cases: list[Case],
    server: FakeLLMServer,
    script: Script,
    trials: int,
) -> dict[str, Row]:
    rows = {name: Row(name) for name in runners}
    names = list(runners)
    for trial in range(trials):
        for index, case in enumerate(cases):
            shift = (index + trial) % len(names)
            for name in names[shift:] + names[:shift]:  # interleaved, rotating order
                script.start(case)
                before = len(server.received)
                started = time.perf_counter()
                ok = await runners[name](case)
                seconds = time.perf_counter() - started
                sizes = [body_bytes(r) for r in server.received[before:]]
                if trial == 0:
                    rows[name].record(case, ok, sizes, seconds)
                else:
                    rows[name].seconds.append(seconds)
    return rows


def table(rows: dict[str, Row]) -> str:
    out = [
        "| framework | success | requests / valid | KB sent / valid | repair ÷ first | median ms / case |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows.values():
        valid = max(row.valid, 1)
        ratio = statistics.mean(row.ratios) if row.ratios else 0.0
        out.append(
            f"| {row.name} | {row.valid}/{row.cases} | {row.requests / valid:.2f} | "
            f"{row.bytes / valid / 1000:.1f} | {ratio:.2f} | "
            f"{statistics.median(row.seconds) * 1000:.1f} |"
        )
    return "\n".join(out)


def per_case_table(rows: dict[str, Row], cases: list[Case]) -> str:
    names = list(rows)
    out = ["| case | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for case in cases:
        cells = []
        for name in names:
            ok, sizes = rows[name].per_case[case.name]
            kb = "+".join(f"{s / 1000:.1f}" for s in sizes)
            cells.append(f"{'ok' if ok else 'FAIL'} {len(sizes)}× ({kb} KB)")
        out.append(f"| {case.name} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def headline(rows: dict[str, Row]) -> list[str]:
    lattice = rows.get("Lattice")
    lines = []
    if lattice is None:
        return lines
    per_valid = {
        n: (r.requests / max(r.valid, 1), r.bytes / max(r.valid, 1)) for n, r in rows.items()
    }
    for peer in ("Instructor", "PydanticAI"):
        if peer not in rows:
            continue
        row = rows[peer]
        lines.append(
            f"Lattice vs {peer}: success {lattice.valid} vs {row.valid}; requests/valid "
            f"{per_valid['Lattice'][0]:.2f} vs {per_valid[peer][0]:.2f}; bytes/valid ratio "
            f"{per_valid['Lattice'][1] / per_valid[peer][1]:.2f}"
        )
    return lines


def _schema_in_prompt_too(request: LLMRequest) -> LLMRequest:
    return request  # what Lattice sent before the schema went out once


async def main_async(args: argparse.Namespace) -> int:
    cases = build_cases()
    if args.cases:
        cases = cases[: args.cases]
    if args.show:
        cases = [c for c in cases if args.show in c.name]
        if not cases:
            print(f"no case matches {args.show!r}", file=sys.stderr)
            return 2
    for noisy in ("instructor", "pydantic_ai", "httpx", "openai"):
        logging.getLogger(noisy).setLevel(logging.CRITICAL)
    script = Script()
    server = FakeLLMServer(script)
    server.start()
    base_url = server.base_url + "/v1"
    try:
        runners: dict[str, Runner] = {
            "Lattice": lattice_runner(base_url, max_attempts_total=ATTEMPTS)
        }
        for name, make in (("Instructor", instructor_runner), ("PydanticAI", pydantic_ai_runner)):
            runner = make(base_url)
            if runner is not None:
                runners[name] = runner
        if args.variants:
            runners["Lattice, default budget (at most 3 per class × ladder)"] = lattice_runner(
                base_url
            )
            runners["Lattice, strict, no repair context"] = lattice_runner(
                base_url, max_attempts_total=ATTEMPTS, strict_output=True, repair_context_chars=0
            )
        if args.show:
            return await show(runners, cases[0], server, script)
        rows = await measure(runners, cases, server, script, args.trials)
        if args.variants:
            rows.update(await schema_twice_rows(base_url, cases, server, script, args.trials))
    finally:
        server.stop()
    print(
        f"corpus: {len(cases)} cases, context {statistics.mean(len(c.log) for c in cases) / 1000:.1f} KB "
        f"per case; {args.trials} interleaved trial(s); repair context cap {REPAIR_CONTEXT_CHARS}"
    )
    print(
        "versions: lattice "
        + version("lattice-lre")
        + f", instructor {version('instructor')}, pydantic-ai-slim {version('pydantic-ai-slim')}, "
        f"openai {version('openai')}, pydantic {version('pydantic')}, python {sys.version.split()[0]}"
    )
    print()
    print(table(rows))
    print()
    for line in headline(rows):
        print(line)
    if args.per_case:
        print()
        print(per_case_table(rows, cases))
    return 0


async def schema_twice_rows(
    base_url: str, cases: list[Case], server: FakeLLMServer, script: Script, trials: int
) -> dict[str, Row]:
    """Lattice with the schema in the prompt and in response_format, as it sent requests
    before; once as it is otherwise, once also strict, without repair context and with the
    default budget (the closest this checkout gets to the behaviour before the issue)."""
    original = LLMRequest.schema_sent_natively
    LLMRequest.schema_sent_natively = _schema_in_prompt_too  # type: ignore[method-assign]
    try:
        return await measure(
            {
                "Lattice, schema in the prompt too": lattice_runner(
                    base_url, max_attempts_total=ATTEMPTS
                ),
                "Lattice as before (schema twice, strict, no repair context, default budget)": (
                    lattice_runner(base_url, strict_output=True, repair_context_chars=0)
                ),
            },
            cases,
            server,
            script,
            trials,
        )
    finally:
        LLMRequest.schema_sent_natively = original  # type: ignore[method-assign]


async def show(
    runners: dict[str, Runner], case: Case, server: FakeLLMServer, script: Script
) -> int:
    for name, runner in runners.items():
        script.start(case)
        before = len(server.received)
        ok = await runner(case)
        print(f"== {name}: {'valid' if ok else 'no valid output'}")
        for number, received in enumerate(server.received[before:], 1):
            body = dict(received.body)
            messages = body.pop("messages", [])
            print(
                f"-- request {number}: {body_bytes(received)} bytes; other fields: {sorted(body)}"
            )
            for message in messages:
                content = message.get("content")
                text = content if isinstance(content, str) else json.dumps(content)
                if len(text) > 1500:
                    text = text[:700] + f"\n[… {len(text) - 1400} characters …]\n" + text[-700:]
                print(f"[{message.get('role')}]\n{text}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=3, help="interleaved repetitions (timing)")
    parser.add_argument("--cases", type=int, default=0, help="run only the first N cases")
    parser.add_argument("--per-case", action="store_true", help="also print a row per case")
    parser.add_argument(
        "--variants",
        action="store_true",
        help="also run Lattice with its default budget, strict without repair context, with "
        "the schema in the prompt too, and all of these at once (before/after of the "
        "contracts issue)",
    )
    parser.add_argument("--show", metavar="CASE", help="print the requests of one case")
    args = parser.parse_args(argv)
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())

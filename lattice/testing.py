"""Testing workflows with pytest (docs/testing.md).

Installed with Lattice as a pytest plugin (the ``pytest11`` entry point
``lattice.testing``, named after the module so that ``-p lattice.testing`` or
``pytest_plugins = ["lattice.testing"]`` next to it does not register it twice), it gives
tests the ``lattice_run`` fixture::

    def test_billing_tickets_get_a_refund(lattice_run):
        result = lattice_run("flows/triage.json", inputs={...}, mock={"classify": [...]})
        assert result.status == "completed"
        assert result.path == ["start", "classify", ..., "end"]
        assert [c.node for c in result.repairs] == []
        assert result.transcript() == snapshot        # syrupy

``lattice_run`` lowers the document, runs it in memory with a mock script (or fixtures,
or any provider) and returns a ``LatticeRun``: the run's vars, output and status, the
path it took, every model call, and a transcript that stays the same from run to run
(no timestamps, run ids or durations). Loading the plugin costs an import of this
module only: the runtime is imported by the first ``lattice_run``.

The ``lattice_eval`` fixture runs ``lattice eval`` (docs/evals.md) and returns an
``EvalOutcome``, so that a suite fails when a change makes a workflow worse::

    def test_triage_keeps_its_thresholds(lattice_eval):
        outcome = lattice_eval("flows/triage.json", "flows/triage.eval.jsonl",
                               mock="flows/triage.mock.json", thresholds={"category": 0.95})
        outcome.assert_thresholds()     # fails with the report's table and verdict
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from lattice.events import EventKind

if TYPE_CHECKING:
    from lattice.contracts.report import FailureReport
    from lattice.contracts.usage import Usage
    from lattice.evals.run import EvalReport
    from lattice.ir.models import ExecIR
    from lattice.llm.base import LLMProvider
    from lattice.runtime.results import RunResult
    from lattice.runtime.settings import RuntimeSettings

__all__ = [
    "Call",
    "EvalOutcome",
    "LatticeRun",
    "evaluate",
    "lattice_eval",
    "lattice_run",
    "run_workflow",
]

SYNTHETIC_KINDS = ("FORK", "JOIN")
"""Ops that lowering adds where connections fan out and meet: not nodes of the document,
so not on ``LatticeRun.path`` (the transcript shows them)."""


@dataclass(frozen=True)
class Call:
    """One model call (an attempt) of a run."""

    node: str
    attempt: int
    """Its number within the op's contract call (1 for the first request)."""
    kind: str
    """``initial``, ``retry``, ``repair`` or ``escalation``."""
    model_class: str
    ok: bool
    """An answer came and met the contract."""
    error_type: str | None = None
    """Why it did not (``schema_error``, ``rate_limit_error``, …)."""
    branch: str | None = None
    """The parallel branch it was made in, if any."""


class LatticeRun:
    """A finished run as a test sees it (``RunResult`` is at ``.result``)."""

    def __init__(self, result: RunResult) -> None:
        self.result = result
        self.events: list[dict[str, Any]] = result.events
        self._calls: list[Call] | None = None

    # -- what the run produced ----------------------------------------------------------

    @property
    def status(self) -> str:
        return self.result.status

    @property
    def output(self) -> Any:
        return self.result.output

    @property
    def vars(self) -> dict[str, Any]:
        """``$vars`` at the end: ``vars["classify"]["result"]`` is the classify node's result."""
        return self.result.vars

    @property
    def failure(self) -> FailureReport | None:
        return self.result.failure

    @property
    def usage(self) -> Usage:
        return self.result.usage

    @property
    def run_dir(self) -> Path | None:
        return self.result.run_dir

    # -- how it got there ---------------------------------------------------------------

    @property
    def path(self) -> list[str]:
        """The nodes the main walk went through, in order: a node visited twice is there
        twice (the ops one node lowers to count as one visit); the nodes of parallel
        branches are in ``branch_paths``."""
        return _paths(self.events).get(None, [])

    @property
    def branch_paths(self) -> dict[str, list[str]]:
        """Branch id (``0002.1``: branch 1 of the fork at op 2) → its nodes, in order."""
        branches = {b: nodes for b, nodes in _paths(self.events).items() if b is not None}
        return {branch: branches[branch] for branch in sorted(branches, key=_branch_key)}

    @property
    def visited(self) -> set[str]:
        """Every node that ran, in any branch."""
        return {e["node_id"] for e in self.events if e["type"] == EventKind.OP_STARTED}

    @property
    def calls(self) -> list[Call]:
        """Every model call, in the order they were made."""
        if self._calls is None:
            self._calls = _calls(self.events)
        return list(self._calls)

    def calls_to(self, node: str) -> list[Call]:
        return [c for c in self.calls if c.node == node]

    @property
    def repairs(self) -> list[Call]:
        """The calls that sent a repair packet (the answer before broke the contract)."""
        return [c for c in self.calls if c.kind == "repair"]

    @property
    def escalations(self) -> list[Call]:
        return [c for c in self.calls if c.kind == "escalation"]

    @property
    def retries(self) -> list[Call]:
        return [c for c in self.calls if c.kind == "retry"]

    def transcript(self, *, prompts: bool = False) -> str:
        """The run as text that is the same every time the same run is made: each op with
        its port, model calls, contract violations, repairs, escalations, state writes
        and branches, then the status and output. Nothing that varies from run to run
        (timestamps, run ids, durations, latencies, retry delays) is in it. ``prompts``
        adds each request's prompt hash and the start of its prompt."""
        return _Transcript(self.events, prompts=prompts).render(self.result)

    def __repr__(self) -> str:
        failure = self.result.failure
        why = f", failure={failure.category}: {failure.summary!r}" if failure else ""
        return f"<LatticeRun {self.status}{why}, path={self.path}>"


def _paths(events: list[dict[str, Any]]) -> dict[str | None, list[str]]:
    """Track → its nodes in order. An op of the node the track is in, other than the op
    that entered it, continues the visit (an ASK is an ASK op and a SWITCH op)."""
    paths: dict[str | None, list[str]] = {}
    entered: dict[str | None, tuple[str, str]] = {}
    for e in events:
        if e["type"] != EventKind.OP_STARTED or e["data"].get("kind") in SYNTHETIC_KINDS:
            continue
        track, node, op = e.get("branch"), e["node_id"], e["op_id"]
        last = entered.get(track)
        if last is not None and last[0] == node and last[1] != op:
            continue
        entered[track] = (node, op)
        paths.setdefault(track, []).append(node)
    return paths


def _branch_key(branch: str) -> tuple[int, ...]:
    return tuple(int(part) for part in branch.split(".") if part.isdigit())


def _calls(events: list[dict[str, Any]]) -> list[Call]:
    calls: list[dict[str, Any]] = []
    open_calls: dict[tuple[str | None, str | None], dict[str, Any]] = {}
    for e in events:
        kind, data = e["type"], e["data"]
        key = (e.get("branch"), e.get("op_id"))
        call = open_calls.get(key)
        if kind == EventKind.LLM_REQUEST:
            call = {
                "node": e.get("node_id"),
                "attempt": data.get("attempt"),
                "kind": data.get("kind"),
                "model_class": data.get("model_class"),
                "answered": False,
                "error_type": None,
                "branch": e.get("branch"),
            }
            calls.append(call)
            open_calls[key] = call
        elif call is None:
            continue
        elif kind == EventKind.LLM_RESPONSE:
            call["answered"] = True
        elif kind in (EventKind.VALIDATION_FAILED, EventKind.RETRY) and call["error_type"] is None:
            call["error_type"] = data.get("error_type")
        elif kind == EventKind.OP_FINISHED:
            if not call["answered"] and call["error_type"] is None:
                call["error_type"] = data.get("error_type") or "error"
            open_calls.pop(key, None)
    return [
        Call(
            node=str(c["node"]),
            attempt=int(c["attempt"] or 0),
            kind=str(c["kind"]),
            model_class=str(c["model_class"]),
            ok=c["answered"] and c["error_type"] is None,
            error_type=c["error_type"],
            branch=c["branch"],
        )
        for c in calls
    ]


def _value(value: Any, limit: int = 2000) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _Transcript:
    """Renders events as indented lines, each branch under the fork that started it."""

    def __init__(self, events: list[dict[str, Any]], *, prompts: bool) -> None:
        self.prompts = prompts
        self.by_track: dict[str | None, list[dict[str, Any]]] = {}
        for e in events:
            self.by_track.setdefault(e.get("branch"), []).append(e)
        self.children: dict[str | None, list[list[str]]] = {}
        """Track → its forks' branch ids, grouped per fork, in the order the forks ran."""
        groups: dict[str | None, dict[str, list[str]]] = {}
        for branch in self.by_track:
            if branch is None:
                continue
            parts = branch.split(".")
            parent = ".".join(parts[:-2]) or None
            groups.setdefault(parent, {}).setdefault(".".join(parts[:-1]), []).append(branch)
        for parent, forks in groups.items():
            self.children[parent] = [
                sorted(ids, key=_branch_key)
                for _, ids in sorted(forks.items(), key=lambda item: _branch_key(item[0]))
            ]
        self.lines: list[str] = []

    def render(self, result: RunResult) -> str:
        self._track(None, "")
        self.lines.append(f"status: {result.status}")
        if result.failure is not None:
            failure = result.failure
            self.lines.append(
                f"failure: [{failure.category}] at {failure.node_id}: {failure.summary}"
            )
        if result.status == "completed":
            self.lines.append(f"output: {_value(result.output)}")
        return "\n".join(self.lines) + "\n"

    def _track(self, track: str | None, indent: str) -> None:  # noqa: C901
        forks = iter(self.children.get(track, []))
        say = self.lines.append
        inner = indent + "  "
        for e in self.by_track.get(track, []):
            kind, data = e["type"], e["data"]
            if kind == EventKind.RUN_STARTED:
                say(f"{indent}run {data.get('workflow')} inputs={_value(data.get('inputs'))}")
            elif kind == EventKind.RUN_RESUMED:
                say(f"{indent}resumed after {data.get('after')} from {data.get('from_op')}")
            elif kind == EventKind.OP_STARTED:
                say(f"{indent}{e.get('node_id')} ({data.get('kind')})")
            elif kind == EventKind.OP_FINISHED:
                if "error_type" in data:
                    say(f"{inner}failed: {data['error_type']}")
                elif data.get("port") not in (None, "", "default"):
                    say(f"{inner}-> {data['port']}")
            elif kind == EventKind.LLM_REQUEST:
                model = f" {data['model']}" if data.get("model") else ""
                say(
                    f"{inner}call {data.get('attempt')} {data.get('kind')} "
                    f"[{data.get('model_class')}]{model}"
                )
                if self.prompts:
                    say(f"{inner}  prompt {data.get('prompt_hash')}: {data.get('prompt_preview')}")
            elif kind == EventKind.LLM_RESPONSE:
                say(f"{inner}  answered ({data.get('finish_reason')})")
            elif kind == EventKind.VALIDATION_FAILED:
                say(f"{inner}  broke the contract: {data.get('error_type')}")
                for violation in data.get("violations") or ():
                    say(f"{inner}    {violation.get('pointer')}: {violation.get('message')}")
            elif kind == EventKind.OUTPUT_SALVAGED:
                say(f"{inner}  salvaged the JSON from the answer")
            elif kind == EventKind.RETRY:
                say(f"{inner}  failed: {data.get('error_type')} (retry {data.get('retry')})")
            elif kind == EventKind.REPAIR_ATTEMPT:
                count = len(data.get("violations") or ())
                say(f"{inner}repair for {count} violation{'' if count == 1 else 's'}")
            elif kind == EventKind.ESCALATED:
                say(f"{inner}escalate {data.get('from')} -> {data.get('to')}")
            elif kind == EventKind.STATE_WRITE:
                if "value" in data:
                    say(f"{inner}set {data.get('path')} = {_value(data['value'])}")
                elif data.get("deleted"):
                    say(f"{inner}delete {data.get('path')}")
                else:
                    say(f"{inner}append {data.get('path')} <- {_value(data.get('appended'))}")
            elif kind == EventKind.HUMAN_ANSWER:
                say(f"{inner}answer {_value(data.get('answer'))}")
            elif kind == EventKind.TOOL_CALL:
                name = data.get("name") or data.get("method")
                say(f"{inner}tool {data.get('tool')} {data.get('server') or ''} {name}".rstrip())
            elif kind == EventKind.TOOL_RESULT and "status" in data:
                say(f"{inner}  status {data['status']}")
            elif kind in (EventKind.FORK_STARTED, EventKind.FOR_EACH_STARTED):
                for branch in next(forks, []):
                    say(f"{inner}branch {branch}")
                    self._track(branch, inner + "  ")
            elif kind == EventKind.RUN_HALTED:
                say(f"{indent}halted: {data.get('reason')}: {data.get('summary')}")
            elif kind == EventKind.RUN_INTERRUPTED:
                say(f"{indent}interrupted")


# -- running --------------------------------------------------------------------------


async def _no_wait(seconds: float) -> None:
    """Retries in tests do not wait out their backoff."""
    return None


def _provider(
    mock: Mapping[str, Any] | str | Path | None,
    fixtures: str | Path | None,
    provider: LLMProvider | None,
    search: Sequence[Path],
) -> LLMProvider:
    from lattice.llm.disabled import DisabledProvider
    from lattice.llm.fixture import FixtureProvider
    from lattice.llm.mock import MockProvider

    given = [x for x in (mock, fixtures, provider) if x is not None]
    if len(given) > 1:
        raise ValueError("give one of mock=, fixtures= and provider=")
    if provider is not None:
        return provider
    if fixtures is not None:
        return FixtureProvider(_resolve(fixtures, search))
    if mock is None:
        return DisabledProvider()
    if isinstance(mock, str | Path):
        return MockProvider.from_file(_resolve(mock, search))
    if "responses" in mock:
        return MockProvider.from_script(mock)
    return MockProvider({node: a if isinstance(a, list) else [a] for node, a in mock.items()})


def _resolve(path: str | Path, search: Sequence[Path]) -> Path:
    """``path`` itself when it exists (absolute, or from the working directory), else the
    first folder of ``search`` that has it, else ``path`` (whose error will name it)."""
    candidate = Path(path)
    if candidate.is_absolute() or candidate.exists():
        return candidate
    for folder in search:
        if (folder / candidate).exists():
            return folder / candidate
    return candidate


def run_workflow(
    workflow: str | Path | Mapping[str, Any] | ExecIR,
    inputs: Mapping[str, Any] | None = None,
    mock: Mapping[str, Any] | str | Path | None = None,
    *,
    fixtures: str | Path | None = None,
    provider: LLMProvider | None = None,
    answers: Mapping[str, Any] | None = None,
    settings: RuntimeSettings | None = None,
    runs_dir: str | Path | None = None,
    search: Sequence[str | Path] = (),
) -> LatticeRun:
    """Lower ``workflow`` (a file, a document or an ExecIR) and run it with ``inputs``.

    The model's answers come from ``mock`` (a mock script, ``{node: [answers]}`` — a
    single answer need not be in a list — or a ``.mock.json`` file), ``fixtures`` (a
    fixtures file) or ``provider``; with none, the first model call fails. ``answers``
    answer the document's questions. ``settings`` default to ``RuntimeSettings()``,
    and retries never wait out their backoff; the run is kept in memory unless
    ``runs_dir`` is given. Relative paths are looked up from the working directory,
    then in each folder of ``search``.
    """
    from dataclasses import replace

    from lattice.ir.models import ExecIR
    from lattice.lower import lower
    from lattice.runs.store import RunStore
    from lattice.runtime.runner import Runner
    from lattice.runtime.settings import RuntimeSettings

    folders = [Path(folder) for folder in search]
    if isinstance(workflow, ExecIR):
        ir = workflow
    elif isinstance(workflow, Mapping):
        ir = lower(dict(workflow))
    else:
        ir = lower(_resolve(workflow, folders))
    settings = settings or RuntimeSettings()
    if settings.sleep is asyncio.sleep:  # a fake clock of the test's own is kept
        settings = replace(settings, sleep=_no_wait)
    runner = Runner(
        ir,
        provider=_provider(mock, fixtures, provider, folders),
        store=RunStore(None if runs_dir is None else Path(runs_dir)),
        answers=answers,
        settings=settings,
    )
    return LatticeRun(runner.run(dict(inputs or {})))


# -- the pytest plugin ----------------------------------------------------------------


@pytest.fixture
def lattice_run(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Callable[..., LatticeRun]:
    """``lattice_run(workflow, inputs=None, mock=None, *, fixtures=None, provider=None,
    answers=None, settings=None, record=False)`` runs a workflow (``run_workflow``) and
    returns a ``LatticeRun``. Relative paths are looked up from the working directory,
    then the rootdir, then the test file's folder. ``record=True`` also writes a run
    folder, under a temporary directory (``result.run_dir``)."""
    search = (Path(request.config.rootpath), Path(request.path).parent)

    def run(
        workflow: str | Path | Mapping[str, Any] | ExecIR,
        inputs: Mapping[str, Any] | None = None,
        mock: Mapping[str, Any] | str | Path | None = None,
        *,
        record: bool = False,
        **options: Any,
    ) -> LatticeRun:
        runs_dir = tmp_path_factory.mktemp("lattice-runs") if record else None
        return run_workflow(workflow, inputs, mock, runs_dir=runs_dir, search=search, **options)

    return run


# -- evaluations ----------------------------------------------------------------------


@dataclass(frozen=True)
class EvalOutcome:
    """What ``lattice_eval`` (or ``evaluate``) found: the report, and ways to assert on it."""

    report: EvalReport

    @property
    def passed(self) -> bool:
        """The thresholds hold and no more rows regressed than allowed (exit code 0)."""
        return self.report.exit_code == 0

    @property
    def regressed(self) -> list[Any]:
        """The ids of the rows the second variant scores lower than the first."""
        return [change.id for change in self.report.regressions]

    def mean(self, scorer: str, variant: int = -1) -> float | None:
        """A scorer's mean over a variant's rows (the last variant by default)."""
        for result in self.report.variants[variant].scorers:
            if result.name == scorer:
                return result.interval.mean if result.interval is not None else None
        raise KeyError(f"no scorer {scorer!r}")

    @property
    def text(self) -> str:
        """The report as ``lattice eval`` prints it."""
        from lattice.evals.report import render

        return render(self.report)

    def assert_thresholds(self) -> None:
        """Raise AssertionError, with the report's text, unless the evaluation passed."""
        if not self.passed:
            raise AssertionError("the evaluation failed:\n" + self.text)


def evaluate(
    workflow: str | Path,
    dataset: str | Path,
    *,
    mock: str | Path | None = None,
    mock_b: str | Path | None = None,
    variant: str | Path | None = None,
    results: Sequence[str | Path] = (),
    scorers: Sequence[Mapping[str, Any] | str] = (),
    thresholds: Mapping[str, float] | None = None,
    max_regressions: int = 0,
    out_dir: str | Path,
    search: Sequence[str | Path] = (),
    **options: Any,
) -> EvalOutcome:
    """Run ``lattice eval`` from Python: ``workflow`` over ``dataset`` (and a second
    variant: ``variant`` a document, or ``mock_b`` a mock script; or ``results``, one or
    two recorded results files), the results under ``out_dir``. ``scorers`` add to the
    dataset's (JSON forms, or Python functions as ``{"type": "python", "function":
    "module:function"}``), ``thresholds`` override its thresholds. Other keyword
    arguments go to ``lattice.evals.run.EvalOptions`` (``provider``, ``cache``,
    ``judge_mock``, ``config``, ``concurrency``, …)."""
    from lattice.evals.run import EvalOptions, Evaluation, Variant
    from lattice.evals.scorers import parse_spec
    from lattice.runtime.sync import run_sync

    folders = [Path(folder) for folder in search]

    def found(path: str | Path | None) -> Path | None:
        return None if path is None else _resolve(path, folders)

    if results:
        variants = [
            Variant(label, results=found(path)) for label, path in zip("AB", results, strict=False)
        ]
    else:
        first = Variant("A", found(workflow), mock=found(mock))
        variants = [first]
        if variant is not None or mock_b is not None:
            variants.append(
                Variant("B", found(variant) or first.workflow, mock=found(mock_b) or first.mock)
            )
    specs = [
        parse_spec(spec, f"scorers[{i}]", origin="command line", index=i)
        for i, spec in enumerate(scorers)
    ]
    eval_options = EvalOptions(
        dataset=_resolve(dataset, folders),
        variants=variants,
        out_dir=out_dir,
        scorers=specs,
        thresholds=dict(thresholds or {}),
        max_regressions=max_regressions,
        progress="none",
        **options,
    )
    report = run_sync(Evaluation(eval_options).arun, what="lattice eval")
    return EvalOutcome(report)


@pytest.fixture
def lattice_eval(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Callable[..., EvalOutcome]:
    """``lattice_eval(workflow, dataset, *, mock=None, mock_b=None, variant=None,
    results=(), scorers=(), thresholds=None, max_regressions=0, **options)`` runs an
    evaluation (``evaluate``) under a temporary directory and returns an
    ``EvalOutcome``; ``outcome.assert_thresholds()`` fails the test when it did not
    pass. Paths are looked up as ``lattice_run`` looks them up."""
    search = (Path(request.config.rootpath), Path(request.path).parent)

    def run(workflow: str | Path, dataset: str | Path, **options: Any) -> EvalOutcome:
        out_dir = options.pop("out_dir", None) or tmp_path_factory.mktemp("lattice-eval")
        return evaluate(workflow, dataset, out_dir=out_dir, search=search, **options)

    return run

"""``lattice eval``: run a workflow (or two variants of it) over a dataset and score it.

Each variant runs with the batch engine (``lattice.batch``) into a results file of its
own under the output directory, named after what makes the variant (its document as
written, its mock script or provider, its configuration's models): running the same
command again resumes each variant's batch, and a changed variant writes a new file. A
variant may also be a results file recorded earlier (``results=``), scored as it is.

The rows are then scored (``lattice.evals.scoring``), each scorer summarised per
variant (mean, 95% interval, threshold), and the two variants compared row by row.
The exit code is 1 when the candidate (the last variant) misses a threshold or more
rows regressed than allowed, else 0.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from lattice.batch.engine import BatchOptions, BatchRun, EngineName
from lattice.batch.limits import BatchLimits
from lattice.batch.results import read_results
from lattice.batch.rows import InvalidLine
from lattice.batch.summary import BatchSummary
from lattice.config import LatticeConfig, load_config
from lattice.document.loader import read_json_file
from lattice.errors import InputError, LatticeUserError, did_you_mean
from lattice.evals.cache import CachedProvider
from lattice.evals.dataset import Dataset, read_dataset
from lattice.evals.judge import JudgeModel, JudgeScorer
from lattice.evals.scorers import Scorer, ScorerSpec, build
from lattice.evals.scoring import (
    Change,
    RowScores,
    ScorerResult,
    compare,
    regressed_rows,
    score_variant,
    summarize_scores,
)
from lattice.ir.models import ExecIR
from lattice.llm.base import LLMProvider
from lattice.lower import lower
from lattice.runtime.settings import settings_from_config
from lattice.service.providers import ProviderChoice, make_provider

EXIT_PASSED = 0
EXIT_REGRESSED = 1


@dataclass
class Variant:
    """One side of an evaluation: a document with a mock script (or the provider), or a
    results file recorded before."""

    label: str
    workflow: Path | None = None
    mock: Path | None = None
    results: Path | None = None
    ir: ExecIR | None = None
    """The workflow lowered (``workflow`` is lowered when not given)."""

    def describe(self) -> str:
        if self.results is not None:
            return f"results {self.results}"
        parts = [str(self.workflow)]
        if self.mock is not None:
            parts.append(f"mock {self.mock}")
        return ", ".join(parts)


@dataclass
class EvalOptions:
    """Everything ``lattice eval`` is told."""

    dataset: str | Path
    variants: Sequence[Variant]
    out_dir: str | Path = "eval-out"
    scorers: Sequence[ScorerSpec] = ()
    """Scorers from the command line or lattice.toml, after the dataset's."""
    thresholds: Mapping[str, float] = field(default_factory=dict)
    """Thresholds from the command line (over the dataset's)."""
    max_regressions: int = 0
    provider: str | None = None
    fixtures: str | Path | None = None
    cache: str | Path | None = None
    judge_mock: str | Path | Mapping[str, Any] | None = None
    judge_provider: str | None = None
    config: LatticeConfig | str | Path | None = None
    concurrency: int = 16
    record: bool = True
    """Keep each row's run folder (under ``out_dir/runs``): needed to score a node's result."""
    durability: Literal["fsync", "os"] | None = "os"
    limits: BatchLimits = field(default_factory=BatchLimits)
    max_calls: int | None = None
    max_tokens_total: int | None = None
    engine: EngineName = "local"
    ray_address: str | None = None
    progress: str | bool | None = None
    on_invalid: Callable[[InvalidLine], None] | None = None
    on_warning: Callable[[str], None] | None = None


@dataclass
class VariantReport:
    """One variant's rows, scores and costs."""

    variant: Variant
    results_path: Path
    rows: dict[str, RowScores]
    scorers: list[ScorerResult]
    summary: BatchSummary | None = None
    """The batch's summary (None for a recorded results file)."""

    @property
    def passed(self) -> bool:
        return all(result.passed is not False for result in self.scorers)

    def scorer(self, name: str) -> ScorerResult:
        """The result of the scorer named ``name``."""
        return next(result for result in self.scorers if result.name == name)

    def totals(self) -> dict[str, Any]:
        rows = list(self.rows.values())
        costs = [r.cost_usd for r in rows if r.cost_usd is not None]
        latencies = sorted(r.latency_ms for r in rows if r.latency_ms is not None)
        return {
            "rows": len(rows),
            "completed": sum(1 for r in rows if r.status == "completed"),
            "calls": sum(r.calls for r in rows),
            "cost_usd": sum(costs) if costs else None,
            "cost_per_row_usd": sum(costs) / len(costs) if costs else None,
            "latency_ms_mean": sum(latencies) / len(latencies) if latencies else None,
            "latency_ms_p50": latencies[len(latencies) // 2] if latencies else None,
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "label": self.variant.label,
            "variant": self.variant.describe(),
            "results": str(self.results_path),
            "passed": self.passed,
            "scorers": [result.to_json() for result in self.scorers],
            "totals": self.totals(),
            "rows": [row.to_json() for row in self.rows.values()],
        }


@dataclass
class EvalReport:
    """What an evaluation found: per variant, per scorer, per row; and what changed."""

    dataset: str
    scorers: list[ScorerSpec]
    variants: list[VariantReport]
    changes: list[Change]
    max_regressions: int
    reused_calls: int | None = None
    """Model calls answered from the cache (None: no cache)."""
    sent_calls: int | None = None
    judge_calls: int = 0
    judge_repairs: int = 0

    @property
    def candidate(self) -> VariantReport:
        return self.variants[-1]

    @property
    def regressions(self) -> list[Change]:
        return regressed_rows(self.changes)

    @property
    def exit_code(self) -> int:
        if not self.candidate.passed or len(self.regressions) > self.max_regressions:
            return EXIT_REGRESSED
        return EXIT_PASSED

    def to_json(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "scorers": [
                {"name": s.name, "type": s.type, "node": s.node, "pass": s.pass_at}
                for s in self.scorers
            ],
            "variants": [variant.to_json() for variant in self.variants],
            "changes": [change.to_json() for change in self.changes],
            "regressed": [change.id for change in self.regressions],
            "max_regressions": self.max_regressions,
            "cache": None
            if self.reused_calls is None
            else {"reused": self.reused_calls, "sent": self.sent_calls},
            "judge": {"calls": self.judge_calls, "repairs": self.judge_repairs},
            "exit_code": self.exit_code,
        }


def _config(options: EvalOptions) -> LatticeConfig:
    if isinstance(options.config, LatticeConfig):
        return options.config
    return load_config(str(options.config) if options.config is not None else None)


def _digest(*parts: Any) -> str:
    text = json.dumps(parts, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def _file_text(path: Path | str | None) -> str | None:
    if path is None:
        return None
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise LatticeUserError(f"cannot read {path}: {exc.strerror}") from None


class Evaluation:
    """One ``lattice eval`` (see the module docstring). ``arun`` returns the report."""

    def __init__(self, options: EvalOptions) -> None:
        if not 1 <= len(options.variants) <= 2:
            raise LatticeUserError("an evaluation has one variant or two")
        self.options = options
        self.config = _config(options)
        self.dataset: Dataset = read_dataset(options.dataset)
        self.out_dir = Path(options.out_dir)
        for variant in options.variants:
            if variant.results is None and variant.ir is None:
                if variant.workflow is None:
                    raise LatticeUserError(f"variant {variant.label} has no workflow")
                variant.ir = lower(variant.workflow)
        self.specs = self._specs()
        self.caches: list[CachedProvider] = []
        """The call caches (``--cache``): the runs' provider's, and a judge's of its own."""
        self.provider: LLMProvider | None = self._provider()
        self._judges: list[JudgeScorer] = []
        self.scorers = [self._build(spec) for spec in self.specs]
        self.row_scorers = {
            key: [self._build(spec) for spec in expectation.assertions]
            for key, expectation in self.dataset.expectations.items()
            if expectation.assertions
        }

    def _specs(self) -> list[ScorerSpec]:
        specs = list(self.dataset.scorers)
        if not specs and any(e.has_expected for e in self.dataset.expectations.values()):
            specs.append(ScorerSpec(name="exact", type="exact"))
        names = {spec.name for spec in specs}
        row_names = {s.name for e in self.dataset.expectations.values() for s in e.assertions}
        for spec in self.options.scorers:
            if spec.name in names | row_names:
                raise InputError(
                    f"scorer {spec.name!r} ({spec.origin}) has the name of a dataset scorer: "
                    "give it another name"
                )
            names.add(spec.name)
            specs.append(spec)
        if not specs and not any(e.assertions for e in self.dataset.expectations.values()):
            raise InputError(
                f'{self.dataset.path}: nothing to score: give rows an "expected" value or '
                '"expect" assertions, or name scorers ({"$eval": {"scorers": …}} on its '
                "first line, or --scorer)"
            )
        thresholds = {**self.dataset.thresholds, **self.options.thresholds}
        known = names | row_names
        for name in thresholds:
            if name not in known:
                raise InputError(
                    f"a threshold names no scorer: {name!r}{did_you_mean(name, sorted(known))}"
                )
        specs = [
            ScorerSpec(**{**spec.__dict__, "threshold": thresholds.get(spec.name, spec.threshold)})
            for spec in specs
        ]
        self._check_nodes(
            [*specs, *(s for e in self.dataset.expectations.values() for s in e.assertions)]
        )
        self.thresholds = {
            **{s.name: s.threshold for s in specs if s.threshold is not None},
            **{name: value for name, value in thresholds.items() if name in row_names},
        }
        return specs

    def _check_nodes(self, specs: Sequence[ScorerSpec]) -> None:
        nodes: set[str] = set()
        for variant in self.options.variants:
            if variant.ir is not None:
                nodes |= {op.source_node for op in variant.ir.ops.values()}
        for spec in specs:
            if spec.node is None:
                continue
            if nodes and spec.node not in nodes:
                raise InputError(
                    f"scorer {spec.name!r} scores node {spec.node!r}, which the workflow "
                    f"does not have{did_you_mean(spec.node, sorted(nodes))}"
                )
            if not self.options.record and any(v.results is None for v in self.options.variants):
                raise InputError(
                    f"scorer {spec.name!r} scores node {spec.node!r}: its result is read "
                    "from the row's run folder, which --no-record does not keep"
                )

    def _provider(self) -> LLMProvider | None:
        """The provider rows share: the cache over the live provider, when asked for."""
        options = self.options
        if options.cache is None:
            return None
        if any(v.mock is not None for v in options.variants) or options.fixtures is not None:
            raise LatticeUserError(
                "--cache keeps a live provider's answers: it is not used with --mock or --fixtures"
            )
        if options.engine != "local":
            raise LatticeUserError("--cache is a file of this process: use the local engine")
        return self._cached(ProviderChoice(name=options.provider).build(self.config))

    def _cached(self, live: LLMProvider) -> CachedProvider:
        """``live`` behind the call cache, its keys scoped to its name and the models."""
        assert self.options.cache is not None
        scope = _digest(getattr(live, "name", ""), self.config.llm.model_dump(mode="json"))
        cache = CachedProvider(self.options.cache, live, scope=scope)
        self.caches.append(cache)
        return cache

    def _judge_model(self) -> JudgeModel:
        options = self.options
        settings = settings_from_config(self.config)
        script = options.judge_mock
        if script is not None:
            if not isinstance(script, Mapping):
                text = _file_text(Path(script))
                try:
                    script = json.loads(text or "")
                except json.JSONDecodeError as exc:
                    raise LatticeUserError(
                        f"judge mock script {options.judge_mock}: {exc}"
                    ) from None
            if not isinstance(script, Mapping):
                raise LatticeUserError("a judge mock script is a JSON object")
            return JudgeModel(script=dict(script), settings=settings)
        if self.provider is not None and options.judge_provider is None:
            return JudgeModel(provider=self.provider, settings=settings)
        provider = make_provider(options.judge_provider or options.provider, config=self.config)
        if getattr(provider, "name", None) == "disabled":
            raise LatticeUserError(
                "a judge scorer needs a model: give --judge-mock FILE, --judge-provider NAME "
                "or --provider NAME (or configure one in lattice.toml)"
            )
        if options.cache is not None:
            provider = self._cached(provider)
        return JudgeModel(provider=provider, settings=settings)

    def _build(self, spec: ScorerSpec) -> Scorer:
        def judge(spec: ScorerSpec) -> Scorer:
            model = self._judge_model()
            scorer = JudgeScorer(spec, model)
            self._judges.append(scorer)
            return scorer

        return build(spec, judge)

    def results_path(self, variant: Variant) -> Path:
        """The variant's results file: named by what makes the variant (module docstring)."""
        if variant.results is not None:
            return variant.results
        assert variant.workflow is not None
        options = self.options
        key = _digest(
            read_json_file(variant.workflow),
            _file_text(variant.mock),
            options.provider,
            str(Path(options.fixtures).resolve()) if options.fixtures else None,
            self.config.llm.model_dump(mode="json"),
        )
        return self.out_dir / f"{variant.label}-{key}.jsonl"

    async def _run_variant(self, variant: Variant) -> tuple[Path, BatchSummary | None]:
        path = self.results_path(variant)
        if variant.results is not None:
            return path, None
        options = self.options
        self.out_dir.mkdir(parents=True, exist_ok=True)
        assert variant.workflow is not None
        batch = BatchOptions(
            workflow=variant.ir or variant.workflow,
            document=read_json_file(variant.workflow),
            inputs=self.dataset.path,
            output=path,
            concurrency=options.concurrency,
            runs_dir=self.out_dir / "runs" if options.record else None,
            provider=self.provider if self.provider is not None else options.provider,
            mock=variant.mock,
            fixtures=options.fixtures,
            config=self.config,
            durability=options.durability,
            max_calls=options.max_calls,
            max_tokens_total=options.max_tokens_total,
            limits=options.limits,
            engine=options.engine,
            ray_address=options.ray_address,
            progress=options.progress,
            on_invalid=options.on_invalid if variant is options.variants[0] else None,
            on_warning=options.on_warning,
        )
        summary = await BatchRun(batch).arun()
        return path, summary

    def _all_specs(self) -> list[ScorerSpec]:
        """Every scorer reported: the dataset's and the command line's, then the rows'
        assertions (one line per name, over the rows that have it)."""
        specs = list(self.specs)
        seen = {spec.name for spec in specs}
        for expectation in self.dataset.expectations.values():
            for spec in expectation.assertions:
                if spec.name not in seen:
                    seen.add(spec.name)
                    specs.append(spec)
        return specs

    async def arun(self) -> EvalReport:
        reports: list[VariantReport] = []
        all_specs = self._all_specs()
        names = [spec.name for spec in all_specs]
        for variant in self.options.variants:
            path, summary = await self._run_variant(variant)
            lines = read_results(path)
            rows = await score_variant(
                self.dataset,
                lines,
                self.scorers,
                self.row_scorers,
                concurrency=self.options.concurrency,
            )
            results = summarize_scores(rows, names, self.thresholds)
            reports.append(VariantReport(variant, path, rows, results, summary))
        changes = compare(reports[0].rows, reports[1].rows) if len(reports) == 2 else []
        judge_calls = judge_repairs = 0
        for report in reports:
            for row in report.rows.values():
                for score in row.scores.values():
                    judge_calls += score.calls
                    judge_repairs += score.repairs
        return EvalReport(
            dataset=str(self.dataset.path),
            scorers=all_specs,
            variants=reports,
            changes=changes,
            max_regressions=self.options.max_regressions,
            reused_calls=sum(c.reused for c in self.caches) if self.caches else None,
            sent_calls=sum(c.sent for c in self.caches) if self.caches else None,
            judge_calls=judge_calls,
            judge_repairs=judge_repairs,
        )

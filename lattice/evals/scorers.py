"""Scorers: each gives a row a score from 0 to 1 (or none, when it does not apply).

A scorer is described by a ``ScorerSpec`` (from the dataset's ``$eval`` header, a row's
``expect``, the command line or lattice.toml) and built into a ``Scorer`` once. What it
scores is a ``Case``: the row's actual value (the run's output, or a node's result; the
``actual`` JMESPath picks part of it), the row's expected value (``expected`` picks part
of it) and the row's inputs.

| type | score |
|---|---|
| ``exact`` | 1 when the actual value equals the expected one (as JSON) |
| ``normalized`` | the same, texts compared case-folded with runs of spaces made one and the ends' spaces and full stops dropped |
| ``json_schema`` | 1 when the actual value is valid against ``schema`` |
| ``jmespath`` | 1 when ``expression`` holds (truthy) over ``{"output", "expected", "inputs"}`` |
| ``numeric`` | 1 when the number is within ``tolerance`` (absolute) or ``relative`` of the expected |
| ``regex`` | 1 when ``pattern`` matches the actual text (``patterns.py``: a time limit per search) |
| ``overlap`` | F1 of the actual list against the expected one as sets (precision and recall reported) |
| ``judge`` | a model grades the row against ``rubric`` (``lattice.evals.judge``) |
| ``python`` | a user's ``module:function`` (never from a dataset: the command line or lattice.toml) |
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import json
import math
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from jmespath.exceptions import JMESPathError

from lattice.batch.diff import json_diff
from lattice.errors import InputError, did_you_mean
from lattice.patterns import PatternError, PatternTimeout, pattern_problem, search
from lattice.runtime.conditions import compile_jmespath
from lattice.schemas import schema_errors, schema_problems, schema_validator

SCORER_TYPES = (
    "exact",
    "normalized",
    "json_schema",
    "jmespath",
    "numeric",
    "regex",
    "overlap",
    "judge",
    "python",
)
ALIASES = {"normalised": "normalized", "schema": "json_schema", "f1": "overlap"}
COMMON_KEYS = frozenset({"name", "type", "node", "actual", "expected", "threshold", "pass"})
PARAMS: Mapping[str, frozenset[str]] = {
    "exact": frozenset(),
    "normalized": frozenset(),
    "json_schema": frozenset({"schema"}),
    "jmespath": frozenset({"expression"}),
    "numeric": frozenset({"tolerance", "relative"}),
    "regex": frozenset({"pattern", "ignore_case"}),
    "overlap": frozenset(),
    "judge": frozenset({"rubric", "scale", "model_class"}),
    "python": frozenset({"function"}),
}
NEEDS_EXPECTED = frozenset({"exact", "normalized", "numeric", "overlap"})
"""Scorers that compare with the row's expected value (a row without one: no score)."""

Origin = Literal["dataset", "row", "command line", "lattice.toml"]


@dataclass(frozen=True)
class ScorerSpec:
    """One scorer as a user describes it."""

    name: str
    type: str
    node: str | None = None
    """Score this node's result (its last output) instead of the run's output."""
    actual: str | None = None
    """A JMESPath that picks the part of the output to score."""
    expected: str | None = None
    """A JMESPath that picks the part of the row's ``expected`` to compare with."""
    params: Mapping[str, Any] = field(default_factory=dict)
    threshold: float | None = None
    """The lowest mean score that passes (the dataset's or the command line's)."""
    pass_at: float = 1.0
    """A row passes this scorer when its score is at least this."""
    origin: Origin = "dataset"


@dataclass(frozen=True)
class Case:
    """What a scorer scores for one row."""

    row_id: Any
    actual: Any
    expected: Any
    has_expected: bool
    inputs: Mapping[str, Any]


@dataclass(frozen=True)
class Score:
    """A row's score under one scorer: ``value`` from 0 to 1, or None when the scorer
    does not apply to the row (no expected value); ``detail`` says why it is not 1."""

    value: float | None
    detail: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)
    calls: int = 0
    """Model calls the scorer made for this row (the judge's, repairs included)."""
    repairs: int = 0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"score": self.value, "detail": self.detail}
        if self.extra:
            out["extra"] = dict(self.extra)
        if self.calls:
            out["calls"] = self.calls
            out["repairs"] = self.repairs
        return out


class Scorer(Protocol):
    """A built scorer."""

    spec: ScorerSpec

    def __call__(self, case: Case) -> Score | Awaitable[Score]: ...


def _fail(where: str, message: str) -> InputError:
    return InputError(f"{where}: {message}")


def parse_spec(value: Any, where: str, *, origin: Origin, index: int = 0) -> ScorerSpec:
    """A ``ScorerSpec`` from its JSON form (``{"type": …, "name": …, …}``); an InputError
    naming ``where`` for a mistake. A dataset (``origin`` dataset or row) may not name a
    Python function: a dataset is data, not code."""
    if isinstance(value, str):
        value = {"type": value}
    if not isinstance(value, dict):
        raise _fail(where, 'a scorer is an object {"type": …} or a type name')
    kind = value.get("type")
    if not isinstance(kind, str):
        raise _fail(where, f"a scorer needs a type, one of {', '.join(SCORER_TYPES)}")
    kind = ALIASES.get(kind, kind)
    if kind not in SCORER_TYPES:
        raise _fail(where, f"unknown scorer type {kind!r}{did_you_mean(kind, SCORER_TYPES)}")
    if kind == "python" and origin in ("dataset", "row"):
        raise _fail(
            where,
            "a dataset cannot name Python code to run; give the function on the command "
            "line (--scorer-fn module:function) or in lattice.toml ([evals] scorers)",
        )
    unknown = set(value) - COMMON_KEYS - PARAMS[kind]
    if unknown:
        listed = ", ".join(sorted(unknown))
        raise _fail(where, f"a {kind} scorer has no key {listed}")
    name = value.get("name", kind if index == 0 else f"{kind}-{index + 1}")
    for key in ("name", "node", "actual", "expected"):
        if key in value and (not isinstance(value[key], str) or not value[key].strip()):
            raise _fail(where, f"{key!r} is a non-empty string")
    for key in ("actual", "expected"):
        if key in value:
            _check_jmespath(value[key], f"{where}: {key}")
    threshold = _fraction(value.get("threshold"), f"{where}: threshold")
    pass_at = _fraction(value.get("pass", 1.0), f"{where}: pass")
    params = {k: value[k] for k in PARAMS[kind] if k in value}
    _check_params(kind, params, where)
    return ScorerSpec(
        name=name,
        type=kind,
        node=value.get("node"),
        actual=value.get("actual"),
        expected=value.get("expected"),
        params=params,
        threshold=threshold,
        pass_at=1.0 if pass_at is None else pass_at,
        origin=origin,
    )


def _fraction(value: Any, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise InputError(f"{where}: a number from 0 to 1")
    return float(value)


def _check_jmespath(expression: str, where: str) -> None:
    try:
        compile_jmespath(expression)
    except JMESPathError as exc:
        raise InputError(f"{where}: invalid JMESPath {expression!r}: {exc}") from None


def _check_params(kind: str, params: Mapping[str, Any], where: str) -> None:  # noqa: C901
    if kind == "json_schema":
        schema = params.get("schema")
        if not isinstance(schema, dict):
            raise _fail(where, 'a json_schema scorer needs "schema": an object')
        problems = schema_problems(schema)
        if problems:
            raise _fail(where, f"its schema cannot be used: {problems[0].message}")
    elif kind == "jmespath":
        expression = params.get("expression")
        if not isinstance(expression, str):
            raise _fail(where, 'a jmespath scorer needs "expression": a JMESPath text')
        _check_jmespath(expression, where)
    elif kind == "numeric":
        for key in ("tolerance", "relative"):
            number = params.get(key, 0)
            if isinstance(number, bool) or not isinstance(number, int | float) or number < 0:
                raise _fail(where, f"{key!r} is a number >= 0")
    elif kind == "regex":
        pattern = params.get("pattern")
        if not isinstance(pattern, str):
            raise _fail(where, 'a regex scorer needs "pattern": a regular expression')
        problem = pattern_problem(pattern)
        if problem is not None:
            raise _fail(where, f"the pattern cannot be used: {problem}")
    elif kind == "judge":
        if not isinstance(params.get("rubric"), str) or not params["rubric"].strip():
            raise _fail(where, 'a judge scorer needs "rubric": what a good answer is')
        scale = params.get("scale", 5)
        if isinstance(scale, bool) or not isinstance(scale, int) or not 1 <= scale <= 100:
            raise _fail(where, '"scale" is an integer from 1 to 100 (the best grade)')
    elif kind == "python":
        function = params.get("function")
        if not isinstance(function, str) or not re.fullmatch(r"[\w.]+:[\w.]+", function):
            raise _fail(where, 'a python scorer needs "function": "module:function"')


# --- the scorers ------------------------------------------------------------------


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _short(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def normalize(value: Any) -> Any:
    """Texts case-folded, runs of white space made one space, the ends' spaces and full
    stops dropped; lists and objects normalised item by item."""
    if isinstance(value, str):
        return re.sub(r"\s+", " ", value.casefold()).strip(" .")
    if isinstance(value, list):
        return [normalize(item) for item in value]
    if isinstance(value, dict):
        return {key: normalize(item) for key, item in value.items()}
    return value


def _equal(spec: ScorerSpec, case: Case, *, normalized: bool) -> Score:
    actual, expected = case.actual, case.expected
    if normalized:
        actual, expected = normalize(actual), normalize(expected)
    if not json_diff(actual, expected):
        return Score(1.0)
    return Score(0.0, f"{_short(case.actual)} ≠ expected {_short(case.expected)}")


@dataclass
class _Builtin:
    spec: ScorerSpec
    run: Callable[[ScorerSpec, Case], Score]

    def __call__(self, case: Case) -> Score:
        if self.spec.type in NEEDS_EXPECTED and not case.has_expected:
            return Score(None, "the row has no expected value")
        return self.run(self.spec, case)


def _schema_scorer(spec: ScorerSpec) -> Callable[[ScorerSpec, Case], Score]:
    validator = schema_validator(spec.params["schema"])

    def run(spec: ScorerSpec, case: Case) -> Score:
        errors = schema_errors(validator, case.actual)
        if not errors:
            return Score(1.0)
        first = errors[0]
        where = "/".join(str(p) for p in first.absolute_path) or "(the value)"
        return Score(0.0, f"{where}: {first.message}")

    return run


def _jmespath_scorer(spec: ScorerSpec) -> Callable[[ScorerSpec, Case], Score]:
    expression = spec.params["expression"]
    compiled = compile_jmespath(expression)

    def run(spec: ScorerSpec, case: Case) -> Score:
        data = {"output": case.actual, "expected": case.expected, "inputs": dict(case.inputs)}
        try:
            held = compiled(data)
        except JMESPathError as exc:
            return Score(0.0, f"{expression}: {exc}")
        if held not in (None, False, "", [], {}):
            return Score(1.0)
        return Score(0.0, f"{expression} does not hold (it gives {_short(held)})")

    return run


def _numeric(spec: ScorerSpec, case: Case) -> Score:
    numbers = (int, float)
    actual, expected = case.actual, case.expected
    if isinstance(actual, str):
        with contextlib.suppress(ValueError):
            actual = float(actual)
    if (
        not isinstance(actual, numbers)
        or isinstance(actual, bool)
        or not isinstance(expected, numbers)
        or isinstance(expected, bool)
        or not math.isfinite(actual)
    ):
        return Score(
            0.0, f"{_short(case.actual)} is not a number to compare with {_short(expected)}"
        )
    allowed = max(
        float(spec.params.get("tolerance", 0)),
        float(spec.params.get("relative", 0)) * abs(expected),
    )
    if abs(actual - expected) <= allowed:
        return Score(1.0)
    return Score(
        0.0, f"{actual} is {abs(actual - expected):.4g} from {expected} (allowed {allowed:.4g})"
    )


def _regex_scorer(spec: ScorerSpec) -> Callable[[ScorerSpec, Case], Score]:
    pattern = spec.params["pattern"]
    if spec.params.get("ignore_case"):
        pattern = "(?i)" + pattern

    def run(spec: ScorerSpec, case: Case) -> Score:
        try:
            found = search(pattern, _text(case.actual))
        except (PatternTimeout, PatternError) as exc:
            return Score(0.0, str(exc))
        return Score(1.0) if found else Score(0.0, f"no match for /{spec.params['pattern']}/")

    return run


def _as_set(value: Any) -> set[str]:
    items = value if isinstance(value, list) else [] if value is None else [value]
    return {json.dumps(normalize(item), sort_keys=True, ensure_ascii=False) for item in items}


def _overlap(spec: ScorerSpec, case: Case) -> Score:
    actual, expected = _as_set(case.actual), _as_set(case.expected)
    hits = len(actual & expected)
    precision = hits / len(actual) if actual else (1.0 if not expected else 0.0)
    recall = hits / len(expected) if expected else 1.0
    f1 = 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)
    extra = {"precision": precision, "recall": recall, "f1": f1}
    if f1 == 1.0:
        return Score(1.0, extra=extra)
    missing = sorted(expected - actual)
    wrong = sorted(actual - expected)
    detail = "; ".join(
        part
        for part in (
            f"missing {', '.join(missing)}" if missing else "",
            f"not expected {', '.join(wrong)}" if wrong else "",
        )
        if part
    )
    return Score(f1, detail, extra)


@dataclass
class PythonScorer:
    """A user's function ``f(output, expected, inputs)`` returning a bool, a number from 0
    to 1, or ``{"score": …, "detail": …}`` (it may be a coroutine function)."""

    spec: ScorerSpec
    function: Callable[..., Any]

    async def __call__(self, case: Case) -> Score:
        try:
            result = self.function(case.actual, case.expected, dict(case.inputs))
            if inspect.isawaitable(result):
                result = await result
        except Exception as exc:  # the user's code: its failure is the row's score
            return Score(0.0, f"{self.spec.params['function']} raised {type(exc).__name__}: {exc}")
        detail = ""
        if isinstance(result, dict):
            detail = str(result.get("detail", ""))
            result = result.get("score")
        if result is None:
            return Score(None, detail)
        if isinstance(result, bool):
            return Score(1.0 if result else 0.0, detail)
        if isinstance(result, int | float) and 0 <= result <= 1:
            return Score(float(result), detail)
        return Score(0.0, f"{self.spec.params['function']} returned {_short(result)}, not a score")


def load_function(reference: str, where: str) -> Callable[..., Any]:
    """``module:function`` imported; an InputError naming ``where`` when it is not there."""
    module_name, _, attribute = reference.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            target = getattr(target, part)
    except ImportError as exc:
        raise InputError(f"{where}: cannot import {module_name}: {exc}") from None
    except AttributeError:
        raise InputError(f"{where}: {module_name} has no {attribute}") from None
    if not callable(target):
        raise InputError(f"{where}: {reference} is not a function")
    return target  # type: ignore[no-any-return]


def build(spec: ScorerSpec, judge: Callable[[ScorerSpec], Scorer] | None = None) -> Scorer:
    """The scorer ``spec`` describes; ``judge`` builds judge scorers (their model)."""
    if spec.type == "judge":
        if judge is None:
            raise InputError(f"scorer {spec.name!r}: a judge scorer needs a model")
        return judge(spec)
    if spec.type == "python":
        function = load_function(spec.params["function"], f"scorer {spec.name!r}")
        return PythonScorer(spec, function)
    runs: dict[str, Callable[[ScorerSpec, Case], Score]] = {
        "exact": lambda s, c: _equal(s, c, normalized=False),
        "normalized": lambda s, c: _equal(s, c, normalized=True),
        "numeric": _numeric,
        "overlap": _overlap,
    }
    if spec.type == "json_schema":
        return _Builtin(spec, _schema_scorer(spec))
    if spec.type == "jmespath":
        return _Builtin(spec, _jmespath_scorer(spec))
    if spec.type == "regex":
        return _Builtin(spec, _regex_scorer(spec))
    return _Builtin(spec, runs[spec.type])

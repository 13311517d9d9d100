"""An evaluation's dataset: the batch's JSON-lines rows with expectations.

The file is a ``lattice batch`` inputs file (``lattice.batch.rows``); a row may add

- ``"expected"``: the expected output (any JSON value; the scorers pick parts of it);
- ``"expect"``: a list of assertions for this row only, each a scorer
  (``{"type": "regex", "pattern": "refund", "actual": "reply"}``), named by its type
  unless it has a ``name``.

A first line ``{"$eval": {…}}`` holds the defaults of the whole dataset:

- ``"scorers"``: the scorers every row is scored by (default: ``exact`` when a row has
  an ``expected`` value);
- ``"thresholds"``: ``{"<scorer name>": <lowest mean>}``;
- ``"description"``: free text.

A batch skips that line and ignores the expectations. A dataset names no Python code
(a ``python`` scorer comes from the command line or lattice.toml only). Every mistake
is reported with its line, all at once, as one InputError.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lattice.batch.rows import DATASET_HEADER, InvalidLine, Row, is_header, read_rows
from lattice.errors import InputError, LatticeUserError
from lattice.evals.scorers import ScorerSpec, parse_spec

HEADER_KEYS = frozenset({"scorers", "thresholds", "description"})


@dataclass
class Expectation:
    """What one row expects: its expected value (when it has one) and its own assertions."""

    expected: Any = None
    has_expected: bool = False
    assertions: list[ScorerSpec] = field(default_factory=list)


@dataclass
class Dataset:
    """A dataset read for an evaluation."""

    path: Path
    rows: list[Row]
    expectations: dict[str, Expectation]
    """Row key → what the row expects."""
    scorers: list[ScorerSpec]
    thresholds: dict[str, float]
    invalid: list[InvalidLine]
    description: str | None = None


def _first_value(path: Path) -> Any:
    with path.open("rb") as handle:
        for raw in handle:
            if raw.strip():
                try:
                    return json.loads(raw)
                except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
                    return None
    return None


def _header(path: Path, problems: list[str]) -> dict[str, Any]:
    value = _first_value(path)
    if not is_header(value):
        return {}
    header = value[DATASET_HEADER]
    where = f"{path}:1"
    if not isinstance(header, dict):
        problems.append(f'{where}: "{DATASET_HEADER}" holds an object {{"scorers", "thresholds"}}')
        return {}
    unknown = set(header) - HEADER_KEYS
    if unknown:
        problems.append(
            f'{where}: "{DATASET_HEADER}" has no key {", ".join(sorted(unknown))} '
            f"(it has {', '.join(sorted(HEADER_KEYS))})"
        )
    return header


def _scorers(header: dict[str, Any], where: str, problems: list[str]) -> list[ScorerSpec]:
    given = header.get("scorers", [])
    if not isinstance(given, list):
        problems.append(f"{where}: scorers is a list")
        return []
    specs: list[ScorerSpec] = []
    for index, item in enumerate(given):
        try:
            specs.append(
                parse_spec(item, f"{where}: scorers[{index}]", origin="dataset", index=index)
            )
        except InputError as exc:
            problems.append(exc.message)
    return specs


def _thresholds(header: dict[str, Any], where: str, problems: list[str]) -> dict[str, float]:
    given = header.get("thresholds", {})
    if not isinstance(given, dict):
        problems.append(f'{where}: thresholds is an object {{"<scorer>": <lowest mean>}}')
        return {}
    out: dict[str, float] = {}
    for name, value in given.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            problems.append(f"{where}: thresholds[{name!r}] is a number from 0 to 1")
        else:
            out[name] = float(value)
    return out


def _expectation(
    row: Row, where: str, problems: list[str], taken: frozenset[str] = frozenset()
) -> Expectation:
    found = row.expectations
    expectation = Expectation(found.get("expected"), "expected" in found)
    given = found.get("expect", [])
    if isinstance(given, dict | str):
        given = [given]
    if not isinstance(given, list):
        problems.append(f"{where}: expect is a list of assertions")
        return expectation
    for index, item in enumerate(given):
        try:
            spec = parse_spec(item, f"{where}: expect[{index}]", origin="row", index=index)
        except InputError as exc:
            problems.append(exc.message)
            continue
        if spec.name in taken or any(s.name == spec.name for s in expectation.assertions):
            problems.append(
                f"{where}: expect[{index}]: another scorer is named {spec.name!r}: give it "
                "a name of its own"
            )
            continue
        expectation.assertions.append(spec)
    return expectation


def read_dataset(path: str | Path) -> Dataset:
    """The dataset at ``path``: its rows (lines that are no row are ``invalid``, as in a
    batch), each row's expectations and the header's defaults. A malformed header or
    expectation is an InputError listing every one with its line."""
    path = Path(path)
    if not path.is_file():
        raise LatticeUserError(f"no dataset {path}")
    problems: list[str] = []
    header = _header(path, problems)
    where = f"{path}:1"
    scorers = _scorers(header, where, problems)
    thresholds = _thresholds(header, where, problems)
    names = [spec.name for spec in scorers]
    for name in {n for n in names if names.count(n) > 1}:
        problems.append(f"{where}: two scorers are named {name!r}: give each its own name")
    taken = frozenset(names)
    rows, invalid = read_rows(path)
    expectations = {
        row.key: _expectation(row, f"{path}:{row.line} (row {row.id!r})", problems, taken)
        for row in rows
    }
    if problems:
        raise InputError("the dataset has mistakes:\n  " + "\n  ".join(problems))
    description = header.get("description")
    return Dataset(
        path=path,
        rows=rows,
        expectations=expectations,
        scorers=scorers,
        thresholds=thresholds,
        invalid=invalid,
        description=description if isinstance(description, str) else None,
    )

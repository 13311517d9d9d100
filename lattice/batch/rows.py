"""A batch's rows: the inputs file read line by line, and the answers given for its rows.

Each non-blank line of the inputs file (JSON lines) is one row:

- an inputs object (``{"ticket": "…"}``): the row's id is its line number;
- or ``{"id": …, "inputs": {…}, "answers": {…}, "expected": …, "expect": […]}``
  (``answers``, ``expected`` and ``expect`` optional, no other keys): an id of your own
  (a string or an integer), answers to the workflow's questions for that row, and what
  ``lattice eval`` expects of the row (a batch carries them along and ignores them).

A first line ``{"$eval": {…}}`` holds an evaluation's defaults for the whole dataset
(``lattice.evals.dataset``); a batch skips it.

A line that is not JSON, not an object, repeats an id, or whose inputs or answers do
not fit the workflow is an ``InvalidLine``: reported with its line number and skipped,
never the end of the batch. A file that is not JSON lines at all (a CSV or TSV file: its
first line is not JSON, and its name or that line says so) is an InputError.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lattice.errors import InputError, LatticeUserError

RowId = str | int
ROW_KEYS = frozenset({"id", "inputs", "answers", "expected", "expect"})
"""The keys of a row written as ``{"id", "inputs", "answers", "expected", "expect"}``."""
EXPECTATION_KEYS = ("expected", "expect")
"""A row's expectations (``lattice eval``): the expected output, and assertions on it."""
DATASET_HEADER = "$eval"
"""The one key of a dataset's first line that holds an evaluation's defaults."""
TABLE_SUFFIXES = frozenset({".csv", ".tsv"})
HEADER_LINE = re.compile(r'\s*"?[\w .-]+"?\s*(?:[,;\t]\s*"?[\w .-]+"?\s*)+')
"""A line of column names (``name,age`` or ``"name"\t"age"``): the header of a table."""


def row_key(row_id: Any) -> str:
    """The key a row is known by in files and tables (``5`` and ``"5"`` are two rows)."""
    return json.dumps(row_id, ensure_ascii=False)


def id_order(row_id: Any) -> tuple[int, Any]:
    """Sorts row ids: integers in numeric order, then strings."""
    if isinstance(row_id, int) and not isinstance(row_id, bool):
        return (0, row_id)
    return (1, str(row_id))


@dataclass(slots=True)
class Row:
    """One row of the inputs file."""

    id: RowId
    line: int
    inputs: dict[str, Any]
    answers: dict[str, Any] = field(default_factory=dict)
    expectations: dict[str, Any] = field(default_factory=dict)
    """``expected`` and ``expect`` as the line gives them (checked by ``lattice eval``)."""

    @property
    def key(self) -> str:
        return row_key(self.id)


@dataclass(frozen=True)
class InvalidLine:
    """A line of the inputs file that was skipped, and why."""

    line: int
    error: str
    id: RowId | None = None

    def to_json(self) -> dict[str, Any]:
        return {"line": self.line, "id": self.id, "error": self.error}

    def describe(self, source: str) -> str:
        row = f" (row {self.id!r})" if self.id is not None else ""
        return f"{source}:{self.line}{row}: {self.error}"


def _row_from(value: Any, line: int) -> Row:
    """The row a parsed line holds; a ValueError says why it holds none."""
    if not isinstance(value, dict):
        raise ValueError(f"a row is a JSON object, not {type(value).__name__}")
    extra = set(value) - ROW_KEYS
    if "id" in value and isinstance(value.get("inputs"), dict) and extra:
        listed = ", ".join(repr(key) for key in sorted(extra))
        raise ValueError(
            f'a row with "id" and "inputs" has no other key than "answers", "expected" '
            f'and "expect": {listed} '
            f"{'is' if len(extra) == 1 else 'are'} unexpected"
        )
    if isinstance(value.get("inputs"), dict) and not extra:
        row_id = value.get("id", line)
        if isinstance(row_id, bool) or not isinstance(row_id, str | int):
            raise ValueError(f"a row's id is a string or an integer, not {json.dumps(row_id)}")
        if isinstance(row_id, str) and not row_id.strip():
            raise ValueError("a row's id is not empty")
        answers = value.get("answers")
        if answers is None:
            answers = {}
        if not isinstance(answers, dict):
            raise ValueError('a row\'s "answers" is an object: {"<nodeId>": "<option>"}')
        expectations = {key: value[key] for key in EXPECTATION_KEYS if key in value}
        return Row(row_id, line, dict(value["inputs"]), dict(answers), expectations)
    return Row(line, line, value)


def is_header(value: Any) -> bool:
    """Whether a parsed first line is a dataset's header, ``{"$eval": {…}}``."""
    return isinstance(value, dict) and len(value) == 1 and DATASET_HEADER in value


def _lines(source: Path | Iterable[Any]) -> Iterator[tuple[int, Any]]:
    """``(line number, parsed value or a ValueError)`` for each non-blank line."""
    if isinstance(source, Path):
        try:
            data = source.read_bytes()
        except OSError as exc:
            raise LatticeUserError(f"cannot read inputs {source}: {exc.strerror}") from exc
        if data.lstrip()[:1] == b"[":
            yield from _array_items(source, data)
            return
        first = True
        for number, raw in enumerate(data.split(b"\n"), 1):
            if not raw.strip():
                continue
            value = _parsed(raw)
            if first and isinstance(value, ValueError):
                _refuse_a_table(source, raw)
            first = False
            yield number, value
        return
    for number, item in enumerate(source, 1):
        yield number, item


def _array_items(source: Path, data: bytes) -> Iterator[tuple[int, Any]]:
    """The items of a file that holds one JSON array (pretty-printed or not) instead of
    JSON Lines, each numbered by the line it starts on; an InputError, said once, when
    the array is not valid JSON."""
    try:
        text = data.decode("utf-8")
        items = json.loads(text)
    except UnicodeDecodeError as exc:
        raise InputError(f"inputs {source} is not UTF-8 text") from exc
    except json.JSONDecodeError as exc:
        raise InputError(
            f"inputs {source} starts like a JSON array but is not valid JSON: {exc.msg} "
            f"(line {exc.lineno}, column {exc.colno}); the inputs file holds either JSON "
            "Lines (one JSON object per line) or one JSON array of such objects"
        ) from exc
    if not isinstance(items, list):  # a line such as "[1] trailing" fails above
        raise InputError(f"inputs {source} is not a JSON array nor JSON Lines")
    decoder = json.JSONDecoder()
    at = text.index("[") + 1
    for item in items:
        while text[at] in " \t\r\n,":
            at += 1
        line = text.count("\n", 0, at) + 1
        _, at = decoder.raw_decode(text, at)
        yield line, item


def _parsed(raw: bytes) -> Any:
    """A line's JSON value, or a ValueError saying why it has none."""
    try:
        return json.loads(raw)
    except UnicodeDecodeError:
        return ValueError("not UTF-8 text")
    except json.JSONDecodeError as exc:
        return ValueError(f"not valid JSON: {exc.msg} (column {exc.colno})")
    except RecursionError:
        return ValueError("nested too deeply")


def _refuse_a_table(source: Path, first_line: bytes) -> None:
    """An InputError for a CSV or TSV file given as inputs: by its name, or by a first
    line of column names."""
    header = HEADER_LINE.fullmatch(first_line.decode("utf-8", "replace").rstrip("\r"))
    if source.suffix.lower() not in TABLE_SUFFIXES and header is None:
        return
    raise InputError(
        f"inputs {source} is not JSON Lines (it looks like a CSV/TSV table): the inputs "
        'file holds one JSON object per line, {"<input>": …} or {"id": …, "inputs": {…}}'
    )


def read_rows(
    source: Path | Iterable[Any],
    check: Callable[[Row], None] | None = None,
) -> tuple[list[Row], list[InvalidLine]]:
    """The valid rows of ``source`` (a JSON-lines file, or rows already parsed) and the
    lines that were skipped. ``check`` raises InputError for a row whose inputs or
    answers do not fit the workflow."""
    rows: list[Row] = []
    invalid: list[InvalidLine] = []
    first_line: dict[str, int] = {}
    first = True
    for number, value in _lines(source):
        if first and is_header(value):
            first = False
            continue
        first = False
        if isinstance(value, ValueError):
            invalid.append(InvalidLine(number, str(value)))
            continue
        try:
            row = _row_from(value, number)
        except ValueError as exc:
            invalid.append(InvalidLine(number, str(exc)))
            continue
        seen = first_line.get(row.key)
        if seen is not None:
            invalid.append(InvalidLine(number, f"the id is used before, on line {seen}", row.id))
            continue
        first_line[row.key] = number
        if check is not None:
            try:
                check(row)
            except InputError as exc:
                message = exc.message.replace(":\n  ", ": ").replace("\n  ", "; ")
                invalid.append(InvalidLine(number, message, row.id))
                continue
        rows.append(row)
    return rows, invalid


@dataclass(frozen=True)
class GivenAnswers:
    """Answers given for a batch's halted rows (``--answers FILE``): the same for every
    row (a JSON object ``{"<nodeId>": "<option>"}``), or per row (a ``.jsonl`` file of
    ``{"id", "answers"}`` lines)."""

    every_row: Mapping[str, Any] = field(default_factory=dict)
    by_row: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.every_row or self.by_row)

    def for_row(self, key: str) -> dict[str, Any]:
        """The answers given for row ``key`` (those for it by id over those for every row)."""
        return {**self.every_row, **self.by_row.get(key, {})}

    def merged(self, row: Row) -> dict[str, Any]:
        """A row's answers: those for every row, then the row's own (its inputs line),
        then those given for it by id."""
        if not self:
            return row.answers
        return {**self.every_row, **row.answers, **self.by_row.get(row.key, {})}


def read_answers(path: Path) -> GivenAnswers:
    """``--answers FILE``: a ``.jsonl`` file answers rows by id, anything else is one JSON
    object of answers for every row. A file that does not say that is an InputError."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read answers {path}: {exc.strerror}") from exc
    except UnicodeDecodeError:
        raise InputError(f"answers {path}: not UTF-8 text") from None
    if path.suffix != ".jsonl":
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise InputError(f"answers {path} is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise InputError(
                f'answers {path} must hold a JSON object {{"<nodeId>": "<option>"}} '
                '(or name a .jsonl file of {"id", "answers"} lines, one per row)'
            )
        return GivenAnswers(every_row=data)
    by_row: dict[str, dict[str, Any]] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
        except (json.JSONDecodeError, RecursionError):
            raise InputError(f"{path}:{number}: not valid JSON") from None
        if (
            not isinstance(line, dict)
            or "id" not in line
            or not isinstance(line.get("answers"), dict)
        ):
            raise InputError(
                f'{path}:{number}: a line is {{"id": <row id>, "answers": {{"<nodeId>": …}}}}'
            )
        by_row[row_key(line["id"])] = line["answers"]
    return GivenAnswers(by_row=by_row)

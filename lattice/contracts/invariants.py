"""Named invariants: checks on an LLM artifact beyond its JSON Schema.

An invariant is referenced in a document as a name (``"no_code"``) or an object
(``{"name": "unified_diff", "path": "/patch"}``). Each returns a list of
violations ``{"pointer", "message"}``; an empty list means it holds.

Built in: ``no_code`` (no source code in any string), ``unified_diff`` (the string at
``path`` parses as a unified diff), ``max_chars`` (serialised size cap, ``max``),
``max_items`` (array at ``path`` has at most ``max`` items), ``patch_applies`` (every hunk
of the diff at ``path`` applies to the files under the run's repository root, checked in
memory; see ``lattice.contracts.patches``).

An invariant registered with ``needs_repo=True`` receives the run's repository root as
``params["repo_root"]`` (from ``RuntimeSettings.repo_root`` / ``--repo``, never from the
document); binding one without a root is a configuration error.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lattice.errors import ErrorType, LatticeUserError

Violation = dict[str, str]
Check = Callable[[Any, dict[str, Any]], list[Violation]]


@dataclass(frozen=True)
class InvariantDef:
    name: str
    check: Check
    error_type: str
    """The error type a violation is reported as (``code_in_output`` for ``no_code``)."""
    rule: str
    """The rule as the model reads it in the contract."""
    needs_repo: bool = False
    """True when the check reads the run's repository (``params["repo_root"]``)."""


_REGISTRY: dict[str, InvariantDef] = {}


def register_invariant(
    name: str, *, rule: str, error_type: str = ErrorType.INVARIANT_ERROR, needs_repo: bool = False
) -> Callable[[Check], Check]:
    """Decorator adding a check to the registry under ``name``; ``rule`` is shown to the model."""

    def wrap(check: Check) -> Check:
        _REGISTRY[name] = InvariantDef(name, check, error_type, rule, needs_repo)
        return check

    return wrap


def invariant_names() -> list[str]:
    return sorted(_REGISTRY)


def get_invariant(name: str) -> InvariantDef | None:
    return _REGISTRY.get(name)


def _strings(value: Any, pointer: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield pointer or "/", value
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _strings(item, f"{pointer}/{i}")
    elif isinstance(value, dict):
        for key, item in value.items():
            escaped = str(key).replace("~", "~0").replace("/", "~1")
            yield from _strings(item, f"{pointer}/{escaped}")


def resolve_pointer(value: Any, pointer: str) -> Any:
    """The value at JSON pointer ``pointer`` (``""`` is the whole value); KeyError if absent."""
    if pointer in ("", "/"):
        return value
    current = value
    for raw in pointer.lstrip("/").split("/"):
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(current, list):
            current = current[int(part)]
        elif isinstance(current, dict):
            current = current[part]
        else:
            raise KeyError(pointer)
    return current


@functools.cache
def _code_line() -> re.Pattern[str]:
    """A line that looks like source code. Compiled on first use: about 1.5 ms that every
    import of the runtime paid, for a check that only planning artifacts ask for."""
    return re.compile(
        r"""^\s*(
            (def|class|async\s+def)\s+\w+.*:\s*$            # python
          | (import\s+[\w.]+(\s+as\s+\w+)?(\s*,\s*[\w.]+)*\s*$|from\s+[\w.]+\s+import\s)  # python imports
          | \#include\s*[<"]                                  # C
          | (public|private|protected)\s+(static\s+)?[\w<>\[\]]+\s+\w+\s*\(   # Java/C#
          | (function\s+\w*\s*\(|const\s+\w+\s*=\s*(\(|async|function)|export\s+(default\s+)?(function|class|const))  # JS
          | (fn\s+\w+\s*\(|let\s+mut\s+\w+|impl\s+\w+)          # Rust
          | (func\s+\w+\s*\(|package\s+\w+\s*$)                # Go
          | .*[;{]\s*$                                        # statement or block ends
          | \s*}\s*$
        )""",
        re.VERBOSE,
    )


_SIGNATURE = re.compile(r"^\s*(async\s+)?def\s+\w+\s*\(.*\)\s*(->.*)?:\s*$")
"""A Python function signature: code on its own, whatever follows."""


@register_invariant(
    "no_code",
    error_type=ErrorType.CODE_IN_OUTPUT,
    rule="No source code anywhere in the artifact (no code blocks, no code lines): describe code in words.",
)
def no_code(value: Any, params: dict[str, Any]) -> list[Violation]:
    """Planning artifacts describe code; they never contain it (fences or >= ``min_lines`` code lines)."""
    min_lines = int(params.get("min_lines", 2))
    violations = []
    for pointer, text in _strings(value):
        if "```" in text:
            violations.append(
                {
                    "pointer": pointer,
                    "message": "contains a fenced code block; describe the change in words",
                }
            )
            continue
        code_lines = [line for line in text.splitlines() if _code_line().match(line)]
        if len(code_lines) >= min_lines or any(_SIGNATURE.match(line) for line in code_lines):
            violations.append(
                {
                    "pointer": pointer,
                    "message": f"contains source code ({len(code_lines)} code lines, e.g. {code_lines[0].strip()[:60]!r}); "
                    "describe it in words instead",
                }
            )
    return violations


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def diff_problems(text: str) -> list[str]:
    """Why ``text`` is not a well-formed unified diff (empty list when it is)."""
    lines = text.splitlines()
    problems: list[str] = []
    if not any(line.startswith("--- ") for line in lines) or not any(
        line.startswith("+++ ") for line in lines
    ):
        problems.append("missing '--- a/file' / '+++ b/file' headers")
    i, hunks = 0, 0
    while i < len(lines):
        match = _HUNK.match(lines[i])
        if not match:
            i += 1
            continue
        hunks += 1
        old = int(match.group(2) or "1")
        new = int(match.group(4) or "1")
        i += 1
        seen_old = seen_new = 0
        while i < len(lines) and (seen_old < old or seen_new < new):
            line = lines[i]
            if line.startswith("\\"):
                i += 1
                continue
            tag = line[:1]
            if tag == " " or line == "":
                seen_old += 1
                seen_new += 1
            elif tag == "-":
                seen_old += 1
            elif tag == "+":
                seen_new += 1
            else:
                break
            i += 1
        if (seen_old, seen_new) != (old, new):
            problems.append(
                f"hunk {hunks} declares -{old} +{new} lines but has -{seen_old} +{seen_new}"
            )
    if hunks == 0:
        problems.append("no '@@ -a,b +c,d @@' hunk")
    return problems


def _diff_at(value: Any, params: dict[str, Any]) -> tuple[str, str | list[Violation]]:
    """(pointer, the diff text at ``params["path"]``) or (pointer, the violations saying why not)."""
    pointer = str(params.get("path", ""))
    shown = pointer or "/"
    try:
        text = resolve_pointer(value, pointer)
    except (KeyError, IndexError, ValueError):
        return shown, [{"pointer": shown, "message": "missing: a unified diff is required here"}]
    if not isinstance(text, str):
        return shown, [{"pointer": shown, "message": "must be a string holding a unified diff"}]
    return shown, text


@register_invariant(
    "unified_diff",
    error_type=ErrorType.INVALID_DIFF,
    rule="The patch is a valid unified diff (--- / +++ headers, @@ hunks whose line counts match).",
)
def unified_diff(value: Any, params: dict[str, Any]) -> list[Violation]:
    """The string at ``path`` (JSON pointer, default the whole value) is a unified diff."""
    pointer, text = _diff_at(value, params)
    if not isinstance(text, str):
        return text
    return [
        {"pointer": pointer, "message": f"not a unified diff: {p}"} for p in diff_problems(text)
    ]


@register_invariant(
    "patch_applies",
    error_type=ErrorType.PATCH_DOES_NOT_APPLY,
    rule="The patch applies to the repository's current files: every hunk's context and removed "
    "lines are exactly the file's lines; a new file is written as '--- /dev/null'.",
    needs_repo=True,
)
def patch_applies(value: Any, params: dict[str, Any]) -> list[Violation]:
    """Every hunk of the diff at ``path`` applies to the files under ``params["repo_root"]``."""
    pointer, text = _diff_at(value, params)
    if not isinstance(text, str):
        return text
    from lattice.contracts.patches import check_patch  # the diff parser, when a patch comes

    return [
        {"pointer": pointer, "message": problem}
        for problem in check_patch(text, Path(params["repo_root"]))
    ]


@register_invariant("max_chars", rule="Keep the artifact within its size limit.")
def max_chars(value: Any, params: dict[str, Any]) -> list[Violation]:
    """The serialised artifact (or the value at ``path``) has at most ``max`` characters."""
    limit = int(params.get("max", 20_000))
    pointer = str(params.get("path", ""))
    try:
        target = resolve_pointer(value, pointer)
    except (KeyError, IndexError, ValueError):
        return []
    size = len(target) if isinstance(target, str) else len(json.dumps(target, ensure_ascii=False))
    if size > limit:
        return [
            {"pointer": pointer or "/", "message": f"is {size} characters; the limit is {limit}"}
        ]
    return []


@register_invariant("max_items", rule="Keep lists within their item limit.")
def max_items(value: Any, params: dict[str, Any]) -> list[Violation]:
    """The array at ``path`` has at most ``max`` items."""
    limit = int(params.get("max", 100))
    pointer = str(params.get("path", ""))
    try:
        target = resolve_pointer(value, pointer)
    except (KeyError, IndexError, ValueError):
        return []
    if isinstance(target, list) and len(target) > limit:
        return [
            {"pointer": pointer or "/", "message": f"has {len(target)} items; the limit is {limit}"}
        ]
    return []


@dataclass(frozen=True)
class BoundInvariant:
    """An invariant with its parameters from the document."""

    definition: InvariantDef
    params: dict[str, Any]

    def check(self, value: Any) -> list[Violation]:
        return self.definition.check(value, self.params)


def bind_invariants(specs: list[Any], *, repo_root: Path | None = None) -> list[BoundInvariant]:
    """Resolve ``["no_code", {"name": "unified_diff", "path": "/patch"}]``; unknown names raise KeyError.

    ``repo_root`` is handed to invariants that need it; without one they cannot be bound
    (LatticeUserError ``config_error``).
    """
    bound = []
    for spec in specs:
        name = spec if isinstance(spec, str) else spec["name"]
        params = (
            {}
            if isinstance(spec, str)
            else {k: v for k, v in spec.items() if k not in ("name", "repo_root")}
        )
        definition = _REGISTRY.get(name)
        if definition is None:
            raise KeyError(name)
        if definition.needs_repo:
            if repo_root is None:
                raise LatticeUserError(
                    f"invariant {name} reads the run's repository: run with --repo DIR "
                    "(RuntimeSettings(repo_root=...) from Python)",
                    error_type=ErrorType.CONFIG_ERROR,
                )
            params["repo_root"] = repo_root
        bound.append(BoundInvariant(definition, params))
    return bound

"""Named invariants (lattice.contracts.invariants) and how documents reference them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lattice.contracts import invariants as invariants_module
from lattice.contracts.invariants import (
    BoundInvariant,
    bind_invariants,
    diff_problems,
    get_invariant,
    invariant_names,
    max_chars,
    max_items,
    no_code,
    register_invariant,
    resolve_pointer,
    unified_diff,
)
from lattice.errors import LatticeUserError
from lattice.llm.mock import MockProvider
from lattice.lower import lower, lower_document
from lattice.runtime import Runner, RunStore
from lattice.runtime.settings import RuntimeSettings
from tests.builders import chain, describe, find, node, only


def test_builtin_invariants_are_registered() -> None:
    assert {"no_code", "unified_diff", "max_chars", "max_items"} <= set(invariant_names())
    definition = get_invariant("no_code")
    assert definition is not None
    assert definition.error_type == "code_in_output"
    assert get_invariant("unified_diff").error_type == "invalid_diff"  # type: ignore[union-attr]
    assert get_invariant("max_chars").error_type == "invariant_error"  # type: ignore[union-attr]
    assert get_invariant("nope") is None


# -- no_code ---------------------------------------------------------------------------------

CODE = {
    "python-imports": "import os\nfrom pathlib import Path",
    "python-def-and-import": "import os\n\ndef main():\n    print(os.getcwd())",
    "python-class": "class Parser:\n    def parse(self, text):\n        pass",
    "javascript": "const add = (a, b) => a + b;\nconsole.log(add(1, 2));",
    "javascript-function": "function add(a, b) {\n  return a + b;\n}",
    "javascript-export": "export default function App() {\n  return null;\n}",
    "java": "public static int add(int a, int b) {\n    return a + b;\n}",
    "c": "#include <stdio.h>\nint main(void) {\n  return 0;\n}",
    "rust": "fn main() {\n    let mut total = 0;\n}",
    "go": "package main\n\nfunc main() {\n}",
}


@pytest.mark.parametrize("text", CODE.values(), ids=CODE.keys())
def test_no_code_flags_code_lines(text: str) -> None:
    violations = no_code({"plan": text}, {})
    assert len(violations) == 1
    assert violations[0]["pointer"] == "/plan"
    assert "source code" in violations[0]["message"]


@pytest.mark.parametrize(
    "text",
    [
        "Change it like this:\n```python\nx = 1\n```",
        "```\nanything\n```",
        "inline ```code``` too",
    ],
    ids=["python-fence", "bare-fence", "inline-fence"],
)
def test_no_code_flags_fenced_blocks(text: str) -> None:
    (violation,) = no_code({"steps": ["fine", text]}, {})
    assert violation["pointer"] == "/steps/1"
    assert "fenced code block" in violation["message"]


@pytest.mark.parametrize(
    "text",
    [
        "Read the config file; validate every field.\nThen write the summary for the team.",
        "First, parse the input;\nthen, for each ticket, decide its priority and owner.",
        "The service handles billing, refunds and disputes.\nIt has three modules: api, worker and scheduler.",
        "Call the parse() function and return its result to the caller.",
        "Add a function `total(items)` that sums the prices; keep it pure.",
        "Use {placeholders} in the template and {{ double braces }} in prompts.",
        "",
    ],
    ids=[
        "semicolon-mid-line",
        "one-line-ends-with-semicolon",
        "plain",
        "mentions-a-call",
        "inline-backticks",
        "braces-mid-line",
        "empty",
    ],
)
def test_no_code_accepts_ordinary_prose(text: str) -> None:
    assert no_code({"plan": text, "n": 3, "flag": True, "none": None}, {}) == []


def test_no_code_flags_a_short_python_function() -> None:
    assert no_code({"plan": "def add(a, b):\n    return a + b"}, {})


def test_no_code_min_lines_param() -> None:
    text = "Read the file;\nthen parse it;\nthen write it."
    assert len(no_code(text, {})) == 1  # two lines end in ';' (the default min_lines is 2)
    assert no_code(text, {"min_lines": 3}) == []
    assert len(no_code("x = 1;", {"min_lines": 1})) == 1


def test_no_code_reports_every_string_with_escaped_pointers() -> None:
    value = {
        "a/b": "import os\nimport sys",
        "list": ["ok", {"deep~key": "```js\nx\n```"}],
    }
    pointers = sorted(v["pointer"] for v in no_code(value, {}))
    assert pointers == ["/a~1b", "/list/1/deep~0key"]


def test_no_code_on_a_bare_string_points_at_the_root() -> None:
    assert [v["pointer"] for v in no_code("import os\nimport sys", {})] == ["/"]


# -- unified_diff ----------------------------------------------------------------------------

GOOD_DIFF = """\
--- a/src/app.py
+++ b/src/app.py
@@ -1,3 +1,4 @@
 import os
-x = 1
+x = 2
+y = 3
 print(x)
@@ -10,2 +11,2 @@
 def main():
-    pass
+    run()
"""

NEW_FILE = """\
--- /dev/null
+++ b/NOTES.md
@@ -0,0 +1,2 @@
+# Notes
+Nothing yet.
"""


@pytest.mark.parametrize("text", [GOOD_DIFF, NEW_FILE], ids=["edit", "new-file"])
def test_valid_unified_diff(text: str) -> None:
    assert diff_problems(text) == []
    assert unified_diff(text, {}) == []


def test_unified_diff_with_no_newline_marker_and_default_counts() -> None:
    text = "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-old\n\\ No newline at end of file\n+new\n"
    assert diff_problems(text) == []


def test_wrong_hunk_counts() -> None:
    text = GOOD_DIFF.replace("@@ -1,3 +1,4 @@", "@@ -1,5 +1,4 @@")
    (problem,) = diff_problems(text)
    assert problem == "hunk 1 declares -5 +4 lines but has -3 +4"
    text = GOOD_DIFF.replace("@@ -10,2 +11,2 @@", "@@ -10,2 +11,3 @@")
    assert diff_problems(text) == ["hunk 2 declares -2 +3 lines but has -2 +2"]


def test_missing_headers() -> None:
    text = "\n".join(GOOD_DIFF.splitlines()[2:])
    assert diff_problems(text) == ["missing '--- a/file' / '+++ b/file' headers"]
    (violation,) = unified_diff(text, {})
    assert violation["pointer"] == "/"
    assert "not a unified diff: missing" in violation["message"]


def test_no_hunks() -> None:
    assert diff_problems("--- a/x\n+++ b/x\n") == ["no '@@ -a,b +c,d @@' hunk"]
    assert len(diff_problems("just some words")) == 2


def test_unified_diff_path_param() -> None:
    value = {"summary": "fix", "patch": GOOD_DIFF}
    assert unified_diff(value, {"path": "/patch"}) == []
    broken = {"summary": "fix", "patch": GOOD_DIFF.replace("+++ b/src/app.py\n", "")}
    (violation,) = unified_diff(broken, {"path": "/patch"})
    assert violation["pointer"] == "/patch"
    assert "headers" in violation["message"]
    # the whole object is not a string: without a path it cannot be a diff
    assert unified_diff(value, {})[0]["message"] == "must be a string holding a unified diff"


def test_unified_diff_missing_or_non_string_target() -> None:
    (missing,) = unified_diff({"summary": "x"}, {"path": "/patch"})
    assert missing == {"pointer": "/patch", "message": "missing: a unified diff is required here"}
    (wrong,) = unified_diff({"patch": ["a"]}, {"path": "/patch"})
    assert wrong["message"] == "must be a string holding a unified diff"
    assert unified_diff({"files": [{"diff": GOOD_DIFF}]}, {"path": "/files/0/diff"}) == []


# -- max_chars / max_items -----------------------------------------------------------------


def test_max_chars_on_the_whole_serialised_value() -> None:
    assert max_chars({"a": "x" * 10}, {"max": 100}) == []
    (violation,) = max_chars({"a": "x" * 200}, {"max": 100})
    assert violation["pointer"] == "/"
    assert violation["message"] == "is 209 characters; the limit is 100"


def test_max_chars_with_path_counts_the_string_itself() -> None:
    value = {"title": "é" * 10, "body": "x" * 1000}
    assert max_chars(value, {"path": "/title", "max": 10}) == []
    (violation,) = max_chars(value, {"path": "/title", "max": 9})
    assert violation == {"pointer": "/title", "message": "is 10 characters; the limit is 9"}
    assert (
        max_chars(value, {"path": "/missing", "max": 1}) == []
    )  # the schema says what is required


def test_max_chars_default_limit() -> None:
    assert max_chars("x" * 20_000, {}) == []
    assert len(max_chars("x" * 20_001, {})) == 1


def test_max_items() -> None:
    value = {"steps": list(range(5)), "tags": ["a"]}
    assert max_items(value, {"path": "/steps", "max": 5}) == []
    (violation,) = max_items(value, {"path": "/steps", "max": 4})
    assert violation == {"pointer": "/steps", "message": "has 5 items; the limit is 4"}
    assert max_items(list(range(101)), {})[0]["pointer"] == "/"
    assert max_items(list(range(100)), {}) == []
    assert max_items(value, {"path": "/tags/0", "max": 0}) == []  # not an array
    assert max_items(value, {"path": "/nope", "max": 0}) == []


# -- pointers, binding, registry ----------------------------------------------------------


def test_resolve_pointer() -> None:
    value = {"a": [{"b/c": 1, "d~e": 2}]}
    assert resolve_pointer(value, "") is value
    assert resolve_pointer(value, "/") is value
    assert resolve_pointer(value, "/a/0/b~1c") == 1
    assert resolve_pointer(value, "/a/0/d~0e") == 2
    with pytest.raises(KeyError):
        resolve_pointer(value, "/x")
    with pytest.raises(IndexError):
        resolve_pointer(value, "/a/3")
    with pytest.raises(KeyError):
        resolve_pointer(value, "/a/0/b~1c/deeper")


def test_bind_invariants() -> None:
    bound = bind_invariants(["no_code", {"name": "max_items", "path": "/steps", "max": 1}])
    assert [b.definition.name for b in bound] == ["no_code", "max_items"]
    assert bound[0].params == {}
    assert bound[1].params == {"path": "/steps", "max": 1}
    assert isinstance(bound[1], BoundInvariant)
    assert bound[1].check({"steps": [1, 2]})[0]["pointer"] == "/steps"
    with pytest.raises(KeyError):
        bind_invariants(["no_such_check"])


def test_custom_invariant_in_a_workflow(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(invariants_module, "_REGISTRY", dict(invariants_module._REGISTRY))

    @register_invariant("polite", rule="Say please.", error_type="invariant_error")
    def polite(value: Any, params: dict[str, Any]) -> list[dict[str, str]]:
        return [] if "please" in str(value) else [{"pointer": "/", "message": "say please"}]

    assert "polite" in invariant_names()
    schema = {"type": "object", "properties": {"ask": {"type": "string"}}}
    doc = chain(node("gen", "prompt", prompt="Ask", outputSchema=schema, invariants=["polite"]))
    provider = MockProvider({"gen": [{"ask": "give"}, {"ask": "give, please"}]})

    async def no_sleep(_: float) -> None:
        return None

    result = Runner(
        lower(doc),
        provider=provider,
        store=RunStore(None),
        settings=RuntimeSettings(sleep=no_sleep),
    ).run({})
    assert result.status == "completed"
    assert result.vars["gen"]["result"] == {"ask": "give, please"}
    assert "Say please." in (provider.calls[0].system or "")
    assert "- /: say please" in provider.calls[1].messages[-1].content


# -- documents ---------------------------------------------------------------------------------


def gen(**data: Any) -> dict[str, Any]:
    schema = {"type": "object", "properties": {"plan": {"type": "string"}}}
    return chain(node("gen", "prompt", prompt="Plan it", outputSchema=schema, **data))


@pytest.mark.parametrize(
    ("spec", "suggestion"),
    [
        ("no_cod", "no_code"),
        ({"name": "unified_dif", "path": "/patch"}, "unified_diff"),
        ("max_item", "max_items"),
    ],
)
def test_unknown_invariant_is_a_lowering_error_with_did_you_mean(
    spec: Any, suggestion: str
) -> None:
    result = lower_document(gen(invariants=["max_chars", spec]))
    assert result.ir is None
    diag = only(result, "invariant-unknown")
    assert diag.node_id == "gen"
    assert diag.pointer == "/nodes/1/data/invariants/1"
    assert f"did you mean {suggestion!r}" in diag.message
    assert "no_code" in diag.message  # the known names are listed


def test_unknown_invariant_far_from_any_name_lists_the_known_ones() -> None:
    diag = only(lower_document(gen(invariants=["spellcheck_everything"])), "invariant-unknown")
    assert "did you mean" not in diag.message
    for name in ("no_code", "unified_diff", "max_chars", "max_items"):
        assert name in diag.message


@pytest.mark.parametrize(
    "spec", [42, {"path": "/x"}, {"name": 3}], ids=["number", "no-name", "name-not-str"]
)
def test_malformed_invariant_spec_is_a_lowering_error(spec: Any) -> None:
    result = lower_document(gen(invariants=[spec]))
    assert result.ir is None
    assert find(result, "invalid-field"), describe(result.diagnostics)


def test_known_invariants_lower_into_the_op() -> None:
    specs = ["no_code", {"name": "unified_diff", "path": "/plan"}]
    ir = lower(gen(invariants=specs))
    assert ir.ops["gen"].invariants == specs  # type: ignore[union-attr]


# -- patch_applies -----------------------------------------------------------------------------

PATCH_SCHEMA = {
    "type": "object",
    "properties": {"patch": {"type": "string"}},
    "required": ["patch"],
}
GOOD_PATCH = (
    "--- a/app.py\n+++ b/app.py\n@@ -1,2 +1,2 @@\n def f():\n-    return 1\n+    return 2\n"
)
STALE_PATCH = GOOD_PATCH.replace("-    return 1", "-    return 0")


def patch_repo(tmp_path: Path) -> Path:
    (tmp_path / "app.py").write_text("def f():\n    return 1\n", encoding="utf-8")
    return tmp_path


def test_patch_applies_is_registered_and_needs_a_repository(tmp_path: Path) -> None:
    definition = get_invariant("patch_applies")
    assert definition is not None
    assert definition.error_type == "patch_does_not_apply"
    assert definition.needs_repo is True
    spec = {"name": "patch_applies", "path": "/patch"}
    with pytest.raises(LatticeUserError) as info:
        bind_invariants([spec])
    assert info.value.error_type == "config_error"
    assert "--repo DIR" in info.value.message
    # The root comes from the run, never from the document.
    [bound] = bind_invariants([{**spec, "repo_root": "/"}], repo_root=tmp_path)
    assert bound.params == {"path": "/patch", "repo_root": tmp_path}


def test_patch_applies_checks_the_diff_at_its_path(tmp_path: Path) -> None:
    root = patch_repo(tmp_path)
    [bound] = bind_invariants([{"name": "patch_applies", "path": "/patch"}], repo_root=root)
    assert bound.check({"patch": GOOD_PATCH}) == []
    [violation] = bound.check({"patch": STALE_PATCH})
    assert violation["pointer"] == "/patch"
    assert violation["message"].startswith("app.py: hunk 1 (@@ -1,2 +1,2 @@) does not apply")
    assert bound.check({})[0]["message"] == "missing: a unified diff is required here"
    assert "must be a string" in bound.check({"patch": 3})[0]["message"]


def patch_workflow() -> dict[str, Any]:
    spec = [
        {"name": "unified_diff", "path": "/patch"},
        {"name": "patch_applies", "path": "/patch"},
    ]
    return chain(
        node("coder", "prompt", prompt="Fix f", outputSchema=PATCH_SCHEMA, invariants=spec)
    )


def test_a_stale_patch_is_repaired_with_the_failing_hunk_named(tmp_path: Path) -> None:
    root = patch_repo(tmp_path)
    provider = MockProvider({"coder": [{"patch": STALE_PATCH}, {"patch": GOOD_PATCH}]})
    result = Runner(
        lower(patch_workflow()),
        provider=provider,
        store=RunStore(None),
        settings=RuntimeSettings(repo_root=root),
    ).run({})
    assert result.status == "completed", result.failure
    assert result.vars["coder"]["result"] == {"patch": GOOD_PATCH}
    assert "The patch applies to the repository's current files" in (provider.calls[0].system or "")
    repair = provider.calls[1].messages[-1].content
    assert "- /patch: app.py: hunk 1 (@@ -1,2 +1,2 @@) does not apply: line 2 is" in repair
    assert (root / "app.py").read_text(encoding="utf-8") == "def f():\n    return 1\n"


def test_a_workflow_with_patch_applies_needs_a_repo_root() -> None:
    with pytest.raises(LatticeUserError) as info:
        Runner(lower(patch_workflow()), provider=MockProvider({}), store=RunStore(None))
    assert info.value.error_type == "config_error"

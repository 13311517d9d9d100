"""The pytest plugin (``lattice.testing``): ``lattice_run`` in a user's test suite, run by
pytester; the transcript a snapshot compares; and that the plugin is registered and
harmless to this suite."""

from __future__ import annotations

import importlib.metadata
import json
import re
import shutil
import subprocess
import sys
import tomllib

import pytest

from lattice.testing import Call, LatticeRun, run_workflow
from tests.builders import conn, node, workflow
from tests.conftest import EXAMPLES, REPO, TRIAGE_PATH
from tests.runtime.test_parallel import fan_out

pytest_plugins = ["pytester"]

TRIAGE = EXAMPLES / "support-triage.json"
TRIAGE_INPUTS = json.loads((EXAMPLES / "support-triage.inputs.json").read_text(encoding="utf-8"))


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A user's project: ``flows/triage.json`` with its mock script and inputs."""
    flows = pytester.mkdir("flows")
    shutil.copy(TRIAGE, flows / "triage.json")
    shutil.copy(EXAMPLES / "support-triage.mock.json", flows / "triage.mock.json")
    shutil.copy(EXAMPLES / "support-triage.inputs.json", flows / "triage.inputs.json")
    return pytester


USER_TESTS = f"""
import json
from pathlib import Path

from lattice.testing import Call

INPUTS = json.loads(Path("flows/triage.inputs.json").read_text())
SCRIPT = json.loads(Path("flows/triage.mock.json").read_text())["responses"]


def test_the_shipped_mock_takes_one_revision(lattice_run):
    result = lattice_run("flows/triage.json", inputs=INPUTS, mock="flows/triage.mock.json")
    assert result.status == "completed"
    assert result.path == {TRIAGE_PATH!r}
    assert result.vars["classify"]["result"] == {{"category": "billing", "urgency": 4}}
    assert result.vars["revisions"] == 1
    assert result.output["approved"] is True
    assert [c.node for c in result.calls] == [
        "classify", "draft-billing", "review", "draft-billing", "review"
    ]
    assert result.repairs == [] and result.escalations == [] and result.retries == []


def test_an_inline_mock_with_a_repair(lattice_run):
    mock = {{**SCRIPT, "classify": [{{"category": "refund", "urgency": 4}},
                                    {{"category": "bug", "urgency": 2}}]}}
    mock["draft-bug"] = [{{"subject": "Fixing it", "body": "We are on it."}}]
    mock["review"] = {{"approved": True, "feedback": "Fine."}}  # one answer, no list needed
    result = lattice_run("flows/triage.json", inputs=INPUTS, mock=mock)
    assert result.status == "completed"
    assert "draft-bug" in result.path and "draft-billing" not in result.path
    assert result.calls_to("classify") == [
        Call("classify", 1, "initial", "small", ok=False, error_type="schema_error"),
        Call("classify", 2, "repair", "small", ok=True),
    ]
    assert [c.node for c in result.repairs] == ["classify"]


def test_a_failed_run_says_why(lattice_run):
    result = lattice_run("flows/triage.json", inputs=INPUTS, mock={{"classify": []}})
    assert result.status == "failed"
    assert result.failure.category == "mock_exhausted"
    assert "mock_exhausted" in repr(result)
"""


def test_lattice_run_in_a_users_suite(project: pytest.Pytester) -> None:
    project.makepyfile(test_triage=USER_TESTS)
    result = project.runpytest("-p", "lattice.testing", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)


SNAPSHOT_TEST = """
import json
from pathlib import Path

INPUTS = json.loads(Path("flows/triage.inputs.json").read_text())


def test_triage_transcript(lattice_run, snapshot):
    result = lattice_run("flows/triage.json", inputs=INPUTS, mock="flows/triage.mock.json")
    assert result.transcript() == snapshot
"""


def test_a_transcript_snapshot_holds_from_run_to_run(project: pytest.Pytester) -> None:
    pytest.importorskip("syrupy")
    project.makepyfile(test_snap=SNAPSHOT_TEST)
    written = project.runpytest(
        "-p", "lattice.testing", "-p", "no:cacheprovider", "--snapshot-update"
    )
    written.assert_outcomes(passed=1)
    (stored,) = (project.path / "__snapshots__").glob("*.ambr")
    text = stored.read_text(encoding="utf-8")
    assert "classify (LLM_WRITE)" in text and "status: completed" in text
    assert not re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d", text)  # no timestamps
    assert not re.search(r"\d{8}T\d{6}-[0-9a-f]{8}", text)  # no run ids
    assert "duration" not in text and "latency" not in text
    again = project.runpytest("-p", "lattice.testing", "-p", "no:cacheprovider")
    again.assert_outcomes(passed=1)  # a new run, the same transcript
    # and a changed answer shows in the snapshot's diff
    mock = json.loads((project.path / "flows" / "triage.mock.json").read_text(encoding="utf-8"))
    mock["responses"]["classify"] = [{"category": "billing", "urgency": 5}]
    (project.path / "flows" / "triage.mock.json").write_text(json.dumps(mock), encoding="utf-8")
    changed = project.runpytest("-p", "lattice.testing", "-p", "no:cacheprovider")
    changed.assert_outcomes(failed=1)
    changed.stdout.fnmatch_lines(['*"urgency": 5*'])


def test_the_example_of_docs_testing_md_runs(project: pytest.Pytester) -> None:
    """The page's example suite, as it is written there, in the project layout it shows."""
    page = (REPO / "docs" / "testing.md").read_text(encoding="utf-8")
    marker = "`tests/test_triage.py`:\n\n```py\n"
    start = page.index(marker) + len(marker)
    example = page[start : page.index("```", start)]
    project.mkdir("tests")
    (project.path / "tests" / "test_triage.py").write_text(example, encoding="utf-8")
    args = ("-p", "lattice.testing", "-p", "no:cacheprovider", "tests")
    project.runpytest(*args, "--snapshot-update").assert_outcomes(passed=3)
    assert (project.path / "tests" / "__snapshots__" / "test_triage.ambr").is_file()
    project.runpytest(*args).assert_outcomes(passed=3)


def test_relative_paths_are_found_next_to_the_test(pytester: pytest.Pytester) -> None:
    sub = pytester.mkdir("suite")
    shutil.copy(EXAMPLES / "hello-world.json", sub / "hello.json")
    (sub / "test_hello.py").write_text(
        "def test_hello(lattice_run):\n"
        "    result = lattice_run('hello.json', {'name': 'Ada'},"
        " {'greet': 'Hi Ada'}, record=True)\n"
        "    assert result.status == 'completed', result\n"
        "    assert result.output == 'Hi Ada'\n"
        "    assert (result.run_dir / 'events.jsonl').is_file()\n",
        encoding="utf-8",
    )
    result = pytester.runpytest("-p", "lattice.testing", "-p", "no:cacheprovider", "suite")
    result.assert_outcomes(passed=1)


# -- the plugin is registered, and harmless ------------------------------------------------


def test_the_entry_point_is_declared() -> None:
    """Named after its module: a suite that also names the module (``-p lattice.testing``,
    ``pytest_plugins``) must not have it registered twice under two names, which pytest
    refuses ("Plugin already registered under a different name")."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert pyproject["project"]["entry-points"]["pytest11"] == {
        "lattice.testing": "lattice.testing"
    }


def test_the_installed_entry_point_loads_the_plugin() -> None:
    """Where the installed distribution is this tree's, pytest finds the plugin by itself
    (an install made before the plugin existed has no entry point: reinstall)."""
    points = [
        p for p in importlib.metadata.entry_points(group="pytest11") if p.value == "lattice.testing"
    ]
    if not points:
        pytest.skip(
            "the installed lattice-lre predates its pytest11 entry point (pip install -e .)"
        )
    (point,) = points
    assert point.name == "lattice.testing"
    import lattice.testing

    assert point.load() is lattice.testing


def test_the_plugin_is_harmless_to_a_suite_that_does_not_use_it(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_plain="def test_plain():\n    assert 1 + 1 == 2\n")
    result = pytester.runpytest_subprocess("-p", "lattice.testing", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert result.ret == 0


def test_loading_the_plugin_imports_no_runtime() -> None:
    """Nor the compiler: ``lattice.lower`` itself is a light package (``import lattice``
    binds its function), whose modules load on the first call."""
    code = (
        "import sys, lattice.testing\n"
        "heavy = ('lattice.runtime', 'lattice.lower.', 'jsonschema', 'openai', 'anthropic', "
        "'opentelemetry', 'litellm')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy or m in heavy "
        "or m.startswith(heavy)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert out.stdout.strip() == "[]"


# -- LatticeRun ---------------------------------------------------------------------------


def test_the_transcript_is_the_same_for_the_same_run() -> None:
    mock = EXAMPLES / "support-triage.mock.json"
    first = run_workflow(TRIAGE, TRIAGE_INPUTS, mock)
    second = run_workflow(TRIAGE, TRIAGE_INPUTS, mock)
    assert first.result.run_id != second.result.run_id
    assert first.transcript() == second.transcript()
    assert first.result.run_id not in first.transcript()
    assert first.transcript(prompts=True) == second.transcript(prompts=True)
    assert "prompt " in first.transcript(prompts=True)


def test_parallel_branches_in_the_transcript_and_paths() -> None:
    mock = {"b1": "one", "b2": "two", "b3": "three", "merge": "all"}
    result = run_workflow(fan_out(3), {"topic": "tides"}, mock)
    assert result.path == ["start", "merge", "end"]
    assert result.branch_paths == {"0002.1": ["b1"], "0002.2": ["b2"], "0002.3": ["b3"]}
    assert result.visited == {"start", "b1", "b2", "b3", "merge", "end"}
    lines = result.transcript().splitlines()
    start = lines.index("start (FORK)")
    assert lines[start + 1 : start + 4] == [
        "  branch 0002.1",
        "    b1 (LLM_WRITE)",
        "      call 1 initial [default]",
    ]
    assert [line.strip() for line in lines if line.strip().startswith("branch")] == [
        "branch 0002.1",
        "branch 0002.2",
        "branch 0002.3",
    ]
    assert [c.branch for c in result.calls] == ["0002.1", "0002.2", "0002.3", None]


def test_retries_escalations_and_halts() -> None:
    greet = workflow(
        [
            node("start", "start"),
            node(
                "greet",
                "prompt",
                prompt="Greet",
                modelClass="small",
                outputSchema={
                    "type": "object",
                    "properties": {"greeting": {"type": "string"}},
                    "required": ["greeting"],
                },
            ),
            node("end", "end"),
        ],
        [conn("start", "greet"), conn("greet", "end")],
    )
    mock = {  # each answer wrong in its own way: none repeats what it was told to fix
        "greet": [
            {"$error": "rate_limit_error"},
            {"no": 0},
            *[{"greeting": n} for n in range(1, 4)],
            {"greeting": "Hi"},
        ]
    }
    result = run_workflow(greet, {}, mock)  # the retry does not wait out its backoff
    assert result.status == "completed"
    assert [(c.kind, c.model_class, c.ok, c.error_type) for c in result.calls] == [
        ("initial", "small", False, "rate_limit_error"),
        ("retry", "small", False, "schema_error"),  # a retry is an attempt of its class
        ("repair", "small", False, "schema_error"),
        ("repair", "small", False, "schema_error"),
        ("escalation", "medium", False, "schema_error"),
        ("repair", "medium", True, None),
    ]
    assert len(result.retries) == 1 and len(result.escalations) == 1 and len(result.repairs) == 3
    text = result.transcript()
    assert "failed: rate_limit_error (retry 1)" in text
    assert "escalate small -> medium" in text
    assert "      /: 'greeting' is a required property" in text

    asks = workflow(
        [
            node("start", "start"),
            node(
                "ask",
                "askUserQuestion",
                questionText="Go?",
                options=[{"label": "Yes"}, {"label": "No"}],
            ),
            node("end", "end"),
        ],
        [conn("start", "ask"), conn("ask", "end", "branch-0"), conn("ask", "end", "branch-1")],
    )
    halted = run_workflow(asks)
    assert halted.status == "halted"
    assert "halted: waiting_for_answer" in halted.transcript()
    answered = run_workflow(asks, answers={"ask": "Yes"})
    assert answered.status == "completed"
    assert answered.path == ["start", "ask", "end"]  # one visit of ask (its ASK and SWITCH ops)
    assert 'answer {"index": 0, "label": "Yes"}' in answered.transcript()


def test_one_source_of_answers() -> None:
    with pytest.raises(ValueError, match="one of mock=, fixtures= and provider="):
        run_workflow(TRIAGE, TRIAGE_INPUTS, {"classify": []}, fixtures="x.jsonl")


def test_a_lattice_run_wraps_a_run_result() -> None:
    result = run_workflow(TRIAGE, TRIAGE_INPUTS, EXAMPLES / "support-triage.mock.json")
    assert isinstance(result, LatticeRun)
    assert result.output == result.result.output
    assert result.usage.calls == len(result.calls) == 5
    assert result.run_dir is None
    assert all(isinstance(c, Call) and c.ok for c in result.calls)

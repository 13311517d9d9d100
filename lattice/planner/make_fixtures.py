"""Keep the planning passes' shipped files in step with their sources.

    python -m lattice.planner.make_fixtures          # rewrite what is out of date
    python -m lattice.planner.make_fixtures --check  # exit 1 and name what is out of date

1. Schemas: the ``outputSchema`` of each pass's LLM node is a copy of
   ``lattice/planner/schemas/<Type>.json`` (the document format has no file references).
2. Fixtures: runs the pass chain over a copy of ``workflows/examples/todo-app``
   (project, architecture, scaffold, test, implementation src/todo/store.py, refactor),
   answering each prompt with the authored ``mocks/<pass>.mock.json`` and recording every
   request as a fixture line keyed by its prompt hash (``FixtureProvider`` wrapping the
   mock provider), so that ``lattice plan PASS --fixtures <pass>.fixtures.jsonl`` replays
   the chain offline. Each artifact is approved (the TestPlan also locked) before the
   next pass, as a person would.

Fixture lookups are by exact prompt hash: any change to a pass document, a schema, the
prompt templates or the sample project's documents changes the prompts, and this script
must be run again (tests/test_passes.py fails until it is).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

from lattice.llm.fixture import FixtureProvider
from lattice.llm.mock import MockProvider
from lattice.planner.artifacts import ArtifactStore
from lattice.planner.passes import PASSES
from lattice.planner.run import run_pass

PLANNER = Path(__file__).resolve().parent
HERE = PLANNER / "workflows"
SCHEMAS = PLANNER / "schemas"
SAMPLE = PLANNER.parent.parent / "workflows" / "examples" / "todo-app"

CHAIN: list[tuple[str, str | None]] = [
    ("project", None),
    ("architecture", None),
    ("scaffold", None),
    ("test", None),
    ("implementation", "src/todo/store.py"),
    ("refactor", "Move reading and writing the data file out of the store into its own module"),
]
"""The passes in order, with the implementation pass's target and the refactor pass's goal."""


def _dump(data: object) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def synced_documents() -> dict[Path, str]:
    """Each pass document's text with its LLM node's outputSchema copied from lattice/planner/schemas."""
    out: dict[Path, str] = {}
    for spec in PASSES.values():
        document = json.loads(spec.workflow.read_text(encoding="utf-8"))
        schema = json.loads((SCHEMAS / f"{spec.artifact_type}.json").read_text(encoding="utf-8"))
        for node in document["nodes"]:
            if node["type"] == "prompt":
                node["data"]["outputSchema"] = schema
        out[spec.workflow] = _dump(document)
    return out


def recorded_fixtures(work: Path) -> dict[Path, str]:
    """Run the chain over a copy of the sample project in ``work``; fixture text per pass."""
    project = work / "todo-app"
    shutil.copytree(SAMPLE, project, ignore=shutil.ignore_patterns(".lattice"))
    store = ArtifactStore(project)
    out: dict[Path, str] = {}
    for name, subject in CHAIN:
        recording = work / f"{name}.fixtures.jsonl"
        provider = FixtureProvider(
            recording, record_with=MockProvider.from_file(HERE / "mocks" / f"{name}.mock.json")
        )
        outcome = run_pass(name, project, subject, provider=provider)
        if outcome.artifact is None:
            failure = outcome.result.failure
            raise SystemExit(
                f"the {name} pass did not complete ({outcome.result.status}): "
                + (failure.summary if failure else "?")
            )
        for warning in outcome.artifact.warnings:
            print(f"warning: {name}: {warning}", file=sys.stderr)
        store.approve(outcome.artifact.id)
        if name == "test":
            store.lock(outcome.artifact.id)
        out[HERE / recording.name] = recording.read_text(encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if stale")
    args = parser.parse_args(argv)

    wanted = synced_documents()
    stale = [p for p, text in wanted.items() if p.read_text(encoding="utf-8") != text]
    if not args.check:
        for path in stale:
            path.write_text(wanted[path], encoding="utf-8")
    with tempfile.TemporaryDirectory() as tmp:
        # With --check the chain runs on the committed documents, so stale schemas show up
        # as stale fixtures too; without it, on the rewritten ones.
        fixtures = recorded_fixtures(Path(tmp))
    for path, text in fixtures.items():
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            stale.append(path)
            if not args.check:
                path.write_text(text, encoding="utf-8")
    for path in stale:
        verb = "out of date" if args.check else "rewritten"
        print(f"{path.relative_to(PLANNER.parent.parent)}: {verb}", file=sys.stderr)
    if not stale:
        print("compiler pass documents and fixtures are up to date", file=sys.stderr)
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())

"""Snapshot tests: the exact ExecIR text of representative corpus documents.

Update with ``python -m pytest tests/test_lower_snapshots.py --snapshot-update`` after an
intended change to lowering, and review the diff of ``__snapshots__/``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from syrupy.assertion import SnapshotAssertion

from lattice.ir import ir_to_json
from lattice.lower import lower_document
from tests.builders import describe
from tests.conftest import corpus_document

SNAPSHOT_DOCUMENTS = {
    # switch + ifElse with natural-language conditions, skills, mcp, subAgents
    "pr-review": ".vscode__workflows__automated-pr-code-review-flow.json",
    # askUserQuestion branching into prompts and a subAgent
    "daily-task": ".vscode__workflows__daily-task-workflow.json",
    # ifElse, askUserQuestion, two end nodes
    "schema-example-2": "packages__core__resources__workflow-schema.json__examples-2.json",
    # a wrapped {"meta", "workflow"} sample
    "getting-started": "resources__samples__getting-started-sample.json",
}
PREFIX = "breaking-brake__cc-wf-studio__"


@pytest.mark.parametrize("name", sorted(SNAPSHOT_DOCUMENTS))
def test_corpus_ir_snapshot(name: str, snapshot: SnapshotAssertion, tmp_path: Path) -> None:
    path = corpus_document(PREFIX + SNAPSHOT_DOCUMENTS[name])
    # base_dir=tmp_path: skill lookup must not depend on .claude folders around the corpus.
    result = lower_document(path, base_dir=tmp_path)
    assert result.ir is not None, describe(result.diagnostics)
    assert ir_to_json(result.ir) == snapshot

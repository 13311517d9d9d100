"""Every corpus document, node by node: what Claude Code would give each sub-agent, skill
and prompt step, and what Lattice gives it, with and without a grant.

The expectations are written from Claude Code's own rules, not from Lattice's lowering:
a sub-agent inherits every tool of the main agent unless its definition names ``tools``;
``explore`` and ``plan`` read and run read-only commands, ``general-purpose`` has every
tool; a skill that executes (the format's default) has its ``allowed-tools``, else
everything; the workflow's own steps are the main agent's turns (every tool, and
AskUserQuestion). The prompt steps' verdicts (does the text ask to run commands or touch
files?) were read and decided by hand.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lattice.cli import main
from lattice.ir.models import AgentOp, LLMWriteOp
from lattice.lower import lower
from lattice.lower.acting import acting_words, toolless_nodes
from lattice.lower.main_agent import under_grant
from lattice.workspace.grants import WorkspaceGrant
from tests.conftest import CORPUS, corpus_files

PATHS = corpus_files()
PARAMS = [pytest.param(path, id=path.stem.split("__")[-1]) for path in PATHS] or [
    pytest.param(None, marks=pytest.mark.skip(reason=f"the corpus ({CORPUS}) is not here"))
]

EVERYTHING = ("Read", "LS", "Glob", "Grep", "Edit", "MultiEdit", "Write", "Bash", "WebFetch")
"""What the whole grant (read, write, shell, web) gives an agent that asks for every tool."""
READ_ONLY_AND_SHELL = ("Read", "LS", "Glob", "Grep", "Bash")

ACTS = {
    # daily-dev-flow-with-worktree-sample (en, ja, ko, zh-CN, zh-TW)
    "prompt-hear-task": False,  # interviews the person: AskUserQuestion, no tool
    "prompt-branch-and-worktree": True,  # "git worktree add …"
    "prompt-confirm-plan": False,  # presents the plan and asks for approval
    "prompt-quality-checks": True,  # "npm run check", "npm run build", fix and re-run
    "prompt-commit-and-pr": True,  # "git commit"
    # github-issue-planning-sample
    "prompt-ticket": False,
    "prompt-gh-fetch": True,  # "gh issue view"
    "prompt-understanding": False,
    "prompt-clarify": False,
    "prompt-reproduce": False,  # lists steps for the person to try
    "prompt-need-more-info": True,  # "gh issue comment"
    "prompt-analysis-start": True,  # "identify related code files", investigate them
    "prompt-estimate": False,  # judges from the analysis before it
    "prompt-1": None,  # two documents: see PER_DOCUMENT
    "prompt-select": False,
    # code-review-sample
    "prompt-pr-url": False,
    "prompt-fetch-pr": True,  # "gh pr view"
    "prompt-changes": True,  # reviews the changed files
    "prompt-tests": False,  # asks about tests; says to run none
    "prompt-summary": False,
    "prompt-submit-review": True,  # "gh pr review"
    "prompt-edit-review": False,
    "prompt-cancelled": False,
    # getting-started-sample
    "prompt-greeting": False,
    "prompt-task": False,
    "prompt-process": False,  # "proceed with the actual work": nothing named
    "prompt-restart": False,
    # daily-task-workflow
    "prompt-1762065918375": False,  # the editor's placeholder text
    "prompt-1762065934779": False,  # "Readout News Report"
}
PER_DOCUMENT = {
    ("github-issue-planning-sample", "prompt-1"): True,  # "git diff", run the tests
    ("sample-workflow", "prompt-1"): False,  # "Say hello in one short sentence."
}


def acts(path: Path, node_id: str) -> bool:
    for (name, node), verdict in PER_DOCUMENT.items():
        if node == node_id and name in path.name:
            return verdict
    verdict = ACTS[node_id]
    assert verdict is not None, f"{path.name}: {node_id} needs a verdict in PER_DOCUMENT"
    return verdict


def claude_code_tools(node: dict[str, Any]) -> tuple[str, ...] | None:
    """What Claude Code offers the node under a grant of read, write, shell and web
    (None: it runs no agent, as a loaded skill)."""
    data = node.get("data") or {}
    if node["type"] == "prompt":
        return (*EVERYTHING, "AskUserQuestion")
    if node["type"] == "skill":
        if data.get("executionMode") == "load":
            return None
        named = data.get("allowedTools")
    elif node["type"] == "subAgent":
        named = data.get("tools")
        if not named and data.get("builtInType") in ("explore", "plan"):
            return READ_ONLY_AND_SHELL
    else:
        return None
    if not named:
        return EVERYTHING
    names = [part.strip().split("(")[0] for part in named.split(",") if part.strip()]
    return tuple(dict.fromkeys(name for name in names if name in EVERYTHING))


def nodes_of(path: Path) -> list[dict[str, Any]]:
    document = json.loads(path.read_text(encoding="utf-8"))
    workflow = document.get("workflow", document)
    return [n for n in workflow["nodes"] if n.get("type") in ("subAgent", "skill", "prompt")]


@pytest.mark.parametrize("path", PARAMS)
def test_under_a_grant_each_node_is_offered_what_claude_code_offers(
    path: Path, tmp_path: Path
) -> None:
    grant = WorkspaceGrant(root=tmp_path, read=True, write=True, shell=True, web=True)
    ir = under_grant(lower(path), grant)
    for node in nodes_of(path):
        expected = claude_code_tools(node)
        op = ir.ops[node["id"]]
        if expected is None:
            assert not isinstance(op, AgentOp), node["id"]
            continue
        assert isinstance(op, AgentOp), node["id"]
        assert grant.decide(op.tools).granted == expected, node["id"]
        if node["type"] == "subAgent" and not (node.get("data") or {}).get("tools"):
            asked = {"explore": READ_ONLY_AND_SHELL, "plan": READ_ONLY_AND_SHELL}
            builtin = (node.get("data") or {}).get("builtInType")
            assert tuple(op.tools) == asked.get(builtin, ("*",)), node["id"]  # whatever the grant


@pytest.mark.parametrize("path", PARAMS)
def test_without_a_grant_check_lists_exactly_the_nodes_meant_to_act(
    path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = nodes_of(path)
    expected = [
        n["id"]
        for n in nodes
        if (n["type"] == "prompt" and acts(path, n["id"]))
        or (n["type"] != "prompt" and claude_code_tools(n) is not None)
    ]
    ir = lower(path)
    for node in nodes:
        if node["type"] == "prompt":
            op = ir.ops[node["id"]]
            assert isinstance(op, LLMWriteOp) and op.main_agent  # one model call, as before
            assert bool(acting_words(op.prompt)) == acts(path, node["id"]), node["id"]
    listed = [t.node for t in toolless_nodes(ir, WorkspaceGrant())]
    assert sorted(listed) == sorted(expected)
    assert main(["check", str(path)]) == 0
    out = capsys.readouterr().out
    shown = out.split("without tools in this run", 1)[1] if expected else ""
    assert [line.split()[0] for line in shown.splitlines()[1::2]] == listed

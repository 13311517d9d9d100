"""What prompt steps and agents cost, with and without a workspace granted: requests and
request bytes per document of a corpus of cc-wf-studio documents (docs/agents.md,
"What it costs").

Each document runs offline three times, in memory, with the scripts ``lattice mock
init`` writes (``plan_mocks``):

- **no grant**: the script made without a grant; every model node is one request, with
  no tools.
- **grant, no tool used**: the same script (final answers only), run with a workspace
  granted (read, write, shell): prompt steps are turns of the main agent and sub-agents
  are offered their tools, but no turn calls one. This is what a step that needs no
  tool costs: one request, tool definitions attached.
- **grant, mock init's tool calls**: the script made with the grant, whose agents and
  prompt steps call each granted tool once (and ask the person once), as ``lattice mock
  init --workspace DIR --allow read,write,shell`` writes it.

A request's bytes are its body as the OpenAI chat-completions API would get it
(``chat_body``: messages, tool definitions, response format), JSON-encoded: what a
provider sees, whatever answers it. "Steps" are the model-calling nodes the run went
through. The workspace is a copy of a small project (``fix-a-bug-project``).

    python bench/agent_cost.py                       # the corpus beside the checkout
    python bench/agent_cost.py --corpus DIR --markdown
    python bench/agent_cost.py --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lattice.llm.base import LLMRequest, LLMResponse
from lattice.llm.examples import example_value
from lattice.llm.mock import MockProvider
from lattice.llm.openai_provider import chat_body
from lattice.lower import lower
from lattice.runtime import Runner, RunStore
from lattice.runtime.settings import AgentSettings, RuntimeSettings
from lattice.service.mocks import plan_mocks
from lattice.workspace.grants import WorkspaceGrant

REPO = Path(__file__).resolve().parent.parent
CORPUS = Path(os.environ.get("LATTICE_CORPUS") or REPO.parent / "shared" / "corpus" / "ccwf")
PROJECT = REPO / "workflows" / "examples" / "fix-a-bug-project"
RUNS = ("no grant", "grant, no tool used", "grant, mock init's tool calls")


class CountingProvider:
    """Counts the requests the wrapped provider answers and their bytes as sent on the
    wire (the OpenAI chat-completions body), per node."""

    def __init__(self, inner: MockProvider) -> None:
        self.inner = inner
        self.name = inner.name
        self.requests: list[tuple[str | None, int, bool]] = []
        """(node, bytes, tools attached) per request."""

    def __getattr__(self, name: str) -> Any:  # the mock's tool answers, checkpoints…
        return getattr(self.inner, name)

    async def complete(self, request: LLMRequest) -> LLMResponse:
        body = chat_body(request, "model", structured=request.response_schema is not None)
        size = len(json.dumps(body, ensure_ascii=False).encode("utf-8"))
        self.requests.append((request.node_id, size, bool(request.tools)))
        return await self.inner.complete(request)


@dataclass
class Measure:
    status: str
    steps: int
    requests: int
    bytes: int
    with_tools: int
    per_node: dict[str, int] = field(default_factory=dict)


def measure(
    path: Path, grant: WorkspaceGrant | None, script_grant: WorkspaceGrant | None
) -> Measure:
    """Run ``path`` with the script made under ``script_grant``, the run granted ``grant``."""
    ir = lower(path)
    plan = plan_mocks(ir, grant=script_grant)
    script = plan.script
    provider = CountingProvider(
        MockProvider(script["responses"], tools=script.get("tools"), keep_calls=False)
    )
    settings = RuntimeSettings(agents=AgentSettings(grant=grant or WorkspaceGrant()))
    inputs = example_value(ir.inputs_schema) if ir.inputs_schema else {}
    runner = Runner(
        ir,
        provider=provider,
        store=RunStore(None),
        answers=plan.answers,
        settings=settings,
    )
    result = asyncio.run(runner.arun(inputs))
    per_node: dict[str, int] = {}
    for node, _, _ in provider.requests:
        per_node[node or "?"] = per_node.get(node or "?", 0) + 1
    return Measure(
        status=result.status,
        steps=len(per_node),
        requests=len(provider.requests),
        bytes=sum(size for _, size, _ in provider.requests),
        with_tools=sum(tools for _, _, tools in provider.requests),
        per_node=per_node,
    )


def measure_document(path: Path) -> dict[str, Measure]:
    out: dict[str, Measure] = {"no grant": measure(path, None, None)}
    for name, scripted in (("grant, no tool used", False), ("grant, mock init's tool calls", True)):
        workspace = Path(tempfile.mkdtemp(prefix="agent-cost-"))
        try:
            shutil.copytree(PROJECT, workspace, dirs_exist_ok=True)
            grant = WorkspaceGrant(root=workspace, read=True, write=True, shell=True)
            out[name] = measure(path, grant, grant if scripted else None)
        finally:
            shutil.rmtree(workspace, ignore_errors=True)
    return out


def short(path: Path) -> str:
    return path.stem.rsplit("__", 1)[-1]


def markdown(rows: dict[str, dict[str, Measure]]) -> str:
    head = (
        "| document | steps | no grant: requests | bytes | grant, no tool used: requests "
        "| bytes | grant, mock init's tool calls: requests | bytes |"
    )
    lines = [head, "|---|--:|--:|--:|--:|--:|--:|--:|"]
    totals = {run: [0, 0] for run in RUNS}
    steps = 0
    for name, runs in rows.items():
        cells = [name, str(runs["no grant"].steps)]
        steps += runs["no grant"].steps
        for run in RUNS:
            m = runs[run]
            mark = "" if m.status == "completed" else f" ({m.status})"
            cells += [f"{m.requests}{mark}", f"{m.bytes:,}"]
            totals[run][0] += m.requests
            totals[run][1] += m.bytes
        lines.append("| " + " | ".join(cells) + " |")
    cells = ["**total**", str(steps)]
    for run in RUNS:
        cells += [f"**{totals[run][0]}**", f"**{totals[run][1]:,}**"]
    lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--markdown", action="store_true", help="print the docs' table")
    parser.add_argument("--json", type=Path, help="write every measure here")
    args = parser.parse_args(argv)
    documents = sorted(args.corpus.glob("*.json"))
    if not documents:
        print(f"no documents in {args.corpus}", file=sys.stderr)
        return 2
    rows = {short(path): measure_document(path) for path in documents}
    if args.json:
        data = {name: {run: m.__dict__ for run, m in runs.items()} for name, runs in rows.items()}
        args.json.write_text(json.dumps(data, indent=2) + "\n")
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

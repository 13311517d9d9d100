"""What the panel's tests share: a workflows folder to start runs from."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from tests.builders import approval, conn, node, workflow
from tests.conftest import EXAMPLES
from tests.server.helpers import APPROVAL_SCRIPT


def repair_script() -> dict[str, Any]:
    """support-triage's script, with a classification that needs a repair and an escalation."""
    data: dict[str, Any] = json.loads((EXAMPLES / "support-triage.mock.json").read_text())
    data["responses"]["classify"] = [
        {"category": "billing", "urgency": 9},
        'Sure! {"category": "billing"}',
        {"category": "billing", "urgency": 4},
    ]
    return data


def workflows_folder(root: Path) -> Path:
    """support-triage (with its script, a repairing script and its inputs), analyst-panel
    (parallel branches) and a question between two prompts (``approval.json``, no
    positions, with its script)."""
    flows = root / "workflows"
    flows.mkdir()
    for example in ("support-triage", "analyst-panel"):
        for suffix in (".json", ".mock.json", ".inputs.json"):
            shutil.copy(EXAMPLES / f"{example}{suffix}", flows / f"{example}{suffix}")
    (flows / "support-triage-repair.mock.json").write_text(json.dumps(repair_script()))
    (flows / "approval.json").write_text(json.dumps(approval()))
    (flows / "approval.mock.json").write_text(json.dumps(APPROVAL_SCRIPT))
    return flows


def sixteen_nodes() -> dict[str, Any]:
    """A 16-node document without positions (laid out in six layers): a switch over
    ``$in.pick`` into six lanes of two steps each, which meet again before the end. It
    runs without a model (every step stores a variable)."""
    return lanes_document("abcdef", 2, "sixteen")


def sixty_nodes() -> dict[str, Any]:
    """A 60-node document without positions: eight lanes of seven steps each (as
    ``sixteen_nodes``)."""
    return lanes_document("abcdefgh", 7, "sixty")


def lanes_document(lanes: str, steps: int, name: str) -> dict[str, Any]:
    """start → a switch over ``$in.pick`` → one lane of ``steps`` variableStore steps per
    letter of ``lanes`` (the last lane the default) → merge → end."""
    nodes = [
        node(
            "start",
            "start",
            label="Start",
            inputs={"type": "object", "properties": {"pick": {"type": "string"}}},
        ),
        node(
            "route",
            "switch",
            label="Route by pick",
            evaluationTarget="$in.pick",
            branches=[
                {"id": f"b-{x}", "label": f"Lane {x.upper()}", "condition": f'== "{x}"'}
                for x in lanes[:-1]
            ]
            + [
                {
                    "id": f"b-{lanes[-1]}",
                    "label": f"Lane {lanes[-1].upper()}",
                    "condition": "",
                    "isDefault": True,
                }
            ],
            outputPorts=len(lanes),
        ),
    ]
    connections = [conn("start", "route")]
    for index, lane in enumerate(lanes):
        for step in range(1, steps + 1):
            nodes.append(
                node(
                    f"{lane}{step}",
                    "variableStore",
                    label=f"Lane {lane.upper()} step {step}",
                    operation="set",
                    name=f"v_{lane}{step}",
                    value=step,
                )
            )
        connections += [
            conn("route", f"{lane}1", f"branch-{index}"),
            *(conn(f"{lane}{step}", f"{lane}{step + 1}") for step in range(1, steps)),
            conn(f"{lane}{steps}", "merge"),
        ]
    nodes.append(node("merge", "variableStore", label="Merge", operation="set", name="m", value=1))
    nodes.append(node("end", "end", label="End", output="$vars.m"))
    connections.append(conn("merge", "end"))
    return workflow(nodes, connections, id=name, name=name)


def many_runs(runs: Path, sources: list[str], count: int) -> list[str]:
    """``count`` runs listed as the ``sources`` (run folders under ``runs``) are, one
    every 37 minutes from 2026-10-01 (their ``checkpoint.json`` and ``result.json`` only:
    enough for ``GET /v1/runs``). Their ids, oldest first."""
    start = datetime(2026, 10, 1, tzinfo=UTC)
    made = []
    for index in range(count):
        source = runs / sources[index % len(sources)]
        at = start + timedelta(minutes=37 * index)
        run_id = f"{at:%Y%m%dT%H%M%S}-{index:08x}"
        folder = runs / run_id
        folder.mkdir()
        checkpoint = json.loads((source / "checkpoint.json").read_text())
        checkpoint |= {"run_id": run_id, "started_at": at.strftime("%Y-%m-%dT%H:%M:%S.000Z")}
        (folder / "checkpoint.json").write_text(json.dumps(checkpoint))
        shutil.copy(source / "result.json", folder / "result.json")
        made.append(run_id)
    return made

"""What the panel's tests share: a workflows folder to start runs from."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from tests.builders import approval
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

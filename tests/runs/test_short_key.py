"""A provider key that is also a word (``OPENAI_API_KEY=test``, as local servers are
often given) never rewrites a run folder: killed runs of the shipped support-triage
example resume to the output of an uninterrupted run.

The key ``test`` is the name of every SWITCH case's condition in ``execir.json`` and a
word of the model's answers: masking it there made every resume fail with
``invalid_ir`` and would change the answers a resume replays. Each run is killed with
SIGKILL at a random moment against a local OpenAI-compatible server (the harness of
``test_crash``), then resumed until it completes. ``LATTICE_SHORT_KEY_KILLS`` sets the
number of runs killed (a larger probe).
"""

from __future__ import annotations

import json
import os
import random
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from lattice.llm.fake_server import serve
from tests.runs.test_crash import (
    Forker,
    completed,
    configure,
    finish,
    kill_at_random,
    lattice_subprocess,
    started,
)

KEY = "test"
KILLS = int(os.environ.get("LATTICE_SHORT_KEY_KILLS", "6"))
LATENCY = 0.05
EXAMPLES = Path(__file__).resolve().parents[2] / "workflows" / "examples"

FIRST_DRAFT = {"subject": "Your duplicate charge", "body": "We will test it and get back to you."}
SECOND_DRAFT = {
    "subject": "Refund of the duplicate charge for INV-2291",
    "body": "A test of our billing records confirms the duplicate; the refund is on its way.",
}
FEEDBACK = "Too vague: say when the refund arrives (a test of patience otherwise)."


def answer(body: dict[str, Any]) -> str:
    """The triage's answers, decided by the request alone (a resent request gets the
    same answer); the key's word ``test`` is in several of them."""
    text = json.dumps(body.get("messages", []))
    if "You triage customer support tickets" in text:
        return json.dumps({"category": "billing", "urgency": 4})
    if "reviewing a reply" in text:
        approved = SECOND_DRAFT["subject"] in text
        return json.dumps({"approved": approved, "feedback": "Fine." if approved else FEEDBACK})
    return json.dumps(SECOND_DRAFT if "Too vague" in text else FIRST_DRAFT)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("shortkey")
    shutil.copy(EXAMPLES / "support-triage.json", work / "flow.json")
    shutil.copy(EXAMPLES / "support-triage.inputs.json", work / "inputs.json")
    return work


@pytest.fixture(scope="module")
def lattice() -> Iterator[Forker]:
    yield Forker(key=KEY)


RUN = ("run", "flow.json", "--inputs", "inputs.json", "--json")


@pytest.fixture(scope="module")
def reference(workdir: Path) -> dict[str, Any]:
    with serve(answer, latency=LATENCY) as server:
        config = configure(workdir, server)
        process = lattice_subprocess(workdir, config, *RUN, "--runs-dir", "ref", key=KEY)
        code, err = finish(process)
        assert code == 0, err
        assert server.received[0].headers["authorization"] == f"Bearer {KEY}"
    (folder,) = (workdir / "ref").iterdir()
    result = json.loads((folder / "result.json").read_text())
    assert result["output"]["reply"] == SECOND_DRAFT["body"]  # the answers as sent
    return {
        "output": result["output"],
        "execir": (folder / "execir.json").read_text(),
        "workflow": (folder / "workflow.json").read_text(),
    }


def scenario(lattice: Forker, work: Path, reference: dict[str, Any], number: int) -> bool:
    """Run, kill, resume until completed (the first resume killed too, for even
    ``number``); False when the run ended before the kill."""
    rng = random.Random(number)
    with serve(answer, latency=LATENCY) as server:
        config = configure(work, server)
        runs = work / f"runs{number}"
        process = lattice(work, config, *RUN, "--runs-dir", str(runs))
        if not kill_at_random(process, started(runs), rng):
            assert finish(process)[0] == 0
            return False
        (folder,) = runs.iterdir()
        # what a resume reads back is written as it is
        assert (folder / "execir.json").read_text() == reference["execir"]
        assert (folder / "workflow.json").read_text() == reference["workflow"]
        resumes = 0
        while not completed(folder):  # a kill can land after the run completed
            resumes += 1
            process = lattice(work, config, "resume", str(folder))
            if resumes == 1 and number % 2 == 0 and kill_at_random(process, lambda: True, rng):
                continue
            code, err = finish(process)
            assert code == 0, f"resume {resumes} of run {number}: {err}"
            break
    result = json.loads((folder / "result.json").read_text())
    assert result["status"] == "completed"
    assert result["output"] == reference["output"]
    return True


def test_killed_runs_with_a_word_for_a_key_resume_to_the_same_output(
    lattice: Forker, workdir: Path, reference: dict[str, Any]
) -> None:
    with ThreadPoolExecutor(max_workers=2) as pool:
        outcomes = list(pool.map(lambda n: scenario(lattice, workdir, reference, n), range(KILLS)))
    assert sum(outcomes) >= KILLS // 2, f"only {sum(outcomes)} of {KILLS} runs were killed mid-way"

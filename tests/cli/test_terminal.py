"""What a person at a terminal meets: questions asked on it, and Ctrl-C."""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Any

import pytest

from lattice.cli import main
from lattice.cli.common import terminal_asker
from lattice.ir.models import AskOp, AskOption
from lattice.llm.mock import MockProvider
from lattice.runs.store import RunStore
from lattice.runtime.runner import Runner
from tests.builders import approval, lower_ok
from tests.conftest import EXAMPLES


def question(*labels: str, multi: bool = False) -> AskOp:
    return AskOp(
        id="pick",
        question="Colour?",
        options=[AskOption(label=label) for label in labels],
        multi_select=multi,
        writes="$vars.pick",
        source_node="pick",
    )


def typed(*answers: str) -> tuple[list[str], Any]:
    """A reader that types ``answers`` one per prompt, and the prompts it was shown."""
    prompts: list[str] = []
    queue = iter(answers)

    def read(prompt: str) -> str:
        prompts.append(prompt)
        return next(queue)

    return prompts, read


def test_options_are_numbered_from_one(capsys: pytest.CaptureFixture[str]) -> None:
    prompts, read = typed("1")
    assert terminal_asker(question("Red", "Blue"), read) == "Red"
    err = capsys.readouterr().err
    assert "1. Red" in err and "2. Blue" in err
    assert "0." not in err
    assert len(prompts) == 1


def test_an_answer_that_is_no_option_asks_again(capsys: pytest.CaptureFixture[str]) -> None:
    prompts, read = typed("3", "0", "green", "2")
    assert terminal_asker(question("Red", "Blue"), read) == "Blue"
    err = capsys.readouterr().err
    assert err.count("is not an option") == 3
    assert "type 1-2 or a label" in err
    assert len(prompts) == 4


def test_labels_match_in_any_case_and_empty_stops(capsys: pytest.CaptureFixture[str]) -> None:
    assert terminal_asker(question("Red", "Blue"), typed("bLUE")[1]) == "Blue"
    assert terminal_asker(question("Red", "Blue"), typed("  ")[1]) is None
    assert terminal_asker(question(), typed("free text")[1]) == "free text"


def test_multi_select_takes_numbers_and_labels(capsys: pytest.CaptureFixture[str]) -> None:
    ask = question("Red", "Blue", "Green", multi=True)
    assert terminal_asker(ask, typed("1, green")[1]) == ["Red", "Green"]
    prompts, read = typed("1, 4", "3")
    assert terminal_asker(ask, read) == ["Green"]
    assert len(prompts) == 2


def test_the_question_asked_is_rendered(tmp_path: Path) -> None:
    doc = approval()
    doc["nodes"][2]["data"]["questionText"] = "Send the note about {{ $in.topic }}?"
    asked: list[str] = []

    def ask(op: AskOp) -> str:
        asked.append(op.question)
        return "Discard"

    mock = MockProvider({"draft": ["a note"]})
    result = Runner(lower_ok(doc), provider=mock, store=RunStore(None), ask_human=ask).run(
        {"topic": "tea"}
    )
    assert result.status == "completed"
    assert asked == ["Send the note about tea?"]


def test_ctrl_c_says_interrupted_once(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))

    async def interrupted(self: MockProvider, request: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(MockProvider, "complete", interrupted)
    code = main(
        [
            "run",
            str(EXAMPLES / "hello-world.json"),
            "--mock",
            str(EXAMPLES / "hello-world.mock.json"),
            "--input",
            "name=Ada",
            "--runs-dir",
            str(tmp_path / "runs"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 130
    lines = [line for line in err.splitlines() if "interrupted" in line]
    assert len(lines) == 1, err
    assert "continue with: lattice resume" in lines[0]

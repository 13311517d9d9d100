"""Arguments a command does not know: reported by that command, with the nearest option;
options written in full; ``lattice`` alone prints the help."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from lattice.cli import main
from lattice.cli.parser import build_batch_diff_parser, build_parser
from tests.conftest import REPO

TRIAGE = str(REPO / "workflows" / "examples" / "support-triage.json")
MOCK = str(REPO / "workflows" / "examples" / "support-triage.mock.json")


def _usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as raised:
        main(argv)
    assert raised.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "usage", "hint"),
    [
        (["run", TRIAGE, "--mocks", MOCK], "usage: lattice run ", "did you mean --mock?"),
        (["check", TRIAGE, "--confg", "x.toml"], "usage: lattice check ", "did you mean --config?"),
        (["mock", "init", TRIAGE, "--ouptut", "x"], "usage: lattice mock init ", "--output?"),
        (
            ["batch", "diff", "a", "b", "--jsn"],
            "usage: lattice batch diff ",
            "did you mean --json?",
        ),
        (["run", TRIAGE, "--mock=x", "--inputs=y", "--jsonn"], "usage: lattice run ", "--json?"),
    ],
)
def test_an_unknown_option_is_reported_by_its_command_with_the_nearest_one(
    argv: list[str], usage: str, hint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _usage_error(argv, capsys)
    assert err.startswith(usage), err
    assert "unrecognized arguments" in err and hint in err, err
    assert "usage: lattice [-h]" not in err  # not every command's usage


def test_an_unknown_argument_with_nothing_near_gets_no_hint(
    capsys: pytest.CaptureFixture[str],
) -> None:
    err = _usage_error(["run", TRIAGE, "--zzzzzz"], capsys)
    assert "unrecognized arguments: --zzzzzz\n" in err and "did you mean" not in err


@pytest.mark.parametrize("abbreviation", ["--moc", "--mo", "--inp"])
def test_options_are_not_abbreviated(abbreviation: str, capsys: pytest.CaptureFixture[str]) -> None:
    err = _usage_error(["run", TRIAGE, abbreviation, MOCK], capsys)
    assert f"unrecognized arguments: {abbreviation}" in err


def _parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                yield from _parsers(child)


def test_no_parser_accepts_abbreviations() -> None:
    parsers = [*_parsers(build_parser()), build_batch_diff_parser()]
    assert len(parsers) > 15
    assert [p.prog for p in parsers if p.allow_abbrev] == []


def test_lattice_alone_prints_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    out = capsys.readouterr()
    assert out.out == build_parser().format_help()
    assert out.err == ""

"""``lattice check --workspace DIR``: per agent node, each tool allowed, asking or denied,
and the rule that decided; a rule that cannot be read stops it with its place (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lattice.cli.main import main
from tests.conftest import EXAMPLES

FIX_A_BUG = str(EXAMPLES / "fix-a-bug.json")


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    root = tmp_path / "project"
    (root / ".claude").mkdir(parents=True)
    (root / ".claude/settings.json").write_text(
        json.dumps({"permissions": {"ask": ["Bash", "Edit"], "deny": ["Read(./.env)"]}})
    )
    return root


def test_check_says_for_each_tool_what_decides_it(
    workspace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "lattice.toml"
    config.write_text('[agents.permissions]\nallow = ["Bash(python -m unittest *)"]\n')
    code = main(
        [
            "check",
            FIX_A_BUG,
            "--config",
            str(config),
            "--workspace",
            str(workspace),
            "--allow",
            "read,write,shell",
            "--deny-rule",
            "Bash(curl *)",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    settings = f"{workspace}/.claude/settings.json"
    assert "permissions: 2 deny, 2 ask, 1 allow; mode default (default)" in out
    assert f"Edit       asks: ask rule 'Edit' ({settings}: permissions.ask[1])" in out
    assert f"Write      asks: ask rule 'Edit' ({settings}: permissions.ask[1])" in out
    assert f"allow Bash(python -m unittest *) ({config}: agents.permissions.allow[0])" in out
    assert "deny Bash(curl *) (--deny-rule)" in out
    assert (
        f"Read  depends: allow (the grant), but deny Read(./.env) ({settings}: permissions.deny[0])"
        in out
    )


def test_check_without_claude_settings_reads_none(
    workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "check",
            FIX_A_BUG,
            "--workspace",
            str(workspace),
            "--allow",
            "read,write,shell",
            "--no-claude-settings",
            "--permission-mode",
            "plan",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "permissions: no rules; mode plan (--permission-mode)" in out
    assert "Bash       denied: plan mode (--permission-mode): not offered" in out
    assert "Read       allowed: the grant" in out


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ("settings", "permissions.ask[2]: permission rule 'Bash(ls'"),
        ("toml", "agents.permissions: deny[0]: permission rule 'WebFetch(example.com)'"),
        ("flag", "--ask-rule: permission rule 'mcp__'"),
    ],
)
def test_a_rule_lattice_cannot_read_stops_check_with_its_place(
    workspace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str, expected: str
) -> None:
    args = ["check", FIX_A_BUG, "--workspace", str(workspace), "--allow", "read"]
    if where == "settings":
        (workspace / ".claude/settings.local.json").write_text(
            json.dumps({"permissions": {"ask": ["Bash", "Edit", "Bash(ls"]}})
        )
    elif where == "toml":
        config = tmp_path / "lattice.toml"
        config.write_text('[agents.permissions]\ndeny = ["WebFetch(example.com)"]\n')
        args += ["--config", str(config)]
    else:
        args += ["--ask-rule", "mcp__"]
    assert main(args) == 2
    assert expected in capsys.readouterr().err

"""Claude Code's permission rules, parsed, matched against tool calls and decided as Claude
Code decides: deny, then ask, then allow; specifiers; ``:*`` and ``*``; paths relative to
the settings file, the working folder, the home folder and the root; ``domain:``; MCP names."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from lattice.permissions import Permissions, RuleError, RuleSource, build_permissions, parse_rule
from lattice.permissions.policy import Mode
from lattice.permissions.rules import command_prefix_rule
from lattice.permissions.settings import RuleSet, parse_rules

CWD = Path("/work/project")
HOME = Path("/home/alice")
SETTINGS_BASE = Path("/work/project")


def decide(
    rules: dict[str, list[str]], tool: str, arguments: dict[str, Any], mode: Mode = "default"
) -> str:
    parsed = parse_rules(rules, "settings: permissions.{behavior}[{index}]", SETTINGS_BASE)
    return Permissions(parsed, mode, "test", home=HOME).decide(tool, arguments, CWD).behavior


def bash(command: str) -> tuple[str, dict[str, Any]]:
    return "Bash", {"command": command}


def read(path: str) -> tuple[str, dict[str, Any]]:
    return "Read", {"file_path": path}


def edit(path: str) -> tuple[str, dict[str, Any]]:
    return "Edit", {"file_path": path, "old_string": "a", "new_string": "b"}


def fetch(url: str) -> tuple[str, dict[str, Any]]:
    return "WebFetch", {"url": url}


TABLE: list[tuple[dict[str, list[str]], tuple[str, dict[str, Any]], str]] = [
    # a bare tool name and Tool(*) match every use
    ({"ask": ["Bash"]}, bash("ls"), "ask"),
    ({"deny": ["Bash(*)"]}, bash("echo hi"), "deny"),
    ({"ask": ["WebFetch"]}, fetch("https://example.com"), "ask"),
    ({"ask": ["Read"]}, read("README.md"), "ask"),
    ({"ask": ["Read"]}, ("Glob", {"pattern": "**/*.py"}), "ask"),  # Read covers every read
    ({"ask": ["Edit"]}, ("Write", {"file_path": "a.py", "content": ""}), "ask"),
    ({"ask": ["Write"]}, edit("a.py"), "allow"),
    # exact commands
    ({"ask": ["Bash(npm run build)"]}, bash("npm run build"), "ask"),
    ({"ask": ["Bash(npm run build)"]}, bash("npm run build:dev"), "allow"),
    # legacy prefix :*
    ({"ask": ["Bash(npm run test:*)"]}, bash("npm run test"), "ask"),
    ({"ask": ["Bash(npm run test:*)"]}, bash("npm run test -- --watch"), "ask"),
    ({"ask": ["Bash(npm run test:*)"]}, bash("npm run testing"), "allow"),
    # * wildcards: the space before a trailing * is a word boundary, the arguments optional
    ({"ask": ["Bash(git diff *)"]}, bash("git diff HEAD~1"), "ask"),
    ({"ask": ["Bash(git diff *)"]}, bash("git diff"), "ask"),
    ({"ask": ["Bash(git diff *)"]}, bash("git difftool"), "allow"),
    ({"ask": ["Bash(ls*)"]}, bash("lsof -i"), "ask"),
    ({"ask": ["Bash(ls *)"]}, bash("lsof -i"), "allow"),
    ({"ask": ["Bash(git * main)"]}, bash("git checkout main"), "ask"),
    ({"ask": ["Bash(git * main)"]}, bash("git checkout dev"), "allow"),
    ({"ask": ["Bash(* --version)"]}, bash("node --version"), "ask"),
    # deny wins over ask and allow, ask over allow, whatever their order or specificity
    ({"allow": ["Bash(aws s3 ls)"], "deny": ["Bash(aws *)"]}, bash("aws s3 ls"), "deny"),
    ({"allow": ["Bash(git push *)"], "ask": ["Bash(git *)"]}, bash("git push origin"), "ask"),
    ({"ask": ["Bash"], "deny": ["Bash(rm *)"]}, bash("rm -rf build"), "deny"),
    # compound commands: each part must be allowed; a deny or ask on any part decides
    ({"ask": ["Bash(rm *)"]}, bash("make && rm -rf build"), "ask"),
    ({"deny": ["Bash(curl *)"]}, bash("echo x | curl -d @- http://x"), "deny"),
    ({"deny": ["Bash(rm *)"]}, bash("ls; rm x"), "deny"),
    ({"allow": ["Bash(make *)"]}, bash("make test && make lint"), "allow"),
    ({"allow": ["Bash(safe-cmd *)"]}, bash("safe-cmd && other-cmd"), "allow"),  # the grant
    ({"deny": ["Bash(rm *)"]}, bash("echo 'a && rm b'"), "allow"),  # quoted: one command
    # wrappers are looked through
    ({"ask": ["Bash(npm test *)"]}, bash("timeout 30 npm test"), "ask"),
    ({"deny": ["Bash(rm *)"]}, bash("nohup rm -rf x"), "deny"),
    ({"deny": ["Bash(rm *)"]}, bash("nice -n 5 rm x"), "deny"),
    # Read and Edit: gitignore paths relative to the working folder
    ({"deny": ["Read(./.env)"]}, read(".env"), "deny"),
    ({"deny": ["Read(./.env)"]}, read("config/.env"), "allow"),
    ({"deny": ["Read(*.env)"]}, read("config/prod.env"), "deny"),
    ({"deny": ["Read(**/.env)"]}, read("/work/project/a/b/.env"), "deny"),
    ({"ask": ["Edit(src/**)"]}, edit("src/app/main.py"), "ask"),
    ({"ask": ["Edit(src/**)"]}, edit("tests/test_main.py"), "allow"),
    ({"ask": ["Edit(src/*.py)"]}, edit("src/app/main.py"), "allow"),
    ({"ask": ["Edit(docs)"]}, edit("docs/guide/index.md"), "ask"),
    ({"ask": ["Edit(src/**)"]}, ("Write", {"file_path": "src/new.py", "content": ""}), "ask"),
    ({"ask": ["Edit(src/**)"]}, ("MultiEdit", {"file_path": "src/a.py", "edits": []}), "ask"),
    ({"ask": ["Write(src/**)"]}, edit("src/a.py"), "allow"),
    ({"deny": ["Read(secrets/**)"]}, ("Grep", {"pattern": "key", "path": "secrets"}), "deny"),
    ({"deny": ["Read(secrets/**)"]}, ("LS", {"path": "secrets/keys"}), "deny"),
    # //absolute, ~/home, /relative to the settings file's project
    ({"deny": ["Read(//etc/**)"]}, read("/etc/passwd"), "deny"),
    ({"deny": ["Read(~/.ssh/**)"]}, read("/home/alice/.ssh/id_rsa"), "deny"),
    ({"deny": ["Edit(/src/**/*.ts)"]}, edit("/work/project/src/ui/app.ts"), "deny"),
    ({"deny": ["Edit(/src/**/*.ts)"]}, edit("/work/project/lib/src/app.ts"), "allow"),
    ({"deny": ["Read(../**)"]}, read("../other/file"), "deny"),
    # WebFetch domains
    ({"deny": ["WebFetch(domain:example.com)"]}, fetch("https://example.com/a"), "deny"),
    ({"deny": ["WebFetch(domain:example.com)"]}, fetch("https://api.example.com/a"), "allow"),
    ({"deny": ["WebFetch(domain:*.example.com)"]}, fetch("https://api.example.com/a"), "deny"),
    ({"deny": ["WebFetch(domain:example.com)"]}, fetch("https://example.com.evil.io/"), "allow"),
    # MCP names
    ({"ask": ["mcp__github__create_issue"]}, ("mcp__github__create_issue", {}), "ask"),
    ({"ask": ["mcp__github__create_issue"]}, ("mcp__github__list_issues", {}), "allow"),
    ({"ask": ["mcp__github"]}, ("mcp__github__list_issues", {}), "ask"),
    ({"deny": ["mcp__github__*"]}, ("mcp__github__list_issues", {}), "deny"),
    ({"deny": ["mcp__github"]}, ("mcp__gitlab__list_issues", {}), "allow"),
    # rules on tools Lattice does not have are read and match nothing of it
    ({"deny": ["WebSearch", "Agent(Explore)", "Skill(deploy *)"]}, bash("ls"), "allow"),
]


@pytest.mark.parametrize(
    ("rules", "call", "expected"), TABLE, ids=[f"{i}" for i in range(len(TABLE))]
)
def test_a_rule_decides_a_call_as_claude_code_does(
    rules: dict[str, list[str]], call: tuple[str, dict[str, Any]], expected: str
) -> None:
    tool, arguments = call
    assert decide(rules, tool, arguments) == expected


def test_the_table_has_forty_rules_at_least() -> None:
    assert len({rule for rules, _, _ in TABLE for items in rules.values() for rule in items}) >= 40


MODES_TABLE: list[tuple[Mode, dict[str, list[str]], tuple[str, dict[str, Any]], str]] = [
    ("plan", {}, read("a.py"), "allow"),
    ("plan", {}, edit("a.py"), "deny"),
    ("plan", {"allow": ["Bash"]}, bash("ls"), "deny"),
    ("acceptEdits", {}, edit("a.py"), "allow"),
    ("acceptEdits", {}, bash("ls"), "ask"),
    ("acceptEdits", {"allow": ["Bash(ls *)"]}, bash("ls -la"), "allow"),
    ("dontAsk", {"ask": ["Bash"]}, bash("ls"), "deny"),
    ("dontAsk", {"allow": ["Bash(ls *)"]}, bash("ls"), "allow"),
    ("dontAsk", {}, read("a.py"), "deny"),
    ("bypassPermissions", {"ask": ["Bash"]}, bash("ls"), "allow"),
    ("bypassPermissions", {"deny": ["Bash(rm *)"]}, bash("rm x"), "deny"),
    ("default", {}, bash("rm -rf /"), "allow"),  # the grant is the allow rule
]


@pytest.mark.parametrize(("mode", "rules", "call", "expected"), MODES_TABLE)
def test_the_mode_decides_what_no_rule_does(
    mode: Mode, rules: dict[str, list[str]], call: tuple[str, dict[str, Any]], expected: str
) -> None:
    tool, arguments = call
    assert decide(rules, tool, arguments, mode) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("Bsh(ls)", "'Bsh' is not a Claude Code tool (did you mean 'Bash'?)"),
        ("bash", "did you mean 'Bash'?"),
        ("Bash(ls", "a rule is Tool or Tool(specifier)"),
        ("Bash()", "the parentheses are empty"),
        ("Bash(npm:* test)", "':*' may only end a Bash rule"),
        ("WebFetch(example.com)", "WebFetch rules are WebFetch(domain:example.com)"),
        ("Grep(src/**)", "path rules are Read(...) or Edit(...)"),
        ("WebSearch(cats)", "WebSearch takes no specifier"),
        ("mcp__", "not an MCP name"),
        ("mcp__github__create issue", "not an MCP name"),
    ],
)
def test_a_rule_lattice_cannot_read_is_an_error_with_its_place(text: str, message: str) -> None:
    with pytest.raises(RuleError) as raised:
        parse_rule(text, "allow", RuleSource(".claude/settings.json: permissions.allow[3]"))
    assert raised.value.message.startswith(".claude/settings.json: permissions.allow[3]: ")
    assert message in raised.value.message


def write_settings(path: Path, permissions: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"permissions": permissions}))


def test_settings_files_are_read_user_then_project_then_local(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    monkeypatch.delenv("CLAUDE_CONFIG_DIR")  # the user's are under ~/.claude
    write_settings(
        home / ".claude/settings.json", {"allow": ["Bash(git *)"], "defaultMode": "plan"}
    )
    write_settings(project / ".claude/settings.json", {"deny": ["Read(/.env)"]})
    write_settings(
        project / ".claude/settings.local.json",
        {"ask": ["Bash(git push *)"], "defaultMode": "acceptEdits"},
    )
    permissions = build_permissions(
        workspace=project,
        configured=[RuleSet({"deny": ["Bash(rm *)"]}, "--{behavior}-rule")],
        home=home,
    )
    assert [(r.behavior, r.text) for r in permissions.rules] == [
        ("allow", "Bash(git *)"),
        ("deny", "Read(/.env)"),
        ("ask", "Bash(git push *)"),
        ("deny", "Bash(rm *)"),
    ]
    assert permissions.mode == "acceptEdits"
    assert permissions.mode_source == str(project / ".claude/settings.local.json")
    verdict = permissions.decide("Read", {"file_path": ".env"}, project)
    assert verdict.behavior == "deny"
    assert (
        verdict.reason
        == f"deny rule 'Read(/.env)' ({project}/.claude/settings.json: permissions.deny[0])"
    )
    assert permissions.decide("Bash", {"command": "git push"}, project).behavior == "ask"
    assert permissions.decide("Bash", {"command": "git status"}, project).behavior == "allow"
    # opted out: none of the files is read
    alone = build_permissions(
        workspace=project,
        claude_files=False,
        home=home,
    )
    assert alone.rules == () and alone.mode == "default"


def test_a_bad_settings_file_names_the_file_and_the_place(tmp_path: Path) -> None:
    settings = tmp_path / ".claude/settings.json"
    write_settings(settings, {"allow": ["Bash(ls *)", "Raed(x)"]})
    with pytest.raises(
        RuleError, match=r"settings.json: permissions.allow\[1\]: permission rule 'Raed\(x\)'"
    ):
        build_permissions(
            workspace=tmp_path,
            home=tmp_path / "nohome",
        )
    settings.write_text('{"permissions": {"allow": [}')
    with pytest.raises(RuleError, match=r"settings.json:1: not JSON"):
        build_permissions(
            workspace=tmp_path,
            home=tmp_path / "nohome",
        )
    write_settings(settings, {"defaultMode": "acceptEdit"})
    with pytest.raises(RuleError, match="did you mean 'acceptEdits'"):
        build_permissions(
            workspace=tmp_path,
            home=tmp_path / "nohome",
        )


def test_bypass_permissions_needs_the_users_flag(tmp_path: Path) -> None:
    write_settings(
        tmp_path / ".claude/settings.json", {"defaultMode": "bypassPermissions", "ask": ["Bash"]}
    )
    common: dict[str, Any] = {
        "workspace": tmp_path,
        "home": tmp_path / "nohome",
    }
    without = build_permissions(**common)
    assert without.mode == "default"
    assert "needs --bypass-permissions" in without.notes[0]
    assert without.decide("Bash", {"command": "ls"}, tmp_path).behavior == "ask"
    with_flag = build_permissions(**common, bypass=True)
    assert with_flag.mode == "bypassPermissions"
    assert with_flag.decide("Bash", {"command": "ls"}, tmp_path).behavior == "allow"


def test_a_whole_tool_denied_is_not_offered_and_check_says_why() -> None:
    rules = parse_rules(
        {"deny": ["Bash"], "ask": ["Edit(src/**)"]}, "s: permissions.{behavior}[{index}]", None
    )
    permissions = Permissions(rules, home=HOME)
    assert permissions.removes("Bash") is not None
    assert permissions.tool_summary("Bash")[0] == "deny"
    assert permissions.tool_summary("Edit") == (
        "depends",
        "allow (the grant), but ask Edit(src/**) (s: permissions.ask[0])",
    )
    assert permissions.tool_summary("Read") == ("allow", "the grant")


def test_claude_config_dir_holds_the_users_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "config"))
    write_settings(tmp_path / "config/settings.json", {"deny": ["WebFetch"]})
    write_settings(tmp_path / "home/.claude/settings.json", {"deny": ["Bash"]})
    permissions = build_permissions(workspace=None, home=tmp_path / "home")
    assert [r.text for r in permissions.rules] == ["WebFetch"]


def test_a_settings_file_that_is_no_small_regular_file_is_refused(tmp_path: Path) -> None:
    """A workspace's ``.claude/settings.json`` linked to a device (``/dev/zero`` would
    fill memory, a FIFO would hang) or huge is an error naming it, never read whole."""
    settings = tmp_path / ".claude/settings.json"
    settings.parent.mkdir()
    settings.symlink_to("/dev/null")
    with pytest.raises(RuleError, match=r"settings.json: cannot read it: not a regular file"):
        build_permissions(workspace=tmp_path, home=tmp_path / "nohome")
    settings.unlink()
    os.mkfifo(settings)
    with pytest.raises(RuleError, match="not a regular file"):
        build_permissions(workspace=tmp_path, home=tmp_path / "nohome")
    settings.unlink()
    settings.write_text('{"permissions": {"allow": []}}' + " " * (1 << 20))
    with pytest.raises(RuleError, match="cannot read it: over 1048576 bytes"):
        build_permissions(workspace=tmp_path, home=tmp_path / "nohome")


HIDDEN_COMMANDS = [
    "git diff $'\\'' ; touch pwned ; echo \\'",  # $'…': \' does not end it
    "git diff #'\ntouch pwned\n#'",  # a comment's quote quotes nothing
    "git diff <<EOF\ngit diff '\nEOF\ntouch pwned\n#'",  # a here-document's lines
    "git diff ${X:=\\$\\(touch pwned\\)} ${X@P}",  # a prompt expansion substitutes
    "git diff ${X:=a[\\$\\(touch pwned\\)]} $[X]",  # so does an arithmetic subscript
]


@pytest.mark.parametrize("command", HIDDEN_COMMANDS)
def test_a_command_hidden_from_the_splitter_is_not_allowed_by_a_rule_on_another(
    command: str, tmp_path: Path
) -> None:
    # bash runs `touch pwned` in each; an allow rule on `git diff` must not allow it
    subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True, check=False)
    assert (tmp_path / "pwned").exists()
    allowed = {"allow": ["Bash(git diff:*)"]}
    assert decide(allowed, *bash(command), mode="dontAsk") == "deny"


@pytest.mark.parametrize(
    ("command", "rule"),
    [
        ("git diff --stat", "Bash(git diff:*)"),
        ("npm run test:unit", "Bash(npm run test:unit:*)"),
        ("python3 -m unittest -v", "Bash(python3 -m unittest:*)"),
        ("ls -la", "Bash(ls:*)"),
        # each of these stood for the tool's every command (git push, python3 -c …)
        ("git --no-pager log", None),
        ("git -C . diff", None),
        ("git", None),
        ("npm run", None),
        ("python3 check.py", None),
        ("bash build.sh", None),
        ("env LANG=C make", None),
        ("xargs -n1 echo", None),
        ("node build.js", None),
    ],
)
def test_allow_for_the_run_stands_for_the_command_the_person_saw(
    command: str, rule: str | None
) -> None:
    assert command_prefix_rule(command) == rule


def test_allow_for_the_run_says_what_it_allows() -> None:
    """The words a person reads before choosing "allow for the rest of the run"."""
    from lattice.permissions.approvals import allow_run_scope

    assert allow_run_scope("Bash", {"command": "git diff --stat"}) == "`git diff` commands"
    both = allow_run_scope("Bash", {"command": "python3 -m unittest -v && ls tests"})
    assert both == "`python3 -m unittest` commands and `ls` commands"
    assert "this once" in allow_run_scope("Bash", {"command": "git -C . log"})
    assert allow_run_scope("Write", {"file_path": "a"}) == "every edit"
    assert allow_run_scope("WebFetch", {"url": "https://x"}) == "every WebFetch call"


@pytest.mark.parametrize(
    "command",
    [
        "(git push origin)",
        "{ git push origin; }",
        "if true; then git push origin; fi",
        "! git push origin",
        "for x in 1; do git push origin; done",
        "echo $(git push origin)",
        "env git push origin",
        "command git push origin",
        "xargs git push < list",
        "bash -c 'git push origin'",
        "/usr/bin/git push origin",
        "git  push\torigin",
    ],
)
def test_an_ask_rule_on_some_commands_is_not_walked_around(command: str) -> None:
    """An ask (or deny) rule on one command asks for it however it is wrapped: grouped,
    under a keyword, in a substitution, run by another program, or spelled with a folder
    or other whitespace; a command no rule can read whole asks under a deny rule too,
    and an ordinary command still runs."""
    assert decide({"ask": ["Bash(git push:*)"]}, *bash(command)) == "ask"
    assert decide({"deny": ["Bash(git push:*)"]}, *bash(command)) in ("deny", "ask")
    assert decide({"ask": ["Bash(git push:*)"]}, *bash("git status")) == "allow"
    assert decide({"deny": ["Bash(rm:*)"]}, *bash("ls -la && git diff")) == "allow"

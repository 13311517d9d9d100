"""Permission rules as Claude Code writes them, parsed and matched against tool calls.

A rule is ``Tool`` or ``Tool(specifier)``:

- ``Bash`` / ``Bash(*)`` every command; ``Bash(npm run build)`` that command exactly;
  ``Bash(git diff *)`` with ``*`` matching any text (spaces too); a single trailing
  `` *`` is optional (``Bash(ls *)`` matches ``ls`` and ``ls -la`` but not ``lsof``);
  the legacy ``Bash(npm run test:*)`` is ``Bash(npm run test *)``. A compound command
  (``&&``, ``||``, ``;``, ``|``, ``&``, a new line) is split: a deny or ask rule that
  matches any part of it decides, an allow rule must match every part. ``timeout``,
  ``time``, ``nice`` and ``nohup`` before a command are looked through.
- ``Read(path)`` (Read, LS, Glob, Grep) and ``Edit(path)`` (Edit, MultiEdit, Write):
  gitignore patterns; ``//path`` absolute, ``~/path`` under the home folder, ``/path``
  relative to the folder the rule's settings belong to, ``path`` or ``./path`` relative
  to the working folder (the workspace). A pattern without a slash matches at any
  depth; a pattern that names a folder covers everything under it. ``Write(path)`` and
  ``MultiEdit(path)`` match their own tool only.
- ``WebFetch(domain:example.com)`` a host (``domain:*.example.com`` its subdomains).
- ``mcp__server`` / ``mcp__server__*`` every tool of an MCP server,
  ``mcp__server__tool`` one tool.

Other Claude Code tools (``WebSearch``, ``Agent(name)``, ``Task``, ``Skill(name)`` …)
are read and kept, and match nothing Lattice runs. Anything else is a ``RuleError``.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from lattice.errors import ErrorType, LatticeUserError, did_you_mean
from lattice.ir.tool_names import parse_mcp_name
from lattice.patterns import glob_source

Behavior = Literal["allow", "ask", "deny"]
BEHAVIORS: tuple[Behavior, ...] = ("deny", "ask", "allow")
"""In the order Claude Code reads them: the first that matches decides."""

READ_TOOLS = frozenset({"Read", "LS", "Glob", "Grep", "NotebookRead"})
"""Tools a ``Read(path)`` rule covers."""
FOLDER_TOOLS = frozenset({"LS", "Glob", "Grep"})
"""Read tools whose path is a folder they look inside."""
EDIT_TOOLS = frozenset({"Edit", "MultiEdit", "Write", "NotebookEdit"})
"""Tools an ``Edit(path)`` rule covers."""
OTHER_TOOLS = frozenset(
    {
        "Bash",
        "WebFetch",
        "WebSearch",
        "Agent",
        "Task",
        "Skill",
        "TodoWrite",
        "ExitPlanMode",
        "BashOutput",
        "KillShell",
        "SlashCommand",
    }
)
RULE_TOOLS = READ_TOOLS | EDIT_TOOLS | OTHER_TOOLS
"""Every tool name a rule may start with (besides ``mcp__…``): Claude Code's tools."""
_SPECIFIED_ANYHOW = frozenset({"Agent", "Task", "Skill", "SlashCommand"})
"""Tools whose specifier Lattice keeps without reading (it has none of them)."""

WRAPPERS = ("timeout", "time", "nice", "nohup")
"""Commands that run another; a Bash rule matches the command they run."""
_OPERATORS = ("&&", "||", "|&", ";", "|", "&", "\n")
_UNSPLITTABLE = ("$(", "`", "<(", ">(", "${", "$[", "$'", "<<")
"""Text bash reads otherwise than the splitter: substitutions and expansions that run
commands (``${X:=…}`` with ``${X@P}`` or ``$[X]``), ``$'…'`` (its ``\\'`` does not end
it) and here-documents (their lines are not commands)."""
_WORD_BREAKS = " \t\n;&|()<>"
_RULE = re.compile(r"([A-Za-z][A-Za-z0-9_]*)(?:\((.*)\))?", re.DOTALL)


class RuleError(LatticeUserError):
    """A rule that cannot be read; its message names where it was written."""

    error_type = ErrorType.CONFIG_ERROR


@dataclass(frozen=True)
class RuleSource:
    """Where a rule was written: a file and the place in it, or a command-line option."""

    where: str
    """``.claude/settings.json: permissions.ask[1]``, ``--ask-rule``, ``lattice.toml: …``."""
    base: Path | None = None
    """The folder ``/path`` patterns are relative to (a settings file's project)."""

    def __str__(self) -> str:
        return self.where


@dataclass(frozen=True)
class Rule:
    """One parsed rule: its tool, its specifier (None: every use of the tool), where from."""

    text: str
    tool: str
    specifier: str | None
    behavior: Behavior
    source: RuleSource = field(default=RuleSource("rule"), compare=False)

    @property
    def whole_tool(self) -> bool:
        """A rule on every use of its tool (``Bash``, ``Bash(*)``, ``mcp__server``)."""
        return self.specifier is None

    def describe(self) -> str:
        return f"{self.behavior} rule {self.text!r} ({self.source})"

    @cached_property
    def _bash(self) -> re.Pattern[str] | None:
        return bash_pattern(self.specifier) if self.tool == "Bash" and self.specifier else None

    def covers_tool(self, tool: str) -> bool:
        """Whether the rule can apply to calls of ``tool`` at all."""
        mcp_rule = parse_mcp_name(self.tool)
        if mcp_rule is not None:
            mcp = parse_mcp_name(tool)
            if mcp is None or mcp[0] != mcp_rule[0]:
                return False
            return mcp_rule[1] is None or mcp_rule[1] == mcp[1]
        if self.tool == tool:
            return True
        return (self.tool == "Read" and tool in READ_TOOLS) or (
            self.tool == "Edit" and tool in EDIT_TOOLS
        )

    def matches(self, tool: str, arguments: Mapping[str, Any], where: CallPlace) -> bool:
        """Whether the rule matches one call (a Bash command as a whole: see ``bash_parts``)."""
        if not self.covers_tool(tool):
            return False
        if self.specifier is None:
            return True
        if self.tool == "Bash":
            assert self._bash is not None
            return bool(self._bash.fullmatch(str(arguments.get("command", ""))))
        if self.tool in READ_TOOLS | EDIT_TOOLS:
            target = where.target(tool, arguments)
            if target is None:
                return False
            base = self.source.base
            if path_matches(self.specifier, target, where, base):
                return True
            # LS, Glob and Grep read what is inside their folder: a deny or ask rule on
            # some of it applies to them (an allow rule must cover the folder itself)
            inside = target / "\x00"
            return (
                tool in FOLDER_TOOLS
                and self.behavior != "allow"
                and path_matches(self.specifier, inside, where, base)
            )
        if self.tool == "WebFetch":
            return domain_matches(self.specifier, str(arguments.get("url", "")))
        return False


@dataclass(frozen=True)
class CallPlace:
    """What a path rule needs besides the call: the working folder and the home folder."""

    cwd: Path
    home: Path

    def target(self, tool: str, arguments: Mapping[str, Any]) -> Path | None:
        """The absolute path a file tool's call reads or writes (its folder for LS, Glob
        and Grep: the working folder when none is given)."""
        raw = arguments.get("file_path", arguments.get("notebook_path", arguments.get("path")))
        if raw is None:
            return self.cwd if tool in ("LS", "Glob", "Grep") else None
        path = Path(str(raw)).expanduser()
        return Path(_normal(str(path if path.is_absolute() else self.cwd / path)))


def _normal(path: str) -> str:
    """``path`` with ``.`` and ``..`` resolved by text (a symlink is the workspace's to
    confine: rules match the path as asked)."""
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts:
                parts.pop()
        else:
            parts.append(part)
    return "/" + "/".join(parts)


def parse_rule(text: str, behavior: Behavior, source: RuleSource) -> Rule:
    """One rule string, checked; a ``RuleError`` naming ``source`` when it cannot be read."""

    def error(why: str) -> RuleError:
        return RuleError(f"{source}: permission rule {text!r}: {why}")

    if not isinstance(text, str):
        raise RuleError(f"{source}: a permission rule is a string, not {type(text).__name__}")
    stripped = text.strip()
    if stripped.startswith("mcp__"):
        if parse_mcp_name(stripped) is None:
            raise error("not an MCP name: mcp__<server>, mcp__<server>__* or mcp__<server>__<tool>")
        return Rule(stripped, stripped, None, behavior, source)
    match = _RULE.fullmatch(stripped)
    if match is None:
        raise error("a rule is Tool or Tool(specifier), e.g. Bash(npm run test *)")
    tool, specifier = match.group(1), match.group(2)
    if tool not in RULE_TOOLS:
        raise error(f"{tool!r} is not a Claude Code tool{did_you_mean(tool, RULE_TOOLS)}")
    if specifier is not None:
        specifier = specifier.strip()
        if not specifier:
            raise error("the parentheses are empty (write the tool alone for every use)")
        if specifier == "*":
            specifier = None
    if specifier is not None:
        _check_specifier(tool, specifier, error)
    return Rule(stripped, tool, specifier, behavior, source)


def _check_specifier(tool: str, specifier: str, error: Any) -> None:
    if tool == "Bash":
        if ":*" in specifier[:-2]:
            raise error("':*' may only end a Bash rule (use '*' for a wildcard inside)")
        return
    if tool in READ_TOOLS | EDIT_TOOLS:
        if tool not in ("Read", "Edit", "Write", "MultiEdit", "NotebookEdit"):
            raise error(f"path rules are Read(...) or Edit(...); {tool} takes no specifier")
        return
    if tool == "WebFetch":
        host = specifier.removeprefix("domain:")
        if not specifier.startswith("domain:") or not _HOST.fullmatch(host):
            raise error("WebFetch rules are WebFetch(domain:example.com)")
        return
    if tool not in _SPECIFIED_ANYHOW:
        raise error(f"{tool} takes no specifier")


_HOST = re.compile(
    r"(\*\.)?[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*"
)


def bash_pattern(specifier: str) -> re.Pattern[str]:
    """The regular expression of a Bash rule's specifier (matched against a whole command)."""
    if specifier.endswith(":*"):
        specifier = specifier[:-2] + " *"
    pieces = specifier.split("*")
    if len(pieces) == 2 and pieces[1] == "" and pieces[0].endswith(" "):
        # one trailing " *": the arguments are optional, the word boundary is not
        return re.compile(re.escape(pieces[0][:-1]) + r"(?: .*)?", re.DOTALL)
    return re.compile(".*".join(re.escape(piece) for piece in pieces), re.DOTALL)


def bash_parts(command: str) -> list[str] | None:
    """The simple commands of a compound one, each without the wrappers before it; None
    when the command cannot be split with confidence (an unclosed quote, a command
    substitution, a comment, a here-document): then only a rule on every Bash command
    allows it."""
    if any(text in command for text in _UNSPLITTABLE):
        return None
    parts: list[str] = []
    current: list[str] = []
    quote: str | None = None
    i = 0
    while i < len(command):
        char = command[i]
        if quote:
            current.append(char)
            if char == quote:
                quote = None
            elif char == "\\" and quote == '"' and i + 1 < len(command):
                current.append(command[i + 1])
                i += 1
            i += 1
            continue
        if char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or command[i - 1] in _WORD_BREAKS):
            return None  # a comment hides the rest of its line from bash, not from us
        elif char == "\\" and i + 1 < len(command):
            current.append(char + command[i + 1])
            i += 2
            continue
        else:
            operator = next((op for op in _OPERATORS if command.startswith(op, i)), None)
            if operator is not None:
                parts.append("".join(current))
                current = []
                i += len(operator)
                continue
        current.append(char)
        i += 1
    if quote:
        return None
    parts.append("".join(current))
    return [unwrapped(part.strip()) for part in parts if part.strip()]


SUBCOMMAND_TOOLS = frozenset(
    {
        "git", "npm", "pnpm", "yarn", "bun", "npx", "cargo", "go", "docker", "kubectl",
        "pip", "pip3", "uv", "poetry", "make", "dotnet", "mvn", "gradle", "bundle", "gh",
    }
)  # fmt: skip
"""Commands whose second word says what they do (``git diff``, ``cargo test``)."""


def command_prefix_rule(command: str) -> str | None:
    """The rule a person's "allow for the rest of the run" on a simple Bash command
    stands for, as Claude Code's "don't ask again for … commands": its command and, for
    a tool with subcommands, the subcommand (``Bash(git diff:*)``, ``Bash(npm run
    test:*)``, ``Bash(python3 -m unittest:*)``, ``Bash(ls:*)``). None when its first
    words are not plain (quotes, ``$``, an assignment): then the person allowed that
    one call only."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    if not words:
        return None
    name = words[0].rsplit("/", 1)[-1]
    size = 1
    if name in SUBCOMMAND_TOOLS:
        # no subcommand (`git`, `git -C dir push`, `npm run`): every command of the tool
        # is no prefix of what the person saw
        if len(words) < 2 or words[1].startswith("-"):
            return None
        size = 2
        if name in _SCRIPT_RUNNERS and words[1] == "run":
            size = 3
            if len(words) < 3:
                return None
    elif len(words) > 2 and name.startswith("python") and words[1] == "-m":
        size = 3
    elif name in _RUNS_ANY or name.startswith(_RUNS_ANY_PREFIXES):
        return None  # `python3 x.py` allowed is no `python3 -c …` allowed
    prefix = words[:size]
    if command.split()[:size] != prefix or not all(_PLAIN_WORD.fullmatch(w) for w in prefix):
        return None
    return f"Bash({' '.join(prefix)}:*)"


_SCRIPT_RUNNERS = frozenset({"npm", "pnpm", "yarn", "bun"})
_RUNS_ANY = frozenset(
    {
        "sh", "bash", "zsh", "dash", "ksh", "fish", "env", "xargs", "sudo", "doas", "su",
        "eval", "exec", "command", "builtin", "source", ".", "node", "deno", "perl",
        "ruby", "php", "lua", "awk", "gawk", "ssh", "busybox", "nsenter", "chroot",
    }
)  # fmt: skip
"""Programs that run whatever code or command their arguments give: a prefix rule on
them would allow any command."""
_RUNS_ANY_PREFIXES = ("python", "pypy")
_PLAIN_WORD = re.compile(r"[A-Za-z0-9_./:@%+,-]+")


_RESERVED = frozenset(
    {"if", "then", "else", "elif", "fi", "do", "done", "while", "until", "for", "case", "esac", "!", "{", "}", "(", ")"}
)  # fmt: skip
RUNS_ANOTHER = frozenset(
    {"eval", "exec", "command", "builtin", "env", "xargs", "sudo", "doas", "su", "bash", "sh", "zsh", "dash", "ksh", "fish", "parallel", "watch"}
)  # fmt: skip
"""Programs that run a command given as their arguments: a part that starts with one is
checked by ask and deny rules as a command that cannot be split."""


def checked_forms(part: str) -> list[str] | None:
    """The spellings of a simple command that ask and deny rules are matched against: as
    written, with its whitespace collapsed, without the grouping and reserved words around
    it (``(git push)``, ``if …; then git push; fi``), and with its program's folder cut
    (``/usr/bin/git push``). None when the part runs a command given as arguments
    (``env``, ``xargs``, ``bash -c``, ``eval``): no rule can say what that runs."""
    words = part.split()
    while words and words[0] in _RESERVED:
        words = words[1:]
    while words and words[-1] in _RESERVED:
        words = words[:-1]
    if words and words[0].startswith("(") and words[0] != "(":
        words[0] = words[0].lstrip("(")
    if words and words[-1].endswith(")"):
        words[-1] = words[-1].rstrip(")")
    words = [w for w in words if w]
    if not words:
        return [part]
    program = words[0].rsplit("/", 1)[-1]
    if program in RUNS_ANOTHER:
        return None
    forms = dict.fromkeys([part, " ".join(words), " ".join([program, *words[1:]])])
    return list(forms)


def unwrapped(command: str) -> str:
    """``command`` without ``timeout 30``, ``time``, ``nice -n 5``, ``nohup`` before it."""
    while True:
        try:
            words = shlex.split(command)
        except ValueError:
            return command
        if not words or words[0] not in WRAPPERS:
            return command
        skip = 1
        if words[0] in ("timeout", "nice"):
            while skip < len(words) and words[skip].startswith("-"):
                takes_value = words[skip] in ("-n", "-s", "-k", "--signal", "--kill-after")
                skip += 2 if takes_value else 1
            if words[0] == "timeout":
                skip += 1  # the duration
        rest = command
        for _ in range(skip):  # cut the words off the text, keeping the rest as written
            rest = rest.lstrip()
            word_end = _word_end(rest)
            rest = rest[word_end:]
        rest = rest.strip()
        if not rest:
            return command
        command = rest


def _word_end(text: str) -> int:
    quote: str | None = None
    for i, char in enumerate(text):
        if quote:
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char.isspace():
            return i
    return len(text)


def path_matches(pattern: str, target: Path, where: CallPlace, base: Path | None) -> bool:
    """Whether ``target`` (absolute) is matched by a gitignore-style ``pattern``."""
    anchored = True
    if pattern.startswith("//"):
        root, rest = Path("/"), pattern[2:]
    elif pattern.startswith("~/"):
        root, rest = where.home, pattern[2:]
    elif pattern.startswith("/"):
        root, rest = (base or where.cwd), pattern[1:]
    else:
        rest = pattern[2:] if pattern.startswith("./") else pattern
        root = where.cwd
        anchored = pattern.startswith("./") or "/" in rest.rstrip("/")
    while rest.startswith("../"):  # a pattern may reach above its folder
        root, rest, anchored = root.parent, rest[3:], True
    folder_only = rest.endswith("/")
    rest = rest.rstrip("/")
    body = (("" if anchored else "(?:.*/)?") + glob_source(rest)) if rest else ""
    prefix = re.escape(_normal(str(root)).rstrip("/"))
    tail = "/.+" if folder_only else "(?:/.*)?"
    regex = prefix + ("/" + body if body else "") + tail
    return re.fullmatch(regex, _normal(str(target)), re.DOTALL) is not None


def domain_matches(specifier: str, url: str) -> bool:
    """Whether ``url``'s host is the rule's ``domain:`` (or one of its subdomains for
    ``domain:*.example.com``)."""
    host = specifier.removeprefix("domain:").lower()
    try:
        actual = (urlsplit(url).hostname or "").lower().rstrip(".")
    except ValueError:
        return False
    if host.startswith("*."):
        return actual.endswith(host[1:])
    return actual == host

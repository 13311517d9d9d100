"""Reading permissions where Claude Code users keep them, and building the run's set.

Claude Code's settings files, in the order their rules are read: ``~/.claude/settings.json``
(the user's), then the workspace's ``.claude/settings.json`` (shared) and
``.claude/settings.local.json`` (personal). Only ``permissions`` is read (``allow``,
``ask``, ``deny``, ``defaultMode``); the rest of a settings file is not Lattice's.
A file that is not JSON (or no regular file of at most 1 MiB), a rule that cannot be
read or a mode Lattice does not know is a ``RuleError`` naming the file and the place in it.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from lattice.errors import did_you_mean
from lattice.permissions.policy import MODES, Mode, Permissions, merged
from lattice.permissions.rules import BEHAVIORS, Rule, RuleError, RuleSource, parse_rule

SETTINGS_FILES = (".claude/settings.json", ".claude/settings.local.json")
"""A workspace's settings files, shared then personal."""
IGNORED_KEYS = ("additionalDirectories",)
"""``permissions`` keys Lattice reads past and says so: the grant sets what agents see."""


def parse_rules(lists: Mapping[str, Any], where: str, base: Path | None) -> tuple[Rule, ...]:
    """The ``allow``/``ask``/``deny`` lists of one source, each rule parsed (deny first).
    ``where`` names a rule's place: ``{behavior}`` and ``{index}`` are filled in."""
    rules: list[Rule] = []
    for behavior in BEHAVIORS:
        items = lists.get(behavior) or ()
        if not isinstance(items, list | tuple):
            place = where.format(behavior=behavior, index="").removesuffix("[]")
            raise RuleError(f"{place}: a list of rules, not {type(items).__name__}")
        for index, text in enumerate(items):
            source = RuleSource(where.format(behavior=behavior, index=index), base)
            rules.append(parse_rule(text, behavior, source))
    return tuple(rules)


@dataclass(frozen=True)
class RuleSet:
    """Rules and a mode from one place (``lattice.toml``, the command line)."""

    lists: Mapping[str, Sequence[str]]
    where: str
    """How a rule's place is named, with ``{behavior}`` and ``{index}``."""
    base: Path | None = None
    mode: str | None = None
    mode_where: str = ""


def check_mode(value: Any, where: str) -> Mode:
    """``value`` as a permission mode; a RuleError naming ``where`` otherwise."""
    if value in MODES:
        return cast(Mode, value)
    if value == "auto":
        raise RuleError(
            f"{where}: mode 'auto' (a model that judges calls) is not one Lattice has; "
            f"use one of {', '.join(MODES)}"
        )
    hint = did_you_mean(str(value), MODES)
    raise RuleError(f"{where}: {value!r} is not a permission mode ({', '.join(MODES)}){hint}")


MAX_SETTINGS_BYTES = 1 << 20
"""The largest settings file read (a workspace's files come with whatever it holds)."""


def _read_small_file(path: Path) -> str:
    """``path``'s text, if it is a regular file of at most ``MAX_SETTINGS_BYTES``: a link
    to ``/dev/zero``, a FIFO or a huge file in a workspace must not hang or fill memory."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError("not a regular file")
        data = handle.read(MAX_SETTINGS_BYTES + 1)
    if len(data) > MAX_SETTINGS_BYTES:
        raise OSError(f"over {MAX_SETTINGS_BYTES} bytes")
    return data.decode("utf-8")


def read_settings_file(path: Path, base: Path) -> Permissions | None:
    """The permissions of one Claude Code settings file (None when it does not exist)."""
    try:
        text = _read_small_file(path)
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise RuleError(f"{path}: cannot read it: {exc}") from exc
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        line = getattr(exc, "lineno", None)
        where = f"{path}:{line}" if line else str(path)
        raise RuleError(f"{where}: not JSON: {getattr(exc, 'msg', exc)}") from exc
    if not isinstance(data, dict):
        raise RuleError(f"{path}: a settings file is a JSON object")
    permissions = data.get("permissions")
    if permissions is None:
        return None
    if not isinstance(permissions, dict):
        raise RuleError(f"{path}: permissions: an object with allow, ask, deny, defaultMode")
    rules = parse_rules(permissions, f"{path}: permissions.{{behavior}}[{{index}}]", base)
    notes = [
        f"{path}: permissions.{key} is not read by Lattice: the grant (--workspace) "
        "is the one folder agents see"
        for key in IGNORED_KEYS
        if key in permissions
    ]
    mode = permissions.get("defaultMode")
    if mode is None:
        return Permissions(rules, notes=tuple(notes))
    checked = check_mode(mode, f"{path}: permissions.defaultMode")
    return Permissions(rules, checked, f"{path}", tuple(notes))


def claude_settings(workspace: Path | None, home: Path) -> list[Permissions]:
    """The user's (``$CLAUDE_CONFIG_DIR/settings.json``, else ``~/.claude/settings.json``,
    as Claude Code finds it) then the workspace's settings files that exist, as read."""
    user_dir = os.environ.get("CLAUDE_CONFIG_DIR")
    user = Path(user_dir).expanduser() if user_dir else home / ".claude"
    found = [read_settings_file(user / "settings.json", home)]
    if workspace is not None:
        found.extend(read_settings_file(workspace / name, workspace) for name in SETTINGS_FILES)
    return [item for item in found if item is not None]


def build_permissions(
    *,
    workspace: Path | None,
    configured: Sequence[RuleSet] = (),
    claude_files: bool = True,
    bypass: bool = False,
    home: Path | None = None,
) -> Permissions:
    """The run's permissions: Claude Code's settings files (unless ``claude_files`` is
    off), then ``configured`` (``lattice.toml``, then the command line), each rule where
    it was written, and the mode the last of them sets. ``bypassPermissions`` stands
    only with ``bypass`` (the user's ``--bypass-permissions``); without it the run is in
    ``default`` mode and says so."""
    home = home if home is not None else Path.home()
    groups = claude_settings(workspace, home) if claude_files else []
    for item in configured:
        rules = parse_rules(item.lists, item.where, item.base)
        if item.mode is None:
            groups.append(Permissions(rules))
        else:
            groups.append(
                Permissions(rules, check_mode(item.mode, item.mode_where), item.mode_where)
            )
    result = merged(groups)
    if result.mode == "bypassPermissions" and not bypass:
        note = (
            f"permission mode bypassPermissions ({result.mode_source}) needs "
            "--bypass-permissions: running in default mode"
        )
        result = Permissions(result.rules, "default", "default", (*result.notes, note))
    return Permissions(result.rules, result.mode, result.mode_source, result.notes, home)

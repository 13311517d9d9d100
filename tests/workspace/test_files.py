"""The read-only and writing tools: what they answer, and every way out of the root refused."""

from __future__ import annotations

import asyncio
import ctypes
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from lattice.tools.toolset import ToolResult
from lattice.workspace import WorkspaceGrant, WorkspaceToolset
from lattice.workspace.edits import file_digest
from lattice.workspace.files import glob_regex
from lattice.workspace.paths import Workspace

ALL = ("Read", "LS", "Glob", "Grep", "Edit", "MultiEdit", "Write")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("def add(a, b):\n    return a - b\n")
    (root / "src" / "util.py").write_text("VALUE = 1\nOTHER = 2\n")
    (root / "README.md").write_text("# demo\n")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[core]\n")
    (tmp_path / "secret.txt").write_text("outside\n")
    return root


def toolset(root: Path, **grant: Any) -> WorkspaceToolset:
    return WorkspaceToolset(WorkspaceGrant(root=root, read=True, write=True, **grant), ALL)


def call(tools: WorkspaceToolset, name: str, **arguments: Any) -> ToolResult:
    return asyncio.run(tools.call(name, arguments))


def test_read_numbers_lines_and_pages(project: Path) -> None:
    result = call(toolset(project), "Read", file_path="src/app.py", offset=2, limit=1)
    assert not result.is_error
    assert result.text == "     2\t    return a - b"
    absolute = call(toolset(project), "Read", file_path=str(project / "src" / "util.py"), limit=1)
    assert absolute.text.splitlines() == [
        "     1\tVALUE = 1",
        "[1 more lines: read on with offset=2]",
    ]


def test_ls_glob_and_grep(project: Path) -> None:
    tools = toolset(project)
    assert call(tools, "LS").text.splitlines() == ["README.md", "src/"]
    assert call(tools, "Glob", pattern="**/*.py").text.splitlines() == ["src/app.py", "src/util.py"]
    assert call(tools, "Glob", pattern="src/{app,none}.py").text == "src/app.py"
    assert call(tools, "Grep", pattern=r"return a \- b").text == "src/app.py"
    content = call(tools, "Grep", pattern="^[A-Z]+ =", output_mode="content")
    assert content.text.splitlines() == ["src/util.py:1:VALUE = 1", "src/util.py:2:OTHER = 2"]
    assert (
        call(tools, "Grep", pattern="value", **{"-i": True}, output_mode="count").text
        == "src/util.py:1"
    )


def test_glob_regex_spellings() -> None:
    assert glob_regex("**/*.py").fullmatch("a/b/c.py")
    assert glob_regex("**/*.py").fullmatch("c.py")
    assert not glob_regex("*.py").fullmatch("a/c.py")
    assert glob_regex("[!a]x").fullmatch("bx") and not glob_regex("[!a]x").fullmatch("ax")


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("../secret.txt", "'..'"),
        ("src/../../secret.txt", "'..'"),
        ("/etc/passwd", "outside the workspace"),
        ("/proc/self/environ", "outside the workspace"),
        (".git/config", ".git/"),
        ("nothing.txt", "does not exist"),
        ("", "non-empty string"),
        ("a\x00b", "NUL"),
    ],
)
def test_paths_out_of_the_root_are_refused(project: Path, path: str, says: str) -> None:
    result = call(toolset(project), "Read", file_path=path)
    assert result.is_error
    assert says in result.text


def test_a_symlink_that_leads_out_is_refused_for_reading_and_writing(project: Path) -> None:
    (project / "link.txt").symlink_to(project.parent / "secret.txt")
    (project / "linkdir").symlink_to(project.parent)
    tools = toolset(project)
    for name, args in [
        ("Read", {"file_path": "link.txt"}),
        ("Read", {"file_path": "linkdir/secret.txt"}),
        ("Write", {"file_path": "link.txt", "content": "x"}),
        ("Write", {"file_path": "linkdir/new.txt", "content": "x"}),
        ("Edit", {"file_path": "link.txt", "old_string": "outside", "new_string": "in"}),
    ]:
        result = call(tools, name, **args)
        assert result.is_error and "outside the workspace" in result.text, (name, args)
    assert (project.parent / "secret.txt").read_text() == "outside\n"
    assert not (project.parent / "new.txt").exists()
    assert "secret.txt" not in call(tools, "Glob", pattern="**/*").text  # links are not followed


def test_binary_and_oversized_files_are_refused(project: Path) -> None:
    (project / "blob.bin").write_bytes(b"\x7fELF\x00\x01\x02")
    big = project / "big.log"
    with big.open("wb") as handle:  # sparse: 1 GB on paper, nothing on disk
        handle.truncate(1_000_000_000)
    tools = toolset(project)
    binary = call(tools, "Read", file_path="blob.bin")
    assert binary.is_error and "binary" in binary.text
    started = time.monotonic()
    large = call(tools, "Read", file_path="big.log")
    assert large.is_error and "1.0 GB" in large.text
    assert call(tools, "Grep", pattern="ELF").text == "no matches"  # neither is searched
    assert time.monotonic() - started < 30


def test_grep_with_catastrophic_backtracking_is_stopped_per_file(project: Path) -> None:
    (project / "evil.txt").write_text("a" * 40 + "!\n")
    started = time.monotonic()
    result = call(toolset(project), "Grep", pattern="(a|aa)+$")
    assert not result.is_error
    assert "were not searched: evil.txt" in result.text
    assert time.monotonic() - started < 15


def test_a_tool_not_granted_is_not_offered_and_cannot_be_called(project: Path) -> None:
    tools = WorkspaceToolset(WorkspaceGrant(root=project, read=True), ("Read", "Glob"))
    names = [t.name for t in asyncio.run(tools.list_tools())]
    assert names == ["Read", "Glob"]
    result = call(tools, "Write", file_path="x.txt", content="x")
    assert result.is_error and "no tool 'Write'" in result.text
    assert not (project / "x.txt").exists()


def test_edit_records_a_diff_with_digests_and_applies_once(project: Path) -> None:
    tools = toolset(project)
    before = file_digest(project / "src" / "app.py")
    result = call(tools, "Edit", file_path="src/app.py", old_string="a - b", new_string="a + b")
    assert not result.is_error
    (change,) = result.changes
    assert change.applied and change.path == "src/app.py"
    assert change.before == before and change.after == file_digest(project / "src" / "app.py")
    assert "-    return a - b\n+    return a + b\n" in change.diff
    assert (project / "src" / "app.py").read_text() == "def add(a, b):\n    return a + b\n"
    again = asyncio.run(tools.apply(result))  # a replay after a crash changes nothing
    assert not again.is_error
    assert (project / "src" / "app.py").read_text() == "def add(a, b):\n    return a + b\n"


def test_a_planned_change_conflicts_when_the_file_moved_on(project: Path) -> None:
    tools = toolset(project)
    planned = asyncio.run(
        tools.plan(
            "Edit",
            {"file_path": "src/util.py", "old_string": "VALUE = 1", "new_string": "VALUE = 3"},
        )
    )
    (project / "src" / "util.py").write_text("something else\n")
    result = asyncio.run(tools.apply(planned))
    assert result.is_error and "changed since this edit was planned" in result.text
    assert (project / "src" / "util.py").read_text() == "something else\n"


def test_edit_mistakes_come_back_to_the_model(project: Path) -> None:
    tools = toolset(project)
    missing = call(tools, "Edit", file_path="src/util.py", old_string="NOPE", new_string="x")
    assert missing.is_error and "was not found" in missing.text
    twice = call(tools, "Edit", file_path="src/util.py", old_string=" = ", new_string="=")
    assert twice.is_error and "occurs 2 times" in twice.text
    everywhere = call(
        tools, "Edit", file_path="src/util.py", old_string=" = ", new_string="=", replace_all=True
    )
    assert not everywhere.is_error
    assert (project / "src" / "util.py").read_text() == "VALUE=1\nOTHER=2\n"
    multi = call(
        tools,
        "MultiEdit",
        file_path="src/util.py",
        edits=[
            {"old_string": "VALUE", "new_string": "V"},
            {"old_string": "NOPE", "new_string": "x"},
        ],
    )
    assert multi.is_error and "edit 2" in multi.text
    assert (project / "src" / "util.py").read_text() == "VALUE=1\nOTHER=2\n"  # all or none


def test_write_creates_folders_inside_and_keeps_the_mode(project: Path) -> None:
    tools = toolset(project)
    os.chmod(project / "src" / "app.py", 0o755)
    assert not call(tools, "Write", file_path="src/app.py", content="print()\n").is_error
    assert (project / "src" / "app.py").stat().st_mode & 0o777 == 0o755
    created = call(tools, "Write", file_path="docs/new/notes.md", content="hi\n")
    assert not created.is_error and created.changes[0].before is None
    assert (project / "docs" / "new" / "notes.md").read_text() == "hi\n"
    assert call(tools, "Write", file_path=".git/hooks/pre-commit", content="x").is_error


@pytest.mark.parametrize("patch_only", [False, True])
def test_the_file_tools_make_no_bare_repository_and_change_none(
    project: Path, patch_only: bool
) -> None:
    """git takes a folder holding HEAD, objects/ and refs/ for a repository and runs its
    config's pager and fsmonitor, and its hooks, on the host: the file tools make none
    (whichever file comes last, at the root too) and change no existing one's files."""
    tools = toolset(project, patch_only=patch_only)
    for folder in ("evil/", "", "wt/"):
        assert not call(tools, "Write", file_path=f"{folder}objects/x", content="x").is_error
        assert not call(tools, "Write", file_path=f"{folder}refs/heads/m", content="x").is_error
    refused = call(tools, "Write", file_path="evil/HEAD", content="ref: refs/heads/main\n")
    assert refused.is_error and "git repository" in refused.text
    assert call(tools, "Write", file_path="HEAD", content="ref: refs/heads/main\n").is_error
    assert not call(tools, "Write", file_path="wt2/HEAD", content="ref: x\n").is_error
    assert call(tools, "Write", file_path="wt2/commondir", content="../evil\n").is_error
    mirror = project / "mirror"
    for name in ("objects", "refs", "hooks"):
        (mirror / name).mkdir(parents=True)
    (mirror / "HEAD").write_text("ref: refs/heads/main\n")
    (mirror / "config").write_text("[core]\n\tbare = true\n")
    edit = call(tools, "Edit", file_path="mirror/config", old_string="true", new_string="x")
    assert edit.is_error and "git repository" in edit.text
    assert call(tools, "Write", file_path="mirror/hooks/post-update", content="x").is_error
    assert (mirror / "config").read_text() == "[core]\n\tbare = true\n"
    assert not (project / "evil" / "HEAD").exists() and not (project / "HEAD").exists()


def test_patch_only_records_the_change_and_leaves_the_file(project: Path) -> None:
    tools = toolset(project, patch_only=True)
    result = call(tools, "Edit", file_path="src/app.py", old_string="a - b", new_string="a + b")
    assert not result.is_error and "would change src/app.py" in result.text
    assert not result.changes[0].applied
    assert "+    return a + b" in result.changes[0].diff
    assert (project / "src" / "app.py").read_text() == "def add(a, b):\n    return a - b\n"


def test_patch_only_reads_see_the_agents_own_pending_changes(project: Path) -> None:
    tools = toolset(project, patch_only=True)
    first = call(tools, "Edit", file_path="src/app.py", old_string="a - b", new_string="a + b")
    assert call(tools, "Read", file_path="src/app.py").text.endswith("2\t    return a + b")
    second = call(tools, "Edit", file_path="src/app.py", old_string="a + b", new_string="b + a")
    assert not second.is_error, second.text
    assert second.changes[0].before == first.changes[0].after  # diffs chain, in order
    assert "-    return a + b" in second.changes[0].diff
    created = call(tools, "Write", file_path="docs/new.md", content="TODO: ship\n")
    assert not created.is_error and created.changes[0].before is None
    assert call(tools, "Read", file_path="docs/new.md").text == "     1\tTODO: ship"
    assert call(tools, "LS").text.splitlines() == ["README.md", "docs/", "src/"]
    assert call(tools, "Glob", pattern="**/*.md").text.splitlines() == ["README.md", "docs/new.md"]
    assert call(tools, "Grep", pattern="b \\+ a|TODO").text.splitlines() == [
        "src/app.py",
        "docs/new.md",
    ]
    rewritten = call(tools, "Write", file_path="docs/new.md", content="done\n")
    assert rewritten.changes[0].before == created.changes[0].after
    # nothing was written
    assert (project / "src" / "app.py").read_text() == "def add(a, b):\n    return a - b\n"
    assert not (project / "docs").exists()
    # another toolset (another agent, or the same one without patch-only) sees the disk
    assert call(toolset(project), "Read", file_path="src/app.py").text.endswith("a - b")


def test_without_a_workspace_file_tools_refuse(tmp_path: Path) -> None:
    tools = WorkspaceToolset(WorkspaceGrant(read=True), ("Read",))
    result = call(tools, "Read", file_path="x")
    assert result.is_error and "needs a workspace" in result.text


def _deep_file(root: Path) -> None:
    deep = root.joinpath(*["a" * 50] * 40)
    deep.mkdir(parents=True)
    (deep / "f").write_text("x\n")


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("Glob", {"pattern": "**a**a**a**b"}),
        ("Grep", {"pattern": "x", "glob": "**a**a**a**b"}),
        ("LS", {"ignore": ["*a*a*a*a*a*a*a*a*a*b"]}),
    ],
)
def test_a_glob_that_backtracks_answers_within_the_tool_time(
    tmp_path: Path, tool: str, arguments: dict[str, Any]
) -> None:
    """Compiled by ``re``, ``**a**a**a**b`` over a 2,000-character path ran for hours,
    holding the interpreter lock the whole time (no timeout could interrupt it)."""
    root = tmp_path / "ws"
    _deep_file(root)
    (root / ("a" * 250)).write_text("")  # LS matches names, not paths: one long name
    tools = toolset(root, tool_timeout=1.0)
    answers: list[ToolResult] = []
    worker = __import__("threading").Thread(
        target=lambda: answers.append(call(tools, tool, **arguments)), daemon=True
    )
    worker.start()
    worker.join(120)
    assert answers, f"{tool} with a backtracking glob did not return"
    answer = answers[0]
    assert not answer.is_error or "ran out of time" in answer.text, answer.text


def test_a_glob_past_its_deadline_is_refused(tmp_path: Path) -> None:
    from lattice.workspace.files import Glob

    with pytest.raises(Exception, match="ran out of time"):
        Glob("**/*.py", time.monotonic() - 1).fullmatch("a/b.py")


class _SwapAfterResolve:
    """Stands for a command running at the same time: right after the ``calls``-th
    ``resolve`` checked a path, the folder ``d`` becomes a link to ``outside``."""

    def __init__(self, root: Path, outside: Path, calls: int) -> None:
        self.root, self.outside, self.left = root, outside, calls
        self.original = Workspace.resolve

    def __call__(self, workspace: Workspace, given: str, **kwargs: Any) -> Path:
        real = self.original(workspace, given, **kwargs)
        self.left -= 1
        if self.left == 0:
            (self.root / "d").rename(self.root / "d.moved")
            (self.root / "d").symlink_to(self.outside)
        return real


@pytest.fixture
def racing(tmp_path: Path) -> tuple[Path, Path]:
    root, outside = tmp_path / "ws", tmp_path / "outside"
    (root / "d").mkdir(parents=True)
    (root / "d" / "f.txt").write_text("inside\n")
    outside.mkdir()
    (outside / "f.txt").write_text("SECRET\n")
    return root, outside


def test_a_folder_swapped_for_a_link_after_the_check_cannot_be_read_through(
    racing: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, outside = racing
    swap = _SwapAfterResolve(root, outside, 1)
    monkeypatch.setattr(Workspace, "resolve", lambda ws, given, **kw: swap(ws, given, **kw))
    result = call(toolset(root), "Read", file_path="d/f.txt")
    assert result.is_error and "SECRET" not in result.text, result.text
    assert "changed while it was opened" in result.text


def test_a_folder_swapped_for_a_link_after_the_check_cannot_be_written_through(
    racing: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, outside = racing
    tools = toolset(root)
    planned = asyncio.run(tools.plan("Write", {"file_path": "d/new.txt", "content": "x\n"}))
    assert not planned.is_error, planned.text
    swap = _SwapAfterResolve(root, outside, 1)
    monkeypatch.setattr(Workspace, "resolve", lambda ws, given, **kw: swap(ws, given, **kw))
    applied = asyncio.run(tools.apply(planned))
    assert applied.is_error, applied.text
    assert sorted(p.name for p in outside.iterdir()) == ["f.txt"]


def test_folders_a_write_makes_are_not_led_out_by_a_folder_swapped_after_the_check(
    racing: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, outside = racing
    tools = toolset(root)
    planned = asyncio.run(tools.plan("Write", {"file_path": "d/x/y/new.txt", "content": "x\n"}))
    assert not planned.is_error, planned.text
    swap = _SwapAfterResolve(root, outside, 1)
    monkeypatch.setattr(Workspace, "resolve", lambda ws, given, **kw: swap(ws, given, **kw))
    applied = asyncio.run(tools.apply(planned))
    assert applied.is_error and "changed while it was made" in applied.text, applied.text
    assert sorted(p.name for p in outside.iterdir()) == ["f.txt"]


def _exchange(first: Path, second: Path) -> None:
    """renameat2(RENAME_EXCHANGE): swap two names atomically, as a racing command can."""
    libc = ctypes.CDLL(None, use_errno=True)
    at_fdcwd, rename_exchange = -100, 2
    if libc.renameat2(at_fdcwd, bytes(first), at_fdcwd, bytes(second), rename_exchange) != 0:
        raise OSError(ctypes.get_errno(), "renameat2")


def test_writes_racing_a_folder_link_exchange_make_nothing_outside(tmp_path: Path) -> None:
    """1,500 writes into new folders under ``d`` while another thread swaps ``d`` and a
    link to an outside folder back and forth, atomically: nothing appears outside."""
    root, outside = tmp_path / "ws", tmp_path / "outside"
    (root / "d").mkdir(parents=True)
    (root / "link").symlink_to(outside)
    outside.mkdir()
    try:
        _exchange(root / "d", root / "link")
        _exchange(root / "d", root / "link")
    except (OSError, AttributeError) as exc:
        pytest.skip(f"renameat2 is not available here: {exc}")
    stop = threading.Event()
    swaps = 0

    def swap_forever() -> None:
        nonlocal swaps
        while not stop.is_set():
            _exchange(root / "d", root / "link")
            swaps += 1

    tools = toolset(root)

    async def write_all() -> tuple[int, int]:
        written = refused = 0
        for number in range(1500):
            arguments = {"file_path": f"d/n{number}/f.txt", "content": "x"}
            planned = await tools.plan("Write", arguments)
            if planned.is_error:
                refused += 1
                continue
            applied = await tools.apply(planned)
            written += not applied.is_error
        return written, refused

    racer = threading.Thread(target=swap_forever)
    racer.start()
    try:
        written, refused = asyncio.run(write_all())
    finally:
        stop.set()
        racer.join()
    assert swaps > 100 and written > 0 and refused > 0
    assert list(outside.iterdir()) == []

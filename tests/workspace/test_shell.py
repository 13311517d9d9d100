"""Bash in the bubblewrap sandbox: the workspace writable, nothing else, no network, limits hold."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from lattice.tools.toolset import ToolResult
from lattice.workspace import WorkspaceGrant, WorkspaceToolset, sandbox_problem
from lattice.workspace import shell as shell_module

needs_bwrap = pytest.mark.skipif(
    sandbox_problem() is not None, reason=f"no sandbox here: {sandbox_problem()}"
)


def bash(root: Path, command: str, **grant: Any) -> ToolResult:
    settings = {"root": root, "read": True, "shell": True, "tool_timeout": 20.0, **grant}
    tools = WorkspaceToolset(WorkspaceGrant(**settings), ("Bash",))
    return asyncio.run(tools.call("Bash", {"command": command}))


@needs_bwrap
def test_the_workspace_is_the_only_writable_path(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "in.txt").write_text("hello\n")
    result = bash(
        root,
        "cat in.txt; echo made > out.txt; pwd; "
        f"echo x > {tmp_path}/escape.txt; "  # lands in the sandbox's own /tmp, if anywhere
        "touch /usr/evil 2>/dev/null || echo refused-usr; ls /root 2>/dev/null | wc -l",
    )
    assert not result.is_error, result.text
    lines = result.text.splitlines()
    assert lines[0] == "hello"
    assert lines[1] == str(root.resolve())
    assert "refused-usr" in lines
    assert (root / "out.txt").read_text() == "made\n"
    assert not (tmp_path / "escape.txt").exists()
    assert result.text.endswith("[exit code 0]")


@needs_bwrap
def test_a_read_only_agents_shell_cannot_change_the_workspace(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "in.txt").write_text("hello\n")
    settings = WorkspaceGrant(root=root, read=True, shell=True, tool_timeout=20.0)
    tools = WorkspaceToolset(settings, ("Bash",), read_only_shell=True)
    (offered,) = asyncio.run(tools.list_tools())
    assert "cannot be changed" in offered.description
    command = "cat in.txt; echo x > out.txt || echo refused-write; rm in.txt || echo refused-rm"
    result = asyncio.run(tools.call("Bash", {"command": command}))
    lines = result.text.splitlines()
    assert lines[0] == "hello" and "refused-write" in lines and "refused-rm" in lines
    assert sorted(p.name for p in root.iterdir()) == ["in.txt"]


@needs_bwrap
def test_a_command_cannot_reach_the_network(tmp_path: Path) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    accepted: list[Any] = []
    server.settimeout(5)

    def accept() -> None:
        with contextlib.suppress(OSError):
            accepted.append(server.accept())

    thread = threading.Thread(target=accept)
    thread.start()
    result = bash(
        tmp_path, f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected || echo no-network"
    )
    thread.join()
    server.close()
    assert "no-network" in result.text and "connected" not in result.text.replace("no-", "")
    assert accepted == []


@needs_bwrap
def test_a_command_that_never_ends_is_killed_at_its_limit(tmp_path: Path) -> None:
    started = time.monotonic()
    result = bash(tmp_path, "sleep 600 & sleep 600", tool_timeout=1.0)
    assert result.is_error
    assert "ran past its 1 s limit" in result.text
    assert time.monotonic() - started < 10


@needs_bwrap
def test_a_fork_bomb_meets_the_process_limit(tmp_path: Path) -> None:
    result = bash(
        tmp_path,
        "for i in $(seq 300); do sleep 5 & done 2>&1 | grep -c -m1 -i 'resource\\|fork' ; echo end",
        shell_processes=32,
        tool_timeout=15.0,
    )
    assert "end" in result.text
    assert "1" in result.text.splitlines()[0], result.text  # fork refused at the limit


@needs_bwrap
def test_memory_and_output_are_capped(tmp_path: Path) -> None:
    hog = bash(
        tmp_path,
        "python3 -c 'x = bytearray(512 * 1024 * 1024)' ",
        shell_memory_bytes=256 * 1024 * 1024,
    )
    assert hog.is_error and "MemoryError" in hog.text
    loud = bash(tmp_path, "yes | head -c 1000000", shell_output_bytes=1000)
    assert "[output cut at the limit]" in loud.text
    assert len(loud.text) < 1200


def test_without_bubblewrap_the_shell_is_refused_saying_how_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on it
    shell_module.sandbox_problem.cache_clear()
    try:
        result = bash(tmp_path, "echo hi")
    finally:
        shell_module.sandbox_problem.cache_clear()
    assert result.is_error
    assert "apt-get install bubblewrap" in result.text


def test_without_the_shell_grant_bash_is_not_offered(tmp_path: Path) -> None:
    tools = WorkspaceToolset(WorkspaceGrant(root=tmp_path, read=True), ("Read",))
    result = asyncio.run(tools.call("Bash", {"command": "echo hi"}))
    assert result.is_error and "no tool 'Bash'" in result.text


@needs_bwrap
def test_a_command_cannot_change_the_workspaces_git(tmp_path: Path) -> None:
    """A hook or ``core.fsmonitor`` in ``.git`` runs on the host, outside the sandbox, at
    the user's next ``git`` command: the repository is read-only to commands."""
    root = tmp_path / "ws"
    (root / ".git" / "hooks").mkdir(parents=True)
    (root / ".git" / "config").write_text("[core]\n")
    result = bash(
        root,
        "echo 'touch /tmp/pwned' > .git/hooks/post-checkout; "
        "echo '  fsmonitor = touch /tmp/pwned' >> .git/config; "
        "echo ok > work.txt; cat .git/config",
    )
    assert not (root / ".git" / "hooks" / "post-checkout").exists()
    assert (root / ".git" / "config").read_text() == "[core]\n"
    assert (root / "work.txt").read_text() == "ok\n"
    assert "[core]" in result.text  # still readable, for git log and git diff


@needs_bwrap
def test_the_sandboxs_tmp_is_capped(tmp_path: Path) -> None:
    if not shell_module.sizes_tmpfs():
        pytest.skip("this bubblewrap cannot size a tmpfs (--size came in 0.8)")
    result = bash(
        tmp_path,
        "head -c 5000000 /dev/zero > /tmp/big; echo rc=$?; stat -c %s /tmp/big",
        shell_tmp_bytes=2_000_000,
    )
    lines = result.text.splitlines()
    assert "No space left on device" in result.text
    assert "rc=1" in lines
    assert int(lines[lines.index("rc=1") + 1]) <= 2_100_000  # the size in whole pages


@needs_bwrap
def test_the_tmp_cap_is_not_escaped_through_dev_shm_dev_or_the_sandboxs_root(
    tmp_path: Path,
) -> None:
    if not shell_module.sizes_tmpfs():
        pytest.skip("this bubblewrap cannot size a tmpfs (--size came in 0.8)")
    # each of these is memory-backed: unbounded, it would let a command fill the host's RAM
    places = ("/dev/shm/big", "/dev/big", "/big", "/usr-like/big")
    command = "; ".join(
        f"mkdir -p $(dirname {p}) 2>/dev/null; head -c 3000000 /dev/zero > {p} 2>/dev/null; "
        f"echo {p}=$(stat -c %s {p} 2>/dev/null || echo none)"
        for p in places
    )
    result = bash(
        tmp_path, command + "; echo x > /dev/null && echo null-ok", shell_tmp_bytes=2_000_000
    )
    sizes = dict(line.split("=", 1) for line in result.text.splitlines() if "=" in line)
    assert int(sizes["/dev/shm/big"]) <= 2_100_000, result.text
    assert sizes["/dev/big"] == "none", result.text
    assert sizes["/big"] == "none", result.text
    assert sizes["/usr-like/big"] == "none", result.text
    assert "null-ok" in result.text


@needs_bwrap
def test_one_file_is_capped_in_size(tmp_path: Path) -> None:
    result = bash(
        tmp_path, "head -c 3000000 /dev/zero > big; stat -c %s big", shell_file_bytes=1_000_000
    )
    assert "File size limit exceeded" in result.text
    assert (tmp_path / "big").stat().st_size == 1_000_000


@needs_bwrap
def test_a_command_that_keeps_making_files_is_stopped_at_the_limit(tmp_path: Path) -> None:
    result = bash(
        tmp_path,
        "i=0; while true; do i=$((i+1)); : > f$i; done",
        shell_write_files=200,
        tool_timeout=60.0,
    )
    assert result.is_error
    assert "[stopped: " in result.text
    assert "files made in the workspace, over the limit of 200" in result.text
    assert "ran past" not in result.text
    made = len(list(tmp_path.iterdir()))
    assert made > 200


@needs_bwrap
def test_a_command_that_keeps_writing_is_stopped_at_the_byte_limit(tmp_path: Path) -> None:
    result = bash(
        tmp_path,
        "i=0; while true; do i=$((i+1)); head -c 500000 /dev/urandom > b$i; done",
        shell_write_bytes=3_000_000,
        tool_timeout=60.0,
    )
    assert result.is_error
    assert "written into the workspace, over the 3.0 MB limit" in result.text
    assert "ran past" not in result.text


@needs_bwrap
def test_what_a_command_writes_into_a_git_it_made_counts_toward_its_limits(
    tmp_path: Path,
) -> None:
    result = bash(
        tmp_path,
        "mkdir -p sub/.git; i=0; while true; do i=$((i+1)); "
        "head -c 500000 /dev/urandom > sub/.git/b$i; done",
        shell_write_bytes=3_000_000,
        tool_timeout=20.0,
    )
    assert "written into the workspace, over the 3.0 MB limit" in result.text
    assert "ran past" not in result.text
    assert not (tmp_path / "sub" / ".git").exists()


@needs_bwrap
@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_a_bare_repository_a_command_makes_is_no_repository_after_it(tmp_path: Path) -> None:
    """git takes a folder holding HEAD, objects/ and refs/ for a repository (a bare one)
    and reads its config, hooks and pager from there: as a .git would be, it is undone,
    by removing its HEAD (nothing else the command wrote is lost), the workspace's root
    included."""
    root = tmp_path / "ws"
    root.mkdir()
    subprocess.run(["git", "init", "-q", "--bare", str(root / "mirror")], check=True)
    config = (root / "mirror" / "config").read_text()
    result = bash(
        root,
        "echo '[core]pager = x' >> mirror/config 2>/dev/null || echo mirror-refused; "
        "touch mirror/hooks/post-update 2>/dev/null || echo hooks-refused; "
        "git init -q --bare evil && git -C evil config core.pager 'touch /tmp/pwned; cat'; "
        "mkdir objects refs && echo 'ref: refs/heads/main' > HEAD; "
        "mkdir -p wt && echo 'ref: refs/heads/x' > wt/HEAD && echo ../evil > wt/commondir; "
        "echo kept > notes.txt; echo done",
    )
    assert "done" in result.text
    assert "[removed HEAD, evil/HEAD, wt/HEAD: commands may not make git" in result.text
    for folder in (root, root / "evil", root / "wt"):
        found = subprocess.run(
            ["git", "-C", str(folder), "rev-parse", "--git-dir"],
            capture_output=True,
            text=True,
            env={"GIT_CEILING_DIRECTORIES": str(tmp_path), "PATH": os.environ["PATH"]},
            check=False,
        )
        assert found.returncode != 0, (folder, found.stdout)
    assert (root / "evil" / "config").is_file() and (root / "notes.txt").is_file()
    assert "mirror-refused" in result.text and "hooks-refused" in result.text
    assert (root / "mirror" / "config").read_text() == config
    assert (root / "mirror" / "HEAD").is_file()  # the user's own is kept


@needs_bwrap
def test_a_git_a_cancelled_command_made_is_removed_too(tmp_path: Path) -> None:
    """An agent's own tool time limit (a document may set it below the shell's) cancels
    the call: the command is killed and what it made of .git removed all the same."""
    from lattice.agents.loop import _limited

    grant = WorkspaceGrant(root=tmp_path, read=True, shell=True, tool_timeout=60.0)
    tools = WorkspaceToolset(grant, ("Bash",))
    command = "mkdir -p sub/.git/hooks && echo x > sub/.git/hooks/post-checkout; : > made; sleep 60"

    async def cancelled() -> ToolResult:
        call = tools.call("Bash", {"command": command})
        return await _limited("Bash", call, 5.0)

    result = asyncio.run(cancelled())
    assert "did not finish within 5 s" in result.text
    assert (tmp_path / "made").exists()  # it ran that far
    assert not (tmp_path / "sub" / ".git").exists()


@needs_bwrap
def test_a_git_repository_a_command_makes_is_removed_and_existing_ones_are_read_only(
    tmp_path: Path,
) -> None:
    root = tmp_path / "ws"
    (root / "vendor" / "lib" / ".git" / "hooks").mkdir(parents=True)
    (root / "other").mkdir()
    result = bash(
        root,
        "mkdir -p sub/.git/hooks && echo 'touch /tmp/pwned' > sub/.git/hooks/post-checkout; "
        "printf 'gitdir: ../sub/.git\\n' > other/.git; "
        "echo hook > vendor/lib/.git/hooks/post-checkout 2>/dev/null || echo vendor-refused; "
        "echo kept > sub/notes.txt; echo done",
    )
    assert result.is_error
    assert "vendor-refused" in result.text and "done" in result.text
    assert "[removed other/.git, sub/.git: commands may not make git repositories" in result.text
    assert not (root / "sub" / ".git").exists() and not (root / "other" / ".git").exists()
    assert (root / "sub" / "notes.txt").read_text() == "kept\n"
    assert (root / "vendor" / "lib" / ".git" / "hooks").is_dir()
    assert not (root / "vendor" / "lib" / ".git" / "hooks" / "post-checkout").exists()


def test_a_git_removal_is_not_led_out_of_the_workspace_by_a_swapped_folder(
    tmp_path: Path,
) -> None:
    """A command running alongside swaps the folder holding a new .git for a link to
    another repository: the removal finds another folder there and leaves it alone."""
    from lattice.workspace.usage import measure, remove_new_gits

    root, outside = tmp_path / "ws", tmp_path / "project"
    root.mkdir()
    (outside / "b" / ".git").mkdir(parents=True)
    before = measure(root)
    (root / "a" / "b" / ".git").mkdir(parents=True)
    (root / "made" / ".git").mkdir(parents=True)
    after = measure(root)
    shutil.rmtree(root / "a")
    (root / "a").symlink_to(outside)  # a/b is now the other project's folder
    assert remove_new_gits(root, before, after) == ["made/.git"]
    assert (outside / "b" / ".git").is_dir()
    assert not (root / "made" / ".git").exists()


@needs_bwrap
def test_no_process_visible_in_the_sandbox_holds_anything_of_the_hosts_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bubblewrap's own PID 1 is visible inside, with the same uid: it must not hold the
    keys of the Lattice process (read back reversed, past any masking of the result)."""
    secret = "sk-test-" + "Q7x9" * 6
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    monkeypatch.setenv("LATTICE_SERVER_TOKEN", "tok-" + "Zr5" * 8)
    root = tmp_path / "ws"
    root.mkdir()
    result = bash(
        root,
        'for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do echo "== $f"; '
        "tr '\\0' '\\n' < $f | rev; done",
    )
    assert not result.is_error, result.text
    shown = result.text
    assert "== /proc/1/environ" in shown and "== /proc/1/cmdline" in shown
    assert shown.count("== /proc/") >= 4  # bubblewrap's PID 1 and the command's shell
    text = "".join(line[::-1] + "\n" for line in shown.splitlines())
    assert "PATH=" in text  # the environments were read
    for value in (secret, "Zr5" * 8, "OPENAI_API_KEY", "LATTICE_SERVER_TOKEN"):
        assert value not in text and value not in shown
    sandbox_own = ("PATH", "LANG", "HOME", "PWD", "SHLVL", "_", "PYTHONDONTWRITEBYTECODE")
    host_only = {k for k in os.environ if k not in sandbox_own}
    leaked = [k for k in host_only if f"\n{k}=" in "\n" + text]
    assert leaked == []

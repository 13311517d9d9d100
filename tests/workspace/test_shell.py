"""Bash in the bubblewrap sandbox: the workspace writable, nothing else, no network, limits hold."""

from __future__ import annotations

import asyncio
import contextlib
import socket
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

"""Bash: a shell command in a bubblewrap sandbox.

The command runs under Debian's ``bwrap`` in fresh namespaces (no network, its own
process tree, no host processes visible, bubblewrap itself started with an environment
that holds nothing of Lattice's: its processes are visible inside), with the system's programs read-only, a
private ``/tmp`` and ``/dev/shm`` of a bounded size (the rest of the sandbox's own
filesystem is read-only), and the workspace as the only writable path (mounted
at its own path, so the paths the model sees work inside) except every ``.git`` in it,
which is read-only: a hook or a ``core.fsmonitor`` written there would run on the host
at the user's next ``git``. A ``.git`` the command makes is removed after it (see
``usage``). Limits: a wall-clock time (the process tree is killed at its end), address
space, the size of one file, what the command may add to the workspace (bytes and
files: it is stopped past them), processes (a pids cgroup where one can be made, else
``RLIMIT_NPROC``) and captured output. Without bubblewrap the tool is refused with a
message saying how to install it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import resource
import shutil
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from lattice.workspace.grants import WorkspaceGrant
from lattice.workspace.paths import PROTECTED_DIRS, ToolRefused
from lattice.workspace.usage import Usage, measure, protected, remove_new_gits

WATCH_SECONDS = 0.25
"""The shortest pause between two measures of the workspace while a command runs (a
workspace that takes longer to measure is measured less often)."""

INSTALL_HINT = (
    "the Bash tool needs bubblewrap (bwrap) to sandbox commands, and it is not installed: "
    "apt-get install bubblewrap (Debian, Ubuntu) or dnf install bubblewrap (Fedora)"
)
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
SYSTEM_FILES = (
    "/etc/ld.so.cache",
    "/etc/alternatives",
    "/etc/localtime",
    "/etc/passwd",
    "/etc/group",
)
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
SHM_BYTES = 64_000_000
"""The most a command's private ``/dev/shm`` holds (memory-backed like ``/tmp``, and
capped at the smaller of this and ``/tmp``'s size)."""
PIDS_CGROUPS = (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup"))


def scrubbed_environment() -> dict[str, str]:
    """The environment ``bwrap`` itself is started with: nothing of Lattice's own.

    ``--clearenv`` cleans only the command's environment; bubblewrap's own processes
    (its PID 1 in the sandbox among them) keep the one they were started with, and a
    command can read it from ``/proc/1/environ``: keys, tokens and all."""
    return {"PATH": SANDBOX_PATH, "LANG": "C.UTF-8"}


def _bwrap() -> str:
    """bubblewrap's full path, found on Lattice's own ``PATH`` (the sandbox's is not it)."""
    return shutil.which("bwrap") or "bwrap"


@functools.cache
def sizes_tmpfs() -> bool:
    """Whether this bubblewrap can cap a tmpfs (``--size``, bubblewrap 0.8 and later)."""
    try:
        shown = subprocess.run(
            [_bwrap(), "--help"],
            capture_output=True,
            timeout=10,
            check=False,
            env=scrubbed_environment(),
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return b"--size" in shown.stdout + shown.stderr


@functools.cache
def sandbox_problem() -> str | None:
    """Why commands cannot be sandboxed here (None: they can); probed once per process."""
    if shutil.which("bwrap") is None:
        return INSTALL_HINT
    try:
        probe = subprocess.run(
            [_bwrap(), *_mounts(None), "--unshare-all", "true"],
            capture_output=True,
            env=scrubbed_environment(),
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap is installed but could not start: {exc}"
    if probe.returncode != 0:
        reason = probe.stderr.decode("utf-8", "replace").strip()[:300]
        return f"bubblewrap is installed but cannot make a sandbox here: {reason}"
    return None


@dataclass(frozen=True, slots=True)
class ShellOutcome:
    exit_code: int | None
    output: str
    timed_out: bool
    cut: bool
    over_limit: str | None = None
    """Why the command was stopped for what it wrote into the workspace."""
    removed_gits: tuple[str, ...] = ()
    """The ``.git`` entries the command made, removed after it."""

    @property
    def failed(self) -> bool:
        stopped = self.timed_out or self.over_limit is not None or bool(self.removed_gits)
        return stopped or self.exit_code != 0

    def describe(self, limit_s: float) -> str:
        parts = [self.output.rstrip("\n")] if self.output.strip() else []
        if self.cut:
            parts.append("[output cut at the limit]")
        if self.over_limit is not None:
            parts.append(
                f"[stopped: {self.over_limit}; what it wrote is still there: remove what "
                "is not needed]"
            )
        elif self.timed_out:
            parts.append(f"[killed: the command ran past its {limit_s:g} s limit]")
        else:
            parts.append(f"[exit code {self.exit_code}]")
        if self.removed_gits:
            parts.append(
                f"[removed {', '.join(self.removed_gits)}: commands may not make git "
                "repositories in the workspace (git would run their hooks outside the sandbox)]"
            )
        return "\n".join(parts)


async def run_command(
    grant: WorkspaceGrant, command: str, timeout: float, *, read_only: bool = False
) -> ShellOutcome:
    """Run ``command`` with ``bash -c`` in the sandbox, inside the workspace
    (``read_only``: the workspace bound read-only, as a read-only agent's shell is)."""
    problem = sandbox_problem()
    if problem is not None:
        raise ToolRefused(problem)
    root = grant.root
    assert root is not None
    before = await asyncio.to_thread(measure, root)
    argv = [
        _bwrap(),
        *_mounts(root, protected(before), grant.shell_tmp_bytes, read_only=read_only),
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--uid", "1000", "--gid", "1000",
        "--chdir", str(root),
        "--clearenv",
        "--setenv", "PATH", SANDBOX_PATH,
        "--setenv", "HOME", "/tmp",
        "--setenv", "LANG", "C.UTF-8",
        "--setenv", "PYTHONDONTWRITEBYTECODE", "1",
        "bash", "-c", command,
    ]  # fmt: skip
    cgroup = _PidsCgroup.make(grant.shell_processes)
    limits = functools.partial(_limit_child, grant, cgroup)
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        preexec_fn=limits,
        start_new_session=True,
        env=scrubbed_environment(),
    )
    watch = asyncio.create_task(_watch_writes(grant, root, before, process))
    try:
        output, cut, timed_out = await _collect(process, grant.shell_output_bytes, timeout)
    except BaseException:
        # cancelled (an agent's own shorter time limit, a stopped run): what the command
        # made of .git is removed all the same, before the cancellation goes on
        await _stop(process, watch, cgroup)
        remove_new_gits(root, before, measure(root, before.gits))
        raise
    await _stop(process, watch, cgroup)
    over = watch.result() if watch.done() and not watch.cancelled() else None
    after = await asyncio.to_thread(measure, root, before.gits)
    over = over or after.grown_past(before, grant.shell_write_bytes, grant.shell_write_files)
    removed = await asyncio.to_thread(remove_new_gits, root, before, after)
    text = output.decode("utf-8", errors="replace")
    return ShellOutcome(process.returncode, text, timed_out, cut, over, tuple(removed))


async def _stop(
    process: asyncio.subprocess.Process, watch: asyncio.Task[str | None], cgroup: _PidsCgroup | None
) -> None:
    """Stop watching, kill the command's process tree and wait for it."""
    watch.cancel()
    _kill_tree(process)
    await process.wait()
    if cgroup is not None:
        cgroup.remove()


async def _watch_writes(
    grant: WorkspaceGrant, root: Path, before: Usage, process: asyncio.subprocess.Process
) -> str | None:
    """Measure the workspace while the command runs; stop it once it has written more than
    its limits allow, and say why."""
    pause = max(WATCH_SECONDS, before.seconds * 10)
    while process.returncode is None:
        await asyncio.sleep(pause)
        now = await asyncio.to_thread(measure, root, before.gits)
        reason = now.grown_past(before, grant.shell_write_bytes, grant.shell_write_files)
        if reason is not None:
            _kill_tree(process)
            return reason
        pause = max(WATCH_SECONDS, now.seconds * 10)
    return None


async def _collect(
    process: asyncio.subprocess.Process, limit: int, timeout: float
) -> tuple[bytes, bool, bool]:
    assert process.stdout is not None
    kept = bytearray()
    cut = False

    async def read_all() -> None:
        nonlocal cut
        assert process.stdout is not None
        while chunk := await process.stdout.read(65536):
            room = limit - len(kept)
            if room > 0:
                kept.extend(chunk[:room])
            if len(chunk) > room:
                cut = True
        await process.wait()

    try:
        await asyncio.wait_for(read_all(), timeout)
    except TimeoutError:
        return bytes(kept), cut, True
    return bytes(kept), cut, False


def _kill_tree(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)


def _mounts(
    root: Path | None,
    protected: frozenset[str] = frozenset(),
    tmp_bytes: int | None = None,
    *,
    read_only: bool = False,
) -> list[str]:
    """Bind mounts: the system read-only, a private ``/tmp`` (capped at ``tmp_bytes``
    where bubblewrap can), the workspace writable (read-only with ``read_only``) and each
    of its ``protected`` paths (``usage.protected``) read-only."""
    args: list[str] = []
    for path in SYSTEM_PATHS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for path in SYSTEM_FILES:
        args += ["--ro-bind-try", path, path]
    args += ["--proc", "/proc", "--dev", "/dev"]
    sized = tmp_bytes is not None and sizes_tmpfs()
    if sized:
        args += ["--size", str(tmp_bytes)]
    args += ["--tmpfs", "/tmp"]
    if sized:
        args += ["--size", str(min(tmp_bytes or 0, SHM_BYTES))]
    args += ["--tmpfs", "/dev/shm"]
    if root is not None and read_only:
        args += ["--ro-bind", str(root), str(root)]
    elif root is not None:
        args += ["--bind", str(root), str(root)]
        for name in sorted(PROTECTED_DIRS | protected):  # hooks and config there run on the host
            args += ["--ro-bind-try", str(root / name), str(root / name)]
    # bubblewrap's own root and /dev are memory-backed and unbounded: read-only, so that
    # /tmp's cap is the cap (device nodes such as /dev/null still take writes)
    args += ["--remount-ro", "/dev", "--remount-ro", "/"]
    return args


def _limit_child(grant: WorkspaceGrant, cgroup: _PidsCgroup | None) -> None:
    """In the child before exec: resource limits, and the pids cgroup."""
    memory = grant.shell_memory_bytes
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_FSIZE, (grant.shell_file_bytes, grant.shell_file_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if cgroup is not None:
        cgroup.enter()
    else:
        processes = grant.shell_processes
        resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))


class _PidsCgroup:
    """A pids cgroup that caps a command's processes (root ignores ``RLIMIT_NPROC``)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def make(cls, limit: int) -> _PidsCgroup | None:
        for base in PIDS_CGROUPS:
            if not (base / "cgroup.procs").exists() or not os.access(base, os.W_OK):
                continue
            path = base / f"lattice-{uuid.uuid4().hex[:12]}"
            try:
                path.mkdir()
                (path / "pids.max").write_text(str(limit))
            except OSError:
                with contextlib.suppress(OSError):
                    path.rmdir()
                continue
            return cls(path)
        return None

    def enter(self) -> None:
        with open(self.path / "cgroup.procs", "w") as handle:
            handle.write(str(os.getpid()))

    def remove(self) -> None:
        for _ in range(50):
            try:
                pids = (self.path / "cgroup.procs").read_text().split()
            except OSError:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.02)

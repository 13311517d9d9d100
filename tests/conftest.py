"""Shared fixtures. Tests never reach the network: sockets may only connect to loopback."""

from __future__ import annotations

import ipaddress
import os
import shutil
import signal
import socket
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from hypothesis import settings

# Hypothesis's per-example time limit is a timing assertion: on a loaded machine it fails
# examples that are only slow. Tests assert behaviour; speed is measured in bench/.
settings.register_profile("lattice", deadline=None)
settings.load_profile("lattice")

REPO = Path(__file__).resolve().parent.parent
DEVELOPMENT_CORPUS = REPO.parent / "shared" / "corpus" / "ccwf"


def corpus_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """The folder of real cc-wf-studio documents the corpus tests read: ``LATTICE_CORPUS``
    when it is set, else the development corpus beside the checkout."""
    given = environ.get("LATTICE_CORPUS")
    return Path(given).expanduser() if given else DEVELOPMENT_CORPUS


CORPUS = corpus_dir()
EXAMPLES = REPO / "workflows" / "examples"
EXAMPLE_GRANTS = ("read", "write", "shell")
"""What an example with a project beside it (``<name>-project/``) is run with."""


def example_workspace(path: Path, tmp: Path) -> Path | None:
    """A copy of the project an example's agents work in (``<name>-project/`` beside
    it), made under ``tmp``; None for an example without one."""
    project = path.with_name(f"{path.stem}-project")
    if not project.is_dir():
        return None
    copy = tmp / project.name
    shutil.copytree(project, copy, dirs_exist_ok=True)
    return copy


TRIAGE_PATH = [
    "start",
    "classify",
    "init-revisions",
    "init-feedback",
    "route",
    "draft-billing",
    "current-draft",
    "review",
    "approved",
    "count-revision",
    "revision-limit",
    "save-feedback",
    "route",
    "draft-billing",
    "current-draft",
    "review",
    "approved",
    "assemble",
    "end",
]
"""The ops support-triage's shipped mock script goes through, in order (once round
the review loop)."""

_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex
_real_getaddrinfo = socket.getaddrinfo


def _is_local(address: object) -> bool:
    if isinstance(address, str | bytes):  # AF_UNIX path
        return True
    if not isinstance(address, tuple) or not address:
        return False
    host = address[0]
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class NetworkBlockedError(RuntimeError):
    """Raised when a test tries to reach a host other than loopback."""


def _guarded_connect(self: socket.socket, address: object) -> None:
    if not _is_local(address):
        raise NetworkBlockedError(f"tests may not reach the network (tried {address!r})")
    return _real_connect(self, address)  # type: ignore[arg-type]


def _guarded_connect_ex(self: socket.socket, address: object) -> int:
    if not _is_local(address):
        raise NetworkBlockedError(f"tests may not reach the network (tried {address!r})")
    return _real_connect_ex(self, address)  # type: ignore[arg-type]


def _guarded_getaddrinfo(host: object, *args: object, **kwargs: object) -> object:
    if host not in (None, "localhost", "127.0.0.1", "::1", b"localhost") and not _is_local((host,)):
        raise NetworkBlockedError(f"tests may not resolve {host!r}")
    return _real_getaddrinfo(host, *args, **kwargs)  # type: ignore[arg-type]


@pytest.fixture(autouse=True, scope="session")
def _block_network() -> object:
    socket.socket.connect = _guarded_connect  # type: ignore[method-assign]
    socket.socket.connect_ex = _guarded_connect_ex  # type: ignore[method-assign]
    socket.getaddrinfo = _guarded_getaddrinfo  # type: ignore[assignment]
    yield
    socket.socket.connect = _real_connect  # type: ignore[method-assign]
    socket.socket.connect_ex = _real_connect_ex  # type: ignore[method-assign]
    socket.getaddrinfo = _real_getaddrinfo


@pytest.fixture(autouse=True, scope="session")
def _no_users_claude_settings(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A developer's own ``~/.claude/settings.json`` (permission rules) never decides a
    test's tool calls: Claude Code's settings folder is an empty one (CLAUDE_CONFIG_DIR)."""
    saved = os.environ.get("CLAUDE_CONFIG_DIR")
    os.environ["CLAUDE_CONFIG_DIR"] = str(tmp_path_factory.mktemp("claude-config"))
    yield
    if saved is None:
        os.environ.pop("CLAUDE_CONFIG_DIR", None)
    else:
        os.environ["CLAUDE_CONFIG_DIR"] = saved


@pytest.fixture(autouse=True)
def _no_provider_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """Live API keys never leak into tests by accident."""
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    for name in OTEL_VARIABLES:  # nor does a developer's collector
        monkeypatch.delenv(name, raising=False)


OTEL_VARIABLES = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_SDK_DISABLED",
    "OTEL_SERVICE_NAME",
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
)


SLOW_FIRST = (
    "tests/runs/test_crash.py",  # kill -9 of 50 lattice processes
    "tests/agents/test_kill.py",  # kill -9 of about 50 agent runs and resumes
    "tests/test_typing.py",  # mypy --strict over the package (20-50 s with a cold cache)
    "tests/fuzz/",
    "tests/lower/test_equivalence.py",
    "tests/examples/",  # starts MCP servers
)
"""Tests that take longest, by node id prefix, slowest first."""


@pytest.fixture
def default_ctrl_c() -> Iterator[None]:
    """Ctrl-C (SIGINT) as an interactive interpreter has it, for tests that send it (to
    this process, or to a child, which inherits an ignored SIGINT): a shell without job
    control starts background commands, such a test run included, with SIGINT ignored."""
    previous = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.SIG_DFL)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the slowest tests first: with several workers (pytest-xdist, ``-n auto`` in
    pyproject.toml) they then overlap the rest instead of trailing behind it."""

    def rank(item: pytest.Item) -> int:
        return next(
            (i for i, prefix in enumerate(SLOW_FIRST) if item.nodeid.startswith(prefix)),
            len(SLOW_FIRST),
        )

    items.sort(key=rank)  # stable: the order within each group is kept


def corpus_files() -> list[Path]:
    return sorted(CORPUS.glob("*.json")) if CORPUS.is_dir() else []


def corpus_document(pattern: str) -> Path:
    """The one corpus document whose name matches ``pattern`` (a glob); the calling test is
    skipped, saying so, when the corpus (``corpus_dir()``) or that document is missing."""
    matches = sorted(CORPUS.glob(pattern)) if CORPUS.is_dir() else []
    if not matches:
        pytest.skip(f"corpus document not found: {CORPUS / pattern}")
    assert len(matches) == 1, f"{pattern!r} matches several corpus documents: {matches}"
    return matches[0]


def example_files() -> list[Path]:
    return sorted(
        p
        for p in EXAMPLES.glob("*.json")
        if not p.name.endswith((".mock.json", ".answers.json", ".inputs.json"))
    )

"""What the example tests share: the example services (``workflows/examples/services.py``),
started once per test process on a free port of 127.0.0.1, and the environment the
documented commands expect (the repository root as the working directory; ``python``
and ``mcp-server-time`` on ``PATH``, as an activated virtual environment puts them)."""

from __future__ import annotations

import importlib.util
import os
import shlex
import sys
import sysconfig
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.conftest import EXAMPLES, REPO


def load_services_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("example_services", EXAMPLES / "services.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def services() -> Iterator[Any]:
    """The example services on a free port (``.url``, ``.port``, ``.received``)."""
    server = load_services_module().Services(0, quiet=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture(scope="session")
def venv_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    """``PATH`` as an activated virtual environment of this Python has it: ``python`` is
    this interpreter (a shim, whatever its file is called) and the environment's scripts
    (``mcp-server-time``) come next."""
    shims = tmp_path_factory.mktemp("bin")
    python = shims / "python"
    python.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n', encoding="utf-8")
    python.chmod(0o755)
    scripts = sysconfig.get_path("scripts")
    return os.pathsep.join([str(shims), scripts, os.environ.get("PATH", "")])


@pytest.fixture
def repo_root_with_venv(monkeypatch: pytest.MonkeyPatch, venv_path: str) -> Path:
    """Run from the repository root (the example configs name ``workflows/examples/…``)
    with the virtual environment's ``PATH`` and no ``LATTICE_*`` settings."""
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("PATH", venv_path)
    for name in ("LATTICE_CONFIG", "LATTICE_PROVIDER"):
        monkeypatch.delenv(name, raising=False)
    return REPO

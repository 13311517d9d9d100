"""What the example tests share: the example services (``workflows/examples/services.py``),
started once per test process on a free port of 127.0.0.1, and the environment the
documented commands expect (the repository root as the working directory, this Python's
``bin`` on ``PATH`` as an activated virtual environment would put it)."""

from __future__ import annotations

import importlib.util
import os
import sys
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


@pytest.fixture
def repo_root_with_venv(monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run from the repository root (the example configs name ``workflows/examples/…``)
    with ``python`` and ``mcp-server-time`` of this environment first on ``PATH``."""
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    for name in ("LATTICE_CONFIG", "LATTICE_PROVIDER"):
        monkeypatch.delenv(name, raising=False)
    return REPO

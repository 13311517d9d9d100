"""The panel's tests each get a workflows folder and a server of their own (per module)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lattice.config import LatticeConfig, RunsConfig
from lattice.server.app import ServerSettings
from tests.panel.helpers import workflows_folder
from tests.server.helpers import serve_in_thread


@pytest.fixture(scope="module")
def space(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("panel")
    workflows_folder(root)
    return root


@pytest.fixture(scope="module")
def base_url(space: Path) -> Iterator[str]:
    settings = ServerSettings(
        runs_dir=space / "runs",
        workflows_dir=space / "workflows",
        config=LatticeConfig(runs=RunsConfig(durability="os")),
    )
    with serve_in_thread(settings) as url:
        yield url

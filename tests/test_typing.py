"""The package type-checks under ``mypy --strict`` (the settings in pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_the_package_type_checks_under_mypy_strict() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "lattice"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr

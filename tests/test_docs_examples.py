"""The ```python examples of docs/python.md run, in order, in one namespace, offline."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import REPO

PAGE = REPO / "docs" / "python.md"
_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.DOTALL | re.MULTILINE)


def python_blocks(text: str) -> list[str]:
    """The bodies of the blocks fenced exactly as ```python (```py blocks are shown, not run)."""
    return _BLOCK.findall(text)


def test_the_extractor_finds_only_python_blocks() -> None:
    text = "a\n```python\nx = 1\n```\n```py\nnot run\n```\n```python\ny = 2\n```\n"
    assert python_blocks(text) == ["x = 1\n", "y = 2\n"]


@pytest.fixture
def clean_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working directory and no LATTICE_* settings from the environment."""
    monkeypatch.chdir(tmp_path)
    for name in ("LATTICE_CONFIG", "LATTICE_PROVIDER"):
        monkeypatch.delenv(name, raising=False)
    for cls in ("small", "medium", "large", "default"):
        monkeypatch.delenv(f"LATTICE_MODEL_{cls.upper()}", raising=False)
    return tmp_path


def test_python_md_examples_run(clean_cwd: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocks = python_blocks(PAGE.read_text(encoding="utf-8"))
    assert len(blocks) >= 8
    namespace: dict[str, object] = {"__name__": "docs_python_md"}
    for number, block in enumerate(blocks, start=1):
        # dont_inherit: the page's code runs without this module's __future__ imports
        code = compile(block, f"{PAGE.name}[python block {number}]", "exec", dont_inherit=True)
        exec(code, namespace)
    # the page covers what it promises, and its examples really did run
    for name in ("ir", "run", "seen_events", "writes", "response", "failed", "results"):
        assert name in namespace, name
    out = capsys.readouterr().out
    assert "billing True" in out
    assert (clean_cwd / "greeter.json").is_file()


def test_telemetry_md_examples_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/telemetry.md's Python example (an in-memory exporter), from the repository root."""
    monkeypatch.chdir(REPO)
    page = REPO / "docs" / "telemetry.md"
    blocks = python_blocks(page.read_text(encoding="utf-8"))
    assert blocks
    namespace: dict[str, object] = {"__name__": "docs_telemetry_md"}
    for number, block in enumerate(blocks, start=1):
        code = compile(block, f"{page.name}[python block {number}]", "exec", dont_inherit=True)
        exec(code, namespace)
    assert namespace["names"] == [
        "START start",
        "chat",
        "LLM_WRITE greet",
        "END end",
        "invoke_workflow hello-world",
    ]

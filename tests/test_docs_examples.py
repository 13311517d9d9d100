"""The ```python examples of docs/python.md run, in order, in one namespace, offline."""

from __future__ import annotations

import fnmatch
import json
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


# -- what the README and the other pages name ----------------------------------------------------

PAGES = [
    REPO / "README.md",
    *sorted((REPO / "docs").glob("*.md")),
    *sorted((REPO / "workflows").glob("**/README.md")),
    REPO / "bench" / "README.md",
]
_REPO_PATH = re.compile(
    r"(?<![\w./-])((?:lattice|tests|docs|workflows|bench|\.ci)/[A-Za-z0-9_./-]*[A-Za-z0-9_])"
)
USERS_FILES = {"tests/test_triage.py", "tests/__snapshots__/test_triage.ambr"}
"""Paths of the user's own project in docs/testing.md's example, not of this repository."""
PENDING: set[str] = set()
"""Pages named before they land (take a page out of here once it is in)."""


def named_paths(text: str) -> list[str]:
    """The repository paths ``text`` names (``lattice/…``, ``docs/…``, …), placeholders
    (``<name>``, ``*``, ``{…}``) left out."""
    return [p for p in _REPO_PATH.findall(text) if not set("<>*{}") & set(p)]


def test_the_path_finder_reads_paths_and_skips_placeholders() -> None:
    text = "see `lattice/cli/run.py`, docs/runs.md#resume and tests/<name>.py or a/lattice/x"
    assert named_paths(text) == ["lattice/cli/run.py", "docs/runs.md"]


def test_every_repository_path_the_docs_name_exists() -> None:
    missing = []
    for page in PAGES:
        for path in named_paths(page.read_text(encoding="utf-8")):
            here = (REPO / path, page.parent / path)
            if path not in USERS_FILES | PENDING and not any(p.exists() for p in here):
                missing.append(f"{page.relative_to(REPO)}: {path}")
    assert not missing, missing


def sh_block_after(text: str, marker: str) -> list[str]:
    """The commands of the first ```sh block after ``marker`` (comments dropped)."""
    start = text.index(marker)
    body = re.search(r"^```sh\n(.*?)^```$", text[start:], re.DOTALL | re.MULTILINE)
    assert body is not None, marker
    return [line for line in body.group(1).splitlines() if line.strip()]


def test_the_readmes_mock_init_example_runs_as_written(
    clean_cwd: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """From a clone's root: each command of the block, exactly as written, exits 0."""
    import shlex
    import shutil

    from lattice.cli import main

    (clean_cwd / "workflows").symlink_to(REPO / "workflows")
    commands = sh_block_after(
        (REPO / "README.md").read_text(encoding="utf-8"), "Try any document without a model"
    )
    assert any(c.startswith("lattice mock init") for c in commands)
    for command in commands:
        words = shlex.split(command, comments=True)
        if words[0] == "cp":
            shutil.copy(words[1], words[2])
            continue
        assert words[0] == "lattice", command
        code = main(words[1:])
        out, err = capsys.readouterr()
        assert code == 0, f"{command}\n{err}"
    assert isinstance(json.loads(out), dict)  # the run's output


def test_install_hints_name_extras_that_exist() -> None:
    """No page or message names the package index name, which no index has; each hint's
    packages are those of its extra in pyproject.toml."""
    import tomllib

    from lattice.errors import EXTRA_PACKAGES, install_hint

    extras = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "optional-dependencies"
    ]
    for extra, packages in EXTRA_PACKAGES.items():
        declared = {re.split(r"[<>=!~;\[ ]", d, maxsplit=1)[0].lower() for d in extras[extra]}
        assert set(packages) <= declared, extra
        assert install_hint(extra).startswith(f"pip install -e '.[{extra}]'")
    sources = [*PAGES, *sorted((REPO / "lattice").rglob("*.py"))]
    stale = [str(p.relative_to(REPO)) for p in sources if "lattice-lre[" in p.read_text("utf-8")]
    assert not stale, stale


def test_the_files_the_docs_commands_make_are_left_out_of_git() -> None:
    """``temporal server start-dev --db-filename temporal.db``, as the docs write it,
    makes a database in the clone: .gitignore leaves it (and its companions) out."""
    ignored = [
        line.strip()
        for line in (REPO / ".gitignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    docs = "\n".join(p.read_text() for p in [REPO / "README.md", *(REPO / "docs").glob("*.md")])
    made = set(re.findall(r"--db-filename (\S+)", docs))
    assert made == {"temporal.db"}
    for name in made:
        for path in (name, f"{name}-wal", f"{name}-shm"):
            assert any(fnmatch.fnmatch(path, pattern) for pattern in ignored), path

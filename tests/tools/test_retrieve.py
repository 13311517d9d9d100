"""retrieve_context: lexical search over the files under a repository root, and nothing else."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from lattice.errors import LatticeRunError
from lattice.tools import retrieve as retrieve_module
from lattice.tools.retrieve import RETRIEVE_CONTEXT_TOOL, retrieve_context, tokenize


def write(root: Path, relative: str, text: str | bytes) -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    write(
        root,
        "src/config.py",
        "import json\n\n\ndef load_config(path):\n    with open(path) as handle:\n"
        "        return json.load(handle)\n",
    )
    write(root, "src/server.py", "def start_server(port):\n    print('listening on', port)\n")
    write(root, "docs/config.md", "# Configuration\n\nThe config file is JSON.\n")
    write(root, "README.md", "A small service. Start the server with start_server.\n")
    return root


def paths(result: dict[str, Any]) -> list[str]:
    return [s["path"] for s in result["snippets"]]


def test_tool_definition_is_a_valid_mcp_tool() -> None:
    tool = RETRIEVE_CONTEXT_TOOL
    assert tool["name"] == "retrieve_context"
    assert isinstance(tool["description"], str) and tool["description"]
    schema = tool["inputSchema"]
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["required"] == ["query"]
    assert schema["properties"]["max_results"] == {
        **schema["properties"]["max_results"],
        "type": "integer",
        "minimum": 1,
        "maximum": 50,
        "default": 8,
    }
    validator = jsonschema.Draft202012Validator(schema)
    assert validator.is_valid({"query": "x", "max_results": 3, "globs": ["*.py"]})
    assert not validator.is_valid({"max_results": 3})
    assert not validator.is_valid({"query": "x", "max_results": 51})


def test_tokenize_splits_identifiers_and_drops_stopwords() -> None:
    assert tokenize("the parseConfig of load_settings, HTTPServer v2 x") == [
        "parseconfig",
        "parse",
        "config",
        "load_settings",
        "load",
        "settings",
        "httpserver",
        "http",
        "server",
        "v2",
    ]


def test_ranking_puts_the_best_match_first(repo: Path) -> None:
    result = retrieve_context(repo, {"query": "load_config json"})
    assert result["truncated"] is False
    assert paths(result)[0] == "src/config.py"
    assert "docs/config.md" in paths(result)
    assert "src/server.py" not in paths(result)  # no query term at all
    scores = [s["score"] for s in result["snippets"]]
    assert scores == sorted(scores, reverse=True)
    assert all(s > 0 for s in scores)


def test_snippets_carry_relative_paths_and_1_based_lines(repo: Path) -> None:
    first = retrieve_context(repo, {"query": "start_server port"})["snippets"][0]
    assert first == {
        "path": "src/server.py",
        "start": 1,
        "end": 2,
        "text": "def start_server(port):\n    print('listening on', port)",
        "score": first["score"],
    }


def test_camel_case_query_finds_snake_case_code(repo: Path) -> None:
    assert paths(retrieve_context(repo, {"query": "loadConfig"}))[0] == "src/config.py"


def test_long_files_are_cut_into_windows(tmp_path: Path) -> None:
    lines = [f"line {i} filler text" for i in range(1, 101)]
    lines[69] = "the needle_marker is here"
    write(tmp_path, "big.txt", "\n".join(lines) + "\n")
    [snippet] = retrieve_context(tmp_path, {"query": "needle_marker"})["snippets"]
    window = retrieve_module.WINDOW_LINES
    assert snippet["start"] == window * (69 // window) + 1
    assert snippet["end"] == min(snippet["start"] + window - 1, 100)
    assert "needle_marker" in snippet["text"]
    assert snippet["text"].splitlines()[0] == lines[snippet["start"] - 1]


def test_ordering_is_deterministic_with_ties_by_path(tmp_path: Path) -> None:
    for name in ("b.txt", "a.txt", "c/a.txt"):
        write(tmp_path, name, "alpha beta\n")
    result = retrieve_context(tmp_path, {"query": "alpha"})
    assert paths(result) == ["a.txt", "b.txt", "c/a.txt"]
    assert result == retrieve_context(tmp_path, {"query": "alpha"})


def test_max_results(tmp_path: Path) -> None:
    for i in range(12):
        write(tmp_path, f"f{i:02d}.txt", "common word\n")
    assert len(retrieve_context(tmp_path, {"query": "common"})["snippets"]) == 8
    assert len(retrieve_context(tmp_path, {"query": "common", "max_results": 3})["snippets"]) == 3
    assert len(retrieve_context(tmp_path, {"query": "common", "max_results": 50})["snippets"]) == 12


def test_a_query_without_search_terms_finds_nothing(repo: Path) -> None:
    assert retrieve_context(repo, {"query": "the ? !"}) == {"snippets": [], "truncated": False}


# -- globs -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("globs", "expected"),
    [
        (["*.py"], {"src/config.py", "src/server.py"}),
        (["src/*.py"], {"src/config.py", "src/server.py"}),
        (["**/*.md"], {"docs/config.md", "README.md"}),
        (["docs/**"], {"docs/config.md"}),
        (["./README.md"], {"README.md"}),
        (["src/con?ig.py", "README.md"], {"src/config.py", "README.md"}),
        (["src/[cd]*.py"], {"src/config.py"}),
        ([], {"src/config.py", "src/server.py", "docs/config.md", "README.md"}),
        (None, {"src/config.py", "src/server.py", "docs/config.md", "README.md"}),
    ],
)
def test_globs_filter_files(repo: Path, globs: list[str] | None, expected: set[str]) -> None:
    result = retrieve_context(repo, {"query": "config server start load", "globs": globs})
    assert set(paths(result)) == expected


def test_a_glob_matches_the_path_it_spells_literally(tmp_path: Path) -> None:
    write(tmp_path, "app/[id]/page.tsx", "export default function Page() {}\n")
    write(tmp_path, "app/i/page.tsx", "export default function Other() {}\n")
    result = retrieve_context(tmp_path, {"query": "page", "globs": ["app/[id]/page.tsx"]})
    assert paths(result) == ["app/[id]/page.tsx", "app/i/page.tsx"]


@pytest.mark.parametrize(
    "glob", ["../secret.txt", "../**", "src/../../x", "/etc/passwd", "C:/Windows", "..\\x", ""]
)
def test_globs_that_leave_the_root_are_refused(repo: Path, glob: str) -> None:
    write(repo.parent, "secret.txt", "config password\n")
    with pytest.raises(LatticeRunError) as info:
        retrieve_context(repo, {"query": "config", "globs": [glob]})
    assert info.value.error_type == "tool_error"
    assert info.value.details["argument"] == "globs"


# -- never outside the root, never the wrong files ---------------------------------------------


def test_symlinks_leaving_the_root_are_not_followed(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    write(root, "inside.txt", "marker inside\n")
    outside = tmp_path / "outside"
    write(outside, "secret.txt", "marker secret outside\n")
    (root / "link-to-file.txt").symlink_to(outside / "secret.txt")
    (root / "link-to-dir").symlink_to(outside, target_is_directory=True)
    (root / "inside-link.txt").symlink_to(root / "inside.txt")
    (root / "broken.txt").symlink_to(tmp_path / "missing.txt")
    loop = root / "loop.txt"
    loop.symlink_to(loop)
    result = retrieve_context(root, {"query": "marker secret outside", "max_results": 50})
    assert sorted(paths(result)) == ["inside-link.txt", "inside.txt"]
    assert all("outside" not in s["text"] for s in result["snippets"])


def test_a_symlinked_root_is_resolved(tmp_path: Path, repo: Path) -> None:
    link = tmp_path / "repo-link"
    link.symlink_to(repo, target_is_directory=True)
    assert paths(retrieve_context(link, {"query": "start_server port"}))[0] == "src/server.py"


def test_tool_folders_binary_large_and_secret_files_are_skipped(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for relative in (".git/config", ".lattice/runs/x.json", "node_modules/a/index.js"):
        write(repo, relative, "zebra\n")
    write(repo, "image.png", b"\x89PNG\r\n\x1a\n\0\0zebra")
    write(repo, "latin1.txt", "zebra caf\xe9\n".encode("latin-1"))
    for relative in (".env", ".env.local", "certs/server.pem", "keys/id_rsa"):
        write(repo, relative, "zebra SECRET=hunter2\n")
    write(repo, "big.txt", "zebra " * 100)
    write(repo, "small.txt", "zebra\n")
    monkeypatch.setattr(retrieve_module, "MAX_FILE_BYTES", 100)
    assert paths(retrieve_context(repo, {"query": "zebra", "max_results": 50})) == ["small.txt"]


def test_root_must_be_a_directory(tmp_path: Path) -> None:
    write(tmp_path, "file.txt", "x")
    for root in (tmp_path / "file.txt", tmp_path / "missing"):
        with pytest.raises(LatticeRunError) as info:
            retrieve_context(root, {"query": "x"})
        assert info.value.error_type == "tool_error"


# -- caps ------------------------------------------------------------------------------------


def test_snippet_text_is_capped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, "a.txt", "\n".join(f"word line {i}" for i in range(30)) + "\n")
    monkeypatch.setattr(retrieve_module, "MAX_SNIPPET_CHARS", 40)
    result = retrieve_context(tmp_path, {"query": "word"})
    [snippet] = result["snippets"]
    assert result["truncated"] is True
    assert len(snippet["text"]) <= 40
    assert snippet["end"] == snippet["start"] + len(snippet["text"].splitlines()) - 1


def test_one_overlong_line_is_cut(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, "min.js", "word" + "x" * 500 + "\n")
    monkeypatch.setattr(retrieve_module, "MAX_SNIPPET_CHARS", 50)
    [snippet] = retrieve_context(tmp_path, {"query": "word" + "x" * 500})["snippets"]
    assert len(snippet["text"]) == 50 and snippet["text"].endswith("…")
    assert (snippet["start"], snippet["end"]) == (1, 1)


def test_total_output_is_capped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(5):
        write(tmp_path, f"f{i}.txt", "word " * 20 + "\n")
    monkeypatch.setattr(retrieve_module, "MAX_OUTPUT_CHARS", 250)
    result = retrieve_context(tmp_path, {"query": "word"})
    assert result["truncated"] is True
    assert sum(len(s["text"]) for s in result["snippets"]) <= 250
    assert len(result["snippets"]) < 5


def test_scan_cap_marks_the_result_truncated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(4):
        write(tmp_path, f"f{i}.txt", "word\n")
    monkeypatch.setattr(retrieve_module, "MAX_FILES", 2)
    result = retrieve_context(tmp_path, {"query": "word"})
    assert result["truncated"] is True
    assert paths(result) == ["f0.txt", "f1.txt"]


# -- arguments ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "argument"),
    [
        ({}, "query"),
        ({"query": ""}, "query"),
        ({"query": "   "}, "query"),
        ({"query": 3}, "query"),
        ({"query": "x", "max_results": 0}, "max_results"),
        ({"query": "x", "max_results": 51}, "max_results"),
        ({"query": "x", "max_results": "3"}, "max_results"),
        ({"query": "x", "max_results": True}, "max_results"),
        ({"query": "x", "globs": "*.py"}, "globs"),
        ({"query": "x", "globs": [1]}, "globs"),
        ({"query": "x", "path": "/etc"}, "path"),
    ],
)
def test_bad_arguments_are_tool_errors(repo: Path, arguments: Any, argument: str) -> None:
    with pytest.raises(LatticeRunError) as info:
        retrieve_context(repo, arguments)
    assert info.value.error_type == "tool_error"
    assert info.value.details == {"tool": "retrieve_context", "argument": argument}
    assert info.value.message.startswith("retrieve_context: ")


def test_arguments_must_be_an_object(repo: Path) -> None:
    with pytest.raises(LatticeRunError):
        retrieve_context(repo, ["query"])  # type: ignore[arg-type]


def test_null_max_results_means_the_default(repo: Path) -> None:
    assert retrieve_context(repo, {"query": "config", "max_results": None})["snippets"]


def test_nothing_is_written(repo: Path) -> None:
    before = {p: p.stat().st_mtime_ns for p in repo.rglob("*")}
    retrieve_context(repo, {"query": "config server"})
    assert {p: p.stat().st_mtime_ns for p in repo.rglob("*")} == before
    assert sorted(os.listdir(repo)) == ["README.md", "docs", "src"]

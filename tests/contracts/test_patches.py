"""check_patch: unified diffs applied in memory to the files under a repository root."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from lattice.contracts.patches import PatchParseError, check_patch, parse_unified_diff

APP = "def greet(name):\n    return 'Hello ' + name\n\n\ndef main():\n    print(greet('world'))\n"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text(APP, encoding="utf-8")
    (root / "notes.txt").write_text("one\ntwo\nthree\n", encoding="utf-8")
    return root


GOOD = """--- a/src/app.py
+++ b/src/app.py
@@ -1,3 +1,3 @@
 def greet(name):
-    return 'Hello ' + name
+    return f'Hello {name}!'
 
@@ -5,2 +5,3 @@
 def main():
     print(greet('world'))
+    print(greet('again'))
"""


def test_a_patch_that_applies_has_no_problems(repo: Path) -> None:
    assert check_patch(GOOD, repo) == []


def test_files_on_disk_are_not_changed(repo: Path) -> None:
    check_patch(GOOD, repo)
    assert (repo / "src" / "app.py").read_text(encoding="utf-8") == APP


def test_wrong_context_names_the_file_the_hunk_and_the_line(repo: Path) -> None:
    bad = GOOD.replace("-    return 'Hello ' + name", "-    return 'Hi ' + name")
    [problem] = check_patch(bad, repo)
    assert problem.startswith("src/app.py: hunk 1 (@@ -1,3 +1,3 @@) does not apply: ")
    assert "line 2 is \"    return 'Hello ' + name\"" in problem
    assert "the hunk expects \"    return 'Hi ' + name\"" in problem


def test_only_the_failing_hunk_is_reported(repo: Path) -> None:
    bad = GOOD.replace("     print(greet('world'))", "     print(greet('earth'))")
    [problem] = check_patch(bad, repo)
    assert problem.startswith("src/app.py: hunk 2 (@@ -5,2 +5,3 @@) does not apply")


def test_hunks_at_the_wrong_line_apply_with_an_offset_like_git_apply(repo: Path) -> None:
    shifted = GOOD.replace("@@ -5,2 +5,3 @@", "@@ -3,2 +3,3 @@").replace(
        "@@ -1,3 +1,3 @@", "@@ -2,3 +2,3 @@"
    )
    assert check_patch(shifted, repo) == []


def test_a_hunk_past_the_end_of_the_file(repo: Path) -> None:
    patch = "--- a/notes.txt\n+++ b/notes.txt\n@@ -9,1 +9,1 @@\n-ten\n+TEN\n"
    [problem] = check_patch(patch, repo)
    assert "notes.txt: hunk 1 (@@ -9,1 +9,1 @@)" in problem
    assert "the file has 3 lines" in problem


def test_insertions_and_blank_context_lines(repo: Path) -> None:
    insert = "--- a/notes.txt\n+++ b/notes.txt\n@@ -3,0 +4,1 @@\n+four\n"
    assert check_patch(insert, repo) == []
    too_far = "--- a/notes.txt\n+++ b/notes.txt\n@@ -7,0 +8,1 @@\n+eight\n"
    assert "inserts after line 7, but the file has 3 lines" in check_patch(too_far, repo)[0]
    # A blank line inside a hunk stands for an empty context line (models drop the space).
    blank = "--- a/src/app.py\n+++ b/src/app.py\n@@ -3,3 +3,4 @@\n\n\n+# main\n def main():\n"
    assert check_patch(blank, repo) == []


def test_new_files(repo: Path) -> None:
    new = "--- /dev/null\n+++ b/src/util.py\n@@ -0,0 +1,2 @@\n+def helper():\n+    return 1\n"
    assert check_patch(new, repo) == []
    exists = new.replace("src/util.py", "notes.txt")
    [problem] = check_patch(exists, repo)
    assert problem.startswith("notes.txt: the patch creates this file")


def test_deleting_a_file(repo: Path) -> None:
    delete = "--- a/notes.txt\n+++ /dev/null\n@@ -1,3 +0,0 @@\n-one\n-two\n-three\n"
    assert check_patch(delete, repo) == []
    partial = "--- a/notes.txt\n+++ /dev/null\n@@ -1,3 +1,1 @@\n-one\n-two\n three\n"
    assert (
        "deletes the file ('+++ /dev/null') but leaves 1 of its lines"
        in (check_patch(partial, repo)[0])
    )


def test_a_missing_file(repo: Path) -> None:
    patch = "--- a/src/missing.py\n+++ b/src/missing.py\n@@ -1 +1 @@\n-a\n+b\n"
    [problem] = check_patch(patch, repo)
    assert problem.startswith("src/missing.py: the file does not exist in the repository")
    assert "/dev/null" in problem


def test_two_patches_of_one_file_apply_in_sequence(repo: Path) -> None:
    first = "--- a/notes.txt\n+++ b/notes.txt\n@@ -1,2 +1,2 @@\n-one\n+ONE\n two\n"
    second = "--- a/notes.txt\n+++ b/notes.txt\n@@ -1,2 +1,2 @@\n-ONE\n+1\n two\n"
    assert check_patch(first + second, repo) == []
    assert check_patch(first + first, repo)[0].startswith("notes.txt: hunk 1")


def test_renames_and_timestamps_and_git_headers(repo: Path) -> None:
    patch = (
        "diff --git a/notes.txt b/docs/notes.txt\n"
        "index 1111111..2222222 100644\n"
        "--- a/notes.txt\t2026-01-01 10:00:00\n"
        "+++ b/docs/notes.txt\t2026-01-01 10:00:01\n"
        "@@ -1,3 +1,3 @@\n one\n-two\n+TWO\n three\n"
        "\\ No newline at end of file\n"
    )
    assert check_patch(patch, repo) == []


def test_crlf_files_compare_by_line(tmp_path: Path) -> None:
    (tmp_path / "win.txt").write_bytes(b"alpha\r\nbeta\r\n")
    assert check_patch("--- a/win.txt\n+++ b/win.txt\n@@ -2 +2 @@\n-beta\n+gamma\n", tmp_path) == []


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("../outside.txt", "leaves the repository root"),
        ("src/../../outside.txt", "leaves the repository root"),
        ("/etc/hosts", "must be relative"),
        ("link/outside.txt", "leads out of the repository root"),
    ],
)
def test_paths_outside_the_root_are_refused_unread(repo: Path, path: str, message: str) -> None:
    outside = repo.parent / "outside"
    outside.mkdir()
    (outside / "outside.txt").write_text("secret\n", encoding="utf-8")
    (repo.parent / "outside.txt").write_text("secret\n", encoding="utf-8")
    (repo / "link").symlink_to(outside, target_is_directory=True)
    patch = f"--- {path}\n+++ {path}\n@@ -1 +1 @@\n-secret\n+public\n"
    [problem] = check_patch(patch, repo)
    assert message in problem
    assert "secret" not in problem


def test_binary_files_cannot_be_patched(repo: Path) -> None:
    (repo / "blob.bin").write_bytes(b"\xff\xfe\x00")
    [problem] = check_patch("--- a/blob.bin\n+++ b/blob.bin\n@@ -1 +1 @@\n-a\n+b\n", repo)
    assert "not a UTF-8 text file" in problem


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("just prose", "no '--- a/file' / '+++ b/file' headers"),
        ("@@ -1 +1 @@\n-a\n+b\n", "comes before any"),
        ("--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n-a\n+b\n", "declares -2 +2 lines but has -1 +1"),
    ],
)
def test_malformed_diffs(repo: Path, text: str, message: str) -> None:
    with pytest.raises(PatchParseError) as info:
        parse_unified_diff(text)
    assert message in str(info.value)
    assert check_patch(text, repo) == [f"not a unified diff: {info.value}"]


NOTES = "--- a/notes.txt\n+++ b/notes.txt\n"
ANCHORS = {
    "middle-without-trailing-context": (NOTES + "@@ -1,2 +1,2 @@\n one\n-two\n+TWO\n", "end"),
    "middle-without-any-context": (NOTES + "@@ -2 +2 @@\n-two\n+TWO\n", "end"),
    "line-1-not-at-the-start": (NOTES + "@@ -1,2 +1,2 @@\n-two\n+TWO\n three\n", "beginning"),
}


@pytest.mark.parametrize(("patch", "anchor"), ANCHORS.values(), ids=ANCHORS.keys())
def test_hunks_are_anchored_like_git_apply(repo: Path, patch: str, anchor: str) -> None:
    [problem] = check_patch(patch, repo)
    assert problem.startswith("notes.txt: hunk 1")
    assert f"must match at the {anchor} of the file" in problem


AGREEMENT = {
    "good": GOOD,
    "wrong-context": GOOD.replace("-    return 'Hello ' + name", "-    return 'Hi ' + name"),
    "offset": GOOD.replace("@@ -1,3 +1,3 @@", "@@ -2,3 +2,3 @@"),
    "no-leading-context": NOTES + "@@ -2,2 +2,2 @@\n-two\n+TWO\n three\n",
    "append-at-end": NOTES + "@@ -3,0 +4 @@\n+four\n",
    "append-with-context": NOTES + "@@ -2,2 +2,3 @@\n two\n three\n+four\n",
    "insert-in-the-middle-without-context": NOTES + "@@ -1,0 +2 @@\n+one and a half\n",
    **{name: patch for name, (patch, _) in ANCHORS.items()},
    "new-file": "--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1,2 @@\n+a\n+b\n",
    "new-file-that-exists": "--- /dev/null\n+++ b/notes.txt\n@@ -0,0 +1 @@\n+a\n",
    "delete": "--- a/notes.txt\n+++ /dev/null\n@@ -1,3 +0,0 @@\n-one\n-two\n-three\n",
    "missing-file": "--- a/nope.txt\n+++ b/nope.txt\n@@ -1 +1 @@\n-a\n+b\n",
}


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
@pytest.mark.parametrize("name", sorted(AGREEMENT))
def test_verdicts_agree_with_git_apply(repo: Path, tmp_path: Path, name: str) -> None:
    patch_file = tmp_path / "change.diff"
    patch_file.write_text(AGREEMENT[name], encoding="utf-8")
    git = subprocess.run(
        ["git", "apply", "--check", str(patch_file)],
        cwd=repo,
        capture_output=True,
        text=True,
        check=False,
    )
    problems = check_patch(AGREEMENT[name], repo)
    assert (problems == []) == (git.returncode == 0), (problems, git.stderr)

"""Freshness settles: after any successful ingest of a folder whose content did not change,
`mdvdb status --check` exits 0, whatever moved the files' stats (a touch, a save of the same
bytes, `cp` without -p, a file put back by `git checkout`), through the real CLI.

`status --check` compares each file's size and mtime with the index's, so the ingest that
finds a file touched records its new stat in the index (schema and pack run for it,
`pipeline.tasks`; nothing is parsed or embedded); before, it published nothing and the
folder stayed stale through any number of ingests."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import run_cli


def _ingest(root: Path, *paths: str) -> dict:
    done = run_cli("ingest", *paths, "--json", "--root", str(root))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _check(root: Path) -> int:
    return run_cli("status", "--check", "--root", str(root)).returncode


def _settled(root: Path, *paths: str) -> dict:
    """One ingest makes the folder fresh, and the next one has nothing to do."""
    report = _ingest(root, *paths)
    assert report["changed"] == report["added"] == report["chunks_embedded"] == 0, report
    assert _check(root) == 0
    again = _ingest(root)
    assert (again["hashed"], again["published"]) == (0, False)
    assert _check(root) == 0
    return report


def _settle_copy(root: Path) -> None:
    """`indexed_notes` is a copy: its first ingest republishes for the new index path."""
    _ingest(root)
    assert _check(root) == 0


def test_a_touched_file_is_fresh_after_one_ingest(indexed_notes: Path):
    """The inner loop's case: the ingests the command runs, in this process, then the real
    `status --check` (the slow cases below run `mdvdb ingest` too)."""
    from kernel.config import load_config
    from pipeline import ingest_folder

    config = load_config(indexed_notes, environ=dict(os.environ))
    ingest_folder(config)  # the copy's own first run
    os.utime(indexed_notes / "tar.md", (1_700_000_000, 1_700_000_000))
    report = ingest_folder(config)
    assert (report.hashed, report.changed, report.published) == (1, 0, True)
    assert _check(indexed_notes) == 0


@pytest.mark.slow
def test_a_touched_file_through_the_cli(indexed_notes: Path):
    _settle_copy(indexed_notes)
    os.utime(indexed_notes / "tar.md", (1_700_000_000, 1_700_000_000))
    assert _check(indexed_notes) == 3  # stale until an ingest has seen it
    assert _settled(indexed_notes)["hashed"] == 1


@pytest.mark.slow
def test_a_touch_then_ingest_of_that_path(indexed_notes: Path):
    """`mdvdb ingest PATH` (what an editor hook runs) settles it too."""
    _settle_copy(indexed_notes)
    os.utime(indexed_notes / "tar.md", (1_700_000_000, 1_700_000_000))
    assert _check(indexed_notes) == 3
    _settled(indexed_notes, str(indexed_notes / "tar.md"))


@pytest.mark.slow
def test_the_hook_form_stays_quiet_after_a_touch(indexed_notes: Path):
    """`ingest --quiet` prints nothing when no content changed, also when it republishes
    the index to record a touched file's stat."""
    _settle_copy(indexed_notes)
    os.utime(indexed_notes / "tar.md", (1_700_000_000, 1_700_000_000))
    quiet = run_cli("ingest", "--quiet", "--root", str(indexed_notes))
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", "")
    assert _check(indexed_notes) == 0


@pytest.mark.slow
def test_a_save_of_the_same_bytes(indexed_notes: Path):
    _settle_copy(indexed_notes)
    page = indexed_notes / "tar.md"
    st = page.stat()
    page.write_bytes(page.read_bytes())  # an editor's save: a new mtime, the same content
    os.utime(page, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    assert _check(indexed_notes) == 3
    _settled(indexed_notes)


@pytest.mark.slow
def test_a_copy_without_p(indexed_notes: Path, tmp_path: Path):
    """The pages copied out with `cp -r` and back over themselves without -p (a backup put
    back): every page has a new mtime, none a new byte."""
    _settle_copy(indexed_notes)
    backup = tmp_path / "backup"
    pages = sorted(p.relative_to(indexed_notes) for p in indexed_notes.rglob("*.md"))
    for rel in pages:
        (backup / rel).parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cp", str(indexed_notes / rel), str(backup / rel)], check=True)
    before = {rel: (indexed_notes / rel).stat().st_mtime_ns for rel in pages}
    done = subprocess.run(["cp", "-r", f"{backup}/.", str(indexed_notes)], capture_output=True)
    assert done.returncode == 0, done.stderr
    assert all((indexed_notes / rel).stat().st_mtime_ns != before[rel] for rel in pages)
    assert _check(indexed_notes) == 3
    report = _settled(indexed_notes)
    assert report["hashed"] == len(pages) == report["files"]


def _git(root: Path, *args: str) -> None:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    done = subprocess.run(["git", *args], cwd=root, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.slow
def test_a_file_put_back_by_git_checkout(notes: Path):
    """A real repository: a page edited and then restored by `git checkout` has the
    indexed content under a new mtime; an edit that was indexed and then restored is an
    ordinary change. Both settle after one ingest."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    (notes / ".gitignore").write_text(".markdownvdb.index\n.markdownvdb.state/\n")
    _git(notes, "init", "-q")
    _git(notes, "add", "-A")
    _git(notes, "commit", "-q", "-m", "notes")
    _ingest(notes)
    assert _check(notes) == 0
    page = notes / "tar.md"
    original = page.read_text()
    st = page.stat()
    page.write_text(original + "\n## Draft\n\nNot kept.\n")
    os.utime(page, ns=(st.st_atime_ns, st.st_mtime_ns + 2_000_000_000))
    _git(notes, "checkout", "--", "tar.md")  # not indexed in between
    assert page.read_text() == original and _check(notes) == 3
    assert _settled(notes)["hashed"] == 1
    page.write_text(original + "\n## Draft\n\nIndexed, then undone.\n")
    assert _ingest(notes)["changed"] == 1
    _git(notes, "checkout", "--", "tar.md")
    assert _ingest(notes)["changed"] == 1 and _check(notes) == 0

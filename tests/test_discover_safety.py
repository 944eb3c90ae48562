"""What the walk refuses, and that a path named alone (the watcher, `ingest PATH`) obeys
exactly the walk's rules."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kernel.config import load_config
from pipeline.walk.discover import PathFilter, walk
from tests.conftest import run_cli


def _tree(root: Path) -> None:
    files = {
        "a.md": "# A\n\nalpha\n",
        "docs/b.md": "# B\n\nbeta\n",
        "docs/deep/c.markdown": "# C\n\ngamma\n",
        "docs/skip/d.md": "# D\n",
        "docs/notes.txt": "not markdown",
        "node_modules/pkg/e.md": "# E\n",
        "drafts/f.md": "# F\n",
        "docs/deep/g.md": "# G\n",
        "x/build/h.md": "# H\n",
        "x/i.md": "# I\n",
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (root / "docs" / ".gitignore").write_text("skip/\ndeep/g.md\n")


def test_path_filter_agrees_with_the_walk(tmp_path: Path):
    _tree(tmp_path)
    config = load_config(tmp_path, environ={"MDVDB_IGNORE_PATTERNS": "drafts/"})
    walked = set(walk(config, []))
    assert walked == {"a.md", "docs/b.md", "docs/deep/c.markdown", "x/i.md"}
    rules = PathFilter(config)
    for dirpath, _, names in os.walk(tmp_path):
        for name in names:
            rel = (Path(dirpath) / name).relative_to(tmp_path).as_posix()
            assert rules.check(rel)[0] == (rel in walked), rel


@pytest.mark.slow
def test_named_paths_follow_the_rules(tmp_path: Path):
    _tree(tmp_path)
    assert run_cli("ingest", "--root", str(tmp_path)).returncode == 0
    result = run_cli(
        "ingest", "--json", "--root", str(tmp_path),
        str(tmp_path / "node_modules/pkg/e.md"), str(tmp_path / "docs/skip/d.md"),
        str(tmp_path / "docs"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["files"], report["added"], report["removed"]) == (5, 0, 0)
    # A folder named after its files were deleted: they leave the index.
    for name in ("b.md", "deep/c.markdown"):
        (tmp_path / "docs" / name).unlink()
    result = run_cli("ingest", "--json", "--root", str(tmp_path), str(tmp_path / "docs"))
    report = json.loads(result.stdout)
    assert (report["files"], report["removed"]) == (3, 2)


@pytest.mark.slow
def test_symlinks_that_loop_or_escape_are_reported_and_skipped(tmp_path: Path):
    root = tmp_path / "project"
    outside = tmp_path / "outside"
    (root / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.md").write_text("# Secret\n\nnever index me\n")
    (root / "note.md").write_text("# Note\n\nhello\n")
    (root / "sub" / "loop").symlink_to(root / "sub")  # a folder loop
    (root / "self.md").symlink_to(root / "self.md")  # a link to itself
    (root / "escape").symlink_to(outside)
    (root / "escape.md").symlink_to(outside / "secret.md")
    (root / "inside.md").symlink_to(root / "note.md")  # allowed: stays in the root
    result = run_cli("ingest", "--json", "--root", str(root))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    problems = {e["path"]: e["problem"] for e in report["errors"]}
    assert "loop" in problems["sub/loop"]
    assert "loop" in problems["self.md"]
    assert "outside the project root" in problems["escape"]
    assert "outside the project root" in problems["escape.md"]
    assert report["files"] == 2  # note.md and inside.md
    # Named directly, the escaping link is refused the same way, not followed.
    result = run_cli("ingest", "--json", "--root", str(root), str(root / "escape.md"))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["files"] == 2
    assert [e["path"] for e in report["errors"]] == ["escape.md"]
    found = run_cli("search", "never index me", "--json", "--root", str(root))
    assert "secret" not in found.stdout


def _without_root_read_powers() -> list[str]:
    """Root reads a chmod 000 file anyway; dropping CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH
    (util-linux `setpriv`) makes the permission real for a root test run, as in CI."""
    if not (hasattr(os, "geteuid") and os.geteuid() == 0):
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: cannot make a file unreadable")
    caps = "-dac_override,-dac_read_search"
    return [setpriv, f"--inh-caps={caps}", f"--bounding-set={caps}"]


def test_unreadable_file_is_reported_and_skipped(tmp_path: Path):
    prefix = _without_root_read_powers()
    (tmp_path / "ok.md").write_text("# Ok\n\nreadable\n")
    locked = tmp_path / "locked.md"
    locked.write_text("# Locked\n\nsecret\n")
    locked.chmod(0)
    try:
        result = subprocess.run(
            [*prefix, sys.executable, "-m", "mdvdb", "ingest", "--json", "--root", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        locked.chmod(0o644)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["files"] == 1
    assert [e["path"] for e in report["errors"]] == ["locked.md"]

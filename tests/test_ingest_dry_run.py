"""`mdvdb ingest --dry-run` through the real command: what an ingest would add, change and
remove, and nothing written (the folder's tree, sizes and mtimes compared before and after)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import run_cli


def everything(root: Path) -> list[tuple[str, bool, int, int]]:
    """Every entry under `root`, folders included, with its size and mtime."""
    out = []
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(folder, name)
            st = os.lstat(path)
            out.append((os.path.relpath(path, root), name in dirs, st.st_size, st.st_mtime_ns))
    return sorted(out)


def edit(root: Path) -> None:
    (root / "new.md").write_text("# New\n\nA page written after the ingest.\n")
    with (root / "tar.md").open("a") as fh:
        fh.write("\nOne more line.\n")
    (root / "git-basics.md").unlink()


@pytest.mark.slow
def test_dry_run_lists_the_changes_and_writes_nothing(indexed_notes: Path):
    root = indexed_notes
    edit(root)
    before = everything(root)
    human = run_cli("ingest", "--dry-run", "--root", str(root))
    as_json = run_cli("ingest", "--dry-run", "--json", "--root", str(root))
    assert everything(root) == before  # no index, state, cache, lock or log written
    assert human.returncode == 0 and as_json.returncode == 0, human.stderr + as_json.stderr
    preview = json.loads(as_json.stdout)
    assert preview["added"] == ["new.md"] and preview["changed"] == ["tar.md"]
    assert preview["removed"] == ["git-basics.md"]
    lines = human.stdout.splitlines()
    assert lines[:3] == ["add    new.md", "change tar.md", "remove git-basics.md"]
    assert lines[3].startswith("dry run: 1 to add, 1 to change, 1 to remove, ")
    assert lines[3].endswith("nothing written")

    # the ingest that follows does what the dry run said
    report = json.loads(run_cli("ingest", "--json", "--root", str(root)).stdout)
    assert (report["added"], report["changed"], report["removed"]) == (1, 1, 1)
    after = json.loads(run_cli("ingest", "--dry-run", "--json", "--root", str(root)).stdout)
    assert (after["added"], after["changed"], after["removed"]) == ([], [], [])


def test_dry_run_of_a_folder_never_ingested_creates_nothing(notes: Path):
    before = everything(notes)
    done = run_cli("ingest", "--dry-run", "--json", "--root", str(notes))
    assert done.returncode == 0, done.stderr
    assert everything(notes) == before
    assert not (notes / ".markdownvdb.state").exists()
    preview = json.loads(done.stdout)
    assert preview["added"] == sorted(p.relative_to(notes).as_posix() for p in notes.rglob("*.md"))


def test_dry_run_of_a_missing_path_is_one_line(indexed_notes: Path):
    done = run_cli("ingest", "--dry-run", "nothere.md", cwd=indexed_notes)
    assert done.returncode == 1
    assert done.stderr.strip() == "mdvdb: ingest: no such file or folder: nothere.md"
    one = run_cli("ingest", "--dry-run", "tar.md", cwd=indexed_notes)
    assert one.returncode == 0 and "0 to add, 0 to change, 0 to remove, 1 unchanged" in one.stdout

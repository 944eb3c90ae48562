"""The walk's fast path (a regular file with an ASCII name, decided from the directory entry
alone) takes exactly what the long way takes: every kind of entry side by side."""

from __future__ import annotations

import os
from pathlib import Path

from kernel.config import load_config
from pipeline.walk.discover import walk_folders


def test_every_kind_of_entry_is_taken_or_left_as_before(tmp_path: Path):
    root = tmp_path / "notes"
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "dir.md").mkdir()  # a folder named like a note: walked, not taken
    (root / "dir.md" / "inside.md").write_text("# in\n")
    for rel in ("a.md", "B.MD", "c.markdown", "skip.txt", "sub/d.md", "sub/deeper/e.md"):
        (root / rel).write_text("# x\n")
    (root / "café.md").write_text("# non-ASCII, valid UTF-8\n")
    (root / "ignored.md").write_text("# ignored\n")
    (root / ".gitignore").write_text("ignored.md\nsub/deeper/\n")
    (root / "link.md").symlink_to(root / "a.md")
    (root / "broken.md").symlink_to(root / "nowhere.md")
    (root / "idx.md").write_text("stands in for the index file\n")
    (root / "state.md").mkdir()
    config = load_config(
        root, environ={"MDVDB_INDEX_FILE": "idx.md", "MDVDB_STATE_DIR": "state.md"}
    )
    problems: list[tuple[str, str]] = []
    found, folders = walk_folders(config, problems)
    assert sorted(found) == [
        "B.MD",
        "a.md",
        "c.markdown",
        "café.md",
        "dir.md/inside.md",
        "link.md",
        "sub/d.md",
    ]
    assert problems == [("broken.md", "broken symlink or symlink loop, skipped")]
    assert sorted(folders) == ["", "dir.md", "sub"]
    assert sorted(folders[""]) == ["B.MD", "a.md", "c.markdown", "café.md", "link.md"]
    for rel, st in found.items():
        assert st.st_size == os.stat(root / rel).st_size, rel


def _tree(root: Path, folders: int = 12, files_at_top: bool = True) -> None:
    for i in range(folders):
        sub = root / f"f{i:02d}" / "inner"
        sub.mkdir(parents=True)
        (root / f"f{i:02d}" / f"a{i}.md").write_text(f"# a {i}\n")
        (sub / f"b{i}.md").write_text(f"# b {i}\n" * (i + 1))
        if i % 3 == 0:
            (sub / f"broken{i}.md").symlink_to(root / "nowhere.md")
        if files_at_top:
            (root / f"top{i:02d}.md").write_text(f"# top {i}\n")
    (root / ".gitignore").write_text("f05/inner/\n")


# Run in a fresh interpreter: the split walk forks only in a process with no other thread,
# and a test session may have some left running by earlier tests.
COMPARE = """
import json, sys, threading
from pipeline.walk import discover
from kernel.config import load_config
from pipeline.walk.discover import folder_signatures, walk_folders
if sys.argv[2] == "thread":
    threading.Thread(target=threading.Event().wait, daemon=True).start()
merged = []
real = discover._merged
discover._merged = lambda *a: merged.append(1) or real(*a)
config = load_config(sys.argv[1], environ={})
one, two = [["earlier", "problem"]], [["earlier", "problem"]]
serial, folders = walk_folders(config, one)
split, their_folders = walk_folders(config, two, split=True)
print(json.dumps({
    "merged": len(merged),
    "order": list(split) == list(serial),
    "stats": all(
        (split[r].st_size, split[r].st_mtime_ns) == (st.st_size, st.st_mtime_ns)
        for r, st in serial.items()
    ),
    "len": len(split) == len(serial),
    "missing": "f01/nowhere.md" in split,
    "folders": list(their_folders.items()) == list(folders.items()),
    "signatures": folder_signatures(split, their_folders) == folder_signatures(serial, folders),
    "child_hashed": len(getattr(split, "signatures", {})),
    "problems": [list(p) for p in one],
    "same_problems": [list(p) for p in two] == [list(p) for p in one],
}))
"""


def _compare(root: Path, thread: bool = False) -> dict:
    import json
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", COMPARE, str(root), "thread" if thread else "alone"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_walk_split_in_two_processes_is_the_serial_walk(tmp_path: Path):
    """Same files in the same order, same folders, same problems in the same order, same
    sizes and mtimes, same folder signatures (the child's hashed there); with and without
    files at the top (the top folder's own entry is then dropped, which shifts the noted
    places)."""
    for top in (True, False):
        root = tmp_path / f"tree{top}"
        _tree(root, files_at_top=top)
        got = _compare(root)
        assert got["merged"] == 1  # the split walk ran and was merged
        for key in ("order", "stats", "len", "folders", "signatures", "same_problems"):
            assert got[key] is True, key
        assert got["missing"] is False and got["child_hashed"] > 0
        assert len(got["problems"]) == 1 + 4  # f00, f03, f06, f09's broken links


def test_a_split_walk_steps_aside_where_it_cannot_promise_the_serial_walk(tmp_path: Path):
    """A symlink from one half into the other (the serial walk's "already visited" depends
    on its order), or another thread running: the serial walk's answer, never a merge."""
    root = tmp_path / "linked"
    _tree(root)
    (root / "f00" / "to-f01").symlink_to(root / "f01")  # f00 is this process's, f01 the child's
    got = _compare(root)
    assert got["merged"] == 0 and got["order"] and got["same_problems"]
    assert any("already visited" in p for _, p in got["problems"])
    root = tmp_path / "threaded"
    _tree(root)
    got = _compare(root, thread=True)
    assert got["merged"] == 0 and got["order"] and got["same_problems"]

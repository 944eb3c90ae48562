"""The walk's fast path (a regular file with an ASCII name, decided from the directory entry
alone) takes exactly what the long way takes: every kind of entry side by side. A walk split
between two processes (`discover._split_walk`) gives the serial walk's answer, and a big
project's ingest takes it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
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
    (root / "zz-broken.md").symlink_to(root / "nowhere.md")  # a problem of the top folder


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
keys = ("st_size", "st_mtime_ns", "st_ino", "st_dev")
print(json.dumps({
    "merged": len(merged),
    "order": list(split) == list(serial),
    "stats": all(
        [getattr(split[r], k) for k in keys] == [getattr(st, k) for k in keys]
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


def _run(script: str, *args: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_a_walk_split_in_two_processes_is_the_serial_walk(tmp_path: Path):
    """Same files in the same order, same folders, same problems in the same order, same
    sizes, mtimes, inodes and devices, same folder signatures (the child's hashed there);
    with and without files at the top (the top folder's own entry is then dropped, which
    shifts the noted places)."""
    for top in (True, False):
        root = tmp_path / f"tree{top}"
        _tree(root, files_at_top=top)
        got = _run(COMPARE, str(root), "alone")
        assert got["merged"] == 1  # the split walk ran and was merged
        for key in ("order", "stats", "len", "folders", "signatures", "same_problems"):
            assert got[key] is True, key
        assert got["missing"] is False and got["child_hashed"] > 0
        assert len(got["problems"]) == 1 + 5  # zz-broken.md, and f00, f03, f06, f09's


def test_a_split_walk_steps_aside_where_it_cannot_promise_the_serial_walk(tmp_path: Path):
    """A symlink from one half into the other (the serial walk's "already visited" depends
    on its order), or another thread running: the serial walk's answer, never a merge."""
    root = tmp_path / "linked"
    _tree(root)
    (root / "f00" / "to-f01").symlink_to(root / "f01")  # f00 is this process's, f01 the child's
    got = _run(COMPARE, str(root), "alone")
    assert got["merged"] == 0 and got["order"] and got["same_problems"]
    assert any("already visited" in p for _, p in got["problems"])
    root = tmp_path / "threaded"
    _tree(root)
    got = _run(COMPARE, str(root), "thread")
    assert got["merged"] == 0 and got["order"] and got["same_problems"]


# Three ingests (first, no-op, an edit with a file added and one removed), split or not.
INGESTS = """
import contextlib, io, json, os, sys
from pathlib import Path
from pipeline import stages
from pipeline.walk import discover
merged = []
real = discover._merged
discover._merged = lambda *a: merged.append(1) or real(*a)
if sys.argv[2] == "serial":
    stages.SPLIT_FOLDERS = 10**9
from mdvdb.cli import main
root = Path(sys.argv[1])
runs = []
for step in range(3):
    if step == 2:
        with open(root / "f07" / "a7.md", "a") as f:
            f.write("one more line\\n")
        (root / "f08" / "new.md").write_text("# new\\n")
        os.unlink(root / "f09" / "a9.md")
    out = io.StringIO()
    sys.argv = ["mdvdb", "ingest", "--json", "--root", str(root)]
    with contextlib.redirect_stdout(out):
        try:
            main()
        except SystemExit:
            pass
    got = json.loads(out.getvalue())
    keep = ("files", "added", "changed", "removed", "unchanged", "hashed", "errors")
    runs.append({"merged": len(merged), **{k: got[k] for k in keep}})
print(json.dumps(runs))
"""


def test_a_big_projects_ingest_walks_on_both_cores_with_the_serial_result(tmp_path: Path):
    """From SPLIT_FOLDERS folders (as the last walk found them) the discover stage splits
    its walk; the no-op and the edit after it report what the serial walk reports."""
    from pipeline.stages import SPLIT_FOLDERS

    runs = {}
    for how in ("split", "serial"):
        root = tmp_path / how
        _tree(root, folders=SPLIT_FOLDERS + 2)
        done = subprocess.run(
            [sys.executable, "-c", INGESTS, str(root), how],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "MDVDB_NO_WARM": "1"},
        )
        assert done.returncode == 0, done.stderr
        runs[how] = json.loads(done.stdout.splitlines()[-1])
    assert [r["merged"] for r in runs["split"]] == [0, 1, 2]  # none stored at first
    assert [r["merged"] for r in runs["serial"]] == [0, 0, 0]
    for split, serial in zip(runs["split"], runs["serial"], strict=True):
        assert {**split, "merged": 0} == {**serial, "merged": 0}
    edit = runs["split"][2]
    assert (edit["added"], edit["changed"], edit["removed"]) == (1, 1, 1)

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

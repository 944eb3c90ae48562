"""The walk's fast path (a regular file with an ASCII name, decided from the directory entry
alone) takes exactly what the long way takes: every kind of entry side by side."""

from __future__ import annotations

import os
from pathlib import Path

from kernel.config import load_config
from pipeline.discover import folder_signatures, walk_folders


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


def _serial_and_split(root: Path, monkeypatch):
    from pipeline import discover

    merged = []
    real = discover._merged
    monkeypatch.setattr(discover, "_merged", lambda *a: merged.append(1) or real(*a))
    config = load_config(root, environ={})
    one: list[tuple[str, str]] = [("earlier", "problem")]
    two: list[tuple[str, str]] = [("earlier", "problem")]
    serial = walk_folders(config, one)
    split = walk_folders(config, two, split=True)
    return serial, one, split, two, merged


def test_a_walk_split_in_two_processes_is_the_serial_walk(tmp_path: Path, monkeypatch):
    """Same files in the same order, same folders, same problems in the same order, same
    sizes and mtimes; with and without files at the top (the top folder's own entry is
    then dropped, which shifts the noted places)."""
    import threading

    assert threading.active_count() == 1  # else the split steps aside (tested below)
    for top in (True, False):
        root = tmp_path / f"tree{top}"
        _tree(root, files_at_top=top)
        (serial, folders), one, (split, their_folders), two, merged = _serial_and_split(
            root, monkeypatch
        )
        assert merged == [1]  # the split walk ran and was merged
        assert list(split) == list(serial)
        assert list(their_folders.items()) == list(folders.items())
        assert two == one and len(one) == 1 + 4  # f00, f03, f06, f09
        for rel, st in serial.items():
            assert (split[rel].st_size, split[rel].st_mtime_ns) == (st.st_size, st.st_mtime_ns)
        assert len(split) == len(serial) and "f01/nowhere.md" not in split
        # The child's folders come with their signatures, hashed there: the same.
        assert set(split.signatures) and set(split.signatures) < set(folders)
        assert folder_signatures(split, their_folders) == folder_signatures(serial, folders)


def test_a_split_walk_steps_aside_where_it_cannot_promise_the_serial_walk(
    tmp_path: Path, monkeypatch
):
    """A symlink from one half into the other (the serial walk's "already visited" depends
    on its order), or another thread running: the serial walk's answer, never a merge."""
    import threading

    root = tmp_path / "linked"
    _tree(root)
    (root / "f00" / "to-f01").symlink_to(root / "f01")  # f00 is this process's, f01 the child's
    (serial, folders), one, (split, their_folders), two, merged = _serial_and_split(
        root, monkeypatch
    )
    assert merged == []
    assert list(split) == list(serial) and two == one
    assert any("already visited" in p for _, p in one)
    stop = threading.Event()
    helper = threading.Thread(target=stop.wait)
    helper.start()
    try:
        root = tmp_path / "threaded"
        _tree(root)
        (serial, _), one, (split, _), two, merged = _serial_and_split(root, monkeypatch)
        assert merged == [] and list(split) == list(serial) and two == one
    finally:
        stop.set()
        helper.join()

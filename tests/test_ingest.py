"""The pipeline end to end on real folders: incrementality, ignores, deletion, atomicity."""

import os
from pathlib import Path

import pytest

from kernel import index_format
from kernel.config import load_config
from pipeline import ingest
from pipeline.pack import build as pack
from query import open_index


def _ingest(root: Path, **kwargs):
    return ingest.ingest_folder(load_config(root, environ={}), **kwargs)


def _paths(root: Path) -> list[str]:
    return sorted(open_index(config=load_config(root, environ={})).snapshot.paths)


def test_first_ingest_then_noop_embeds_nothing(notes: Path):
    first = _ingest(notes)
    assert first.added == 4 and first.chunks_embedded > 0 and first.published
    again = _ingest(notes)
    assert again.chunks_embedded == 0
    assert again.added == again.changed == again.removed == 0
    assert not again.published  # nothing changed: the index file is not rewritten
    # Touching a file without changing it re-hashes it but embeds nothing.
    os.utime(notes / "tar.md", None)
    touched = _ingest(notes)
    assert touched.chunks_embedded == 0 and touched.changed == 0


def test_editing_one_file_embeds_only_its_changed_chunks(notes: Path):
    _ingest(notes)
    path = notes / "tar.md"
    path.write_text(path.read_text().replace("tar cf target.tar", "tar cvf target.tar"))
    report = _ingest(notes)
    assert report.changed == 1
    assert report.chunks_embedded == 1  # only the "Create" section changed
    hits = open_index(config=load_config(notes, environ={})).search("tar cvf", limit=20)
    assert any("tar cvf" in (notes / h.path).read_text() for h in hits.results)


def test_moved_file_costs_no_embedding_and_deletion_is_removed(notes: Path):
    _ingest(notes)
    (notes / "guides" / "cooking.md").rename(notes / "bread.md")
    (notes / "git-basics.md").unlink()
    report = _ingest(notes)
    assert report.chunks_embedded == 0
    assert report.removed == 2 and report.added == 1
    assert _paths(notes) == ["bread.md", "guides/networking.md", "tar.md"]


def test_named_paths_reingest_only_those(notes: Path):
    _ingest(notes)
    (notes / "tar.md").write_text("# tar\n\nChanged.\n")
    (notes / "new.md").write_text("# New\n\nNot named, so not indexed yet.\n")
    report = _ingest(notes, paths=[str(notes / "tar.md")])
    assert report.changed == 1 and report.added == 0
    assert "new.md" not in _paths(notes)
    with pytest.raises(ingest.IngestError, match="outside the project root"):
        _ingest(notes, paths=["/etc/hosts"])


def test_ignores_builtin_nested_gitignore_and_user_globs(notes: Path):
    (notes / "node_modules" / "pkg").mkdir(parents=True)
    (notes / "node_modules" / "pkg" / "README.md").write_text("# dep\n")
    (notes / ".obsidian").mkdir()
    (notes / ".obsidian" / "x.md").write_text("# x\n")
    (notes / "build").mkdir()
    (notes / "build" / "out.md").write_text("# built\n")
    (notes / "guides" / ".gitignore").write_text("drafts/\n*.tmp.md\n")
    (notes / "guides" / "drafts").mkdir()
    (notes / "guides" / "drafts" / "d.md").write_text("# draft\n")
    (notes / "guides" / "scratch.tmp.md").write_text("# tmp\n")
    (notes / "drafts").mkdir()
    (notes / "drafts" / "kept.md").write_text("# top-level drafts are not under guides/\n")
    (notes / "private").mkdir()
    (notes / "private" / "secret.md").write_text("# secret\n")
    (notes / "log.md").write_text("# log\n")
    (notes / ".markdownvdb").write_text("MDVDB_IGNORE_PATTERNS=private/,log.md\n")
    _ingest(notes)
    assert _paths(notes) == [
        "drafts/kept.md",
        "git-basics.md",
        "guides/cooking.md",
        "guides/networking.md",
        "tar.md",
    ]


def test_index_is_replaced_atomically_and_old_readers_keep_their_snapshot(notes: Path):
    _ingest(notes)
    config = load_config(notes, environ={})
    old = index_format.read_index(config.index_path)
    old_paths = old.tables["files"].column("path").to_pylist()
    (notes / "extra.md").write_text("# Extra\n\nA new page about kayaks.\n")
    _ingest(notes)
    # The old mapping still reads the old snapshot; a fresh open sees the new one.
    assert old.tables["files"].column("path").to_pylist() == old_paths
    new = index_format.read_index(config.index_path)
    assert "extra.md" in new.tables["files"].column("path").to_pylist()
    assert new.inode != old.inode
    leftovers = [p for p in os.listdir(notes) if p.endswith(".tmp")]
    assert leftovers == []


def test_a_failed_pack_leaves_the_previous_index_intact(notes: Path, monkeypatch):
    _ingest(notes)
    config = load_config(notes, environ={})
    before = config.index_path.read_bytes()
    (notes / "extra.md").write_text("# Extra\n\nkayaks\n")

    def broken(plan):
        raise OSError("disk full (simulated)")

    # A step between the plan and the write fails (the previous index is still mapped).
    monkeypatch.setattr(pack.duplicates, "update", broken)
    with pytest.raises(OSError, match="disk full"):
        _ingest(notes)
    monkeypatch.undo()
    assert config.index_path.read_bytes() == before
    assert [p for p in os.listdir(notes) if p.endswith(".tmp")] == []
    # The next run completes and picks the file up.
    assert _ingest(notes).published
    assert "extra.md" in _paths(notes)


def test_missing_index_is_rebuilt(notes: Path):
    """The index is part of the cache: the state folder keeps no second copy of its records
    or (for the local model, which re-embeds thousands of chunks a second) of its vectors, so
    a deleted index is rebuilt by parsing and embedding again. A remote provider's vectors are
    kept: tests/test_providers_cli.py rebuilds one without a request."""
    _ingest(notes)
    config = load_config(notes, environ={})
    config.index_path.unlink()
    report = _ingest(notes)
    assert report.published and report.parsed == 4 and report.chunks_embedded == report.chunks
    assert len(_paths(notes)) == 4
    again = _ingest(notes)
    assert again.nothing_changed and again.parsed == 0 and again.chunks_embedded == 0


def test_full_rebuild_and_config_change(notes: Path):
    _ingest(notes)
    report = ingest.ingest_folder(load_config(notes, environ={}), full=True)
    assert report.published and report.chunks_embedded == 0
    # Changing the chunk size re-chunks; the index records the new chunking.
    small = load_config(
        notes, environ={"MDVDB_CHUNK_MAX_TOKENS": "20", "MDVDB_CHUNK_OVERLAP_TOKENS": "5"}
    )
    ingest.ingest_folder(small)
    meta = index_format.read_index(small.index_path).meta
    assert meta["config"]["chunk_max_tokens"] == 20
    chunks = index_format.read_index(small.index_path).tables["chunks"]
    assert max(chunks.column("token_count").to_pylist()) <= 20


def test_a_new_chunking_gives_the_index_a_fresh_build_gives(notes: Path, tmp_path: Path):
    """A new chunking while parse is up to date: the chunk stage reads and parses the files
    again itself, and its index is the one a first build with that chunking writes."""
    import shutil

    small = {"MDVDB_CHUNK_MAX_TOKENS": "20", "MDVDB_CHUNK_OVERLAP_TOKENS": "5"}
    fresh = tmp_path / "fresh"
    shutil.copytree(notes, fresh)
    _ingest(notes)
    report = ingest.ingest_folder(load_config(notes, environ=small))
    assert report.published and report.parsed == 4
    ingest.ingest_folder(load_config(fresh, environ=small))
    again = index_format.read_index(load_config(notes, environ=small).index_path).tables
    first = index_format.read_index(load_config(fresh, environ=small).index_path).tables
    assert sorted(again) == sorted(first)
    for name in first:  # rows and columns (the clusters' summary holds when it was built)
        assert again[name].equals(first[name]), name


def test_index_moves_to_another_folder(notes: Path, tmp_path: Path):
    _ingest(notes)
    moved = tmp_path / "elsewhere"
    notes.rename(moved)
    hits = open_index(config=load_config(moved, environ={})).search("sourdough starter", limit=1)
    assert hits.results[0].path == "guides/cooking.md"

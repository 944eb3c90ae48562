"""The index written in steps (`index_format.IndexWriter`) and the checksum verdict kept once
per file (`index_format.checksum_problems`): the same index `write_index` writes, nothing
published by a writer that fails, and no byte of a damaged index reused by the next one."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from kernel import index_format
from tests.conftest import build_index, run_cli


def temp_files(path: Path | str) -> list[Path]:
    """The temp files `write_index` left beside `path` (`.NAME.*.tmp`)."""
    path = Path(path)
    prefix = f".{path.name}."
    names = [p.name for p in path.parent.iterdir()]
    return [path.parent / n for n in names if n.startswith(prefix) and n.endswith(".tmp")]


def _tables(n: int = 20_000) -> dict[str, pa.Table]:
    rng = np.random.default_rng(3)
    return {
        "files": pa.table({"path": pa.array([f"p{i:05d}.md" for i in range(n // 10)])}),
        "chunks": pa.table(
            {
                "text": pa.array([f"row {i} " * (i % 7) for i in range(n)]),
                "vector": pa.FixedSizeListArray.from_arrays(
                    pa.array(rng.random(n * 8, dtype=np.float32)), 8
                ),
            }
        ),
        "lexical": pa.table({"tf": pa.array(rng.random(n * 3, dtype=np.float32))}),
    }


def _regions(index: index_format.IndexFile, table: str) -> list[int]:
    starts: list[int] = []

    def walk(columns):
        for desc in columns:
            starts.extend(b[0] for b in desc["b"] if b is not None)
            walk(desc["c"])

    walk(index.layouts[table]["columns"])
    return starts


def test_tables_put_early_make_the_index_write_index_makes(tmp_path: Path):
    """Spliced from a previous index (copied file-to-file on the thread) or fresh, put
    early or given to `finish`: the same tables, the same footer order and meta, every
    checksum right; the early ones lie first in the file."""
    tables = _tables()
    index_format.write_index(tmp_path / "old.index", tables, {"k": 1})
    old = index_format.read_index(tmp_path / "old.index")
    spliced = {
        name: pa.concat_tables([t.slice(t.num_rows // 2), tables[name].slice(0, 5), t.slice(0, 9)])
        for name, t in old.tables.items()
    }
    index_format.write_index(tmp_path / "plain.index", spliced, {"k": 2}, source=old)
    writer = index_format.IndexWriter(tmp_path / "steps.index", source=old)
    writer.put("chunks", spliced["chunks"])
    writer.put("lexical", spliced["lexical"])
    size = writer.finish(spliced, {"k": 2})
    assert size == (tmp_path / "steps.index").stat().st_size
    plain = index_format.read_index(tmp_path / "plain.index")
    steps = index_format.read_index(tmp_path / "steps.index")
    assert list(steps.tables) == list(plain.tables) == ["files", "chunks", "lexical"]
    for name, table in plain.tables.items():
        assert steps.tables[name].equals(table), name
        assert table.equals(spliced[name].combine_chunks()), name
    assert {k: v for k, v in steps.meta.items() if k != "written_at"} == {
        k: v for k, v in plain.meta.items() if k != "written_at"
    }
    assert index_format.verify_checksums(steps) == []
    assert max(_regions(steps, "chunks")) < min(_regions(steps, "lexical"))
    assert max(_regions(steps, "lexical")) < min(_regions(steps, "files"))
    assert temp_files(tmp_path / "steps.index") == []


def test_a_failing_writer_publishes_nothing_and_leaves_no_temp_file(tmp_path: Path):
    """An error on the writer's thread reaches `finish`; `abort` after any step removes
    the temp file; the published index is the previous one, byte for byte."""
    path = tmp_path / "x.index"
    index_format.write_index(path, _tables(), {})
    before = path.read_bytes()
    unwritable = pa.table({"d": pa.array([{"a": 1}, {"a": 2}])})  # structs: refused

    writer = index_format.IndexWriter(path)
    writer.put("bad", unwritable)
    with pytest.raises(TypeError, match="cannot store"):
        writer.finish({"bad": unwritable}, {})
    writer.abort()
    assert path.read_bytes() == before and temp_files(path) == []

    writer = index_format.IndexWriter(path)
    writer.put("chunks", _tables()["chunks"])
    writer.abort()  # the caller's own step failed after the put
    assert path.read_bytes() == before and temp_files(path) == []

    writer = index_format.IndexWriter(path)
    writer.put("chunks", _tables()["chunks"])
    with pytest.raises(ValueError, match="put but not published"):
        writer.finish({"files": _tables()["files"]}, {})
    writer.abort()
    assert path.read_bytes() == before and temp_files(path) == []
    with pytest.raises(ValueError, match="twice"):
        writer = index_format.IndexWriter(path)
        try:
            writer.put("chunks", _tables()["chunks"])
            writer.put("chunks", _tables()["chunks"])
        finally:
            writer.abort()


def test_the_verdict_is_kept_per_file_and_a_changed_file_is_checked_again(tmp_path: Path):
    """The verdict of a file is computed once (or begun on a thread by `check_soon`), a
    file this process wrote is not hashed again, and a file whose bytes changed (a new
    mtime) gets a verdict of its own."""
    path = tmp_path / "v.index"
    index_format.write_index(path, _tables(), {})
    calls = []
    real = index_format.verify_checksums

    def counting(index):
        calls.append(index.path)
        return real(index)

    index_format.verify_checksums = counting
    try:
        assert index_format.checksum_problems(index_format.read_index(path)) == []
        assert calls == []  # written here
        index = index_format.read_index(path)
        where = index.layouts["chunks"]["columns"][1]["c"][0]["b"][1]  # the vectors
        del index
        data = bytearray(path.read_bytes())
        data[where[0] + 100] ^= 1
        path.write_bytes(bytes(data))
        os.utime(path, ns=(1, 1_000_000_000))
        index_format.check_soon(path)
        damaged = index_format.read_index(path)  # opens: only the checksums see it
        assert index_format.checksum_problems(damaged) == [
            "table chunks: column vector: 1 buffer(s) differ from their checksum"
        ]
        assert index_format.checksum_problems(damaged) and len(calls) == 1
    finally:
        index_format.verify_checksums = real


def _flip_in(index_path: Path, table: str, column: int, buffer: int, child: bool = False):
    index = index_format.read_index(index_path)
    desc = index.layouts[table]["columns"][column]
    where = (desc["c"][0] if child else desc)["b"][buffer]
    del index
    data = bytearray(index_path.read_bytes())
    data[where[0] + where[1] // 2] ^= 4
    index_path.write_bytes(bytes(data))


def test_a_full_rebuild_takes_no_vector_from_a_damaged_index(tmp_path: Path):
    """One flipped bit in the vectors opens fine (only the checksums see it); `ingest
    --full` re-embeds instead of copying the flipped vector into an index with fresh
    checksums, so the rebuild is the clean build and passes `status --verify`."""
    root = tmp_path / "notes"
    root.mkdir()
    for i in range(12):
        (root / f"n{i:02d}.md").write_text(
            f"# Note {i}\n\nText about topic {i % 3} and tar archives.\n"
        )
    env = {"MDVDB_CLUSTERING_ENABLED": "false"}
    build_index(root, env=env)  # the first build is not the subject: `ingest --full` is
    index = root / ".markdownvdb.index"
    clean = index_format.read_index(index).tables["chunks"].column("vector").combine_chunks()
    _flip_in(index, "chunks", 9, 1, child=True)
    assert run_cli("status", "--verify", "--root", str(root), env=env).returncode == 1
    rebuilt = run_cli("ingest", "--full", "--root", str(root), env=env)
    assert rebuilt.returncode == 0, rebuilt.stderr
    checked = run_cli("status", "--verify", "--root", str(root), env=env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    vectors = index_format.read_index(index).tables["chunks"].column("vector").combine_chunks()
    assert vectors.equals(clean)


def test_an_edit_over_a_damaged_index_reuses_none_of_its_text(tmp_path: Path):
    """A flipped byte in the chunk texts, then a plain ingest after an edit elsewhere:
    the damage is reported, nothing of it reaches the new index, which verifies and holds
    the text as written."""
    root = tmp_path / "notes"
    root.mkdir()
    for i in range(12):
        (root / f"n{i:02d}.md").write_text(f"# Note {i}\n\nPlain words of note {i}.\n")
    env = {"MDVDB_CLUSTERING_ENABLED": "false"}
    build_index(root, env=env)  # the first build is not the subject: the ingest after it is
    index = root / ".markdownvdb.index"
    _flip_in(index, "chunks", 6, 2)
    with open(root / "n05.md", "a") as fh:
        fh.write("\nOne more line.\n")
    done = run_cli("ingest", "--root", str(root), env=env)
    assert done.returncode == 0, done.stderr
    assert "damaged" in done.stderr
    checked = run_cli("status", "--verify", "--root", str(root), env=env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    clean = tmp_path / "clean"
    shutil.copytree(root, clean, ignore=shutil.ignore_patterns(".markdownvdb*"))
    build_index(clean, env=env)  # the reference: what a clean build of the same pages holds
    for name in ("files", "chunks"):
        got = index_format.read_index(index).tables[name]
        want = index_format.read_index(clean / ".markdownvdb.index").tables[name]
        for column in ("path", "title") if name == "files" else ("text", "heading", "vector"):
            assert got.column(column).equals(want.column(column)), (name, column)


@pytest.mark.skipif(
    index_format._sync_file_range() is None, reason="no sync_file_range on this system"
)
def test_the_file_goes_to_the_disk_as_it_is_written(tmp_path: Path, monkeypatch):
    """The fsync before the rename waits only for the tail: every full step of the file,
    put early (copied file-to-file on the thread) or written by `finish`, was handed to the
    disk while the writer went on (the kernel took a `sync_file_range` request for it)."""
    monkeypatch.setattr(index_format, "WRITEBACK_STEP", 1 << 20)
    big = {
        "chunks": pa.table({"v": pa.array(np.arange(3 << 20, dtype=np.float32))}),  # 12 MB
        "tail": pa.table({"v": pa.array(np.arange(1 << 20, dtype=np.int64))}),  # 8 MB
    }
    index_format.write_index(tmp_path / "old.index", big, {})
    old = index_format.read_index(tmp_path / "old.index")
    writer = index_format.IndexWriter(tmp_path / "new.index", source=old)
    writer.put("chunks", old.tables["chunks"].slice(7))
    size = writer.finish({"chunks": old.tables["chunks"].slice(7), "tail": big["tail"]}, {})
    assert writer.handed_to_disk >= size - (2 << 20), (writer.handed_to_disk, size)
    new = index_format.read_index(tmp_path / "new.index")
    assert index_format.verify_checksums(new) == []
    assert new.tables["chunks"].equals(old.tables["chunks"].slice(7))


def test_the_writer_begun_with_the_plan_is_removed_when_pack_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The next index is being written from the schema stage on (its chunks table is final
    once planned); when a later step fails, the run leaves no temp file and the published
    index is the previous one, byte for byte."""
    from kernel.config import load_config
    from pipeline import ingest
    from pipeline.pack import lexical

    root = tmp_path / "notes"
    root.mkdir()
    for i in range(12):
        (root / f"n{i:02d}.md").write_text(f"# Note {i}\n\nPlain words of note {i}.\n")
    config = load_config(root, environ={"MDVDB_CLUSTERING_ENABLED": "false"})
    assert ingest.ingest_folder(config).published
    before = config.index_path.read_bytes()
    with open(root / "n05.md", "a") as fh:
        fh.write("\nOne more line.\n")
    seen: list[list[Path]] = []

    def failing(*args, **kwargs):
        seen.append(temp_files(config.index_path))
        raise RuntimeError("the lexical step failed")

    monkeypatch.setattr(lexical, "update", failing)
    with pytest.raises(RuntimeError, match="lexical step failed"):
        ingest.ingest_folder(config)
    assert len(seen) == 1 and len(seen[0]) == 1  # being written when the step ran
    assert temp_files(config.index_path) == []
    assert config.index_path.read_bytes() == before
    monkeypatch.undo()
    assert ingest.ingest_folder(config).published
    assert index_format.verify_checksums(index_format.read_index(config.index_path)) == []

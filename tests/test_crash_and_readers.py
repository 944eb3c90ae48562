"""Readers never see a torn or mixed index; SIGKILLed ingests leave a sound index and
caches from which one ingest gives exactly a clean build. Real processes throughout."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from tests.conftest import run_cli, unpack_corpus


@pytest.mark.slow
def test_four_readers_while_a_writer_reingests_twenty_times(tmp_path: Path):
    from bench.concurrency import run

    out = run(readers=4, rounds=20, root=tmp_path / "project")
    assert out["writer"]["rounds"] == 20
    for report in out["readers"]:
        assert report["queries"] > 0
        assert (report["errors"], report["mixed"], report["backwards"]) == (0, 0, 0), str(report)
    # The readers did see the writer's work, not one frozen snapshot.
    assert max(r["rounds_seen"] for r in out["readers"]) > 5


@pytest.mark.slow
@pytest.mark.corpus
def test_sigkilled_ingests_leave_a_sound_index(corpora_dir: Path):
    from bench.crash_stress import stress

    result = stress(unpack_corpus(corpora_dir, "tldr"), kills=5, n_files=60, seed=7)
    assert result["verify_failures"] == 0, result["failure_samples"]
    assert result["files_equal"] and result["chunks_equal"], result
    assert result["vectors_equal"], result
    assert result["leftover_temp_files"] == 0


@pytest.mark.slow
def test_verify_finds_damage_and_tells_stale_from_damaged(indexed_notes: Path):
    ok = run_cli("status", "--verify", "--root", str(indexed_notes))
    assert ok.returncode == 0, ok.stderr
    assert "verify:   ok" in ok.stdout

    # Same size and mtime, other bytes: the index records a version that is not on disk.
    tar = indexed_notes / "tar.md"
    st = tar.stat()
    data = bytearray(tar.read_bytes())
    data[-2] = ord("X") if data[-2] != ord("X") else ord("Y")
    tar.write_bytes(bytes(data))
    os.utime(tar, ns=(st.st_atime_ns, st.st_mtime_ns))
    # A merely edited file is stale, not damage.
    (indexed_notes / "git-basics.md").write_text("# Git\n\nRewritten.\n")
    bad = run_cli("status", "--verify", "--json", "--root", str(indexed_notes))
    assert bad.returncode == 1
    import json

    report = json.loads(bad.stdout)
    assert any("tar.md" in p for p in report["problems"]), report
    assert report["stale"] == ["git-basics.md: changed since indexing"]

    # A vector that is no longer unit length, at the bytes of the published file.
    assert run_cli("ingest", "--full", "--root", str(indexed_notes)).returncode == 0
    from kernel.index_format import read_index

    index = indexed_notes / ".markdownvdb.index"
    chunks = read_index(index).tables["chunks"]
    first = chunks.column("vector").combine_chunks().values.to_numpy()[:4].tobytes()
    raw = bytearray(index.read_bytes())
    at = raw.find(first)
    assert at > 0
    raw[at : at + 4] = struct.pack("<f", 3.0)
    index.write_bytes(bytes(raw))
    damaged = run_cli("status", "--verify", "--root", str(indexed_notes))
    assert damaged.returncode == 1
    assert "not unit length for chunks 0" in damaged.stderr

    index.write_bytes(bytes(raw[: len(raw) // 2]))  # torn
    torn = run_cli("status", "--verify", "--root", str(indexed_notes))
    assert torn.returncode == 1
    assert "torn or truncated" in torn.stderr


def test_a_query_keeps_its_snapshot_while_a_new_index_is_published(notes: Path):
    from kernel.config import load_config
    from pipeline import ingest
    from query import open_index

    config = load_config(notes)
    ingest.ingest_folder(config)
    index = open_index(config=config)
    with index.pinned() as held:
        (notes / "extra.md").write_text("# Extra\n\nA new note.\n")
        ingest.ingest_folder(config)
        assert index.snapshot is held
        assert "extra.md" not in index.snapshot.paths
    assert "extra.md" in index.snapshot.paths


@pytest.mark.slow
@pytest.mark.corpus
@pytest.mark.parametrize("name,limit", [("powershell-docs", 150)])
def test_corpus_files_are_indexed_or_reported(corpora_dir: Path, tmp_path: Path, name, limit):
    import json
    import shutil

    source = unpack_corpus(corpora_dir, name)
    root = tmp_path / name
    all_md = sorted(p for p in source.rglob("*") if p.name.lower().endswith((".md", ".markdown")))[
        :limit
    ]
    for path in all_md:
        target = root / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    result = run_cli("ingest", "--json", "--root", str(root))
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    from query import open_index

    indexed = set(open_index(root).snapshot.paths)
    reported = {e["path"] for e in report["errors"]}
    on_disk = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}
    on_disk = {p for p in on_disk if p.lower().endswith((".md", ".markdown"))}
    on_disk = {p for p in on_disk if not p.startswith(".markdownvdb")}
    from kernel.config import load_config
    from pipeline.walk.discover import walk

    wanted = set(walk(load_config(root), []))  # what the ignore rules leave
    assert wanted <= on_disk
    assert wanted - indexed <= reported, sorted(wanted - indexed - reported)[:10]
    verify = run_cli("status", "--verify", "--root", str(root))
    assert verify.returncode == 0, verify.stderr[-2000:]

"""A one-file index split into shards (bench/split_shards.py) is the
shard set `MDVDB_SHARDS=N mdvdb ingest` writes for the same folder: the same manifest, the
same tables in every shard file and in the global file, `status --verify` passing, the same
answers; a split that put a file in another shard fails all three (docs/scale-out.md)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kernel import index_format, shards
from tests.conftest import REPO, build_index, run_cli
from tests.test_shards import _project

# IVF lists from 10 chunks: the one-file index (96 chunks, 10 lists) and each shard (20-28
# chunks, 5 lists) both get them, and a shard's list count is "balanced" against the
# one-file index's, so an IVF step that reused the one-file centroids would show.
ENV = {"MDVDB_IVF_MIN_CHUNKS": "10"}
SHARDED = {**ENV, "MDVDB_SHARDS": "4"}
QUERIES = ["tar archive gzip", "secure shell key", "pattern text lines"]


def _folder(root: Path) -> Path:
    return root / ".markdownvdb.index.shards"


def _differences(left: Path, right: Path) -> list[str]:
    """Every way two published shard sets differ (the write times aside)."""
    a, b = shards.read_manifest(_folder(left)), shards.read_manifest(_folder(right))
    assert a is not None and b is not None
    out = [
        f"manifest {k}"
        for k in a.meta.keys() | b.meta.keys()
        if k != "written_at" and a.meta.get(k) != b.meta.get(k)
    ]
    if [vars(e) for e in a.entries] != [vars(e) for e in b.entries]:
        out.append("manifest entries")
    pairs = [(e.name, f.name) for e, f in zip(a.entries, b.entries, strict=True)]
    for name_a, name_b in [*pairs, (a.global_file, b.global_file)]:
        fa = index_format.read_index(_folder(left) / name_a)
        fb = index_format.read_index(_folder(right) / name_b)
        for table in fa.tables.keys() | fb.tables.keys():
            ta, tb = fa.tables.get(table), fb.tables.get(table)
            if ta is None or tb is None or not ta.equals(tb):
                out.append(f"{name_a}: table {table}")
        for key in fa.meta.keys() | fb.meta.keys():
            if key != "written_at" and fa.meta.get(key) != fb.meta.get(key):
                out.append(f"{name_a}: meta {key}")
    return out


def _top10(root: Path, query: str, mode: str) -> list:
    done = run_cli(
        "search", query, "--root", str(root), "--json", "-n", "10", "--mode", mode, env=SHARDED
    )
    assert done.returncode == 0, done.stderr
    return [
        (r["path"], r["start_line"], r["end_line"], r["score"])
        for r in json.loads(done.stdout)["results"]
    ]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The same project twice: ingested as one file (then split in place by the bench
    script, as a user switching to shards would), and ingested with MDVDB_SHARDS=4."""
    base = tmp_path_factory.mktemp("split")
    one = _project(base / "one")
    ingested = base / "ingested"
    shutil.copytree(one, ingested)  # copy2: the same mtimes
    build_index(one, ENV)
    build_index(ingested, SHARDED)
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "bench" / "split_shards.py"),
            str(one),
            str(one),
            "--shards",
            "4",
            "--json",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, **ENV},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout)["rows"][0]
    assert (row["shards"], row["chunks"], row["with_state"]) == (4, 96, True)
    return one, ingested


@pytest.mark.slow
def test_a_split_writes_the_shards_an_ingest_writes(built) -> None:
    from pipeline.pack.ivf import list_count

    one, ingested = built
    assert _differences(one, ingested) == []
    manifest = shards.read_manifest(_folder(one))
    assert manifest is not None and manifest.generation == 1
    # Every shard got its own IVF lists, trained on its rows (not the one file's 10).
    for entry in manifest.entries:
        meta = index_format.read_index(_folder(one) / entry.name, lazy=True).meta["ivf"]
        assert (meta["trained_rows"], meta["lists"]) == (entry.chunks, list_count(entry.chunks))
    verify = run_cli("status", "--verify", "--root", str(one), env=SHARDED)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    for mode in ("lexical", "hybrid"):
        for query in QUERIES:
            expected = _top10(ingested, query, mode)
            assert expected and _top10(one, query, mode) == expected, (mode, query)


@pytest.mark.slow
def test_a_split_that_misplaces_a_file_is_caught(built, tmp_path: Path, monkeypatch) -> None:
    """The checks above fail for a split whose hash sends files to the next shard."""
    from bench.split_shards import split
    from kernel.config import load_config
    from pipeline.state import State

    one, ingested = built
    wrong = tmp_path / "wrong"
    shutil.copytree(one, wrong)
    shutil.rmtree(_folder(wrong))
    right = shards.shard_of
    monkeypatch.setattr(shards, "shard_of", lambda path, n: (right(path, n) + 1) % n)
    config = load_config(wrong, {**os.environ, **SHARDED})
    with State(config.state_path) as state:
        split(config.index_path, config, state)
    monkeypatch.undo()
    assert "manifest entries" in _differences(wrong, ingested)
    verify = run_cli("status", "--verify", "--root", str(wrong), env=SHARDED)
    assert verify.returncode == 1
    assert "shard" in verify.stderr + verify.stdout


def test_a_split_refuses_one_shard_and_a_missing_index(tmp_path: Path) -> None:
    script = str(REPO / "bench" / "split_shards.py")
    done = subprocess.run(
        [sys.executable, script, str(tmp_path), str(tmp_path / "out"), "--shards", "3"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert done.stderr.startswith("error: ") and "no index at" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    one_shard = subprocess.run(
        [sys.executable, script, str(tmp_path), str(tmp_path / "out"), "--shards", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert one_shard.returncode == 2 and "--shards must be 2 or more" in one_shard.stderr


@pytest.mark.slow
def test_sharded_ingests_go_on_from_a_split(built, tmp_path: Path) -> None:
    """A folder switched to shards by a split is then kept by ordinary sharded ingests: one
    with nothing new changes no shard file, an edit rewrites the one shard of its file."""
    one, _ = built
    root = tmp_path / "switched"
    shutil.copytree(one, root)
    before = shards.read_manifest(_folder(root))
    done = run_cli("ingest", "--root", str(root), env=SHARDED)
    assert done.returncode == 0, done.stderr
    assert [e.name for e in shards.read_manifest(_folder(root)).entries] == [
        e.name for e in before.entries
    ]
    page = root / "v1" / "archive" / "tar-0.md"
    page.write_text(page.read_text(encoding="utf-8") + "\nA new line on tar.\n", encoding="utf-8")
    done = run_cli("ingest", "--root", str(root), env=SHARDED)
    assert done.returncode == 0, done.stderr
    after = shards.read_manifest(_folder(root))
    changed = [
        e.shard for e, f in zip(before.entries, after.entries, strict=True) if e.name != f.name
    ]
    assert changed == [shards.shard_of("v1/archive/tar-0.md", 4)]
    verify = run_cli("status", "--verify", "--root", str(root), env=SHARDED)
    assert verify.returncode == 0, verify.stdout + verify.stderr


@pytest.mark.slow
def test_a_split_without_the_state_differs_only_in_clusters(built, tmp_path: Path) -> None:
    """The 1M measurement's case: an index file copied alone (no `.markdownvdb.state`). Its
    shards are the ingest's but for the clustering, which lives in the state: no cluster
    ids, no `clusters` tables."""
    one, ingested = built
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy2(one / ".markdownvdb.index", alone / ".markdownvdb.index")
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "split_shards.py"), str(alone), str(alone)]
        + ["--shards", "4", "--json"],
        capture_output=True,
        text=True,
        env={**os.environ, **ENV},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["rows"][0]["with_state"] is False
    left = [d for d in _differences(alone, ingested) if d != "manifest entries"]
    clustering = ("table clusters", "table cluster_similarity", "table files")
    assert left and all(d.endswith(clustering) for d in left), left
    manifest = shards.read_manifest(_folder(alone))
    for entry in manifest.entries:
        files = index_format.read_index(_folder(alone) / entry.name).tables["files"]
        assert set(files.column("cluster_id").to_pylist()) == {-1}
    # the same rows otherwise: paths, shas and every chunk
    for a, b in zip(manifest.entries, shards.read_manifest(_folder(ingested)).entries, strict=True):
        fa = index_format.read_index(_folder(alone) / a.name).tables
        fb = index_format.read_index(_folder(ingested) / b.name).tables
        assert fa["chunks"].equals(fb["chunks"])
        assert fa["files"].drop(["cluster_id"]).equals(fb["files"].drop(["cluster_id"]))


def test_a_split_waits_for_no_writer(tmp_path: Path) -> None:
    """The split publishes DEST's shards: with DEST's writer lock held (an ingest running),
    it stops with one line and writes nothing."""
    from kernel.config import load_config
    from pipeline.lock import WriterLock

    dest = tmp_path / "dest"
    dest.mkdir()
    lock = WriterLock(load_config(dest, dict(os.environ)).state_path)
    lock.acquire(wait=False)
    try:
        done = subprocess.run(
            [sys.executable, str(REPO / "bench" / "split_shards.py"), str(tmp_path), str(dest)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        lock.release()
    assert done.returncode == 1
    assert done.stderr.startswith("error: another writer holds the index lock")
    assert len(done.stderr.strip().splitlines()) == 1
    assert not _folder(dest).exists()

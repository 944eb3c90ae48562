"""Parallel ingest (`MDVDB_WORKERS`, pipeline/workers.py): a pool of worker processes
builds the same index as one process, byte for byte, through the real CLI."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from pipeline.workers import POOL_MIN_FILES
from tests.conftest import run_cli

LONG_SECTION = "\n".join(
    f"- step {n}: run `tool --flag-{n} value` on the input" for n in range(200)
)


def _page(i: int) -> bytes:
    """Every kind of file the pipeline treats differently, in turn."""
    kind = i % 8
    if kind == 0:  # frontmatter; aliases, an inline tag, a comment, a wikilink (issue 35)
        front = f"title: Page {i}\ntags: [a, b{i % 5}]\ndate: 2024-01-{i % 28 + 1:02d}"
        front += f"\naliases: [Alias {i}]"
        body = f"Body {i} about kayaks #t{i % 3} %%hidden%% [[Page {i + 8}|next]].\n"
        return f"---\n{front}\n---\n\n# Heading {i}\n\n{body}".encode()
    if kind == 1:  # nested headings: chunks embedded with their parents' headings
        nested = f"## Child {i}\n\nChild text {i}.\n\n### Grandchild\n\nDeep {i}.\n"
        return f"# Top {i}\n\nIntro.\n\n{nested}".encode()
    if kind == 2:  # over the token budget: windows, and a line longer than the budget
        return f"# Long {i}\n\n{LONG_SECTION}\n\n## One line\n\n{'word ' * 900}\n".encode()
    if kind == 3:
        return f"---\ntitle: [unclosed\n---\n\n# Bad frontmatter {i}\n\ntext\n".encode()
    if kind == 4:
        return b"# Latin-1 \xe9t\xe9\n\ncaf\xe9 " + str(i).encode() + b"\n"
    if kind == 5:  # the same content at many paths
        return b"# Shared\n\nThe same page in several folders.\n"
    if kind == 6:
        return f"Setext {i}\n========\n\n```\n# not a heading {i}\n```\n\nText.\n".encode()
    return b"   \n" if i % 16 == 7 else f"no heading at all, file {i}\n".encode()


def _project(root: Path, files: int) -> Path:
    for i in range(files):
        path = root / f"d{i % 10}" / f"page-{i:05d}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(_page(i))
    return root


def _ingest(root: Path, workers: str) -> dict:
    # Clustering off: the clusters table records when it was built (pipeline/cluster/topics.py), so
    # two builds differ there by the clock whatever the workers; everything else is compared.
    env = {"MDVDB_WORKERS": workers, "MDVDB_CLUSTERING_ENABLED": "false"}
    out = run_cli("ingest", "--json", "--root", str(root), env=env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _index_parts(path: Path) -> tuple[bytes, dict]:
    """The index body (every buffer and schema) and its footer without the time of writing
    (the container: kernel/index_format.py)."""
    data = path.read_bytes()
    footer_len = int.from_bytes(data[-24:-16], "little")
    footer = json.loads(data[-24 - footer_len : -24])
    footer["meta"].pop("written_at")
    return data[: -24 - footer_len], footer


def _cache_rows(state: Path) -> dict[str, list]:
    """Every row of every cache table (kv: its keys; its values hold paths and times)."""
    db = sqlite3.connect(state / "cache.sqlite3")
    try:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        rows = {}
        for table in tables:
            if table in ("_migrations",):
                continue
            column = "key" if table == "kv" else "*"
            rows[table] = sorted(db.execute(f"SELECT {column} FROM {table}").fetchall())
        return rows
    finally:
        db.close()


@pytest.mark.slow
def test_a_pool_of_workers_builds_the_serial_index_byte_for_byte(tmp_path: Path):
    serial = _project(tmp_path / "serial", POOL_MIN_FILES + 400)
    pooled = Path(shutil.copytree(serial, tmp_path / "pooled"))  # same bytes, same mtimes

    one, two = _ingest(serial, "1"), _ingest(pooled, "2")
    assert (one["workers"], two["workers"]) == (1, 2)
    for key in ("files", "chunks", "chunks_embedded", "chunked", "errors"):
        assert one[key] == two[key], key
    assert one["chunked"] > POOL_MIN_FILES and one["errors"]  # the bad files are reported
    assert one["chunks_per_second"] > 0 and two["cpu_per_wall"] > 0
    assert _index_parts(serial / ".markdownvdb.index") == _index_parts(
        pooled / ".markdownvdb.index"
    )
    assert _cache_rows(serial / ".markdownvdb.state") == _cache_rows(pooled / ".markdownvdb.state")

    # An incremental run over most files (the previous index is a cache): the pool again,
    # the same index as one process again.
    for path in sorted(serial.glob("d[0-8]/*.md")):
        path.write_bytes(path.read_bytes() + b"\n## Added\n\nnew words about canoes\n")
        twin = pooled / path.relative_to(serial)
        twin.write_bytes(path.read_bytes())
        os.utime(twin, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns))  # mtimes: indexed
    for path in sorted(serial.glob("d9/*.md"))[:50]:
        path.unlink()
        (pooled / path.relative_to(serial)).unlink()
    one, two = _ingest(serial, "1"), _ingest(pooled, "2")
    assert (one["workers"], two["workers"]) == (1, 2)
    assert one["changed"] == two["changed"] > POOL_MIN_FILES - 100
    assert one["chunks_embedded"] == two["chunks_embedded"]
    assert _index_parts(serial / ".markdownvdb.index") == _index_parts(
        pooled / ".markdownvdb.index"
    )


def test_a_small_run_starts_no_pool_and_a_bad_value_is_one_line(tmp_path: Path):
    root = _project(tmp_path / "small", 24)
    report = _ingest(root, "8")
    assert report["workers"] == 1 and report["files"] == 24 and report["chunked"] > 24
    out = run_cli("ingest", "--root", str(root), env={"MDVDB_WORKERS": "-2"})
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "MDVDB_WORKERS" in out.stderr


def test_the_workers_analyses_are_the_ones_pack_would_make(tmp_path: Path):
    """The workers analyse each chunk's words as they cut it (pipeline/workers.py); pack then
    only merges postings. Their analyses, looked up by chunk key, equal pack's own for every
    kind of page, and a chunk they lack is analysed by pack (here: every other one)."""
    import hashlib

    import numpy as np

    from pipeline.pack import build as pack
    from pipeline.pack import lexical
    from pipeline.state import ManifestEntry
    from pipeline.workers import Spec, prepare_batch

    root = _project(tmp_path / "p", 64)
    items = []
    for path in sorted(root.rglob("*.md")):
        rel = str(path.relative_to(root))
        items.append((rel, hashlib.sha256(path.read_bytes()).hexdigest()))
    batch = prepare_batch(Spec(str(root), 400, 0, None), items)
    docs = {sha: json.loads(record) for sha, record in batch.records}
    entries = [ManifestEntry(p, 0, 0, s) for p, s in items if s in docs]
    files = pack._files_rows(entries, docs)
    columns = pack._chunk_columns(entries, docs, 0)
    chunks = pack._with_vectors(columns, lambda shas: np.zeros((len(shas), 4)), 4)
    assert batch.lexical is not None and len(batch.lexical.keys) == chunks.num_rows > 64

    keys = lexical.chunk_keys(
        lexical.title_fields(files),  # each file's title and aliases
        chunks.column("file_id").to_numpy(),
        chunks.column("heading").to_pylist(),
        chunks.column("sha256").to_pylist(),
    )
    assert (batch.lexical.rows_for(keys) >= 0).all()  # pack finds every chunk's analysis
    own = lexical.analysed_store(files, chunks)
    given = lexical.analysed_store(files, chunks, batch.lexical)
    half = batch.lexical.take(np.arange(0, chunks.num_rows, 2))
    partly = lexical.analysed_store(files, chunks, half)
    for store in (given, partly):
        for name in ("keys", "starts", "lengths", "terms", "counts"):
            assert np.array_equal(getattr(store, name), getattr(own, name)), name

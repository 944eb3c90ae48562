"""A first build's memory is bounded by design (docs/benchmarks.md, "Ingest memory (issue 37)"):
pack decodes the chunk records of at most `RECORDS_BATCH` files at once
(`pipeline.pack.build._fresh_rows`), so the Python objects it holds do not grow with the
corpus. Real `mdvdb ingest` processes: a build in batches of a few files writes the index
byte for byte as one in a single batch, and no read of records asks for more files than a
batch holds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.fake_embeddings import FakeEmbeddingServer
from tests.test_parallel_ingest import _index_parts, _project

# The real CLI with `RECORDS_BATCH` set (argv[1]); each read of records prints how many
# files it asked for (stderr, "asked N"). The rest of argv is the command line.
_BATCHED = r"""
import sys
import pipeline.state as st
st.RECORDS_BATCH = int(sys.argv[1])
get_chunks = st.State.get_chunks
def counted(self, key, shas):
    shas = list(shas)
    print("asked", len(shas), file=sys.__stderr__, flush=True)
    return get_chunks(self, key, shas)
st.State.get_chunks = counted
import pipeline.embed as em
embed_missing = em.embed_missing
def embedding(state, provider, texts, *args):
    print("embedding", len(texts), file=sys.__stderr__, flush=True)
    return embed_missing(state, provider, texts, *args)
em.embed_missing = embedding
from mdvdb.cli import main
sys.argv = ["mdvdb", *sys.argv[2:]]
sys.exit(main())
"""


def _ingest(
    root: Path, batch: int, workers: str, held: list | None = None, **extra: str
) -> tuple[dict, list[int]]:
    """`held`: gets how many texts each call of the embed stage's `embed_missing` held."""
    env = {**os.environ, "MDVDB_WORKERS": workers, "MDVDB_CLUSTERING_ENABLED": "false", **extra}
    env.pop("FORCE_COLOR", None)
    out = subprocess.run(
        [sys.executable, "-c", _BATCHED, str(batch), "ingest", "--json", "--root", str(root)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stderr.splitlines()
    asked = [int(line.split()[1]) for line in lines if line.startswith("asked")]
    if held is not None:
        held += [int(line.split()[1]) for line in lines if line.startswith("embedding")]
    return json.loads(out.stdout), asked


@pytest.mark.slow  # four builds
def test_records_read_in_batches_build_the_same_index(tmp_path: Path):
    one = _project(tmp_path / "one", 120)
    batched = _project(tmp_path / "batched", 120)
    for root in (one, batched):  # a file of no chunks and a duplicate among the batches
        (root / "d0" / "empty.md").write_text("")
        (root / "d1" / "same.md").write_bytes((root / "d0" / "page-00000.md").read_bytes())
    os.utime(batched / "d0" / "empty.md", ns=(0, (one / "d0" / "empty.md").stat().st_mtime_ns))
    for path in one.rglob("*.md"):  # same mtimes: they are in the index
        st = path.stat()
        os.utime(batched / path.relative_to(one), ns=(st.st_atime_ns, st.st_mtime_ns))

    whole, whole_asked = _ingest(one, 10_000, "1")
    parts, parts_asked = _ingest(batched, 7, "1")
    assert whole["files"] == parts["files"] == 122 and whole["chunks"] == parts["chunks"]
    distinct = max(whole_asked)  # one read of every distinct file's records
    assert distinct > 7 and max(parts_asked) <= 7 and sum(parts_asked) >= distinct
    assert _index_parts(batched / ".markdownvdb.index") == _index_parts(one / ".markdownvdb.index")

    # An edit packs its fresh rows the same way: still the same index both ways.
    for root in (one, batched):
        path = root / "d3" / "page-00003.md"
        path.write_text(path.read_text() + "\n\n## Added\n\nA paragraph about kayaks.\n")
        st = (one / "d3" / "page-00003.md").stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    _ingest(one, 10_000, "1")
    _ingest(batched, 7, "1")
    assert _index_parts(batched / ".markdownvdb.index") == _index_parts(one / ".markdownvdb.index")


def test_the_embed_stage_reads_records_in_batches(tmp_path: Path):
    """A provider that embeds in this process (a remote one here, MiniLM alike): the embed
    stage keeps only the texts of a batch's records, and builds the same index."""
    one = _project(tmp_path / "one", 60)
    batched = _project(tmp_path / "batched", 60)
    for path in one.rglob("*.md"):
        st = path.stat()
        os.utime(batched / path.relative_to(one), ns=(st.st_atime_ns, st.st_mtime_ns))
    with FakeEmbeddingServer(dims=16) as server:
        env = {
            "MDVDB_EMBEDDING_PROVIDER": "ollama",
            "MDVDB_EMBEDDING_DIMENSIONS": "16",
            "OLLAMA_HOST": server.url,
            "MDVDB_EMBEDDING_CONCURRENCY": "1",
        }
        whole, whole_asked = _ingest(one, 10_000, "1", **env)
        held: list[int] = []
        parts, parts_asked = _ingest(batched, 5, "1", held, **env)
    assert whole["chunks_embedded"] == parts["chunks_embedded"] > 60
    # the texts of 5 files at a time (a few sections each), never the whole folder's
    assert len(held) >= 10 and max(held) <= 5 * 8 and sum(held) >= parts["chunks_embedded"]
    distinct = max(whole_asked)
    assert distinct > 5 and max(parts_asked) <= 5 and sum(parts_asked) >= 2 * distinct
    assert _index_parts(batched / ".markdownvdb.index") == _index_parts(one / ".markdownvdb.index")


def _random_store(rng, chunks: int):
    """A `lexical.Store` of `chunks` made-up analyses (few distinct terms: many shared)."""
    import numpy as np

    from pipeline.pack import lexical

    parts = [
        rng.integers(0, 50, rng.integers(0, 9)).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        for _ in range(3 * chunks)
    ]
    keys = rng.integers(0, 2**63, chunks).astype(np.uint64)
    return lexical._store_of_parts(keys, parts)


def test_postings_from_the_workers_order_equal_those_in_chunk_order():
    """pack builds a first index's postings from the workers' analyses in their own order
    (`build_postings(store, rows=...)`), with no copy of them in chunk order: the same
    arrays as from that copy, with rows used by several chunks (the same text twice) and
    rows no chunk has."""
    import numpy as np

    from pipeline.pack import lexical

    rng = np.random.default_rng(37)
    for trial in range(200):
        store = _random_store(rng, int(rng.integers(1, 40)))
        n = int(rng.integers(1, 60))
        rows = rng.integers(0, len(store.keys), n)  # repeats and rows nobody has
        if trial % 3 == 0 and n <= len(store.keys):
            rows = rng.permutation(len(store.keys))[:n]  # each row at most once
        expected = lexical.build_postings(store.take(rows))
        got = lexical.build_postings(store, rows=rows)
        for name in ("terms", "df", "offsets", "chunk_ids", "tf", "lengths"):
            want, have = getattr(expected, name), getattr(got, name)
            assert want.dtype == have.dtype and np.array_equal(want, have), (trial, name)
        assert got.forward.equals(expected.forward), trial


def test_pack_lets_the_workers_analyses_go_once_the_postings_are_built():
    """The parse stage hands its analyses over (`lexical.Handed`): the lexical step takes
    them, so nothing holds them through the steps after it."""
    import gc
    import weakref

    import numpy as np
    import pyarrow as pa

    from pipeline.pack import lexical
    from pipeline.plan import Plan

    texts = ["kayaks and canoes", "canoes", "a paddle", "kayaks and canoes"]
    files = pa.table({"title": ["Boats"], "aliases": pa.array([[]], pa.list_(pa.string()))})
    chunks = pa.table(
        {
            "file_id": pa.array(np.zeros(len(texts), np.int32)),
            "heading": [""] * len(texts),
            "heading_path": pa.array([[] for _ in texts], pa.list_(pa.string())),
            "text": texts,
            "sha256": [str(i % 3) * 64 for i in range(len(texts))],  # the last repeats the first
        }
    )
    store, rows = lexical.analyses_of(files, chunks)
    workers = store.take(np.array([2, 1, 0]))  # the workers' order: not the chunks'
    gone = weakref.ref(workers)
    handed = lexical.Handed(workers)
    del workers
    plan = Plan(None, files, chunks, np.full(1, -1), np.full(len(texts), -1), ())
    tables = lexical.update(plan, handed).tables
    gc.collect()
    assert gone() is None and handed.take() is None
    expected = lexical.build_postings(store.take(rows))
    assert tables["lexical"].equals(lexical.postings_table(expected))
    assert tables["lexical_forward"].equals(lexical.forward_table(expected))


def test_the_plan_adopts_the_held_vectors(tmp_path: Path):
    """A first build holds its vectors in memory (`State.hold`); pack's plan reads them with
    `adopt`, after which the held rows are rows of the plan's matrix (one copy, not two),
    and what is spilled or read again is the same."""
    import numpy as np

    from pipeline.state import State

    rng = np.random.default_rng(4)
    shas = [bytes([i]) * 32 for i in range(6)]
    vectors = rng.random((6, 8), dtype=np.float32)
    with State(tmp_path / "state") as state:
        state.hold()
        state.put_prepared("k", [("f" * 64, "{}")], "m", shas, vectors, ["f" * 64])
        asked = [shas[3], shas[0], shas[3], shas[5]]  # a repeat, and rows left out
        matrix = state.get_embeddings("m", asked, 8, adopt=True)
        assert np.array_equal(matrix, vectors[[3, 0, 3, 5]])
        held = state._held.vectors  # type: ignore[union-attr]
        for sha in (shas[0], shas[3], shas[5]):
            assert np.shares_memory(held[("m", sha)], matrix)
        assert not np.shares_memory(held[("m", shas[1])], matrix)
        state.spill()
        assert np.array_equal(state.get_embeddings("m", shas, 8), vectors)

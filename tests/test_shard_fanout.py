"""The per-shard work of a sharded search at a size where it matters (shards of 1,000+
chunks): each shard runs the one-file reader's int8 first pass and exact rescoring, and
answers the router with its best candidates and the chunks that score, not one number per
chunk; every answer stays the one-file one (docs/scale-out.md)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import run_cli

FILES = 1_500  # ~4,500 chunks: four shards of more than RESCORE_DEPTH (1,000) rows
SHARDED = {"MDVDB_SHARDS": "4"}
QUERIES = [
    "extract a tar archive",
    "merge a branch and push to the remote",
    "bake bread with yeast and flour",
    "invoice tax audit",
]


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, int]:
    """A generated corpus as one file, and as four shards packed from a copy of it."""
    from bench.generate import generate

    base = tmp_path_factory.mktemp("fanout")
    one = generate(base / "one", FILES)
    done = run_cli("ingest", "--root", str(one))
    assert done.returncode == 0, done.stderr
    four = base / "four"
    shutil.copytree(one, four, symlinks=True)
    (four / ".markdownvdb.index").unlink()
    done = run_cli("ingest", "--root", str(four), env=SHARDED)
    assert done.returncode == 0, done.stderr
    index = _open(one, {})
    with index.pinned() as snap:
        chunks = len(snap.chunk_file_ids)
    assert chunks > 4 * 1_000, chunks
    return one, four, chunks


def _open(root: Path, env: dict):
    from kernel.config import load_config
    from query import open_index

    return open_index(config=load_config(root, {**os.environ, **env}))


def _top(index, query: str, mode: str, **options) -> list:
    response = index.search(query, limit=10, mode=mode, **options)
    return [(r.path, r.start_line, r.end_line, r.score) for r in response.results]


def _answers(index) -> dict:
    from query.filters import parse_filter

    found = {}
    for mode in ("lexical", "hybrid", "semantic"):
        for query in QUERIES:
            found[mode, query] = _top(index, query, mode)
            # twice: a warm reader's second vector query is the first int8 one under auto
            found[mode, query, "again"] = _top(index, query, mode)
    found["filtered"] = _top(
        index, QUERIES[0], "hybrid", filters=[parse_filter("category=archive")]
    )
    return found


@pytest.mark.slow
@pytest.mark.parametrize("first_pass", ["int8", "exact", "auto"])
def test_shards_rank_as_one_file_with_each_first_pass(generated, first_pass: str) -> None:
    one, four, _ = generated
    env = {"MDVDB_SEARCH_FIRST_PASS": first_pass}
    expected = _answers(_open(one, env))
    assert expected["hybrid", QUERIES[0]] and expected["filtered"]
    assert _answers(_open(four, {**env, **SHARDED})) == expected


@pytest.mark.slow
def test_shards_with_ivf_lists_answer_as_the_exact_ranking(generated, tmp_path: Path) -> None:
    """Shards packed with IVF lists (forced small here): a hybrid query hands each shard the
    lexical side's best rows to score exactly, as the one-file reader does, and its top 10
    agrees with the exact ranking."""
    _, four, _ = generated
    ivf = tmp_path / "ivf"
    shutil.copytree(four, ivf, symlinks=True)
    for stale in ivf.glob(".markdownvdb*"):
        shutil.rmtree(stale) if stale.is_dir() else stale.unlink()
    env = {**SHARDED, "MDVDB_IVF_MIN_CHUNKS": "100"}
    done = run_cli("ingest", "--root", str(ivf), env=env)
    assert done.returncode == 0, done.stderr
    with _open(ivf, env).pinned() as snap:
        assert all(part.shard.table("ivf") is not None for part in snap.parts)
    fast = _open(ivf, {**env, "MDVDB_SEARCH_FIRST_PASS": "ivf"})
    exact = _open(ivf, {**env, "MDVDB_SEARCH_FIRST_PASS": "exact"})
    agree = []
    for query in QUERIES:
        got = {r[:3] for r in _top(fast, query, "hybrid")}
        want = {r[:3] for r in _top(exact, query, "hybrid")}
        agree.append(len(got & want) / len(want))
    assert min(agree) >= 0.9, agree


@pytest.mark.slow
def test_each_shard_runs_the_int8_first_pass(generated) -> None:
    """A warm sharded reader's hybrid query runs `query.score.vector.dense_scorer` in each shard:
    each keeps its own int8 copy (of its rows mixed with their pages'), as the one-file
    reader keeps one of the whole matrix; with `exact`, none is built."""
    _, four, _ = generated

    def copies(part) -> list:
        return [
            key
            for key in part.shard.cache
            if key == "int8_rows" or (isinstance(key, tuple) and key[0] == "page_side")
        ]

    for first_pass, built in (("exact", False), ("int8", True)):
        index = _open(four, {**SHARDED, "MDVDB_SEARCH_FIRST_PASS": first_pass})
        with index.pinned() as snap:
            for part in snap.parts:  # a process shares a snapshot between its readers
                for key in copies(part):
                    del part.shard.cache[key]
        index.search(QUERIES[0], limit=10, mode="hybrid")
        with index.pinned() as snap:
            held = [
                any(
                    getattr(part.shard.cache[key], "compact", True) is not None
                    for key in copies(part)
                )
                for part in snap.parts
            ]
            assert held == [built] * len(snap.parts), (first_pass, held)


@pytest.mark.slow
def test_a_router_receives_candidates_not_a_number_per_chunk(generated, monkeypatch) -> None:
    """The staged rounds a router over shard groups runs (here with the shards in threads):
    the answers are the one file's. A hybrid query's dense side is one call per shard
    answering its best rows (no call answers a cosine per chunk: the previous protocol's
    `dots` and `page_dots` did, twice over), and the BM25F answers carry only the chunks
    that score."""
    from bench.scaleout import Traffic
    from query.rank import shard_search

    one, four, chunks = generated
    monkeypatch.setattr(shard_search, "IN_PROCESS", True)
    router = _open(four, SHARDED)
    reference = _open(one, {})
    for mode in ("lexical", "hybrid"):
        for query in QUERIES:
            assert _top(router, query, mode) == _top(reference, query, mode), (mode, query)
    with Traffic() as traffic:
        for query in QUERIES:
            router.search(query, limit=10, mode="hybrid")
    assert traffic.calls.get("stage:dense") == 4 * len(QUERIES), traffic.calls
    assert not {"dots", "page_dots", "dots_rows", "term_scores"} & set(traffic.calls)
    assert traffic.by_call["stage:dense"] / len(QUERIES) < 8 * chunks, traffic.by_call


@pytest.fixture(scope="module")
def two_shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small generated corpus packed as two shards of ~220 chunks (built in this process:
    the test reads a shard file, it is not about the ingest)."""
    from bench.generate import generate
    from tests.conftest import build_index

    root = generate(tmp_path_factory.mktemp("fanout-small") / "two", 150)
    return build_index(root, env={"MDVDB_SHARDS": "2", "MDVDB_CLUSTERING_ENABLED": "false"})


def test_a_shard_answers_its_best_rows_and_a_fill(two_shards: Path) -> None:
    """`ShardPart.dense` with `top`: at most the best `top` rows of the cosine and of the
    moved score, exact, and for the rest the `top`-th best value, which no other row
    exceeds (what makes the merged array fuse to the one-file bits)."""
    import numpy as np

    from query.shards.part import ShardPart

    shard = sorted((two_shards / ".markdownvdb.index.shards").glob("shard-000-*.index"))[0]
    part = ShardPart.load(shard)
    vectors = part.shard.vectors
    query, direction = vectors[7], vectors[:3].mean(axis=0)
    whole = part.call("dense", query, direction, 1.0, 101, 0.5, "exact", 0)
    top = part.call("dense", query, direction, 1.0, 101, 0.5, "exact", 101)
    rows = top["rows"]
    assert len(vectors) > 2 * 101 and len(rows) <= 2 * 101
    for name, fill in zip(("cosine", "moved"), top["fill"][1:], strict=True):
        assert np.array_equal(top[name], whole[name][rows])
        best = np.sort(whole[name])[::-1]
        assert fill == best[100]
        outside = np.setdiff1d(np.arange(len(vectors)), rows)
        assert whole[name][outside].max() <= fill


# words of every topic of the generator: every shard has more matching rows than a query
# fetches, in both corpora (fewer would make the small one's answers smaller still)
WIDE = [
    "tar commit flour soil budget socket table import",
    "zip branch oven seed ledger port join module",
]


def _kb_per_query(root: Path, mode: str) -> tuple[float, dict]:
    """KB a router exchanges per query with its four shards in the staged rounds (after a
    first pass: the terms' df is kept per generation), and the calls it made."""
    from bench.scaleout import Traffic

    router = _open(root, SHARDED)
    for query in WIDE:
        router.search(query, limit=10, mode=mode)
    with Traffic() as traffic:
        for query in WIDE:
            router.search(query + " again", limit=10, mode=mode)
    return (traffic.sent + traffic.received) / len(WIDE) / 1e3, dict(traffic.calls)


@pytest.mark.slow
def test_bytes_per_query_do_not_grow_with_the_shards(
    generated, tmp_path: Path, monkeypatch
) -> None:
    """The staged protocol (query.rank.shard_search): a lexical or hybrid query over shards 3x
    larger exchanges about the same bytes (best rows, maxima, terms: ~9 KB lexical, ~80 KB
    hybrid over 4 shards), where the per-chunk protocol sent every scoring chunk's BM25F
    and expansion score; and the larger answers are the one-file ones."""
    from bench.generate import generate
    from query.rank import shard_search

    monkeypatch.setattr(shard_search, "IN_PROCESS", True)
    one, four, chunks = generated
    small = generate(tmp_path / "small", FILES // 3)
    done = run_cli("ingest", "--root", str(small), env=SHARDED)
    assert done.returncode == 0, done.stderr
    with _open(small, SHARDED).pinned() as snap:
        few = len(snap.chunk_file_ids)
    assert chunks >= 2.5 * few, (chunks, few)
    for mode in ("lexical", "hybrid"):
        kb_small, _ = _kb_per_query(small, mode)
        kb_large, calls = _kb_per_query(four, mode)
        assert kb_large <= 1.25 * kb_small + 1.0, (mode, kb_small, kb_large, calls)
        assert not {"term_scores", "page_tf", "dots"} & set(calls), calls
    routed = _open(four, {**SHARDED})
    reference = _open(one, {})
    for query in WIDE:
        for mode in ("lexical", "hybrid"):
            assert _top(routed, query, mode) == _top(reference, query, mode), (mode, query)


@pytest.mark.slow
def test_rounds_answer_as_one_file_and_survive_a_lost_session(generated, monkeypatch) -> None:
    """The staged rounds run in process (as the bench times them): lexical and hybrid top
    10s, with and without a filter, are the one-file ones; when the shards drop a query's
    arrays (more queries at once than they keep), the router's next request for the same
    query's rows starts the rounds again and answers the same."""
    from query.filters import parse_filter
    from query.rank import shard_search as shard_query

    one, four, _ = generated
    monkeypatch.setattr(shard_query, "IN_PROCESS", True)
    reference = _open(one, {})
    staged = _open(four, SHARDED)
    archive = [parse_filter("category=archive")]
    for mode in ("lexical", "hybrid"):
        for query in QUERIES:
            assert _top(staged, query, mode) == _top(reference, query, mode), (mode, query)
            # the same query again, filtered: the memo's rounds answer it (one `final`)
            want = _top(reference, query, mode, filters=archive)
            with staged.pinned() as snap:
                for part in snap.parts:
                    part._sessions.clear()  # as if 16 other queries had come in between
            assert _top(staged, query, mode, filters=archive) == want, (mode, query)
    with staged.pinned() as snap:
        assert "_select" in snap.cache["last_scores"][1][1]  # the rounds answered


def test_top_rows_breaks_ties_by_row_so_a_merge_of_shards_is_the_whole() -> None:
    """`query.score.vector.top_rows`: the k best by score, then row descending; each shard's own
    best (its rows in the one-file order), merged by (score, global row descending), are the whole
    array's best, with many equal scores (near copies) at and around the k-th."""
    import numpy as np

    from query.score.vector import top_rows

    rng = np.random.default_rng(7)
    for _ in range(200):
        n = int(rng.integers(1, 400))
        k = int(rng.integers(1, 150))
        scores = rng.integers(0, 6, n).astype(np.float32)
        whole = top_rows(scores, k)
        assert np.array_equal(whole, np.lexsort((-np.arange(n), -scores))[:k])
        owner = rng.integers(0, 3, n)
        rows = np.concatenate(
            [np.flatnonzero(owner == s)[top_rows(scores[owner == s], k)] for s in range(3)]
        )
        merged = rows[np.lexsort((-rows, -scores[rows]))][:k]
        assert np.array_equal(merged, whole)

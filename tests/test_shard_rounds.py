"""A router over shard groups answers in few round trips (query/rank/shard_search.py): a round is
one request per group, the corpus-wide numbers a step needs are gathered in the round
before it where they can be, and the rows a shortcut cannot vouch for are asked for in a
round of their own. The counts are asserted, and every shortcut is checked against the
round it replaces: the same answers, and the one-file ones (docs/scale-out.md)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import build_index

SHARDS = {"MDVDB_SHARDS": "3"}
QUERIES = [
    "extract a tar archive",
    "merge a branch and push to the remote",
    "bake bread with yeast and flour",
    "invoice tax audit",
    "compress folder",
    "firewall port and dns route",
]


def _records(root: Path) -> None:
    """Catalogue records (a title and `Label: value` lines): short pages the stub prior
    scales down when they rank among a query's best, and exact copies (equal scores)."""
    for i in range(24):
        topic = ["archive", "git", "cooking", "finance"][i % 4]
        words = {
            "archive": "Tar archive extract",
            "git": "Merge branch push",
            "cooking": "Bake bread yeast",
            "finance": "Invoice tax audit",
        }[topic]
        text = f"# {words} record {i % 6}\n\nAuthors: Person {i % 6}\nPublished: 19{70 + i % 6}\n"
        page = root / "records" / f"{topic}-{i}.md"
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(text, encoding="utf-8")


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A generated corpus with catalogue records, as one file and as three shards."""
    from bench.generate import generate

    base = tmp_path_factory.mktemp("rounds")
    one = generate(base / "one", 240)
    _records(one)
    three = base / "three"
    shutil.copytree(one, three, symlinks=True)
    env = {"MDVDB_CLUSTERING_ENABLED": "false"}
    build_index(one, env=env)
    build_index(three, env={**env, **SHARDS})
    return one, three


@pytest.fixture
def staged(monkeypatch) -> None:
    """The staged rounds a router over shard groups runs, with the shards in this process's
    threads (as bench/scaleout.py times them; tests/test_ray_serve.py runs them on Ray
    Serve): the same calls, arguments and answers."""
    from query.rank import shard_search

    monkeypatch.setattr(shard_search, "IN_PROCESS", True)


def _open(root: Path, env: dict):
    from kernel.config import load_config
    from query import open_index

    return open_index(config=load_config(root, {**os.environ, **env}))


def _top(index, query: str, mode: str, **options) -> list:
    response = index.search(query, limit=10, mode=mode, explain=True, **options)
    return [(r.path, r.start_line, r.end_line, r.score, r.explain) for r in response.results], (
        response.total
    )


def _forget(index) -> None:
    """The reader's memo of its last query's scores dropped: the same query runs again."""
    with index.pinned() as snap:
        snap.cache.pop("last_scores", None)


class Rounds:
    """The router's round trips (`call_each` calls), each named by its step."""

    def __init__(self, monkeypatch):
        from query.rank import shard_search
        from query.shards import reader

        self.log: list[str] = []
        send = reader.call_each

        def logged(parts, name, args=None):
            self.log.append(f"{name}:{args[0][1]}" if name == "stage" else name)
            return send(parts, name, args)

        monkeypatch.setattr(reader, "call_each", logged)
        monkeypatch.setattr(shard_search, "call_each", logged)

    def of(self, search) -> list[str]:
        self.log.clear()
        search()
        return list(self.log)


RATE = "feedback_postings"  # the shown sections' terms, for their confidence
HYBRID = ["stage:bm25", "stage:dense", "stage:first", "stage:expand", "stage:fuse", "stage:final"]


def test_round_trips_per_query(folders, staged, monkeypatch) -> None:
    """A lexical query is one round trip once its terms' statistics are known (its best
    rows come back with the scores), a hybrid one six (no stub round: the pool of the name
    test is known from the candidates); new terms add one round for both of their
    statistics, and RM3's new expansion terms one more; then one round reads the shown
    sections' terms for their confidence (query.rank.confidence). Each round is one request
    per shard group, whatever the shards it serves."""
    one, three = folders
    router = _open(three, SHARDS)
    rounds = Rounds(monkeypatch)
    first = rounds.of(lambda: router.search(QUERIES[0], limit=10, mode="lexical"))
    assert first[-3:] == ["term_df", "stage:bm25", RATE], first
    for query in QUERIES:  # (a query string the reader has not just answered)
        assert rounds.of(lambda q=query: router.search(q + " ", mode="lexical")) in (
            ["stage:bm25", RATE],
            ["term_df", "stage:bm25", RATE],
        )
        again = rounds.of(lambda q=query: router.search(q + "  ", mode="lexical"))
        assert again == ["stage:bm25", RATE]
    fresh = rounds.of(lambda: router.search("yeast flour oven", mode="hybrid"))
    assert fresh[0] == "term_df" and fresh[1:4] == HYBRID[:3], fresh
    assert [r for r in fresh if r != "term_df"] == [*HYBRID, RATE], fresh
    for query in QUERIES:
        router.search(query, mode="hybrid")
        assert rounds.of(lambda q=query: router.search(q + " ", mode="hybrid")) == [*HYBRID, RATE]


def test_router_answers_as_one_file_with_every_part(folders, staged) -> None:
    """Top 10 with every part of the score (`explain`: BM25F, cosine, page, stub, name),
    totals, with and without a filter, lexical and hybrid: the one-file answers."""
    from query.filters import parse_filter

    one, three = folders
    router = _open(three, SHARDS)
    reference = _open(one, {})
    archive = [parse_filter("category=archive")]
    stubs_cut = 0
    for mode in ("lexical", "hybrid"):
        for query in [*QUERIES, "tar archive record", "invoice tax record"]:
            want = _top(reference, query, mode)
            assert want[0], query
            assert _top(router, query, mode) == want, (mode, query)
            assert _top(router, query, mode, filters=archive) == _top(
                reference, query, mode, filters=archive
            ), (mode, query)
            stubs_cut += sum("stub" in (r[4] or {}) for r in want[0])
    assert stubs_cut, "no query ranks a catalogue record: the stub prior goes untested"


def test_each_shortcut_answers_as_the_round_it_replaces(folders, staged, monkeypatch) -> None:
    """The rounds the router skips, run anyway: the name test's pool asked of the shards
    after the stub prior (not computed from the candidates), and every shard's best 10 of the
    first fused ranking with postings (no bound). The answers are the same. (The third
    shortcut, the lexical maximum from each shard's front, is checked against every row in
    `test_the_shards_front_gives_the_mixed_lexical_maximum`, and end to end by the one-file
    comparison above.)"""
    from query.rank import shard_search as shard_query

    one, three = folders
    router = _open(three, SHARDS)
    queries = [*QUERIES, "tar archive record", "invoice tax record"]
    real_bound = shard_query._first_bound
    bounds = []

    def recorded_bound(*args, **kwargs):
        bounds.append(real_bound(*args, **kwargs))
        return bounds[-1]

    monkeypatch.setattr(shard_query, "_first_bound", recorded_bound)
    rounds = Rounds(monkeypatch)
    quick = {}
    for query in queries:
        _forget(router)
        steps = rounds.of(lambda q=query: _top(router, q, "hybrid"))
        assert "stage:stub" not in steps, steps
        quick[query] = _top(router, query, "hybrid")
    # the bound is what the quick path used (else "no bound" below would change nothing)
    assert any(bound is not None for bound in bounds), bounds
    monkeypatch.setattr(shard_query, "_pool_after_stub", lambda *a, **k: None)
    monkeypatch.setattr(shard_query, "_first_bound", lambda *a, **k: None)
    for query in queries:
        _forget(router)
        steps = rounds.of(lambda q=query: _top(router, q, "hybrid"))
        assert "stage:stub" in steps, steps  # the round the candidates made unnecessary
        _forget(router)
        assert _top(router, query, "hybrid") == quick[query], query


def test_the_shards_front_gives_the_mixed_lexical_maximum() -> None:
    """`lexical_front`: the maximum of (1 - λ) bm25 / max + λ expansion / max over a shard's
    rows is its maximum over the front, bit for bit, for any λ and corpus-wide maxima; with
    ties, zeros and rows that score on one side only. And the front is a front: each of its
    pairs is a row's, and no row beats one of them in both values (all the rows would give
    the maximum too, at the bytes the front is there to save)."""
    from query.shards.stages import lexical_front, mixed_lexical

    rng = np.random.default_rng(3)
    dominated = 0  # rows a front must leave out: the draws have them
    for _ in range(300):
        n = int(rng.integers(1, 300))
        b = rng.choice([0, 0, 1, 2, 2.5, 7], n) * rng.random(n).round(1)
        e = rng.choice([0, 1, 3], n) * rng.random(n).round(1)
        b, e = b.astype(np.float32), e.astype(np.float32)
        fb, fe = lexical_front(b, e)
        assert 1 <= len(fb) <= n + 2  # the two corners may be one row
        pairs = set(zip(b.tolist(), e.tolist(), strict=True))
        for pb, pe in zip(fb.tolist(), fe.tolist(), strict=True):
            assert (pb, pe) in pairs
            assert not np.any((b > pb) & (e > pe)), (pb, pe)
        dominated += int(np.sum([np.any((b > x) & (e > y)) for x, y in pairs]))
        for _ in range(5):
            lam = float(rng.random())
            mb = float(b.max()) * float(rng.uniform(1, 3))
            me = float(e.max()) * float(rng.uniform(1, 3))
            whole = mixed_lexical(b, e, lam, mb, me).max()
            assert mixed_lexical(fb, fe, lam, mb, me).max() == whole
    assert dominated > 1000, dominated


def test_the_name_pool_from_the_candidates_is_exact_or_none() -> None:
    """`_pool_after_stub` against the whole ranking: the best rows after the stub prior,
    computed over every row, are the ones it returns, or it returns None (then the router
    asks the shards); it returns them in most draws."""
    from types import SimpleNamespace

    from query.rank.shard_search import _pool_after_stub
    from query.score.fusion import Fused, with_stub_prior
    from query.score.vector import top_rows

    rng = np.random.default_rng(11)
    known = 0
    for trial in range(400):
        n = int(rng.integers(20, 400))
        scores = (rng.integers(0, 12, n) * rng.choice([0.1, 0.25], n)).astype(np.float32)
        if trial % 3 == 0:
            scores -= np.float32(0.3)  # some rows at or below zero
        length = rng.choice([5.0, 20.0, 39.0, 80.0], n).astype(np.float32)
        candidates, names = int(rng.integers(5, 40)), int(rng.integers(2, 30))
        stub = {"length": 40.0, "weight": float(rng.choice([0.4, 0.9]))}
        rows = top_rows(scores, candidates)
        cut = rng.random(len(rows)) < rng.choice([0.1, 0.5, 0.9])
        prior = SimpleNamespace(stub_length=stub["length"], stub_weight=stub["weight"])
        whole = with_stub_prior(
            Fused(scores, scores, scores), length[rows[cut]], prior, rows[cut]
        ).scores
        want = top_rows(whole, names, positive=True)
        got = _pool_after_stub(rows, scores[rows], length[rows], cut, stub, names, candidates)
        if got is not None:
            known += 1
            assert np.array_equal(got, want), trial
    assert 100 < known < 400, known


def test_concurrent_queries_through_one_router(folders, staged) -> None:
    """Searches from several threads of one router (as `mdvdb serve` answers clients): each
    query's rounds keep their own session on every shard, and every answer is the one-file
    one."""
    from concurrent.futures import ThreadPoolExecutor

    one, three = folders
    router = _open(three, SHARDS)
    reference = _open(one, {})
    asked = [
        (q + " " * i, mode) for i in range(3) for q in QUERIES for mode in ("lexical", "hybrid")
    ]
    want = [_top(reference, q, mode) for q, mode in asked]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda qm: _top(router, *qm), asked))
    assert got == want

"""Hybrid search over candidates (query/score/fusion.py, query/score/vector.py top_rows): the
sampled top-k, the first fusion's feedback chunks from the rescored and best BM25F rows, the
sparse semantic part, the per-file page part, the stub and name parts on their rows only. Each
must give the answer of the n-length fallbacks they stand in for bit for bit (`_reference`:
every shortcut turned off)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench.generate import generate
from kernel.config import load_config
from query import open_index
from query.filters import parse_filter
from query.rank.search import mode_scores, search
from query.rank.tiers import tiered_search
from query.score import fusion, vector
from tests.conftest import build_index, read_only_folder
from tests.test_ivf import QUERIES as IVF_QUERIES

# four of the IVF tests' queries over the generated corpus (two topics' words, a query across
# topics), a one-word query and one no term matches (dense side only); each query costs
# ~0.1 CPU-s a test, and the mutations of the candidate path tried fail on these as on all ten
QUERIES = [*(IVF_QUERIES[i] for i in (0, 3, 5, 9)), "git", "zzzz qqqq"]


def _reference_top(scores, k, mask=None, positive=False):
    """The plain definition: every allowed finite row sorted by (-score, -row)."""
    rows = np.arange(len(scores)) if mask is None else np.flatnonzero(mask)
    values = scores[rows]
    keep = np.isfinite(values) & ((values > 0) if positive else True)
    rows, values = rows[keep], values[keep]
    return rows[np.lexsort((-rows, -values))][:k]


@pytest.mark.parametrize("n", [1_000, 40_000, 150_000])
def test_top_rows_is_the_sorted_answer_with_ties_masks_and_odd_values(n: int):
    rng = np.random.default_rng(n)
    for case in range(12):
        # few distinct values: ties at every cut, as BM25F of one term has them
        scores = rng.integers(0, 1 + case * 3, n).astype(np.float32)
        if case % 3 == 1:
            scores = rng.random(n, dtype=np.float32) * (rng.random(n) < 0.05)
        if case % 4 == 2:
            scores[rng.integers(0, n, 20)] = np.nan
            scores[rng.integers(0, n, 5)] = np.inf
            scores[rng.integers(0, n, 5)] = -np.inf
        mask = None if case % 2 else rng.random(n) < (0.9 if case % 4 else 0.001)
        for positive in (False, True):
            # the reference's k rows are the first k of its 1,000 (one sort, not five)
            ranked = _reference_top(scores, 1000, mask, positive).tolist()
            for k in (1, 3, 10, 128, 1000):
                got = vector.top_rows(scores, k, mask, positive)
                assert got.tolist() == ranked[:k], (case, k, positive)


def test_sampled_path_is_taken_at_scale(monkeypatch):
    """The sampled cut really answers at 150k rows (the partition of n rows is not run)."""
    scores = np.random.default_rng(1).random(150_000, dtype=np.float32)
    calls = []
    real = np.partition
    monkeypatch.setattr(np, "partition", lambda a, kth, **kw: calls.append(len(a)) or real(a, kth))
    assert vector.top_rows(scores, 10).tolist() == _reference_top(scores, 10).tolist()
    assert calls and max(calls) < 20_000


FORCE = {"MDVDB_IVF_MIN_CHUNKS": "100"}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """~1,200 chunks: the rescored rows (101 + 4 x 101 moved) are under half of them (800
    pages cost twice the build and caught no mutation more). Built in
    the worker (`build_index`); the tests only read the index through the library, so they
    share the folder (no copy per test) and its teardown checks nobody wrote into it."""
    root = build_index(generate(tmp_path_factory.mktemp("cand") / "gen", 400), env=FORCE)
    with read_only_folder(root):
        yield root


@pytest.fixture
def small_scale(monkeypatch):
    """The sizes of a large index on a small one: sampled top-k, rescored sets smaller
    than the index, a short lexical candidate list (so the bound and its fallback run)."""
    monkeypatch.setattr(vector, "SAMPLED_MIN_ROWS", 64)
    monkeypatch.setattr(vector, "SAMPLE_MIN", 16)
    monkeypatch.setattr(vector, "SAMPLED_MAX_SHARE", 8)
    monkeypatch.setattr(vector, "CUT_MIN_ROWS", 16)
    monkeypatch.setattr(vector, "IVF_MIN_PROBE_ROWS", 0)
    monkeypatch.setattr(vector, "IVF_PROBE_SHARE", 0.3)
    monkeypatch.setattr(vector, "IVF_RESCORE_DEPTH", 101)
    monkeypatch.setattr(vector, "RESCORE_DEPTH", 101)
    monkeypatch.setattr(fusion, "LEXICAL_EXACT", 40)
    monkeypatch.setattr(fusion, "BLOCK", 500)  # several blocks in `_blended`
    monkeypatch.setattr(fusion, "PARALLEL_FUSION_ROWS", 500)  # split when threads are on
    monkeypatch.setattr(fusion, "FIRST_LEXICAL", 12)


def _index(root: Path, first_pass: str, threads: str = "1"):
    env = {"MDVDB_SEARCH_FIRST_PASS": first_pass, "MDVDB_SEARCH_THREADS": threads}
    index = open_index(config=load_config(root, environ=env))
    for query in QUERIES[:2]:  # a long-lived reader: int8 / IVF copies built, weights cached
        index.search(query, mode="hybrid")
    return index


def _reference(patch) -> None:
    """Every candidate shortcut declines, so each step takes its n-length fallback."""
    for name in ("_sparse_semantic", "_first_best", "_blended", "_page_rows"):
        patch.setattr(fusion, name, lambda *a, **k: None)
    patch.setattr(vector, "SAMPLED_MIN_ROWS", 1 << 62)  # no sampled cut: every row ranked
    patch.setattr(vector.Above, "select", lambda *a, **k: None)


def _answers(index, reference: bool, monkeypatch, hybrid_only: bool = False) -> list:
    """`hybrid_only`: without the lexical and semantic modes (no fusion runs in them)."""
    if reference:
        with monkeypatch.context() as patch:
            _reference(patch)
            return _answers(index, False, monkeypatch, hybrid_only)
    index.snapshot.cache.pop("last_scores", None)
    out = []
    n = index.snapshot.vectors.shape[0]
    every_third = np.arange(n) % 3 == 0
    for query in QUERIES:
        scores, parts = mode_scores(index, query, "hybrid")
        arrays = {
            name: np.asarray(value).tobytes()
            for name, value in parts.items()
            if not isinstance(value, float) and name != "_above"  # (not scores: a cut)
        }
        out.append((query, scores.tobytes(), arrays))
        asked = [
            {"mode": "hybrid", "explain": True, "limit": 10},
            {"mode": "hybrid", "limit": 5, "filters": [parse_filter("tags=git,python")]},
            {"mode": "hybrid", "limit": 7, "mask": every_third, "per_file": 1},
        ]
        if not hybrid_only:
            asked += [{"mode": "lexical", "limit": 10}, {"mode": "semantic", "limit": 10}]
        for options in asked:
            response = search(index, query, **options)
            hits = [(h.chunk_id, h.score, h.explain) for h in response.results]
            out.append((query, str(options), hits, response.total))
        tiered = tiered_search(index, query, limit=10, explain=True)
        out.append((query, [(k, h.chunk_id, h.score) for k, h in tiered.results], tiered.total))
    return out


@pytest.mark.parametrize("first_pass", ["exact", "int8", "ivf"])
def test_candidate_path_answers_as_the_n_length_reference(
    built: Path, first_pass: str, small_scale, monkeypatch
):
    """Scores, every explain part, rankings, totals: the same bits with and without the
    candidate path, for each first pass, with filters, masks, tiers and other modes."""
    want = _answers(_index(built, first_pass), True, monkeypatch)
    fast = _index(built, first_pass)
    blended = []
    real = fusion._blended
    monkeypatch.setattr(fusion, "_blended", lambda *a: blended.append(real(*a)) or blended[-1])
    got = _answers(fast, False, monkeypatch)
    # the block-wise fusion answered (it needs the rescored rows: not after the exact scan)
    assert any(f is not None for f in blended) == (first_pass != "exact")
    if first_pass != "exact":  # the candidates are a part of the rows, not all of them
        scorer = vector.dense_scorer(fast, None)
        scorer.mixed(fast.snapshot.vectors[0], fast.snapshot.vectors[1], 1.0, keep=101)
        assert scorer.support is not None and len(scorer.support) < 0.5 * len(scorer.matrix)
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert a == b, a[0]


def test_first_fusion_bound_falls_back_when_it_cannot_prove(built: Path, small_scale, monkeypatch):
    """With a lexical candidate list of 1 and a small dense weight the bound rarely holds:
    the fallback (all n rows) answers, still the reference's bits; and a list long enough
    proves it without one."""
    calls = {"proved": 0, "fell": 0}
    real = fusion._first_best

    def counting(*args, **kwargs):
        found = real(*args, **kwargs)
        calls["proved" if found is not None else "fell"] += 1
        return found

    monkeypatch.setattr(fusion, "_first_best", counting)
    for depth in (1, 200):
        monkeypatch.setattr(fusion, "FIRST_LEXICAL", depth)
        with fusion.overridden(dense_weight=0.05):
            want = _answers(_index(built, "int8"), True, monkeypatch, hybrid_only=True)
            got = _answers(_index(built, "int8"), False, monkeypatch, hybrid_only=True)
        assert got == want
    assert calls["proved"] and calls["fell"]


def test_union_rows_is_union1d() -> None:
    """`query.score.vector.union_rows`, the rescored rows of both directions, is np.union1d's
    answer (sorted distinct rows, its dtype) for overlapping, disjoint, empty and mixed-width
    inputs."""
    from query.score.vector import union_rows

    rng = np.random.default_rng(3)
    for _ in range(300):
        n = int(rng.integers(1, 5_000))
        a = rng.choice(n, int(rng.integers(0, n + 1)), replace=False).astype(np.int64)
        b = rng.integers(0, n, int(rng.integers(0, 2 * n))).astype(
            np.int32 if rng.random() < 0.5 else np.int64
        )
        want = np.union1d(a, b)
        got = union_rows(a, b)
        assert got.dtype == want.dtype and np.array_equal(got, want)


@pytest.mark.parametrize("first_pass", ["int8", "ivf"])
def test_passes_split_over_cores_answer_as_one_core(
    built: Path, first_pass: str, small_scale, monkeypatch
):
    """The IVF lists' int8 products, the block-wise fusion and the top-k comparison passes
    run in pieces on every core (query.score.second_core.in_parallel):
    the same bits as on one core, with the pieces really taken by more than one thread."""
    from query.score import second_core

    monkeypatch.setattr(second_core, "_THREADS", second_core._THREADS)  # restored after
    monkeypatch.setattr(vector, "PARALLEL_INT8_ROWS", 64)
    monkeypatch.setattr(vector, "PARALLEL_COMPARE_ROWS", 300)
    monkeypatch.setattr(second_core, "cores", lambda: 1)
    want = _answers(_index(built, first_pass), False, monkeypatch)

    monkeypatch.setattr(second_core, "cores", lambda: 2)
    threads: dict[str, set[str]] = {}
    real = second_core.in_parallel

    def recording(function, pieces):
        import threading
        import time

        name = getattr(function, "__qualname__", "")

        def run(piece):
            threads.setdefault(name, set()).add(threading.current_thread().name)
            if len(set().union(*threads.values())) < 2:
                time.sleep(0.001)  # a moment for the other thread to take a piece
            return function(piece)

        return real(run, pieces) if len(pieces) > 1 else real(function, pieces)

    monkeypatch.setattr(second_core, "in_parallel", recording)
    # two threads from the first pass on (mode_scores is called directly too: not through
    # a search, which sets the threads from the settings)
    index = _index(built, first_pass, threads="2")
    got = _answers(index, False, monkeypatch)
    assert got == want
    split = {name for name in threads if name}
    assert any("dots_spans" in name for name in split) == (first_pass == "ivf")
    assert any("_blended" in name for name in split)
    assert any("_rows_above" in name for name in split)
    # more than one thread took pieces
    assert len(set().union(*threads.values())) > 1


def test_page_part_at_its_rows_only_is_the_gather_of_every_row(monkeypatch):
    """`fusion._page_rows`: the rows whose page part is not 0 and that part, for files
    of one to many chunks, none, one, a few or the first and last file with a part, -0.0
    among them; None over the share (the caller then gathers every row)."""
    monkeypatch.setattr(fusion, "PAGE_FILES_SHARE", 2)
    rng = np.random.default_rng(7)
    sizes = rng.integers(1, 6, size=300)
    files = np.repeat(np.arange(300, dtype=np.int32), sizes)
    n = len(files)
    for case in range(40):
        part = np.zeros(300, dtype=np.float32)
        picked = rng.choice(300, size=[0, 1, 2, 5][case % 4], replace=False)
        part[picked] = rng.random(len(picked), dtype=np.float32) + np.float32(0.01)
        if case % 5 == 0:
            part[[0, 299]] = [np.float32(0.5), np.float32(-0.0)]
        found = fusion._page_rows(part, files, n)
        assert found is not None
        rows, values = found
        assert np.all(np.diff(rows) > 0)
        gathered = np.take(part, files)
        assert np.array_equal(values, gathered[rows])
        rest = np.ones(n, dtype=bool)
        rest[rows] = False
        assert not np.any(gathered[rest])  # every row it leaves has a part of 0
        assert set(np.flatnonzero(gathered)) <= set(rows.tolist())
    part = np.ones(300, dtype=np.float32)
    monkeypatch.setattr(fusion, "PAGE_FILES_SHARE", n)
    assert fusion._page_rows(part, files, n) is None  # over the share: every row gathered


@pytest.mark.parametrize("share", [1, 10**9])
def test_page_part_at_its_rows_answers_as_the_reference(
    built: Path, share, small_scale, monkeypatch
):
    """The block-wise fusion with the page part added at its rows only (share 1: whenever
    some page has one) and with it gathered for every row (share 10**9): the n-length
    reference path's bits, and the rows path taken with some page parts in the first case."""
    want = _answers(_index(built, "ivf"), True, monkeypatch, hybrid_only=True)
    monkeypatch.setattr(fusion, "PAGE_FILES_SHARE", share)
    taken = []
    real = fusion._page_rows
    monkeypatch.setattr(fusion, "_page_rows", lambda *a: taken.append(real(*a)) or taken[-1])
    got = _answers(_index(built, "ivf"), False, monkeypatch, hybrid_only=True)
    assert got == want
    with_rows = [t for t in taken if t is not None and len(t[0])]
    assert bool(with_rows) == (share == 1)

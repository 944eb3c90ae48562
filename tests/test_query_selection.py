"""The query path's selections: `query.score.vector.top_rows(above=)`, a selection of the same
scores, changed since at known rows, made from the rows an earlier selection found above its
cut (the stub selection's rows serve the name pool and the final ranking: no pass over n rows
each), and `distinct`, np.unique's answer by one sort. Each must be the plain answer."""

from __future__ import annotations

import numpy as np
import pytest

from query.score import vector
from tests.test_hybrid_candidates import _reference_top


# 40k rows in the inner loop; 150k (~2.3 CPU-s) in CI
@pytest.mark.parametrize("n", [40_000, pytest.param(150_000, marks=pytest.mark.slow)])
def test_a_reused_cut_gives_the_sorted_answer_after_changes(n: int):
    rng = np.random.default_rng(n)
    reused = 0
    for case in range(16):
        scores = rng.integers(0, 2 + case * 5, n).astype(np.float32)  # ties at every cut
        if case % 3 == 1:
            scores = rng.random(n, dtype=np.float32)
        if case % 4 == 2:
            scores[rng.integers(0, n, 20)] = np.nan
            scores[rng.integers(0, n, 5)] = np.inf
        seen: list = []
        first = vector.top_rows(scores, 128, seen=seen)
        assert first.tolist() == _reference_top(scores, 128).tolist()
        assert len(seen) == 1
        above = seen[0]
        # lowered rows among the best (the stub prior), raised rows anywhere (a name part)
        low = first[rng.integers(0, len(first), 40)]
        scores[low] -= np.float32(rng.random() * 3)
        raised = np.unique(rng.integers(0, n, 30 + case * 40))
        scores[raised] += np.float32(rng.random() * (2 + case))
        above = above.rising(low).rising(raised)
        mask = None if case % 2 else rng.random(n) < 0.7
        for positive in (False, True):
            for k in (1, 10, 100, 110, 128):
                want = _reference_top(scores, k, mask, positive).tolist()
                reused += above.select(scores, k, mask, positive) is not None
                got = vector.top_rows(scores, k, mask, positive, above=above)
                assert got.tolist() == want, (case, k, positive)
    assert reused > 100  # the shortcut answered most selections


def test_a_raised_row_left_out_would_be_missed():
    """Without the rows that rose, a row from below the cut that now ranks first is not
    among the reused rows: `rising` is what keeps the answer right (and the selection
    falls back to all rows when too few remain above the cut)."""
    rng = np.random.default_rng(7)
    scores = rng.random(100_000, dtype=np.float32)
    seen: list = []
    vector.top_rows(scores, 128, seen=seen)
    low_row = int(np.argmin(scores))
    scores[low_row] = 5.0
    assert vector.top_rows(scores, 10, above=seen[0].rising(np.array([low_row])))[0] == low_row
    assert seen[0].select(scores, 10, None, False)[0] != low_row  # what it guards against
    scores[seen[0].rows] = -1.0  # every reused row falls below the cut: all n rows ranked
    assert seen[0].select(scores, 10, None, False) is None
    got = vector.top_rows(scores, 10, above=seen[0])
    assert got.tolist() == _reference_top(scores, 10).tolist()


def test_distinct_is_numpys_unique():
    """`query.score.vector.distinct`, the query path's np.unique (terms, pages, feedback terms):
    the same values, counts and inverse, for every integer type the callers pass."""
    rng = np.random.default_rng(5)
    for dtype in (np.int32, np.int64, np.uint64):
        for size in (0, 1, 2, 7, 100, 5_000):
            values = rng.integers(0, max(1, size // 3 + 1), size).astype(dtype)
            want = np.unique(values, return_counts=True, return_inverse=True)
            got_values, got_inverse, got_counts = vector.distinct(values, True, True)
            for a, b in ((got_values, want[0]), (got_inverse, want[1]), (got_counts, want[2])):
                assert a.dtype == b.dtype and np.array_equal(a, b), (dtype, size)
            assert np.array_equal(vector.distinct(values)[0], want[0])
            assert np.array_equal(vector.distinct(values, counts=True)[1], want[2])

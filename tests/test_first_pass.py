"""The int8 first pass of hybrid search (query/score/vector.py): rescored rows are exact, the rest
can never outrank them, and over a real corpus the fused scores are those of the exact scan."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from kernel.config import load_config
from query import open_index
from query.rank.search import PageVectors, mode_scores
from query.score import vector
from query.score.vector import DenseScorer, Int8Rows, PageSide
from tests.conftest import run_cli, unpack_corpus


def clustered(n: int = 20_000, d: int = 64, seed: int = 3) -> np.ndarray:
    """Unit rows around 50 centres: near ties, as real embeddings have them."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((50, d)).astype(np.float32)
    rows = centres[rng.integers(0, 50, n)] + 0.6 * rng.standard_normal((n, d)).astype(np.float32)
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def test_int8_codes_use_each_dimensions_range():
    matrix = clustered() * np.linspace(0.1, 3.0, 64, dtype=np.float32)  # spreads differ 30x
    compact = Int8Rows.of(matrix, block=4096)  # several blocks
    assert compact.codes.dtype == np.int8
    assert np.abs(compact.codes).max(axis=0).min() == 127  # every dimension's full range
    approx = compact.dots(matrix[:2])
    exact = matrix @ matrix[:2].T
    assert np.abs(approx - exact.T).max() < 0.02 * np.abs(exact).max()


def test_rescored_rows_are_exact_and_the_rest_never_outrank_them():
    matrix = clustered()
    query, direction = matrix[0] + matrix[1], matrix[10:13].mean(axis=0)
    fast = DenseScorer(matrix, Int8Rows.of(matrix), depth=300)
    _, cosine, moved = fast.mixed(query, direction, 1.0)
    exact_cos = matrix @ query
    exact_moved = exact_cos + np.float32(1.0) * (matrix @ direction)
    for got, want in ((cosine, exact_cos), (moved, exact_moved)):
        top = np.argsort(-want)[:100]
        assert set(np.argsort(-got)[:100].tolist()) == set(top.tolist())
        np.testing.assert_allclose(got[top], want[top], rtol=1e-5)
        assert np.sort(got)[-101] <= np.sort(want)[-101] + 1e-5  # the pool floor holds
    # The exact scorer is the reference itself.
    _, plain_cos, plain_moved = DenseScorer(matrix).mixed(query, direction, 1.0)
    np.testing.assert_allclose(plain_cos, exact_cos, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(plain_moved, exact_moved, rtol=1e-5, atol=1e-6)


def _has_int8_copy(cache: dict) -> bool:
    """The rows' int8 copy, or (pages of several sections) the mixed vectors' one."""
    return "int8_rows" in cache or any(
        isinstance(key, tuple) and key[0] == "page_side" and cache[key].compact is not None
        for key in cache
    )


def _pages(n: int, size: int = 3) -> PageVectors:
    """Pages of `size` contiguous rows, the last one alone (a one-section page)."""
    chunks = np.arange(n - 1)
    rows = chunks // size
    return PageVectors(np.zeros((rows[-1] + 1, 0), np.float32), chunks, rows)


def test_page_mixed_scores_exact_and_int8_agree_with_the_gathered_formula():
    """Page-level evidence mixed in by the scorer: the exact path gives the bits of the
    formula over gathered rows (as fusion computed it before), the int8 pass over the mixed
    vectors rescores the best rows to those same bits and caps the rest below them."""
    matrix = clustered()
    n = matrix.shape[0]
    layout = _pages(n)
    sums = np.add.reduceat(
        matrix[layout.chunks], np.flatnonzero(np.r_[True, np.diff(layout.rows) > 0])
    )
    page_vecs = (sums / np.linalg.norm(sums, axis=1, keepdims=True)).astype(np.float32)
    pages = PageVectors(page_vecs, layout.chunks, layout.rows)
    query, direction = matrix[0] + matrix[1], matrix[10:13].mean(axis=0)
    rho, beta = np.float32(0.5), np.float32(1.0)
    # The formula as query.score.fusion applied it, over the gathered rows of multi-section pages.
    sub = matrix[pages.chunks]
    plain = matrix @ query
    mix = (np.float32(1) - rho) * np.einsum("ij,j->i", sub, query) + rho * np.einsum(
        "ij,j->i", page_vecs, query
    )[pages.rows]
    want_cos = np.einsum("ij,j->i", matrix, query)
    want_cos[pages.chunks] = mix
    want_moved = np.einsum("ij,j->i", matrix, query) + beta * np.einsum(
        "ij,j->i", matrix, direction
    )
    want_moved[pages.chunks] = mix + beta * np.einsum("ij,j->i", sub, direction)
    exact = DenseScorer(matrix, pages=PageSide.of(pages, matrix))
    raw, cos, moved = exact.mixed(query, direction, 1.0, rho=0.5)
    assert np.array_equal(cos, want_cos) and np.array_equal(moved, want_moved)
    np.testing.assert_allclose(raw, plain, rtol=1e-5, atol=1e-6)
    fast = DenseScorer(matrix, depth=300, pages=PageSide.of(pages, matrix, 0.5))
    assert fast.pages.compact is not None
    _, cos8, moved8 = fast.mixed(query, direction, 1.0, keep=101, rho=0.5)
    for got, want in ((cos8, want_cos), (moved8, want_moved)):
        top = np.argsort(-want)[:101]
        assert set(np.argsort(-got)[:101].tolist()) == set(top.tolist())
        assert np.array_equal(got[top], want[top])
        assert np.sort(got)[-102] <= np.sort(want)[-102]  # the pool floor holds


def test_auto_builds_the_int8_copy_on_the_second_query(indexed_notes: Path, monkeypatch):
    monkeypatch.setattr(vector, "AUTO_MIN_ROWS", 0)
    monkeypatch.setattr(vector, "RESCORE_DEPTH", 2)
    fast = open_index(config=load_config(indexed_notes, environ={}))
    exact = open_index(
        config=load_config(indexed_notes, environ={"MDVDB_SEARCH_FIRST_PASS": "exact"})
    )
    first = fast.search("how to extract an archive", mode="hybrid")
    assert not _has_int8_copy(fast.snapshot.cache)  # a one-shot search pays no copy
    second = fast.search("git branch and merge", mode="hybrid")
    assert _has_int8_copy(fast.snapshot.cache)
    for response, query in ((first, "how to extract an archive"), (second, "git branch and merge")):
        reference = exact.search(query, mode="hybrid")
        assert [(r.chunk_id, r.score) for r in response.results] == [
            (r.chunk_id, r.score) for r in reference.results
        ]


def test_a_bad_first_pass_setting_is_one_line(indexed_notes: Path):
    result = run_cli(
        "search", "archive", cwd=indexed_notes, env={"MDVDB_SEARCH_FIRST_PASS": "fastest"}
    )
    assert result.returncode in (1, 2)
    assert "MDVDB_SEARCH_FIRST_PASS" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_int8_hybrid_equals_the_exact_scan_on_cranfield(
    corpora_dir: Path, tmp_path: Path, monkeypatch
):
    """Every Cranfield query: the fused scores of the int8 pass rescored at a depth of 200
    (of ~1.4k chunks: as selective as 1000 of 7k) are the exact scan's, bit for bit; and the
    CLI answers the same with MDVDB_SEARCH_FIRST_PASS=int8 and =exact."""
    source = unpack_corpus(corpora_dir, "cranfield")
    root = tmp_path / "cranfield"
    shutil.copytree(source / "md", root)
    assert run_cli("ingest", "-q", cwd=root).returncode == 0
    queries = [json.loads(line)["text"] for line in (source / "queries.jsonl").open()]
    monkeypatch.setattr(vector, "RESCORE_DEPTH", 200)
    exact = open_index(config=load_config(root, environ={"MDVDB_SEARCH_FIRST_PASS": "exact"}))
    fast = open_index(config=load_config(root, environ={"MDVDB_SEARCH_FIRST_PASS": "int8"}))
    assert exact.snapshot.vectors.shape[0] > 200
    recalls, identical = [], 0
    for query in queries:
        want, _ = mode_scores(exact, query, "hybrid")
        got, _ = mode_scores(fast, query, "hybrid")
        top_want = set(vector.top_rows(want, 10).tolist())
        recalls.append(len(top_want & set(vector.top_rows(got, 10).tolist())) / 10)
        identical += bool(np.array_equal(want, got))
    assert _has_int8_copy(fast.snapshot.cache)
    assert np.mean(recalls) >= 0.99
    assert identical >= 0.99 * len(queries)
    for query in queries[:3]:  # the CLI, whole (depth 1000 here: the int8 pass still runs)
        answers = [
            run_cli("search", query, "--json", cwd=root, env={"MDVDB_SEARCH_FIRST_PASS": mode})
            for mode in ("int8", "exact")
        ]
        assert all(a.returncode == 0 for a in answers)
        hits = [[(h["path"], h["score"]) for h in json.loads(a.stdout)["results"]] for a in answers]
        assert hits[0] == hits[1] and hits[0]


def test_semantic_mode_through_the_int8_pass_answers_as_the_exact_scan(
    indexed_notes: Path, monkeypatch
):
    """`--mode semantic` reads the int8 copy once it exists (its best rows rescored), and
    under a narrow, a middling and a broad filter answers what the exact scan answers."""
    monkeypatch.setattr(vector, "RESCORE_DEPTH", 2)
    fast = open_index(
        config=load_config(indexed_notes, environ={"MDVDB_SEARCH_FIRST_PASS": "int8"})
    )
    exact = open_index(
        config=load_config(indexed_notes, environ={"MDVDB_SEARCH_FIRST_PASS": "exact"})
    )
    n = exact.snapshot.vectors.shape[0]
    assert n > 8
    rng = np.random.default_rng(5)
    masks = {"none": None, "all but one": np.arange(n) != 3}
    masks["narrow"] = np.isin(np.arange(n), rng.choice(n, size=max(1, n // 10), replace=False))
    masks["half"] = np.arange(n) % 2 == 0
    for query in ("how to extract an archive", "git branch and merge", "network ports"):
        for name, mask in masks.items():
            got = fast.search(query, mode="semantic", limit=5, mask=mask)
            want = exact.search(query, mode="semantic", limit=5, mask=mask)
            assert [(r.chunk_id, r.score) for r in got.results] == [
                (r.chunk_id, r.score) for r in want.results
            ], (query, name)
            assert got.results, (query, name)
    assert _has_int8_copy(fast.snapshot.cache)

"""The int8 first pass of hybrid search (query/vector.py): rescored rows are exact, the rest
can never outrank them, and over a real corpus the fused scores are those of the exact scan."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from kernel.config import load_config
from query import open_index, vector
from query.search import mode_scores
from query.vector import DenseScorer, Int8Rows
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
    cosine, moved = fast.scores(query, direction, 1.0)
    exact_cos = matrix @ query
    exact_moved = exact_cos + np.float32(1.0) * (matrix @ direction)
    for got, want in ((cosine, exact_cos), (moved, exact_moved)):
        top = np.argsort(-want)[:100]
        assert set(np.argsort(-got)[:100].tolist()) == set(top.tolist())
        np.testing.assert_allclose(got[top], want[top], rtol=1e-5)
        assert np.sort(got)[-101] <= np.sort(want)[-101] + 1e-5  # the pool floor holds
    # The exact scorer is the reference itself.
    plain_cos, plain_moved = DenseScorer(matrix).scores(query, direction, 1.0)
    np.testing.assert_allclose(plain_cos, exact_cos, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(plain_moved, exact_moved, rtol=1e-5, atol=1e-6)


def test_auto_builds_the_int8_copy_on_the_second_query(indexed_notes: Path, monkeypatch):
    monkeypatch.setattr(vector, "AUTO_MIN_ROWS", 0)
    monkeypatch.setattr(vector, "RESCORE_DEPTH", 2)
    fast = open_index(config=load_config(indexed_notes, environ={}))
    exact = open_index(
        config=load_config(indexed_notes, environ={"MDVDB_SEARCH_FIRST_PASS": "exact"})
    )
    first = fast.search("how to extract an archive", mode="hybrid")
    assert "int8_rows" not in fast.snapshot.cache  # a one-shot search pays no copy
    second = fast.search("git branch and merge", mode="hybrid")
    assert "int8_rows" in fast.snapshot.cache
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
        top_want = set(vector.top_k(want, 10).tolist())
        recalls.append(len(top_want & set(vector.top_k(got, 10).tolist())) / 10)
        identical += bool(np.array_equal(want, got))
    assert "int8_rows" in fast.snapshot.cache
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

"""Exact vector search: one matrix-vector product over the mapped float32 matrix.

No ANN library: 100k x 384 from a mapped file is 12 ms here, exact, and needs no build step.
"""

from __future__ import annotations

import numpy as np


def cosine_scores(matrix: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Rows and query are unit length, so the dot product is the cosine."""
    return row_dots(matrix, query)


def row_dots(matrix: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """matrix @ vector through einsum's single-threaded SIMD loop, not BLAS: OpenBLAS's
    threaded sgemv waits for a scheduler slice whenever the other core is busy, which on a
    shared 2-core machine made a 40k x 256 product 10 ms at the median against einsum's 2-3 ms
    (same minimum, 1.6 ms; bench/query_speed.py, docs/benchmarks.md)."""
    scores = np.einsum("ij,j->i", matrix, vector.astype(np.float32, copy=False))
    # A NaN row (a damaged index, an old provider answer) scores nothing rather than
    # turning every normalised hybrid score into NaN (cheap: one pass over n scores).
    return np.nan_to_num(scores, copy=False, nan=0.0, posinf=0.0, neginf=0.0)


def top_k(scores: np.ndarray, k: int, mask: np.ndarray | None = None) -> np.ndarray:
    """Indices of the k best scores, best first; rows where mask is False are skipped."""
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    n = scores.shape[0]
    if n == 0 or k <= 0:
        return np.zeros(0, dtype=np.int64)
    k = min(k, n)
    part = np.argpartition(-scores, k - 1)[:k]
    order = part[np.argsort(-scores[part], kind="stable")]
    return order[np.isfinite(scores[order])]

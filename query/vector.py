"""Vector scoring: exact over the mapped float32 matrix, or an int8 first pass rescored exactly.

No ANN library: a scan needs no build step and stays exact where it matters. Below ~20k
chunks one float32 matrix-vector product is a few ms. Above, a long-lived reader (`mdvdb
serve`, MCP, the library) keeps an int8 copy of the matrix (per-dimension scales, a quarter
of the bytes) built on the snapshot's second vector query, scores every row on it (SIMD int8
dot products, simsimd) and rescores the best `RESCORE_DEPTH` rows exactly from float32.
Hybrid fusion only ever uses the best `pool` (100) cosines (every lower one is clipped to 0,
query.fusion), so when the exact top `pool` is among the rescored rows every fused score is
the exact one, whatever mask a tier or filter applies after; recall of that is measured per
corpus (bench/query_speed.py, tests). `--mode semantic` ranks raw cosines under any mask, so
it stays an exact scan.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Below this many rows a product is cheaper than handing it to another thread (~50 us).
PARALLEL_ROWS = 20_000
# Rows rescored exactly after the int8 pass (10x hybrid fusion's pool of 100).
RESCORE_DEPTH = 1000
# `auto`: the int8 pass only from this many chunks on (below, float32 is already cheap).
AUTO_MIN_ROWS = 20_000


def cosine_scores(matrix: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Rows and query are unit length, so the dot product is the cosine."""
    return row_dots(matrix, query)


def row_dots(matrix: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """matrix @ vector through einsum's single-threaded SIMD loop, not BLAS: OpenBLAS's
    threaded sgemv waits for a scheduler slice whenever the other core is busy, which on a
    shared 2-core machine made a 40k x 256 product 10 ms at the median against einsum's 2-3 ms
    (same minimum, 1.6 ms; bench/query_speed.py, docs/benchmarks.md). A matrix left in the
    shards of a sharded index (query.sharded.ShardedVectors) computes it shard by shard."""
    fanned = getattr(matrix, "row_dots", None)
    if fanned is not None:
        return fanned(vector)
    scores = np.einsum("ij,j->i", matrix, vector.astype(np.float32, copy=False))
    # A NaN row (a damaged index, an old provider answer) scores nothing rather than
    # turning every normalised hybrid score into NaN (cheap: one pass over n scores).
    return np.nan_to_num(scores, copy=False, nan=0.0, posinf=0.0, neginf=0.0)


@dataclass(frozen=True)
class Int8Rows:
    """An int8 copy of a float32 matrix: column j is stored as round(x / scale[j]) with
    scale[j] = max |x| of column j / 127, so each dimension uses the whole int8 range (the
    dimensions of a static model differ in spread by 10x and more)."""

    codes: np.ndarray  # (n, d) int8, C-contiguous
    scale: np.ndarray  # (d,) float32

    @classmethod
    def of(cls, matrix: np.ndarray, block: int = 65_536) -> Int8Rows:
        """Quantise in blocks of rows, so the float32 temporaries stay a few MB."""
        n, d = matrix.shape
        top = np.zeros(d, dtype=np.float32)
        for a in range(0, n, block):
            part = np.nan_to_num(matrix[a : a + block], nan=0.0, posinf=0.0, neginf=0.0)
            np.maximum(top, np.abs(part).max(axis=0, initial=0.0), out=top)
        scale = np.where(top > 0, top / np.float32(127), np.float32(1)).astype(np.float32)
        codes = np.empty((n, d), dtype=np.int8)
        for a in range(0, n, block):
            part = np.nan_to_num(matrix[a : a + block], nan=0.0, posinf=0.0, neginf=0.0)
            codes[a : a + block] = np.clip(np.rint(part / scale), -127, 127)
        return cls(codes, scale)

    def dots(self, vectors: np.ndarray) -> np.ndarray:
        """Approximate matrix @ v for each row v of `vectors` (k, d) as a (k, n) float32
        array, in one pass over the codes: v * scale is itself quantised to int8 (its own
        scale per vector), and the int8 x int8 products are exact integer sums."""
        import simsimd

        weighted = vectors.astype(np.float32) * self.scale
        top = np.abs(weighted).max(axis=1)
        step = np.where(top > 0, top / np.float32(127), np.float32(1)).astype(np.float32)
        query = np.rint(weighted / step[:, None]).astype(np.int8)
        # codes first: each row of codes is read once for all k vectors (the other order
        # reads the matrix k times: 52 against 32-47 ms for k=2 at 131k under load).
        raw = np.asarray(simsimd.cdist(self.codes, query, metric="dot", out_dtype="float32"))
        return np.multiply(raw.T, step[:, None], order="C")


class DenseScorer:
    """Cosines of every row against a query (and the dense-feedback direction), exact or by
    an int8 pass plus exact rescoring. The rows outside the rescored set keep their int8
    estimate, capped at the lowest exact score of the rescored set: they can never outrank
    one, so a top-k or a top-`pool` floor taken on the result is the exact one whenever the
    exact top-k is among the rescored rows (and `explain` still shows a near cosine)."""

    def __init__(self, matrix: np.ndarray, compact: Int8Rows | None = None, depth: int = 0):
        self.matrix = matrix
        self.compact = compact
        self.depth = depth or RESCORE_DEPTH

    def scores(
        self,
        query: np.ndarray,
        direction: np.ndarray | None = None,
        beta: float = 0.0,
        keep: int = 0,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(matrix @ q, matrix @ (q + beta * direction)): the first-pass cosine and the
        dense-feedback score (the second is the first when `direction` is None). `keep`: the
        caller reads the best `keep` scores, so at least that many rows are rescored."""
        query = query.astype(np.float32, copy=False)
        beta32 = np.float32(beta)
        depth = max(self.depth, keep)
        if self.compact is None or self.matrix.shape[0] <= depth:
            if direction is None:
                cosine = row_dots(self.matrix, query)
                return cosine, cosine
            direction = direction.astype(np.float32)
            if self.matrix.shape[0] < PARALLEL_ROWS:
                cosine = row_dots(self.matrix, query)
                return cosine, cosine + beta32 * row_dots(self.matrix, direction)
            # Both products at once, the second on the other core (query.second_core).
            from query.second_core import in_background

            moved = in_background(row_dots, self.matrix, direction)
            cosine = row_dots(self.matrix, query)
            return cosine, cosine + beta32 * moved.result()
        rows = query[None] if direction is None else np.stack([query, direction])
        approx = self.compact.dots(rows)
        cosine = approx[0]
        moved = cosine if direction is None else cosine + beta32 * approx[1]
        picked = _best_rows(cosine, depth)
        if direction is not None:
            picked = np.union1d(picked, _best_rows(moved, depth))
        exact = self.matrix[picked]  # gather: depth rows, not n
        exact_cos = row_dots(exact, query)
        cosine = _with_exact(cosine, picked, exact_cos)
        if direction is None:
            return cosine, cosine
        exact_moved = exact_cos + beta32 * row_dots(exact, direction.astype(np.float32))
        return cosine, _with_exact(moved, picked, exact_moved)


def _best_rows(scores: np.ndarray, k: int) -> np.ndarray:
    return np.argpartition(-scores, k - 1)[:k]


def _with_exact(approx: np.ndarray, rows: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """approx capped at min(exact) everywhere, exact at `rows` (in place: approx is ours)."""
    np.minimum(approx, exact.min() if len(exact) else 0.0, out=approx)
    approx[rows] = exact
    return approx


def dense_scorer(index) -> DenseScorer:
    """The scorer for this reader's snapshot, by MDVDB_SEARCH_FIRST_PASS: `exact`; `int8`;
    `auto` (default) = int8 from AUTO_MIN_ROWS chunks on, once the snapshot has answered a
    vector query (a one-shot `mdvdb search` never pays for a copy it would use once: building
    it is a pass over the matrix, as dear as the exact scan)."""
    snap = index.snapshot
    matrix = snap.vectors
    mode = getattr(index.config, "search_first_pass", "auto")
    n = matrix.shape[0]
    if not isinstance(matrix, np.ndarray):  # sharded: each shard's exact scan, in parallel
        return DenseScorer(matrix)
    if mode == "exact" or n <= RESCORE_DEPTH or (mode == "auto" and n < AUTO_MIN_ROWS):
        return DenseScorer(matrix)
    if not _has_simsimd():  # a platform without its wheel: the exact scans, same results
        return DenseScorer(matrix)
    compact = snap.cache.get("int8_rows")
    if compact is None:
        seen = snap.cache.get("vector_queries", 0)
        snap.cache["vector_queries"] = seen + 1
        if mode == "auto" and seen == 0:
            return DenseScorer(matrix)
        compact = snap.cache["int8_rows"] = Int8Rows.of(matrix)
    return DenseScorer(matrix, compact)


def _has_simsimd() -> bool:
    try:
        import simsimd  # noqa: F401
    except ImportError:
        return False
    return True


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

"""Pack's IVF step: coarse lists of the chunk vectors (the `ivf` table, `kernel.ivf`) by seeded
spherical k-means on a sample, about sqrt(n) lists; an edit's fresh rows join the nearest
centroid until drift or growth calls for retraining; below `min_rows` chunks nothing is built
(docs/benchmarks.md, "IVF first pass (issue 18 item 2, fourth round)")."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from kernel import ivf as ivf_format

SAMPLE_PER_LIST = 40  # training rows per list (at least), as FAISS recommends 39-256
ITERATIONS = 10
DRIFT = 0.2  # rows assigned since training / rows, above which the lists are retrained
# Rows assigned per product: a small temporary beside pack's peak, the same bits at any size.
BLOCK = 8_192
SEED = 20261201


@dataclass(frozen=True)
class IvfPart:
    table: Any  # pyarrow Table (kernel.ivf.schema) or None: no IVF
    meta: dict[str, Any] | None
    trained: bool  # the lists were (re)trained in this pack


def list_count(n: int) -> int:
    return max(1, int(round(math.sqrt(n))))


def _vector_blocks(chunks, dims: int):
    """(start, (rows, dims) float32 array) for each piece of the chunks' vector column:
    views over the previous index's map or the fresh table, never the whole matrix."""
    column = chunks.column("vector")
    at = 0
    for piece in column.chunks:
        block = _matrix(piece, dims)
        for a in range(0, len(block), BLOCK):
            yield at + a, block[a : a + BLOCK]
        at += len(block)


def _rows(chunks, dims: int, rows: np.ndarray) -> np.ndarray:
    """The vectors at `rows`, gathered from NumPy views of the column's pieces (no `take`,
    which would copy every vector first)."""
    rows = np.asarray(rows, dtype=np.int64)
    out = np.zeros((len(rows), dims), dtype=np.float32)
    at = 0
    for piece in chunks.column("vector").chunks:
        size = len(piece)
        inside = np.flatnonzero((rows >= at) & (rows < at + size))
        if len(inside):
            out[inside] = _matrix(piece, dims)[rows[inside] - at]
        at += size
    return out


def _matrix(array, dims: int) -> np.ndarray:
    """A fixed-size-list array's values as (rows, dims), nulls included (zero rows)."""
    flat = array.values.slice(array.offset * dims, len(array) * dims)
    return np.asarray(flat.to_numpy(zero_copy_only=False), dtype=np.float32).reshape(-1, dims)


def _clean(x: np.ndarray) -> np.ndarray:
    return np.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0)


def assign(vectors: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """The list of each row: its centroid of highest dot product."""
    out = np.empty(len(vectors), dtype=np.int32)
    for a in range(0, len(vectors), BLOCK):
        out[a : a + BLOCK] = np.argmax(_clean(vectors[a : a + BLOCK]) @ centroids.T, axis=1)
    return out


def train(sample: np.ndarray, k: int) -> np.ndarray:
    """Spherical k-means on `sample` (unit rows): k unit centroids. An empty list takes
    the sample row farthest from its centroid, so no list stays empty."""
    rng = np.random.default_rng(SEED)
    sample = _clean(sample)  # the caller's array goes here when it holds no other reference
    k = min(k, len(sample))
    centroids = sample[rng.choice(len(sample), k, replace=False)].copy()
    for _ in range(ITERATIONS):
        products = sample @ centroids.T
        labels = np.argmax(products, axis=1)
        best = products[np.arange(len(sample)), labels]
        del products  # before the gather below and the next product: one at a time
        counts = np.bincount(labels, minlength=k)
        sums = np.zeros_like(centroids)
        filled = counts > 0
        order = np.argsort(labels, kind="stable")
        starts = (np.cumsum(counts) - counts)[filled]
        sums[filled] = np.add.reduceat(sample[order], starts, axis=0)
        empty = np.flatnonzero(counts == 0)
        if len(empty):
            far = np.argsort(best)[: len(empty)]
            sums[empty] = sample[far]
        norms = np.linalg.norm(sums, axis=1, keepdims=True)
        centroids = (sums / np.maximum(norms, np.float32(1e-12))).astype(np.float32)
    return centroids


def _table(centroids: np.ndarray, labels: np.ndarray, dims: int):
    import pyarrow as pa

    order = np.argsort(labels, kind="stable").astype(np.int32)  # ascending ids in each list
    counts = np.bincount(labels, minlength=len(centroids))
    offsets = np.r_[0, np.cumsum(counts)].astype(np.int32)
    rows = pa.ListArray.from_arrays(pa.array(offsets), pa.array(order, pa.int32()))
    flat = pa.array(np.ascontiguousarray(centroids, dtype=np.float32).reshape(-1))
    cents = pa.FixedSizeListArray.from_arrays(flat, dims)
    return pa.Table.from_arrays([cents, rows], schema=ivf_format.schema(dims))


def _previous_labels(previous, dims: int) -> tuple[np.ndarray, np.ndarray, dict] | None:
    """(centroids, list of each old chunk, meta) of the previous index's sound IVF."""
    if previous is None:
        return None
    table = previous.tables.get(ivf_format.TABLE)
    n_old = previous.tables["chunks"].num_rows
    lists = ivf_format.read(table, previous.meta, n_old, dims)
    if lists is None:
        return None
    labels = np.empty(n_old, dtype=np.int32)
    labels[np.asarray(lists.rows)] = np.repeat(
        np.arange(lists.lists, dtype=np.int32), np.diff(lists.offsets)
    )
    return np.array(lists.centroids), labels, previous.meta[ivf_format.META_KEY]


def build(plan, dims: int, min_rows: int) -> IvfPart:
    """The `ivf` table for the plan's chunks (None below `min_rows` chunks)."""
    chunks = plan.chunks
    n = chunks.num_rows
    if n < max(min_rows, 2) or dims <= 0:
        return IvfPart(None, None, False)
    k = list_count(n)
    old = _previous_labels(plan.previous, dims)
    source = np.asarray(plan.chunk_source)
    if old is not None:
        centroids, old_labels, info = old
        fresh = np.flatnonzero(source < 0)
        since = int(info.get("assigned_since", 0)) + len(fresh)
        trained = int(info.get("trained_rows", 0)) or 1
        balanced = len(centroids) / 2 <= k <= 2 * len(centroids)
        if balanced and since <= DRIFT * max(n, trained):
            labels = np.empty(n, dtype=np.int32)
            kept = source >= 0
            labels[kept] = old_labels[source[kept]]
            if len(fresh):
                labels[fresh] = assign(_rows(chunks, dims, fresh), centroids)
            meta = {**info, "lists": len(centroids), "assigned_since": since, "chunks": n}
            return IvfPart(_table(centroids, labels, dims), meta, False)
    rng = np.random.default_rng(SEED)
    size = min(n, max(SAMPLE_PER_LIST * k, 20_000))
    picked = np.sort(rng.choice(n, size, replace=False)) if size < n else np.arange(n)
    centroids = train(_rows(chunks, dims, picked), k)
    labels = np.empty(n, dtype=np.int32)
    for start, block in _vector_blocks(chunks, dims):
        labels[start : start + len(block)] = assign(block, centroids)
    meta = {
        "version": ivf_format.VERSION,
        "lists": len(centroids),
        "trained_rows": n,
        "sample": int(size),
        "assigned_since": 0,
        "chunks": n,
    }
    return IvfPart(_table(centroids, labels, dims), meta, True)

"""Two matrix-vector products over the index's vectors at once, one per core.

Hybrid search scores every chunk against the query and, for the dense feedback, against the
mean of the best BM25 chunks (query.fusion.hybrid). Each product streams the whole mapped
matrix (40k x 384 float32 = 62 MB on tldr, ~2.5 ms) and is bound by one core's memory
bandwidth, so reading it once for both (one (n, 384) @ (384, 2) product) saves nothing (einsum) or
loses (OpenBLAS's sgemm with two columns, measured 2-3x slower than two einsums). Two
threads, each running one einsum (which releases the GIL), read it on both cores at once.

On a busy machine the second core may not be free: the caller's thread runs its product, and
if the helper has not started the other one by then, runs it too (`Future.cancel` succeeds
only for work not started), so a busy core never makes a search wait for a scheduler slice.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache

import numpy as np

from query.vector import row_dots

# Below this many rows a product is cheaper than handing it to another thread (~50 us).
PARALLEL_ROWS = 20_000


@lru_cache(maxsize=1)
def _helper() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(1, thread_name_prefix="mdvdb-dots")


def row_dots_pair(
    matrix: np.ndarray, a: np.ndarray, b: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(matrix @ a, matrix @ b) as `row_dots` computes each; on two cores when there are two
    and the matrix is large enough to be worth it."""
    if matrix.shape[0] < PARALLEL_ROWS or (os.cpu_count() or 1) < 2:
        return row_dots(matrix, a), row_dots(matrix, b)
    second = _helper().submit(row_dots, matrix, b)
    first = row_dots(matrix, a)
    if second.cancel():  # the helper never got a core: do it here rather than wait for one
        return first, row_dots(matrix, b)
    return first, second.result()

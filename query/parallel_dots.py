"""Two matrix-vector products over the index's vectors at once, one per core.

Hybrid search scores every chunk against the query and, for the dense feedback, against the
mean of the best BM25 chunks (query.fusion.hybrid). Each product streams the whole mapped
matrix (40k x 384 float32 = 62 MB on tldr, ~2.5 ms) and is bound by one core's memory
bandwidth, so reading it once for both (one (n, 384) @ (384, 2) product) saves nothing (einsum) or
loses (OpenBLAS's sgemm with two columns, measured 2-3x slower than two einsums). Two
threads, each running one einsum (which releases the GIL), read it on both cores at once.

On a busy machine the second core may not be free: the caller's thread runs its product, and
if the helper has not started the other one by then, runs it too (whoever claims
the product first computes it), so a busy core never makes a search wait for a scheduler slice.
"""

from __future__ import annotations

import os
import threading
from functools import lru_cache

import numpy as np

from query.vector import row_dots

# Below this many rows a product is cheaper than handing it to another thread (~50 us).
PARALLEL_ROWS = 20_000


class _Job:
    """One product for the helper; whoever claims it first (helper or caller) computes it."""

    def __init__(self, matrix: np.ndarray, vector: np.ndarray):
        self.matrix, self.vector = matrix, vector
        self.result: np.ndarray | None = None
        self.done = threading.Event()
        self._lock = threading.Lock()
        self._claimed = False

    def claim(self) -> bool:
        with self._lock:
            if self._claimed:
                return False
            self._claimed = True
            return True

    def run(self) -> None:
        try:
            self.result = row_dots(self.matrix, self.vector)
        except Exception:  # the caller sees no result and computes it, raising it there
            self.result = None
        finally:
            self.done.set()


class _Helper:
    """A daemon thread that waits for one product at a time. Not a ThreadPoolExecutor:
    importing concurrent.futures costs a cold `mdvdb search` ~3 ms, and a thread started per
    call would wait for the scheduler before the caller could go on."""

    def __init__(self) -> None:
        self._ready = threading.Condition()
        self._job: _Job | None = None
        threading.Thread(target=self._loop, name="mdvdb-dots", daemon=True).start()

    def submit(self, job: _Job) -> bool:
        """Hand `job` over; False when the helper already has one (a concurrent search)."""
        with self._ready:
            if self._job is not None:
                return False
            self._job = job
            self._ready.notify()
            return True

    def _loop(self) -> None:
        while True:
            with self._ready:
                while self._job is None:
                    self._ready.wait()
                job, self._job = self._job, None
            if job.claim():
                job.run()


@lru_cache(maxsize=1)
def _helper() -> _Helper:
    return _Helper()


def row_dots_pair(
    matrix: np.ndarray, a: np.ndarray, b: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(matrix @ a, matrix @ b) as `row_dots` computes each; on two cores when there are two
    and the matrix is large enough to be worth it."""
    if matrix.shape[0] < PARALLEL_ROWS or (os.cpu_count() or 1) < 2:
        return row_dots(matrix, a), row_dots(matrix, b)
    second = _Job(matrix, b)
    if not _helper().submit(second):
        return row_dots(matrix, a), row_dots(matrix, b)
    first = row_dots(matrix, a)
    if second.claim():  # the helper never got a core: do it here rather than wait for one
        return first, row_dots(matrix, b)
    second.done.wait()
    if second.result is None:  # the helper's product failed: the caller's raises the error
        return first, row_dots(matrix, b)
    return first, second.result

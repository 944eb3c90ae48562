"""A search's work on the other cores, on one `concurrent.futures` thread pool.

`in_background` runs a call beside the caller (the second dense product of a hybrid search,
a warm query's embedding while BM25 is scored); `in_parallel` runs a pass split by rows
(`row_ranges`: the IVF lists' int8 products, the block-wise fusion, top-k comparisons). The
calls release the GIL (NumPy, simsimd, onnxruntime), and each row is computed on its own, so
the answer is the same bits on one thread or many.

MDVDB_SEARCH_THREADS sets how many threads a split pass runs on (`set_threads`, per search);
0, the default: one per core this process may run on.
"""

from __future__ import annotations

import os

from kernel.config import Config

TYPE_CHECKING = False
if TYPE_CHECKING:
    from concurrent.futures import Future, ThreadPoolExecutor

# Pieces per thread of a split pass: small enough that a thread the scheduler pauses holds up
# the pass for one piece at most, large enough that handing one out costs nothing.
PIECES_PER_THREAD = 4

# Threads of a split pass (MDVDB_SEARCH_THREADS, which each search sets); None: every core.
_THREADS: int | None = Config.search_threads or None
_POOLS: dict[int, ThreadPoolExecutor] = {}


def cores() -> int:
    """The cores this process may run on (its affinity, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def set_threads(count: int | None) -> None:
    """Run a search's split passes on `count` threads (1: in the caller); None: every core.
    Process-wide, as the pool is."""
    global _THREADS
    _THREADS = count


def threads() -> int:
    return cores() if _THREADS is None else max(1, _THREADS)


def _pool(workers: int) -> ThreadPoolExecutor:
    pool = _POOLS.get(workers)
    if pool is None:
        from concurrent.futures import ThreadPoolExecutor  # only once a pass is split

        pool = _POOLS[workers] = ThreadPoolExecutor(workers, thread_name_prefix="mdvdb-search")
    return pool


def in_background(function, *args) -> Future:
    """`function(*args)` started on another thread; `.result()` gives its value."""
    return _pool(max(2, threads())).submit(function, *args)


def in_parallel(function, pieces: list) -> list:
    """`[function(piece) for piece in pieces]`, in the pieces' order, on `threads()` threads."""
    count = threads()
    if len(pieces) < 2 or count < 2:
        return [function(piece) for piece in pieces]
    return list(_pool(count).map(function, pieces))


def row_ranges(n: int, minimum: int) -> list[tuple[int, int]]:
    """0..n cut into contiguous (start, end) ranges of at least `minimum` rows each, up to
    PIECES_PER_THREAD per thread (one range when n is below twice `minimum` or one thread
    runs the pass)."""
    count, k = threads(), 1
    if count > 1 and n >= 2 * max(minimum, 1):
        k = max(1, min(count * PIECES_PER_THREAD, n // max(minimum, 1)))
    bounds = [n * i // k for i in range(k + 1)]
    return list(zip(bounds[:-1], bounds[1:], strict=True))

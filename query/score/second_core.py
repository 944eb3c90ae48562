"""A search's work on the other cores, on one thread pool: `in_background` runs a call beside
the caller, `in_parallel` a pass split by rows (the same bits on any number of threads). The
caller takes part, so a busy machine never makes a search wait for a scheduler slice.
MDVDB_SEARCH_THREADS (0: one per core) sets the threads of a split pass."""

from __future__ import annotations

import itertools
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


class Background:
    """A call started on the pool. `result()` gives its value; if no thread has started it
    by then (every core busy), the caller runs it, rather than wait for a scheduler slice."""

    def __init__(self, function, args: tuple) -> None:
        self.function, self.args = function, args
        self.future: Future = _pool(max(1, threads() - 1)).submit(function, *args)

    def result(self):
        if self.future.cancel():
            return self.function(*self.args)
        return self.future.result()


class _Done:
    """A call already run (one thread: nothing to hand over)."""

    def __init__(self, value) -> None:
        self.value = value

    def result(self):
        return self.value


def in_background(function, *args) -> Background | _Done:
    """`function(*args)` started on another thread (run now on one); `.result()` gives its
    value."""
    if threads() < 2:
        return _Done(function(*args))
    return Background(function, args)


def in_parallel(function, pieces: list) -> list:
    """`[function(piece) for piece in pieces]` in order, on `threads()` threads: each takes the
    next piece not started, so a thread held back delays the pass by one piece at most."""
    count = threads()
    if len(pieces) < 2 or count < 2:
        return [function(piece) for piece in pieces]
    values: list = [None] * len(pieces)
    taken = itertools.count()  # `next` on it is atomic: each piece goes to one thread

    def work() -> None:
        while (i := next(taken)) < len(pieces):
            values[i] = function(pieces[i])

    helpers = [_pool(count - 1).submit(work) for _ in range(count - 1)]
    try:
        work()
    finally:
        for helper in helpers:  # one not started yet has nothing left to take
            if not helper.cancel():
                helper.result()
    return values


def row_ranges(n: int, minimum: int) -> list[tuple[int, int]]:
    """0..n cut into contiguous (start, end) ranges of at least `minimum` rows, up to
    PIECES_PER_THREAD per thread."""
    count, k = threads(), 1
    if count > 1 and n >= 2 * max(minimum, 1):
        k = max(1, min(count * PIECES_PER_THREAD, n // max(minimum, 1)))
    bounds = [n * i // k for i in range(k + 1)]
    return list(zip(bounds[:-1], bounds[1:], strict=True))

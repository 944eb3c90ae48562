"""The other cores' helper threads: a dense product, a pass split by rows, a query's embedding.

Hybrid search scores every chunk against the query and, for the dense feedback, against the
mean of the best BM25 chunks (query.score.fusion.hybrid). Each product streams the whole mapped
matrix (40k x 384 float32 = 62 MB on tldr, ~2.5 ms) and is bound by one core's memory
bandwidth, so reading it once for both (one (n, 384) @ (384, 2) product) saves nothing (einsum)
or loses (OpenBLAS's sgemm with two columns, measured 2-3x slower than two einsums). Two
threads, each running one einsum (which releases the GIL), read it on both cores at once. In
the same way a warm process embeds the query (onnxruntime, which releases the GIL) while the
caller scores BM25 (query.rank.search.mode_scores), and a pass whose rows are computed each on its
own (the IVF lists' int8 products, fusion's blocks) is cut into pieces that every core takes
from one queue (`in_parallel`).

On a busy machine the other cores may not be free: the caller runs its own part, and if no
helper has started the other by then, runs that too (whoever claims a job or a piece first
runs it), so a busy core never makes a search wait for a scheduler slice, only for a piece a
helper is already running.
"""

from __future__ import annotations

import os
import threading
from functools import lru_cache

from kernel.config import Config

# Helper threads at most (a memory-bound pass gains little past a few cores).
MAX_HELPERS = 3
# Pieces per thread of a split pass: small enough that a helper the scheduler pauses holds
# up the caller for one piece at most, large enough that taking one costs nothing.
PIECES_PER_THREAD = 4


class _Job:
    """One call for a helper; whoever claims it first (helper or caller) runs it."""

    def __init__(self, function, *args):
        self.function, self.args = function, args
        self.value = None
        self.error: BaseException | None = None
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
            self.value = self.function(*self.args)
        except BaseException as exc:  # handed to the caller by `result`
            self.error = exc
        finally:
            self.done.set()

    def take_over(self) -> None:
        """What a helper does with it: run it unless the caller already has."""
        if self.claim():
            self.run()

    def result(self):
        """The call's value (its exception re-raised here): run now by the caller if the
        helper has not started it, else waited for."""
        if self.claim():
            return self.function(*self.args)
        self.done.wait()
        if self.error is not None:
            raise self.error
        return self.value


class _Pieces:
    """`function(piece)` for every piece, taken one at a time from a shared cursor by the
    caller and by every helper that joins in."""

    def __init__(self, function, pieces: list):
        self.function, self.pieces = function, pieces
        self.values: list = [None] * len(pieces)
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        self._next = 0
        self._left = len(pieces)
        self.done = threading.Event()

    def _claim(self) -> int:
        with self._lock:
            at = self._next
            self._next += 1
            return at

    def take_over(self) -> None:
        """Run pieces until none is left to start (a helper's and the caller's loop)."""
        while (at := self._claim()) < len(self.pieces):
            try:
                self.values[at] = self.function(self.pieces[at])
            except BaseException as exc:  # handed to the caller by `result`
                self.error = exc
            with self._lock:
                self._left -= 1
                if self._left == 0:
                    self.done.set()

    def result(self) -> list:
        self.take_over()
        self.done.wait()
        if self.error is not None:
            raise self.error
        return self.values


class _Helper:
    """A daemon thread that waits for one job at a time. Not a ThreadPoolExecutor:
    importing concurrent.futures costs a cold `mdvdb search` ~3 ms, and a thread started per
    call would wait for the scheduler before the caller could go on."""

    def __init__(self) -> None:
        self._ready = threading.Condition()
        self._job: _Job | _Pieces | None = None
        threading.Thread(target=self._loop, name="mdvdb-dots", daemon=True).start()

    def submit(self, job: _Job | _Pieces) -> bool:
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
            job.take_over()


# Threads a split pass may run on, caller included (MDVDB_SEARCH_THREADS, which each search
# sets through `set_threads`; until then the setting's default); None: one per core this
# process may run on that is idle when a pass starts, up to 1 + MAX_HELPERS. `in_background`
# (one job on another core) does not depend on it.
_THREADS: int | None = Config.search_threads or None


def cores() -> int:
    """The cores this process may run on (its affinity, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def idle_cores() -> int:
    """The other cores with nothing to run at this moment: this process's cores less the
    caller and the machine's other runnable threads (the run queue, /proc/loadavg's fourth
    field, which counts the caller too). Without that file (not Linux), from the one-minute
    load average. On a machine whose every core is busy, a pass split over threads ran
    2% slower than on the caller alone (a woken helper waits for a slice, then the caller
    waits for its piece); with a core idle, 6-8% faster at 1M chunks (docs/benchmarks.md)."""
    try:
        with open("/proc/loadavg", "rb") as f:
            others = int(f.read().split()[3].split(b"/")[0]) - 1
    except (OSError, IndexError, ValueError):
        try:
            others = round(os.getloadavg()[0])
        except (AttributeError, OSError):
            return cores() - 1
    return max(0, cores() - 1 - others)


def set_threads(count: int | None) -> None:
    """Run a query's passes on at most `count` threads, the caller's included (1: helper
    threads off); None: one per core, those idle when a pass starts. Process-wide, as the
    helper threads are."""
    global _THREADS
    _THREADS = count


def threads() -> int:
    """How many threads a split pass runs on: the caller and each helper."""
    most = 1 + max(0, min(cores() - 1, MAX_HELPERS))
    return most if _THREADS is None else max(1, min(_THREADS, most))


@lru_cache(maxsize=1)
def _helpers() -> tuple[_Helper, ...]:
    """One helper per core beyond the caller's (at most MAX_HELPERS), started on first use;
    `threads` says how many of them a pass asks."""
    return tuple(_Helper() for _ in range(min(cores() - 1, MAX_HELPERS)))


def in_background(function, *args) -> _Job:
    """Start `function(*args)` on a helper thread; `.result()` gives its value. The call
    must release the GIL for most of its time to gain anything (NumPy products,
    onnxruntime runs); when every helper is busy or none has started it, the caller runs it."""
    job = _Job(function, *args)
    if cores() < 2:
        return job  # `result` runs it in the caller
    for helper in _helpers():
        if helper.submit(job):
            break
    return job


def in_parallel(function, pieces: list) -> list:
    """`[function(piece) for piece in pieces]`, in the pieces' order, run by the caller and
    every free helper at once, each taking the next piece not started. For a pass split by
    rows whose every row is computed on its own (the same bits as one call over all of
    them), by calls that release the GIL (NumPy, simsimd)."""
    if len(pieces) < 2 or threads() < 2:
        return [function(piece) for piece in pieces]
    job = _Pieces(function, pieces)
    for helper in _helpers()[: threads() - 1]:
        helper.submit(job)
    return job.result()


def row_ranges(n: int, minimum: int) -> list[tuple[int, int]]:
    """0..n cut into contiguous (start, end) ranges of at least `minimum` rows each, up to
    PIECES_PER_THREAD per thread (one range when n is below twice `minimum`, or one core;
    set to one per core, `set_threads(None)`: per core idle now, `idle_cores`)."""
    most, k = threads(), 1
    if most > 1 and n >= 2 * max(minimum, 1):
        if _THREADS is None:  # (read only for a pass that would split: ~4 us)
            most = min(most, 1 + idle_cores())
        k = max(1, min(most * PIECES_PER_THREAD, n // max(minimum, 1))) if most > 1 else 1
    bounds = [n * i // k for i in range(k + 1)]
    return list(zip(bounds[:-1], bounds[1:], strict=True))

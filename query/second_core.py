"""The second core's helper thread: a dense product or a warm query's embedding.

Hybrid search scores every chunk against the query and, for the dense feedback, against the
mean of the best BM25 chunks (query.fusion.hybrid). Each product streams the whole mapped
matrix (40k x 384 float32 = 62 MB on tldr, ~2.5 ms) and is bound by one core's memory
bandwidth, so reading it once for both (one (n, 384) @ (384, 2) product) saves nothing (einsum)
or loses (OpenBLAS's sgemm with two columns, measured 2-3x slower than two einsums). Two
threads, each running one einsum (which releases the GIL), read it on both cores at once. In
the same way a warm process embeds the query (onnxruntime, which releases the GIL) while the
caller scores BM25 (query.search.mode_scores).

On a busy machine the second core may not be free: the caller runs its own part, and if the
helper has not started the other by then, runs that too (whoever claims a job first runs it),
so a busy core never makes a search wait for a scheduler slice.
"""

from __future__ import annotations

import os
import threading
from functools import lru_cache


class _Job:
    """One call for the helper; whoever claims it first (helper or caller) runs it."""

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

    def result(self):
        """The call's value (its exception re-raised here): run now by the caller if the
        helper has not started it, else waited for."""
        if self.claim():
            return self.function(*self.args)
        self.done.wait()
        if self.error is not None:
            raise self.error
        return self.value


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


def in_background(function, *args) -> _Job:
    """Start `function(*args)` on the helper thread; `.result()` gives its value. The call
    must release the GIL for most of its time to gain anything (NumPy products,
    onnxruntime runs); when the helper is busy or has not started it, the caller runs it."""
    job = _Job(function, *args)
    if (os.cpu_count() or 1) < 2:
        return job  # `result` runs it in the caller
    _helper().submit(job)
    return job

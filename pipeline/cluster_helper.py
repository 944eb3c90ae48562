"""A full clustering's k-means in a helper process, forked while discover walks and fed by the
cluster stage, so the fit runs beside schema and pack (docs/architecture.md, "The pipeline:
doit tasks, one per stage"; the index equals one built without it:
tests/test_cluster_helper.py). It ignores Ctrl-C, ends with its parent (`kernel.lifeline`)
and never holds the writer lock."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from pipeline.cluster.topics import KChoice

# Fewer files than this never get a helper: under it the ingest starts no worker pool
# (`workers.POOL_MIN_FILES`) and k-means needs no scikit-learn (`cluster.NUMPY_BELOW`).
MIN_FILES = 1000


class ClusterHelper:
    """The parent's handle: `submit` a matrix, later `result` its `KChoice`; `close`."""

    def __init__(self, process: Any, conn: Any) -> None:
        self._process = process
        self._conn = conn

    @classmethod
    def start(cls) -> ClusterHelper | None:
        """A helper forked now, or None where forking is not safe."""
        import multiprocessing

        from pipeline.workers import pool_is_safe

        if not pool_is_safe():
            return None
        context = multiprocessing.get_context("fork")
        mine, theirs = context.Pipe()
        process = context.Process(target=_serve, args=(theirs, mine, os.getpid()), daemon=True)
        process.start()
        theirs.close()
        return cls(process, mine)

    def submit(self, vectors: np.ndarray, max_clusters: int) -> None:
        self._conn.send(("fit", vectors, max_clusters))

    def result(self) -> KChoice:
        """The fit, waiting for it; a helper that died or failed is one line."""
        from pipeline.stages import IngestError

        try:
            answer = self._conn.recv()
        except (EOFError, OSError):
            raise IngestError(
                "the clustering helper process died (out of memory?); the previous index is "
                "intact; MDVDB_WORKERS=1 runs without helper processes"
            ) from None
        if isinstance(answer, str):
            raise IngestError(f"clustering failed: {answer}; the previous index is intact")
        return answer

    def close(self) -> None:
        """Stop the helper (idle, or still fitting for a run that failed); again: nothing."""
        if self._process is None:
            return
        try:
            self._conn.close()  # the helper's recv ends: it exits
        except OSError:
            pass
        self._process.join(timeout=2)
        if self._process.is_alive():  # still fitting: nobody wants its answer
            self._process.kill()
            self._process.join()
        self._process = None


def _serve(conn: Any, parent_end: Any, parent: int) -> None:
    """The helper's life: import, then fit what comes until the pipe closes."""
    import signal

    from kernel.lifeline import die_with_parent

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent(parent)  # it would outlive a SIGKILLed parent, blocked in `recv`
    parent_end.close()  # so that the parent's close is our end of file
    import sklearn.cluster  # noqa: F401 - what the fit and the silhouette use
    import sklearn.metrics  # noqa: F401

    from pipeline.cluster.topics import choose_and_fit

    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            break
        _, vectors, max_clusters = message
        try:
            answer: Any = choose_and_fit(vectors, max_clusters)
        except Exception as exc:  # noqa: BLE001 - the parent reports it in one line
            answer = f"{type(exc).__name__}: {exc}"
        del vectors, message
        try:
            conn.send(answer)
        except OSError:
            break
    conn.close()
    os._exit(0)

"""The post-publish hand-over of a first full ingest: this checkout against a reference one.

A first build writes every chunk record (and, for the default local model, every vector) to
the state database; after the publish, `State.hand_over` forgets what the index now holds and
gives the pages back. This bench runs `mdvdb ingest` on a generated corpus with each
checkout's own interpreter, times `State.hand_over` inside that process, and reports the
whole ingest's wall, CPU (user+sys of the child), peak RSS and the state files' size after
the run (database + WAL) and at their largest (sampled while the run goes).

    python bench/reclaim.py --files 30000 --ref /work/base-s6 [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent

# Run inside the measured checkout: wrap State.hand_over with a timer, then the CLI.
_CHILD = r"""
import json, sys, time
import pipeline.state as st
spent = []
orig = st.State.hand_over
def timed(self, *a, **k):
    t = time.perf_counter()
    try:
        return orig(self, *a, **k)
    finally:
        spent.append(time.perf_counter() - t)
st.State.hand_over = timed
import resource
from mdvdb.cli import main
sys.argv = ["mdvdb", *sys.argv[1:]]
try:
    rc = main()
except SystemExit as e:
    rc = e.code
rss = max(resource.getrusage(w).ru_maxrss for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
print("HANDOVER " + json.dumps([spent, rss]), file=sys.stderr)
sys.exit(rc or 0)
"""


def _state_bytes(folder: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            if "cache.sqlite3" in name:
                try:
                    total += os.path.getsize(os.path.join(root, name))
                except OSError:
                    pass
    return total


def measure(checkout: Path, corpus: Path) -> dict:
    python = checkout / ".venv" / "bin" / "python"
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.5):
            peak[0] = max(peak[0], _state_bytes(corpus))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(
        [str(python), "-c", _CHILD, "ingest", str(corpus)],
        cwd=corpus,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    done.set()
    sampler.join()
    if proc.returncode != 0:
        sys.exit(f"ingest failed in {checkout}: {proc.stderr[-2000:]}")
    line = [x for x in proc.stderr.splitlines() if x.startswith("HANDOVER ")][-1]
    spent, rss_kb = json.loads(line.split(" ", 1)[1])
    final = _state_bytes(corpus)
    return {
        "checkout": str(checkout),
        "wall_s": round(wall, 1),
        "cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 1),
        "handover_s": round(sum(spent), 2),
        "peak_rss_mb": round(rss_kb / 1024),  # the ingest process or its largest worker
        "state_peak_mb": round(max(peak[0], final) / 2**20, 1),
        "state_after_mb": round(final / 2**20, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=30000)
    ap.add_argument("--ref", type=Path, default=None, help="reference checkout (its .venv)")
    ap.add_argument("--corpus", type=Path, default=None, help="a generated corpus to reuse")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mdvdb-reclaim-"))
    try:
        source = args.corpus
        if source is None:
            source = work / "source"
            subprocess.run(
                [
                    sys.executable,
                    str(HERE / "bench" / "generate.py"),
                    "--files",
                    str(args.files),
                    str(source),
                ],
                check=True,
            )
        rows = []
        for name, checkout in (("ref", args.ref), ("this", HERE)):
            if checkout is None:
                continue
            corpus = work / name
            shutil.copytree(source, corpus, ignore=shutil.ignore_patterns(".mdvdb*"))
            rows.append({"run": name, **measure(checkout, corpus)})
            shutil.rmtree(corpus)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    cols = [
        "run",
        "wall_s",
        "cpu_s",
        "handover_s",
        "peak_rss_mb",
        "state_peak_mb",
        "state_after_mb",
    ]
    print(" | ".join(cols))
    for r in rows:
        print(" | ".join(str(r[c]) for c in cols))


def sql_only(files: int, way: str) -> dict:
    """The hand-over's SQL alone on a state filled like a first build's (per file: a 16 KB
    chunk record, three 1 KB vectors, an embedded mark), without an ingest: `old` deletes
    row by row, `new` is `State._rebuild_without`; both then `State.reclaim`."""
    import numpy as np

    sys.path.insert(0, str(HERE))
    from pipeline.state import State

    folder = Path(tempfile.mkdtemp(prefix="mdvdb-reclaim-sql-"))
    try:
        state = State(folder)
        rng = np.random.default_rng(0)
        text = "x" * 16000
        for start in range(0, files, 2000):
            n = min(2000, files - start)
            shas = [f"{i:064x}" for i in range(start, start + n)]
            vshas = [rng.bytes(32) for _ in range(3 * n)]
            vectors = rng.standard_normal((3 * n, 256), dtype=np.float32)
            state.put_prepared("k", [(s, f'"{text}{s}"') for s in shas], "m", vshas, vectors, shas)
        state.db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        filled = _state_bytes(folder)
        gone = [f"{i:064x}" for i in range(files)]
        vgone = [r[0] for r in state.db.execute("SELECT sha256 FROM embeddings")]
        plans = [
            ("chunks", "key = ?", ("k",), gone),
            ("embedded", "model = ?", ("m|k",), gone),
            ("embeddings", "model = ?", ("m",), vgone),
        ]
        peak = [0]
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.2):
                peak[0] = max(peak[0], _state_bytes(folder))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        t0 = time.perf_counter()
        c0 = time.process_time()
        with state.transaction():
            for table, where, params, keys in plans:
                if way == "new":
                    state._rebuild_without(table, where, params, keys)
                    continue
                for at in range(0, len(keys), 500):
                    part = keys[at : at + 500]
                    marks = ",".join("?" * len(part))
                    state.db.execute(
                        f"DELETE FROM {table} WHERE {where} AND sha256 IN ({marks})",
                        (*params, *part),
                    )
        t1 = time.perf_counter()
        state.reclaim()
        t2 = time.perf_counter()
        done.set()
        sampler.join()
        row = {
            "way": way,
            "files": files,
            "state_filled_mb": round(filled / 2**20),
            "delete_s": round(t1 - t0, 2),
            "reclaim_s": round(t2 - t1, 2),
            "cpu_s": round(time.process_time() - c0, 2),
            "state_peak_mb": round(max(peak[0], filled) / 2**20),
            "state_after_mb": round(_state_bytes(folder) / 2**20, 1),
        }
        state.close()
        return row
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main_sql() -> None:
    ap = argparse.ArgumentParser(description="the hand-over's SQL alone, old vs new")
    ap.add_argument("--sql-files", type=int, required=True)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = [sql_only(args.sql_files, way) for way in ("old", "new")]
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    cols = list(rows[0])
    print(" | ".join(cols))
    for r in rows:
        print(" | ".join(str(r[c]) for c in cols))


if __name__ == "__main__":
    main_sql() if "--sql-files" in sys.argv else main()

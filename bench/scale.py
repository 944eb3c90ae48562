"""Scale curve: ingest, incremental runs, queries and footprint at 10k, 100k and 1M chunks.

A synthetic corpus per size (`bench/generate.py`: ~3 chunks a file), then, per size:

- full ingest: chunks/s, CPU/wall and peak RSS of the `mdvdb ingest` process;
- no-op and one-file edit: wall of a fresh `mdvdb ingest` process (median of --repeat);
  reference in the same run: `rg --files` over the folder (the floor for listing it);
- warm hybrid / lexical / semantic query p50 and p95 (an open `query.Index`, --queries
  queries); reference: a float32 brute-force scan of the same (chunks, dims) matrix;
- cold CLI search: `mdvdb search` in a fresh process, no warm server (median of --repeat);
- index bytes per chunk.

    python bench/scale.py [--sizes 10k,100k,1m] [--repeat 5] [--json] [--keep-index]

Folders live under $MDVDB_BENCH_DIR (default /tmp/mdvdb-bench)/scale; --keep-index reuses an
index already built there (a full ingest of 1M chunks takes most of an hour on 2 cores).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import WORK, median_ms, p95_ms, print_table  # noqa: E402
from bench.generate import TOPICS, generate  # noqa: E402

MDVDB = [sys.executable, "-m", "mdvdb"]
CHUNKS_PER_FILE = 3  # bench/generate.py: 2-4 sections a file


def chunks_of(size: str) -> int:
    text = size.lower().strip()
    scale = {"k": 1_000, "m": 1_000_000}.get(text[-1:], 1)
    return int(float(text.rstrip("km")) * scale)


def run_child(args: list[str], env: dict | None = None) -> tuple[float, float, int, str]:
    """(wall s, CPU s, peak RSS bytes, stdout) of one child process: its own CPU and peak
    RSS from wait4, not RUSAGE_CHILDREN's running maximum over every child."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        args,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )
    # wait4 before communicate would block on full pipes: read them first, then reap.
    out = proc.stdout.read() if proc.stdout else b""
    err = proc.stderr.read() if proc.stderr else b""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed: {err.decode()[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024, out.decode()


def _rg() -> str | None:
    local = Path(sys.executable).with_name("rg")
    return str(local) if local.exists() else shutil.which("rg")


def queries(n: int, seed: int = 11) -> list[str]:
    rng = random.Random(seed)
    words = [w for topic in TOPICS.values() for w in topic.split()]
    return [" ".join(rng.sample(words, rng.randint(2, 4))) for _ in range(n)]


def warm_queries(root: Path, count: int) -> dict:
    """p50/p95 ms per mode on an open index, and the float32 brute-force reference."""
    import numpy as np

    from query import open_index

    index = open_index(root)
    asked = queries(count)
    out: dict = {}
    for mode in ("hybrid", "lexical", "semantic"):
        index.search(asked[0], mode=mode)  # first use: model, postings views
        samples = []
        for q in asked:
            start = time.perf_counter()
            index.search(q, mode=mode)
            samples.append(time.perf_counter() - start)
        out[f"{mode} p50 ms"] = median_ms(samples)
        out[f"{mode} p95 ms"] = p95_ms(samples)
    snapshot = index.snapshot
    chunks = snapshot.meta.get("chunks") or 0
    dims = int(snapshot.meta.get("dimensions") or 0)
    matrix = np.random.default_rng(0).standard_normal((chunks, dims), dtype=np.float32)
    vector = matrix[0].copy()
    samples = []
    for _ in range(max(5, min(count, 30))):
        start = time.perf_counter()
        scores = matrix @ vector
        np.argpartition(scores, -10)[-10:]
        samples.append(time.perf_counter() - start)
    out["f32 scan p50 ms"] = median_ms(samples)
    return out


def edit_one(root: Path, files: list[Path], step: int) -> None:
    target = files[step % len(files)]
    with open(target, "a") as fh:
        fh.write(f"\nEdited paragraph {step} about compress and rebase.\n")


def bench_size(size: str, repeat: int, count: int, keep_index: bool) -> dict:
    chunks_wanted = chunks_of(size)
    files = max(1, chunks_wanted // CHUNKS_PER_FILE)
    root = generate(WORK / "scale" / f"gen{files}", files)
    index_path = root / ".markdownvdb.index"
    row: dict = {"size": size, "files": files}
    import json

    if keep_index and index_path.is_file():
        row["ingest chunks/s"] = row["ingest CPU/wall"] = row["ingest peak RSS MB"] = None
    else:
        for leftover in (index_path, root / ".markdownvdb.state"):
            if leftover.is_dir():
                shutil.rmtree(leftover)
            elif leftover.exists():
                leftover.unlink()
        wall, cpu, rss, out = run_child([*MDVDB, "ingest", "--json", "--root", str(root)])
        report = json.loads(out)
        row["ingest chunks/s"] = report["chunks"] / wall
        row["ingest CPU/wall"] = cpu / wall
        row["ingest peak RSS MB"] = rss / 1e6
    run_child([*MDVDB, "ingest", "--root", str(root)])  # settle: the next runs are no-ops
    noop = [run_child([*MDVDB, "ingest", "--root", str(root)])[0] for _ in range(repeat)]
    sample = sorted(root.glob("*/*/*.md"))[:: max(1, files // 50)]
    edits = []
    for step in range(repeat):
        edit_one(root, sample, step)
        edits.append(run_child([*MDVDB, "ingest", "--root", str(root)])[0])
    row["no-op s"] = statistics.median(noop)
    row["1-file edit s"] = statistics.median(edits)
    rg = _rg()
    if rg:
        listing = [run_child([rg, "--files", str(root)])[0] for _ in range(repeat)]
        row["rg --files s"] = statistics.median(listing)
    meta_chunks = json.loads(run_child([*MDVDB, "status", "--json", "--root", str(root)])[3]).get(
        "chunks"
    )
    row["chunks"] = meta_chunks
    row.update(warm_queries(root, count))
    cold = [
        run_child(
            [*MDVDB, "search", queries(1)[0], "--root", str(root)], env={"MDVDB_NO_WARM": "1"}
        )[0]
        for _ in range(repeat)
    ]
    row["cold search ms"] = statistics.median(cold) * 1000
    row["index bytes/chunk"] = index_path.stat().st_size / max(1, meta_chunks or 1)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10k,100k,1m", help="chunk counts, e.g. 10k,100k")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--queries", type=int, default=50, help="warm queries per mode")
    parser.add_argument("--keep-index", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    rows = [
        bench_size(size, args.repeat, args.queries, args.keep_index)
        for size in args.sizes.split(",")
    ]
    for row in rows:
        row["load"] = round(load, 1)
    print_table("Scale: ingest, incremental runs, queries, footprint", rows, args.json)


if __name__ == "__main__":
    main()

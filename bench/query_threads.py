"""Warm hybrid search with the query's helper threads on against off, in one process.

    python bench/query_threads.py --root DIR [--root DIR2 ...] [--rounds 5] [--json]

A split pass (query.second_core.in_parallel: the IVF lists' int8 products, the block-wise
fusion, top-k comparisons) runs on the caller and one helper thread per other core; whether
that pays depends on the machine (free cores, shared memory bandwidth). Fresh processes
differ by more than the effect (±15% here), so both arms run in one warm `Index`,
alternating per query (on/off, then off/on for the next), with the same answers (the test
suite checks the bits). Per root: the p50 and p95 of each arm, the median of the per-query
ratios (off / on), and the load average. Each arm is an `Index` opened with its own
MDVDB_SEARCH_THREADS (0: one thread per core; 1: the caller alone, the default) over the
same mapped snapshot. Nothing is written into DIR.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import print_table  # noqa: E402
from bench.query_speed import QUERIES  # noqa: E402


def measure(root: Path, rounds: int) -> dict:
    import query.second_core as second_core
    from kernel.config import load_config
    from query import open_index

    arms = {
        arm: open_index(config=load_config(root, environ={"MDVDB_SEARCH_THREADS": threads}))
        for arm, threads in (("on", "0"), ("off", "1"))
    }
    index = arms["off"]

    def run(arm: str, q: str) -> float:
        # the same query twice in a row: not the remembered last answer (query.search)
        index.snapshot.cache.pop("last_scores", None)
        start = time.perf_counter()
        arms[arm].search(q, mode="hybrid")
        return time.perf_counter() - start

    for _ in range(2):  # warm-up: maps, lexical views, IVF / int8 copies, helper threads
        for q in QUERIES:
            for arm in arms:
                run(arm, q)
    times: dict[str, list[float]] = {arm: [] for arm in arms}
    ratios = []
    loads = []
    for r in range(rounds):
        for i, q in enumerate(QUERIES):
            order = list(arms) if (r + i) % 2 == 0 else list(arms)[::-1]
            got = {arm: run(arm, q) for arm in order}
            for arm, t in got.items():
                times[arm].append(t)
            ratios.append(got["off"] / got["on"])
        loads.append(os.getloadavg()[0])
    chunks = int(index.snapshot.vectors.shape[0])
    row = {"root": str(root), "chunks": chunks, "cores": second_core.cores()}
    for arm in arms:
        ordered = sorted(times[arm])
        row[f"{arm}_p50_ms"] = round(statistics.median(ordered) * 1e3, 2)
        row[f"{arm}_p95_ms"] = round(ordered[int(0.95 * (len(ordered) - 1))] * 1e3, 2)
    row["off_x_on"] = round(statistics.median(ratios), 3)
    row["load"] = round(statistics.median(loads), 1)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, action="append", required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = [measure(root.resolve(), args.rounds) for root in args.root]
    print_table("Warm hybrid, helper threads on / off, alternating per query", rows, args.json)


if __name__ == "__main__":
    main()

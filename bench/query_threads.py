"""Warm hybrid search with the query's helper threads on against off, in one process.

    python bench/query_threads.py --root DIR [--root DIR2 ...] [--rounds 5] [--quiet] [--json]

A split pass (query.score.second_core.in_parallel: the IVF lists' int8 products, the block-wise
fusion, top-k comparisons) runs on the caller and one helper thread per other core; whether
that pays depends on the machine (free cores, shared memory bandwidth). Fresh processes
differ by more than the effect (±15% here), so the arms run in one warm `Index`, each query
under every arm back to back (the order rotating from query to query), with the same answers
(the test suite checks the bits). Each arm is an `Index` opened with its own
MDVDB_SEARCH_THREADS over the same mapped snapshot:
- `split`: one thread per core whatever the machine does (MDVDB_SEARCH_THREADS = the cores);
- `default`: 0, the default: one thread per core idle when a pass starts;
- `off`: 1, the caller alone.
Per root: each arm's p50 and p95, the median of the per-query ratios `split / off` and
`default / off`, how many queries were kept, and the load average. `--quiet` keeps a query
only when the machine's run queue (/proc/loadavg) showed nothing else runnable before and
after each of its arms: what a split pass gains on a machine with a core to spare, measured
on a shared one. Nothing is written into DIR.
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


def _run_queue() -> int:
    """The machine's runnable threads now, this one included (Linux; 1 elsewhere)."""
    try:
        with open("/proc/loadavg", "rb") as f:
            return int(f.read().split()[3].split(b"/")[0])
    except (OSError, IndexError, ValueError):
        return 1


def measure(root: Path, rounds: int, quiet: bool = False) -> dict:
    import query.score.second_core as second_core
    from kernel.config import load_config
    from query import open_index

    cores = str(max(2, second_core.cores()))
    arms = {
        arm: open_index(config=load_config(root, environ={"MDVDB_SEARCH_THREADS": threads}))
        for arm, threads in (("split", cores), ("default", "0"), ("off", "1"))
    }
    index = arms["off"]

    def run(arm: str, q: str) -> tuple[float, bool]:
        # the same query again: not the remembered last answer (query.rank.search)
        index.snapshot.cache.pop("last_scores", None)
        alone = _run_queue() <= 1
        start = time.perf_counter()
        arms[arm].search(q, mode="hybrid")
        took = time.perf_counter() - start
        return took, alone and _run_queue() <= 1

    for _ in range(2):  # warm-up: maps, lexical views, IVF / int8 copies, helper threads
        for q in QUERIES:
            for arm in arms:
                run(arm, q)
    names = list(arms)
    times: dict[str, list[float]] = {arm: [] for arm in arms}
    ratios: dict[str, list[float]] = {"split": [], "default": []}
    loads, seen = [], 0
    for r in range(rounds):
        for i, q in enumerate(QUERIES):
            turn = (r + i) % len(names)
            got = {arm: run(arm, q) for arm in names[turn:] + names[:turn]}
            seen += 1
            if quiet and not all(alone for _, alone in got.values()):
                continue
            for arm, (t, _) in got.items():
                times[arm].append(t)
            for arm in ratios:
                ratios[arm].append(got[arm][0] / got["off"][0])
        loads.append(os.getloadavg()[0])
    chunks = int(index.snapshot.vectors.shape[0])
    row = {"root": str(root), "chunks": chunks, "cores": second_core.cores()}
    row["queries"] = f"{len(times['off'])} of {seen}"
    for arm in arms:
        ordered = sorted(times[arm])
        if not ordered:
            continue
        row[f"{arm}_p50_ms"] = round(statistics.median(ordered) * 1e3, 2)
        row[f"{arm}_p95_ms"] = round(ordered[int(0.95 * (len(ordered) - 1))] * 1e3, 2)
    for arm, values in ratios.items():
        row[f"{arm}_x_off"] = round(statistics.median(values), 3) if values else None
    row["load"] = round(statistics.median(loads), 1)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, action="append", required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--quiet", action="store_true", help="keep the queries no other thread ran beside"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = [measure(root.resolve(), args.rounds, args.quiet) for root in args.root]
    print_table("Warm hybrid, helper threads split / default / off, per query", rows, args.json)


if __name__ == "__main__":
    main()

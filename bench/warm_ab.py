"""Warm hybrid latency of this checkout against another one, alternating fresh processes.

    python bench/warm_ab.py --root DIR [--against /work/base/.venv/bin/python] [--pairs 4]
        [--rounds 2] [--one-core] [--json]

Each process (one per checkout and pair, in the order A B, B A, A B...) opens the index at
DIR read-only, warms up (every query of bench/query_speed.py twice: maps the index, builds the
lexical weights and the IVF / int8 copies), then runs `rounds` passes over the 30 queries,
each query's `Index.search(q, mode="hybrid")` (limit 10, what `mdvdb serve` runs) followed by
the fastest obvious alternative, `M @ v` over an in-memory float32 copy of the whole matrix
(NumPy's default BLAS threads), so both meet the same load. A process reports its p50 of
each and their ratio; the table gives the medians over its processes per checkout, and the
other checkout's p50 over this one's.
`--against` is the other checkout's interpreter (its `bench/` and code are found next to
its `.venv`); without it, only this checkout runs. `--against-root` gives the other checkout
its own ingested copy of the folder (one that reads an older index format). `--threads` adds
this checkout with MDVDB_SEARCH_THREADS=0 (the passes split over every core,
query.score.second_core; the default is 1) to the rotation; `--one-core` makes the other
checkout's helper threads off too (its `query.score.second_core.cores` = 1: what this
checkout's default does). The load average is
printed with each process. Nothing is written into DIR.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.common import print_table  # noqa: E402

CHILD = r"""
import json, os, statistics, sys, time
sys.path.insert(0, {tree!r})
import numpy as np
from bench.query_speed import QUERIES
from kernel.config import load_config
from query import open_index

if {one_core}:
    import query.score.second_core as second_core
    second_core.cores = lambda: 1
index = open_index(config=load_config({root!r}, environ={env!r}))
for _ in range(2):
    for q in QUERIES:
        index.search(q, mode="hybrid")
vectors = np.array(index.snapshot.vectors)  # in RAM, not the map
probe = np.asarray(index.provider().embed([QUERIES[0]])[0], dtype=np.float32)
hybrid, scan = [], []
for _ in range({rounds}):
    for q in QUERIES:
        start = time.perf_counter()
        index.search(q, mode="hybrid")
        hybrid.append(time.perf_counter() - start)
        start = time.perf_counter()
        vectors @ probe
        scan.append(time.perf_counter() - start)
print(json.dumps({{"hybrid": statistics.median(hybrid) * 1e3, "scan": statistics.median(scan) * 1e3,
    "load": os.getloadavg()[0], "chunks": int(vectors.shape[0])}}))
"""


def run_child(
    python: str, tree: Path, root: Path, rounds: int, one_core: bool = False, env=None
) -> dict:
    code = CHILD.format(
        tree=str(tree), root=str(root), rounds=rounds, one_core=one_core, env=env or {}
    )
    done = subprocess.run(
        [python, "-c", code], capture_output=True, text=True, cwd="/", env={**os.environ}
    )
    if done.returncode != 0:
        raise SystemExit(f"{python}: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def tree_of(python: str) -> Path:
    """The checkout an interpreter belongs to: the folder holding its `.venv`."""
    path = Path(python).absolute()
    for parent in path.parents:
        if parent.name == ".venv":
            return parent.parent
    raise SystemExit(f"{python}: not inside a checkout's .venv")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, required=True, help="an ingested folder")
    parser.add_argument("--against", help="the other checkout's python (its .venv/bin/python)")
    parser.add_argument(
        "--against-root",
        type=Path,
        help="the other checkout's own ingested copy of the folder (an older index format)",
    )
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--threads",
        action="store_true",
        help="also run this checkout with MDVDB_SEARCH_THREADS=0 (passes split over every "
        "core), in the same rotation",
    )
    parser.add_argument(
        "--one-core",
        action="store_true",
        help="the other checkout with its helper threads off (as this one's default)",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    here = Path(__file__).resolve().parents[1]
    runs = {"this": (sys.executable, here, False, None)}
    roots = {"other": args.against_root or args.root}
    if args.threads:
        runs["this, every core"] = (sys.executable, here, False, {"MDVDB_SEARCH_THREADS": "0"})
    if args.against:
        runs["other"] = (args.against, tree_of(args.against), args.one_core, None)
    seen: dict[str, list[dict]] = {name: [] for name in runs}
    names = list(runs)
    for pair in range(args.pairs):
        for name in names if pair % 2 == 0 else names[::-1]:
            python, tree, one_core, env = runs[name]
            root = roots.get(name, args.root).resolve()
            got = run_child(python, tree, root, args.rounds, one_core, env)
            seen[name].append(got)
            if not args.json:
                print(
                    f"  {name} ({tree}): hybrid {got['hybrid']:.2f} ms, scan "
                    f"{got['scan']:.2f} ms, load {got['load']:.1f}",
                    file=sys.stderr,
                )
    medians = {name: statistics.median(s["hybrid"] for s in seen[name]) for name in names}
    rows = []
    for name, samples in seen.items():
        rows.append(
            {
                "checkout": f"{name}: {runs[name][1]}",
                "processes": len(samples),
                "chunks": samples[0]["chunks"],
                "hybrid_p50_ms": round(medians[name], 2),
                "scan_p50_ms": round(statistics.median(s["scan"] for s in samples), 2),
                "hybrid_x_scan": round(
                    statistics.median(s["hybrid"] / s["scan"] for s in samples), 3
                ),
                "x_this": round(medians[name] / medians["this"], 3),
                "load": round(statistics.median(s["load"] for s in samples), 1),
            }
        )
    print_table("Warm hybrid p50 per process, alternating checkouts", rows, args.json)


if __name__ == "__main__":
    main()

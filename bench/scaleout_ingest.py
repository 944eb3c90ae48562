"""Ingest on Ray vs the local process pool, per worker count, Ray's start-up apart.

    python bench/scaleout.py ingest [--files 4000] [--workers 1,2] [--rounds 1] [--json]

A corpus of generated files (bench/generate.py, 2-4 sections each) is copied fresh for every
run and ingested from nothing with `mdvdb ingest --json` (clustering on, as a user runs it):

- `local`: the fork pool of pipeline/workers.py (MDVDB_WORKERS=N; 1: this process);
- `ray paths`: `--executor ray`, a Ray cluster of N CPUs started for the run, N actors that
  read the files by path (a shared filesystem);
- `ray bytes`: the same, the driver shipping each file's bytes in the task
  (MDVDB_EXECUTOR_FILES=bytes, what a cluster without a shared filesystem needs).

`ray_start_s` is Ray's start-up inside the run (starting the cluster until every actor holds
its model: `executor_start_seconds` of the report); `work_s` is the run without it. Every run
builds the same index (tests/test_ray.py checks it byte for byte); the table checks the chunk
counts agree. Median over --rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import WORK, print_table  # noqa: E402
from bench.generate import generate  # noqa: E402

QUIET = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_USAGE_STATS_PROMPT_ENABLED": "0"}


def run_once(corpus: Path, target: Path, workers: int, mode: str) -> dict:
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(corpus, target)
    env = {**os.environ, **QUIET, "MDVDB_WORKERS": str(workers)}
    args = [sys.executable, "-m", "mdvdb", "ingest", "--json", "--root", str(target)]
    if mode != "local":
        args += ["--executor", "ray"]
        env["MDVDB_EXECUTOR_FILES"] = mode.split()[1]
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{mode} x{workers}: {done.stderr.strip()}")
    shutil.rmtree(target)
    return json.loads(done.stdout)


def rows(corpus: Path, scratch: Path, counts: list[int], rounds: int) -> list[dict]:
    out = []
    for workers in counts:
        for mode in ("local", "ray paths", "ray bytes"):
            reports = [run_once(corpus, scratch, workers, mode) for _ in range(rounds)]
            wall = statistics.median(r["seconds"] for r in reports)
            start = statistics.median(r["executor_start_seconds"] for r in reports)
            last = reports[-1]
            out.append(
                {
                    "executor": mode,
                    "workers": workers,
                    "ingest_s": round(wall, 2),
                    "ray_start_s": round(start, 2),
                    "work_s": round(wall - start, 2),
                    "parse_s": round(last["stage_seconds"].get("parse", 0.0), 2),
                    "chunks": last["chunks"],
                    "chunks_per_s": round(last["chunked"] / max(wall - start, 1e-9), 1),
                    "actors_or_procs": last["workers"],
                }
            )
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=4000, help="generated files")
    parser.add_argument("--workers", default="1,2", help="worker counts, e.g. 1,2")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    base = WORK / f"scaleout-ingest-{args.files}"
    corpus = generate(base / "corpus", args.files)
    counts = [int(n) for n in args.workers.split(",")]
    table = rows(corpus, base / "run", counts, args.rounds)
    if len({r["chunks"] for r in table}) != 1:
        raise SystemExit(f"the executors built different indexes: {table}")
    print_table(
        f"ingest from nothing, {args.files} generated files, {table[0]['chunks']} chunks "
        f"(s; median of {args.rounds})",
        table,
        args.json,
    )
    print(f"load average: {os.getloadavg()[0]:.1f}", file=sys.stderr)


if __name__ == "__main__":
    main()

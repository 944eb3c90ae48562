"""Ingest benchmark: full build, no-op rebuild and a one-file edit, through the real CLI.

Each figure is the wall time of a fresh `mdvdb ingest` process (what a user or a hook pays),
median of --repeat runs for the no-op and the edit. The reference alternative measured in the
same run: `rg --files` over the same folder (the floor for merely listing the files).

    python bench/ingest.py [--corpora tldr gen10k gen100k] [--repeat 5] [--json] [--keep-index]

`--workers 1 2` instead measures full builds only, one per MDVDB_WORKERS value, each on a
fresh copy (1 = one process, the serial build, measured in the same run): wall, chunks/s,
CPU/wall (the ingest's own `--json` figures) and the peak RSS of the largest process.

    python bench/ingest.py --corpora tldr --workers 1 2 [--json]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import WORK, corpus, print_table, run  # noqa: E402
from bench.generate import generate  # noqa: E402

MDVDB = [sys.executable, "-m", "mdvdb"]


def _rg() -> str:
    local = Path(sys.executable).with_name("rg")
    return str(local) if local.exists() else "rg"


def prepare(name: str) -> Path:
    if name.startswith("gen"):
        count = int(name[3:].replace("k", "000"))
        return generate(WORK / "generated" / name, count)
    return corpus(name)


CPU: list[float] = []  # CPU seconds (user + sys) of each timed child, in call order


def timed_cli(args: list[str], root: Path) -> float:
    """Wall seconds of one `mdvdb` process; its CPU seconds go to CPU (a figure that a busy
    machine inflates far less than wall time)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = run([*MDVDB, *args, "--root", str(root)])
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    if result.returncode != 0:
        raise SystemExit(f"mdvdb {' '.join(args)} failed: {result.stderr[-2000:]}")
    return elapsed


def bench(name: str, repeat: int, keep_index: bool = False) -> dict:
    root = prepare(name)
    kept = keep_index and (root / ".markdownvdb.index").is_file()
    if not kept:
        for leftover in (root / ".markdownvdb.index", root / ".markdownvdb.state"):
            if leftover.is_dir():
                shutil.rmtree(leftover)
            elif leftover.exists():
                leftover.unlink()
    files = sum(1 for _ in root.rglob("*.md"))
    # With --keep-index the first run only brings the existing index up to date (its time
    # is not a full ingest and is not reported as one).
    full = timed_cli(["ingest"], root)
    full_cpu = CPU[-1]
    if kept:
        full = full_cpu = None
    noop = [timed_cli(["ingest"], root) for _ in range(repeat)]
    noop_cpu = CPU[-repeat:]
    target = sorted(root.rglob("*.md"))[len(sorted(root.rglob("*.md"))) // 2]
    original = target.read_text()
    edits = []
    for i in range(repeat):
        target.write_text(original + f"\n\nEdited line {i} about kayaks.\n")
        edits.append(timed_cli(["ingest"], root))
    edit_cpu = CPU[-repeat:]
    target.write_text(original)
    timed_cli(["ingest"], root)
    rg_times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run([_rg(), "--files", "-g", "*.md", str(root)])
        rg_times.append(time.perf_counter() - start)
    index_mb = (root / ".markdownvdb.index").stat().st_size / 1e6
    return {
        "corpus": name,
        "files": files,
        "full_s": full,
        "full_cpu_s": full_cpu,
        "files_per_s": files / full if full else None,
        "noop_s_p50": statistics.median(noop),
        "noop_cpu_s_p50": statistics.median(noop_cpu),
        "edit1_s_p50": statistics.median(edits),
        "edit1_cpu_s_p50": statistics.median(edit_cpu),
        "load_avg": os.getloadavg()[0],
        "rg_files_s_p50": statistics.median(rg_times),
        "index_MB": index_mb,
    }


def full_build(name: str, workers: int) -> dict:
    """One full `mdvdb ingest --json` with MDVDB_WORKERS=workers on a fresh copy."""
    import json
    import subprocess

    root = prepare(name)
    for leftover in (root / ".markdownvdb.index", root / ".markdownvdb.state"):
        if leftover.is_dir():
            shutil.rmtree(leftover)
        elif leftover.exists():
            leftover.unlink()
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    env = {**os.environ, "MDVDB_WORKERS": str(workers)}
    start = time.perf_counter()
    done = subprocess.run(
        [*MDVDB, "ingest", "--json", "--root", str(root)], env=env, capture_output=True, text=True
    )
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"mdvdb ingest failed: {done.stderr[-2000:]}")
    report = json.loads(done.stdout)
    # ru_maxrss of children: the largest process that has ended (parent or a worker), KB.
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return {
        "corpus": name,
        "workers": workers,
        "chunks": report["chunks"],
        "wall_s": round(wall, 2),
        "chunks_per_s": round(report["chunked"] / wall, 1),
        "cpu_per_wall": report["cpu_per_wall"],
        "parse_s": report["stage_seconds"].get("parse"),
        "cluster_s": report["stage_seconds"].get("cluster"),
        "pack_s": report["stage_seconds"].get("pack"),
        "peak_rss_MB": round(max(peak, before) / 1024, 1) if peak > before else None,
        "load_avg": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpora", nargs="+", default=["tldr", "gen10k", "gen100k"])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--keep-index",
        action="store_true",
        help="reuse an index already built in MDVDB_BENCH_DIR (no full ingest: for 100k files "
        "it takes 5 minutes); only the no-op and the edit are measured",
    )
    parser.add_argument(
        "--workers",
        nargs="+",
        type=int,
        help="full builds only, one per MDVDB_WORKERS value (include 1: the serial build)",
    )
    args = parser.parse_args()
    if args.workers:
        rows = [full_build(name, n) for name in args.corpora for n in args.workers]
        print_table("mdvdb ingest, full build per MDVDB_WORKERS", rows, args.json)
        return
    rows = [bench(name, args.repeat, args.keep_index) for name in args.corpora]
    print_table("mdvdb ingest (fresh process each run)", rows, args.json)


if __name__ == "__main__":
    main()

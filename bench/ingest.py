"""Ingest benchmark: full build, no-op rebuild and a one-file edit, through the real CLI.

Each figure is the wall time of a fresh `mdvdb ingest` process (what a user or a hook pays),
median of --repeat runs for the no-op and the edit. The reference alternative measured in the
same run: `rg --files` over the same folder (the floor for merely listing the files).

    python bench/ingest.py [--corpora tldr gen10k gen100k] [--repeat 5] [--json] [--keep-index]

`--workers 1 2` instead measures full builds only, one per MDVDB_WORKERS value, each on a
fresh copy (1 = one process, the serial build, measured in the same run): wall, chunks/s,
CPU/wall (the ingest's own `--json` figures) and the peak RSS of the largest process.

    python bench/ingest.py --corpora tldr --workers 1 2 [--json]

`--reference DIR` adds the same builds by another checkout (its own `.venv`), interleaved
with this one's in the same run (`--rounds N` times each: medians come from alternating
runs under the same load), and checks that both wrote the same index (`same_index`: every
byte but the times of writing and of clustering).

    python bench/ingest.py --corpora tldr --workers 1 2 --reference /work/base-s6 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import REPO, WORK, corpus, print_table, run  # noqa: E402
from bench.generate import generate  # noqa: E402

MDVDB = [sys.executable, "-m", "mdvdb"]
_PEAK = (
    "import resource, subprocess, sys; rc = subprocess.call(sys.argv[1:]); "
    "r = resource.getrusage(resource.RUSAGE_CHILDREN); "
    "print('cpu_s', r.ru_utime + r.ru_stime, file=sys.stderr); "
    "print('peak_rss_KB', r.ru_maxrss, file=sys.stderr); sys.exit(rc)"
)


def _rg() -> str:
    local = Path(sys.executable).with_name("rg")
    return str(local) if local.exists() else "rg"


def prepare(name: str) -> Path:
    if os.sep in name and Path(name).is_dir():  # a folder (bench/real_corpus.py --sets)
        return Path(name)
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


def index_digest(path: Path) -> str:
    """SHA-256 over every table of an index (schema, metadata and rows) and its meta,
    without what differs between two identical builds: the time of writing and the time
    of clustering (the clusters table's summary)."""
    import hashlib
    import json

    import pyarrow as pa

    from kernel import index_format

    index = index_format.read_index(path)
    h = hashlib.sha256()
    meta = {k: v for k, v in index.meta.items() if k != "written_at"}
    h.update(json.dumps(meta, sort_keys=True, default=str).encode())
    for name in sorted(index.tables):
        table = index.tables[name]
        metadata = dict(table.schema.metadata or {})
        key = index_format.CLUSTERS_META_KEY.encode()
        if key in metadata:
            summary = json.loads(metadata[key])
            summary.pop("built_at", None)
            metadata[key] = json.dumps(summary, sort_keys=True).encode()
        table = table.replace_schema_metadata(metadata)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        h.update(name.encode() + sink.getvalue().to_pybytes())
    return h.hexdigest()[:16]


def full_build(name: str, workers: int, python: str = sys.executable, label: str = "") -> dict:
    """One full `mdvdb ingest --json` with MDVDB_WORKERS=workers on a fresh copy, by
    `python` (another checkout's interpreter for a reference row)."""
    import json
    import subprocess

    root = prepare(name)
    for leftover in (root / ".markdownvdb.index", root / ".markdownvdb.state"):
        if leftover.is_dir():
            shutil.rmtree(leftover)
        elif leftover.exists():
            leftover.unlink()
    env = {**os.environ, "MDVDB_WORKERS": str(workers)}
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    # A fresh wrapper per build reports the ru_maxrss of its children: the largest process
    # of this build alone (the ingest or one of its workers, which it waits for), in KB.
    # Run from the checkout that owns `python`: `-m` puts the working folder first on
    # sys.path, so a reference run from this folder would import this checkout's code.
    checkout = Path(python).parents[2] if label == "reference" else REPO
    # `/usr/bin/time -v` where it exists: its maximum resident set size is the same
    # ru_maxrss of the largest process, reported by a tool outside the benchmark.
    gnu_time = ["/usr/bin/time", "-v"] if Path("/usr/bin/time").exists() else []
    done = subprocess.run(
        [*gnu_time, python, "-c", _PEAK, python, "-m", "mdvdb", "ingest", "--json"]
        + ["--root", str(root)],
        env=env,
        capture_output=True,
        text=True,
        cwd=checkout,
    )
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"mdvdb ingest failed: {done.stderr[-2000:]}")
    report = json.loads(done.stdout)
    figures = _stderr_figures(done.stderr)
    peak = int(figures["peak_rss_KB"])
    # Every process of the build, as `/usr/bin/time` counts it (the ingest's own figure
    # counts the worker and helper processes it reaped, not the interpreter's start).
    cpu_all = float(figures["cpu_s"])
    cpu = report.get("stage_cpu_seconds", {})
    return {
        "code": label or "this",
        "corpus": name,
        "workers": workers,
        "chunks": report["chunks"],
        "wall_s": round(wall, 2),
        "chunks_per_s": round(report["chunked"] / wall, 1),
        "cpu_per_wall": report["cpu_per_wall"],
        "cpu_s": report.get("cpu_seconds"),
        "cpu_all_s": round(cpu_all, 2),
        "cpu_all_per_wall": round(cpu_all / wall, 2),
        "discover_s": report["stage_seconds"].get("discover"),
        "parse_s": report["stage_seconds"].get("parse"),
        "cluster_s": report["stage_seconds"].get("cluster"),
        "schema_s": report["stage_seconds"].get("schema"),
        "pack_s": report["stage_seconds"].get("pack"),
        "discover_cpu_s": cpu.get("discover"),
        "parse_cpu_s": cpu.get("parse"),
        "cluster_cpu_s": cpu.get("cluster"),
        "schema_cpu_s": cpu.get("schema"),
        "pack_cpu_s": cpu.get("pack"),
        "index": index_digest(root / ".markdownvdb.index"),
        "peak_rss_MB": round(peak / 1024, 1),
        "time_v_rss_MB": (
            round(int(figures["time_v_KB"]) / 1024, 1) if "time_v_KB" in figures else None
        ),
        "load_before": round(load_before, 2),
        "load_avg": round(os.getloadavg()[0], 2),
    }


def _stderr_figures(stderr: str) -> dict[str, str]:
    """The wrapper's `cpu_s` and `peak_rss_KB` lines, and `/usr/bin/time -v`'s maximum
    resident set size as `time_v_KB` when it ran."""
    out = {}
    for line in stderr.splitlines():
        words = line.split()
        if len(words) == 2 and words[0] in ("cpu_s", "peak_rss_KB"):
            out[words[0]] = words[1]
        elif line.strip().startswith("Maximum resident set size (kbytes):"):
            out["time_v_KB"] = words[-1]
    return out


def _medians(runs: list[dict]) -> list[dict]:
    """One row per code: the median of each figure over its runs; `same_index` says whether
    every run of every code wrote the same index."""
    digests = {r["index"] for r in runs}
    out = []
    for label in dict.fromkeys(r["code"] for r in runs):
        mine = [r for r in runs if r["code"] == label]
        row = dict(mine[0])
        for key, value in row.items():
            if isinstance(value, float) or key in ("peak_rss_MB", "time_v_rss_MB"):
                values = [r[key] for r in mine if r[key] is not None]
                row[key] = round(statistics.median(values), 2) if values else None
        for key in ("peak_rss_MB", "time_v_rss_MB"):
            row[key] = max((r[key] or 0) for r in mine) or None
        row["runs"] = len(mine)
        row["same_index"] = len(digests) == 1
        out.append(row)
    return out


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
    parser.add_argument(
        "--reference",
        type=Path,
        help="with --workers: another checkout (with its own .venv) measured in the same run",
    )
    parser.add_argument("--rounds", type=int, default=1, help="with --workers: builds of each")
    args = parser.parse_args()
    if args.workers:
        codes = [("this", sys.executable)]
        if args.reference:
            codes.append(("reference", str(args.reference / ".venv" / "bin" / "python")))
        rows = []
        for name in args.corpora:
            for n in args.workers:
                runs = []
                for _ in range(args.rounds):
                    for label, python in codes:
                        runs.append(full_build(name, n, python, label))
                        print(json.dumps(runs[-1]), file=sys.stderr, flush=True)  # as it comes
                rows += _medians(runs) if args.rounds > 1 else runs
        print_table("mdvdb ingest, full build per MDVDB_WORKERS", rows, args.json)
        return
    rows = [bench(name, args.repeat, args.keep_index) for name in args.corpora]
    print_table("mdvdb ingest (fresh process each run)", rows, args.json)


if __name__ == "__main__":
    main()

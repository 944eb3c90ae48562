"""No waiting for quality (docs/upgrade.md): how soon a folder is searchable with MiniLM
configured, against a static-model ingest and a direct MiniLM build.

    MDVDB_BENCH_DIR=/tmp/x python bench/upgrade.py [--pages 600] [--runs 3] [--seconds 10]
    python bench/upgrade.py --root tldr [--no-direct] [--seconds 120] --runs 1
    python bench/upgrade.py --generate 44000 --no-direct --seconds 120 --runs 1

The folder: `--pages N` tldr pages (default), `--root DIR` a whole folder (`tldr` for the
unpacked set), or `--generate N` files of bench/generate.py (44,000 files: ~132k chunks).
Per run, each on a fresh hard-linked copy of it, fresh `mdvdb ingest --json` processes under
`/usr/bin/time -v`:
- static: the default static model;
- direct: MiniLM with MDVDB_UPGRADE_SECONDS=0 (everything embedded before publishing);
  `--no-direct` leaves it out (at 130k chunks it is another half hour);
- upgrade: MiniLM with MDVDB_UPGRADE_SECONDS=--seconds, ingests one after the other (what a
  user re-running `mdvdb ingest`, or a hook, does) until the MiniLM index is published: when
  the static index was searchable (`upgrade.static_seconds`), when the first ingest exited,
  how many ingests and seconds it took in all, the MiniLM stage's chunks/s.
Peak RSS is the largest process of any of a mode's ingests, CPU s the user + system time of
all of them (`/usr/bin/time -v`). Medians over the runs; the load average is printed beside
them (the machine is shared).
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

from bench.common import WORK, corpus, print_table  # noqa: E402

MINILM = {"MDVDB_EMBEDDING_MODEL": "all-minilm-l6-v2"}
RSS_LINE = "Maximum resident set size (kbytes):"
CPU_LINES = ("User time (seconds):", "System time (seconds):")


def _ingest(root: Path, env: dict) -> dict:
    """One `mdvdb ingest --json`: its report, plus `peak_rss_MB` and `cpu_s` (user + system)
    where /usr/bin/time exists."""
    gnu_time = ["/usr/bin/time", "-v"] if Path("/usr/bin/time").exists() else []
    done = subprocess.run(
        [*gnu_time, sys.executable, "-m", "mdvdb", "ingest", "--json", "--root", str(root)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"mdvdb ingest failed: {done.stderr[-2000:]}")
    report = json.loads(done.stdout)
    rss = [ln.split()[-1] for ln in done.stderr.splitlines() if ln.strip().startswith(RSS_LINE)]
    report["peak_rss_MB"] = round(int(rss[0]) / 1024, 1) if rss else None
    cpu = [ln.split()[-1] for ln in done.stderr.splitlines() if ln.strip().startswith(CPU_LINES)]
    report["cpu_s"] = round(sum(float(c) for c in cpu), 1) if cpu else None
    return report


def _copy(source: Path, target: Path) -> Path:
    """A fresh copy of `source` (hard links where the file system allows): no index yet."""
    shutil.rmtree(target, ignore_errors=True)

    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    ignore = shutil.ignore_patterns(".markdownvdb.index", ".markdownvdb.state", ".markdownvdb")
    shutil.copytree(source, target, copy_function=link, ignore=ignore)
    return target


def _upgrade(source: Path, seconds: float) -> dict:
    root = _copy(source, WORK / "upgrade-upgrading")
    env = {**MINILM, "MDVDB_UPGRADE_SECONDS": str(seconds)}
    runs = [_ingest(root, env)]
    while not runs[-1]["upgrade"]["published"]:
        runs.append(_ingest(root, env))
    embedding = [r["upgrade"] for r in runs if r["upgrade"].get("chunks_per_second")]
    rates = [u["chunks_per_second"] for u in embedding]
    first = runs[0]
    return {
        "upgrade: searchable after s": first["upgrade"]["static_seconds"],
        "upgrade: first ingest s": first["seconds"],
        "upgrade: ingests to MiniLM": len(runs),
        "upgrade: MiniLM after s": sum(r["seconds"] for r in runs),
        "upgrade: CPU s": _total(r["cpu_s"] for r in runs),
        "upgrade: MiniLM stage chunks/s": statistics.median(rates) if rates else None,
        "upgrade: peak RSS MB": max(r["peak_rss_MB"] or 0 for r in runs) or None,
    }


def _total(values) -> float | None:
    values = list(values)
    return None if None in values else round(sum(values), 1)


def one_run(source: Path, seconds: float, direct: bool) -> dict:
    static = _ingest(_copy(source, WORK / "upgrade-static"), {"MDVDB_EMBEDDING_MODEL": ""})
    row = {
        "chunks": static["chunks"],
        "static s": static["seconds"],
        "static chunks/s": round(static["chunks"] / static["seconds"], 1),
        "static CPU s": static["cpu_s"],
        "static peak RSS MB": static["peak_rss_MB"],
    }
    if direct:
        off = {**MINILM, "MDVDB_UPGRADE_SECONDS": "0"}
        built = _ingest(_copy(source, WORK / "upgrade-direct"), off)
        row["direct MiniLM s"] = built["seconds"]
        row["direct chunks/s"] = round(built["chunks"] / built["seconds"], 1)
        row["direct CPU s"] = built["cpu_s"]
        row["direct peak RSS MB"] = built["peak_rss_MB"]
    return {**row, **_upgrade(source, seconds)}


def _source(args: argparse.Namespace) -> tuple[Path, str]:
    """The folder every run copies, and its name for the table's title."""
    if args.generate:
        folder = WORK / f"upgrade-gen{args.generate}"
        if not folder.is_dir():
            script = Path(__file__).with_name("generate.py")
            subprocess.run(
                [sys.executable, str(script), str(folder), "--files", str(args.generate)],
                check=True,
            )
        return folder, f"bench/generate.py --files {args.generate}"
    if args.root:
        folder = corpus("tldr") if str(args.root) == "tldr" else args.root
        return folder, f"{args.root}"
    common = sorted((corpus("tldr") / "pages" / "common").glob("*.md"))
    pages = common[:: max(1, len(common) // args.pages)][: args.pages]
    folder = WORK / f"upgrade-pages{args.pages}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for page in pages:
        shutil.copy2(page, folder / page.name)
    return folder, f"{len(pages)} tldr pages"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pages", type=int, default=600)
    parser.add_argument("--root", type=Path, help="a folder (`tldr`: the whole set)")
    parser.add_argument("--generate", type=int, help="files of bench/generate.py")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--no-direct", action="store_true", help="no direct MiniLM build")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    source, name = _source(args)
    samples = []
    for _ in range(args.runs):
        samples.append(one_run(source, args.seconds, not args.no_direct))
        print(f"load {os.getloadavg()[0]:.1f}: {samples[-1]}", file=sys.stderr)
    row = {
        k: statistics.median(s[k] for s in samples) if samples[0][k] is not None else None
        for k in samples[0]
    }
    row["searchable / static"] = round(row["upgrade: searchable after s"] / row["static s"], 2)
    if "direct MiniLM s" in row:
        row["searchable / direct"] = round(
            row["upgrade: searchable after s"] / row["direct MiniLM s"], 2
        )
    row["load"] = round(os.getloadavg()[0], 1)
    title = f"upgrade, {name}, MDVDB_UPGRADE_SECONDS={args.seconds:g}, medians of {args.runs}"
    print_table(title, [row], args.json)


if __name__ == "__main__":
    main()

"""No waiting for quality (docs/upgrade.md): how soon a folder is searchable with MiniLM
configured, against a static-model ingest and a direct MiniLM build, on tldr pages.

    MDVDB_BENCH_DIR=/tmp/x python bench/upgrade.py [--pages 600] [--runs 3] [--seconds 10]

Per run, each on a fresh copy of the same pages, a fresh `mdvdb ingest --json` process:
- static: the default static model;
- direct: MiniLM with MDVDB_UPGRADE_SECONDS=0 (everything embedded before publishing);
- upgrade: MiniLM with MDVDB_UPGRADE_SECONDS=--seconds: when its static index was published
  (`upgrade.static_seconds`), when the first ingest exited, and how many ingests (and their
  seconds in all) it took until the MiniLM index was published.
Medians over the runs; the load average is printed beside them (the machine is shared).
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


def _ingest(root: Path, env: dict) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "mdvdb", "ingest", "--json", "--root", str(root)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)


def _copy(pages: list[Path], target: Path) -> Path:
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for page in pages:
        shutil.copy2(page, target / page.name)
    return target


def one_run(pages: list[Path], seconds: float) -> dict:
    minilm = {"MDVDB_EMBEDDING_MODEL": "all-minilm-l6-v2"}
    static = _ingest(_copy(pages, WORK / "upgrade-static"), {"MDVDB_EMBEDDING_MODEL": ""})
    off = {**minilm, "MDVDB_UPGRADE_SECONDS": "0"}
    direct = _ingest(_copy(pages, WORK / "upgrade-direct"), off)
    root = _copy(pages, WORK / "upgrade-upgrading")
    env = {**minilm, "MDVDB_UPGRADE_SECONDS": str(seconds)}
    first = _ingest(root, env)
    runs, total = [first], first["seconds"]
    while not runs[-1]["upgrade"]["published"]:
        runs.append(_ingest(root, env))
        total += runs[-1]["seconds"]
    return {
        "chunks": static["chunks"],
        "static s": static["seconds"],
        "direct MiniLM s": direct["seconds"],
        "upgrade: searchable after s": first["upgrade"]["static_seconds"],
        "upgrade: first ingest s": first["seconds"],
        "upgrade: ingests to MiniLM": len(runs),
        "upgrade: seconds in all": total,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pages", type=int, default=600)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    common = sorted((corpus("tldr") / "pages" / "common").glob("*.md"))
    pages = common[:: max(1, len(common) // args.pages)][: args.pages]
    samples = []
    for _ in range(args.runs):
        samples.append(one_run(pages, args.seconds))
        print(f"load {os.getloadavg()[0]:.1f}: {samples[-1]}", file=sys.stderr)
    row = {k: statistics.median(s[k] for s in samples) for k in samples[0]}
    row["searchable / static"] = round(row["upgrade: searchable after s"] / row["static s"], 2)
    row["searchable / direct"] = round(
        row["upgrade: searchable after s"] / row["direct MiniLM s"], 2
    )
    row["load"] = round(os.getloadavg()[0], 1)
    title = (
        f"upgrade, {len(pages)} tldr pages, MDVDB_UPGRADE_SECONDS={args.seconds:g}, medians "
        f"of {args.runs}"
    )
    print_table(title, [row], args.json)


if __name__ == "__main__":
    main()

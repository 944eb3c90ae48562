"""On-disk footprint: what `mdvdb ingest` leaves in a project (index + state folder), against
the Markdown it indexes and the float32 vectors it must hold, through the real CLI.

The per-user model cache (kernel.user_cache: the model's float32 table and the query BPE, once
per user whatever the number of projects) is shown apart: it is not part of any project.
Reference points: the Markdown itself, 2 x (Markdown + vectors), and qmd's footprint on
NFCorpus as reported in the project's issue (15 MB; qmd is not installed here).

    python bench/footprint.py [--corpora nfcorpus tldr] [--json]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import WORK, corpus, print_table  # noqa: E402

MB = 1e6


def folder_bytes(folder: Path, suffixes: tuple[str, ...] | None = None) -> int:
    total = 0
    for path in folder.rglob("*"):
        if path.is_file() and (suffixes is None or path.suffix in suffixes):
            total += path.stat().st_size
    return total


def project(name: str) -> Path:
    """A fresh copy of the corpus's Markdown (NFCorpus: its md/ folder only)."""
    source = corpus(name)
    if name == "nfcorpus":
        source = source / "md"
    target = WORK / "footprint" / name
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target)
    return target


def measure(name: str, cache: Path) -> dict:
    root = project(name)
    env = {**os.environ, "MDVDB_CACHE_DIR": str(cache)}
    started = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "mdvdb", "ingest", "--json", "--root", str(root)],
        env=env,
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        raise SystemExit(f"ingest {name} failed: {out.stderr[-2000:]}")
    seconds = time.perf_counter() - started
    import json

    report = json.loads(out.stdout)
    from kernel import index_format

    index_path = root / ".markdownvdb.index"
    dims = int(index_format.read_meta(index_path).get("dimensions") or 0)
    markdown = folder_bytes(root, (".md", ".markdown"))
    index = index_path.stat().st_size
    state = folder_bytes(root / ".markdownvdb.state")
    vectors = report["chunks"] * dims * 4
    total = index + state
    return {
        "corpus": name,
        "files": report["files"],
        "markdown_MB": markdown / MB,
        "vectors_MB": vectors / MB,
        "index_MB": index / MB,
        "state_MB": state / MB,
        "total_MB": total / MB,
        "total_vs_markdown": total / markdown,
        "total_vs_2x(md+vectors)": total / (2 * (markdown + vectors)),
        "user_cache_MB": folder_bytes(cache) / MB,
        "ingest_s": seconds,
        "load_avg": os.getloadavg()[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpora", nargs="+", default=["nfcorpus", "tldr"])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mdvdb-footprint-cache-") as cache:
        rows = [measure(name, Path(cache)) for name in args.corpora]
    print_table("mdvdb footprint on disk (index + state folder)", rows, args.json)


if __name__ == "__main__":
    main()

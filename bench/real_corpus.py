"""A large real corpus for speed figures: one folder with the Markdown of every set in
../shared/corpora, and a fixed list of real queries (the sets' own questions).

    python bench/real_corpus.py [--dest DIR] [--sets NAME...] [--ingest] [--json]

The folder (default MDVDB_BENCH_DIR/real) holds one sub-folder per set: tldr, leetcode,
powershell-docs, and the `md/` pages of ray-docs-qa, nfcorpus, cranfield, arguana and cacm.
Files are hard links to the sets unpacked under MDVDB_BENCH_DIR/corpora where the file system
allows, else copies; nothing is written into the project. `queries.json` beside the folder
lists the first QUERIES_PER_SET questions of each set that has questions, in file order, so
every run asks the same ones. `--ingest` indexes the folder with `mdvdb ingest` and reports
files and chunks per set (the figures in docs/benchmarks.md, "The real large corpus").
Other benches take the folder as `--root` and the list with `--queries-file`. `--sets` builds
the folder from the named sets only (e.g. `--sets tldr leetcode --dest DIR`: 153k chunks).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.common import SHARED, WORK, print_table  # noqa: E402

# set name -> (archive, folder of its Markdown inside the unpacked set)
SETS = {
    "tldr": ("tldr.tar.gz", "."),
    "leetcode": ("leetcode.tar.gz", "."),
    "powershell-docs": ("powershell-docs.tar.gz", "."),
    "ray-docs-qa": ("ray-docs-qa.tar.gz", "md"),
    "nfcorpus": ("beir-nfcorpus.tar.gz", "md"),
    "cranfield": ("beir-cranfield.tar.gz", "md"),
    "arguana": ("beir-arguana.tar.gz", "md"),
    "cacm": ("cacm.tar.gz", "md"),
}
QUERIES_PER_SET = 40
DEFAULT_DEST = WORK / "real"


def unpacked(name: str) -> Path:
    """The set unpacked once under WORK/corpora."""
    target = WORK / "corpora" / name
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(SHARED / SETS[name][0]) as tar:
            tar.extractall(target.parent, filter="data")
    return target


def _link(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def build(dest: Path, sets: list[str] | None = None) -> dict[str, int]:
    """Fill `dest` with the Markdown of `sets` (default: every set; kept between runs);
    returns files per set."""
    counts = {}
    for name in sets or SETS:
        inner = SETS[name][1]
        source = unpacked(name) / inner
        n = 0
        for path in sorted(source.rglob("*.md")):
            n += 1
            target = dest / name / path.relative_to(source)
            if not target.exists():
                _link(path, target)
        counts[name] = n
    return counts


def questions(name: str) -> list[str]:
    """The set's first QUERIES_PER_SET questions that have judgements, in file order."""
    folder = unpacked(name)
    if not (folder / "queries.jsonl").exists():
        return []
    judged = set()
    qrels = folder / "qrels" / "test.tsv"
    if qrels.exists():
        with open(qrels, encoding="utf-8") as fh:
            judged = {line.split("\t")[0] for line in fh}
    out = []
    with open(folder / "queries.jsonl", encoding="utf-8") as fh:
        for line in fh:
            q = json.loads(line)
            if not judged or str(q["_id"]) in judged:
                out.append(" ".join(q["text"].split())[:300])
            if len(out) == QUERIES_PER_SET:
                break
    return out


def real_queries(dest: Path = DEFAULT_DEST) -> list[str]:
    """The fixed query list: written beside `dest` on first use, read back after."""
    path = dest.with_name(dest.name + "-queries.json")
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        listed = [q for name in SETS for q in questions(name)]
        path.write_text(json.dumps(listed, indent=0, ensure_ascii=False), encoding="utf-8")
    return json.loads(path.read_text(encoding="utf-8"))


def ingested_real(
    dest: Path = DEFAULT_DEST, sets: list[str] | None = None
) -> tuple[Path, list[str]]:
    """The folder, built and ingested if it is not yet, and its queries."""
    build(dest, sets)
    if not (dest / ".markdownvdb.index").exists():
        subprocess.run(
            [sys.executable, "-m", "mdvdb", "ingest", "--quiet", "--root", str(dest)],
            check=True,
        )
    return dest, real_queries(dest)


def chunks_per_set(dest: Path) -> Counter:
    """Chunks of the ingested folder, counted per top-level set folder."""
    from kernel.config import load_config
    from query import open_index

    snap = open_index(config=load_config(dest)).snapshot
    names = snap.paths
    paths = [names[i] for i in snap.chunk_file_ids]
    return Counter(p.split("/", 1)[0] for p in paths)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dest", type=Path, default=DEFAULT_DEST)
    parser.add_argument("--sets", nargs="+", choices=list(SETS), help="only these sets")
    parser.add_argument("--ingest", action="store_true", help="index it and count chunks")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    files = build(args.dest, args.sets)
    queries = real_queries(args.dest)
    chunks: Counter = Counter()
    if args.ingest:
        ingested_real(args.dest, args.sets)
        chunks = chunks_per_set(args.dest)
    rows = [{"set": n, "files": files[n], "chunks": chunks.get(n, "")} for n in files]
    rows.append({"set": "all", "files": sum(files.values()), "chunks": sum(chunks.values())})
    title = f"real corpus at {args.dest}: {len(queries)} queries"
    print_table(title, rows, args.json)


if __name__ == "__main__":
    main()
